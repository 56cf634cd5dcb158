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

It also resumes after a kill during fairseq's (non-atomic) copy to
``checkpoint_last.pt``: when that file does not load, training continues from the
newest checkpoint that does, with a warning naming both files
(:func:`fairseq_dense.resume.recover_checkpoint_last`).
Everything else is :class:`fairseq.tasks.translation.TranslationTask`.
"""

import logging
from dataclasses import dataclass

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II, OmegaConf, open_dict

from fairseq_dense.resume import LAST, recover_checkpoint_last

logger = logging.getLogger(__name__)


@dataclass
class TranslationExactResumeConfig(TranslationConfig):
    """fairseq's :class:`TranslationConfig` plus the checkpoint options the task reads.

    The three fields mirror other option groups (no flags of their own), as
    ``TranslationConfig.seed`` mirrors ``--seed``.
    """

    save_dir: str = II("checkpoint.save_dir")
    restore_file: str = II("checkpoint.restore_file")
    distributed_rank: int = II("distributed_training.distributed_rank")


def _option(cfg, name: str):
    """``cfg.name``, or None where it is unset or an unresolved interpolation."""
    try:
        value = getattr(cfg, name, None)
    except Exception:  # an interpolation that cannot be resolved (no such config group)
        return None
    return None if isinstance(value, str) and value.startswith("${") else value


@register_task("translation_exact_resume", dataclass=TranslationExactResumeConfig)
class TranslationExactResumeTask(TranslationTask):
    """Translation whose batches depend on the epoch only, not on where the run started.

    Args:
        cfg: :class:`TranslationExactResumeConfig` (all ``translation`` options apply).
        src_dict: source dictionary.
        tgt_dict: target dictionary.
    """

    def __init__(self, cfg: TranslationExactResumeConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if OmegaConf.is_config(self.cfg):
            with open_dict(self.cfg):
                self.cfg.rebuild_batches = True
        else:
            self.cfg.rebuild_batches = True

    def build_model(self, cfg, from_checkpoint=False):
        """Build the model; for training, first make ``checkpoint_last.pt`` loadable.

        ``fairseq-train`` builds the model before it loads ``--restore-file``
        (default ``checkpoint_last.pt`` in ``--save-dir``); models loaded for
        inference come with ``from_checkpoint=True`` and leave the folder alone.
        On a data-parallel run only rank 0 touches the files (only rank 0 reads the
        checkpoint; the others receive its content).
        """
        save_dir = _option(self.cfg, "save_dir")
        if (
            not from_checkpoint
            and save_dir
            and _option(self.cfg, "restore_file") == LAST
            and not _option(self.cfg, "distributed_rank")
        ):
            recover_checkpoint_last(save_dir)
        return super().build_model(cfg, from_checkpoint)
