"""``translation_exact_resume``: fairseq's translation task with bit-exact resume.

fairseq-fixed 0.12.3.1 builds the training batches once per run with
``numpy_seed(seed + first_epoch)`` (``FairseqTask.get_batch_iterator``) and reuses
them for every later epoch. Equal-length sentences are ordered by that seed, so
a run resumed in epoch ``e`` (first epoch ``e``) groups them into different
batches from an uninterrupted run (first epoch 1): same data, different batches
and dropout masks, slightly different losses after the resume.

This task sets fairseq's own ``rebuild_batches`` switch (used by its audio
tasks): the batches of epoch ``e`` are then built with ``seed + e`` in every run,
so ``checkpoint_last.pt`` resumes exactly where the interrupted run stopped.
Everything else is :class:`fairseq.tasks.translation.TranslationTask`.
"""
import logging

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import OmegaConf, open_dict

logger = logging.getLogger(__name__)


@register_task("translation_exact_resume", dataclass=TranslationConfig)
class TranslationExactResumeTask(TranslationTask):
    """Translation whose batches depend on the epoch only, not on where the run started.

    Args:
        cfg: fairseq's :class:`TranslationConfig` (all ``translation`` options apply).
        src_dict: source dictionary.
        tgt_dict: target dictionary.
    """

    def __init__(self, cfg: TranslationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if OmegaConf.is_config(self.cfg):
            with open_dict(self.cfg):
                self.cfg.rebuild_batches = True
        else:
            self.cfg.rebuild_batches = True
