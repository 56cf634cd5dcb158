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

It also keeps the save directory loadable across kills (:mod:`fairseq_dense.resume`):
before fairseq-train loads ``checkpoint_last.pt`` the folder is checked and repaired,
and training resumes from the newest checkpoint that loads; after every save
``checkpoint_best.pt`` and ``checkpoint_last.pt`` are checked; a run started again
after it reached ``--max-update``/``--max-epoch``/``--stop-time-hours`` ends at once
(exit status 0) without training or writing anything.
Everything else is :class:`fairseq.tasks.translation.TranslationTask`.
"""

import logging
import os
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II, OmegaConf, open_dict

from fairseq_dense.resume import (
    LAST,
    TrainingFinished,
    check_after_save,
    finished_reason,
    read_checkpoint,
    recover_at_restart,
)

logger = logging.getLogger(__name__)


@dataclass
class TranslationExactResumeConfig(TranslationConfig):
    """fairseq's :class:`TranslationConfig` plus the checkpoint options the task reads.

    The fields mirror other option groups (no flags of their own), as
    ``TranslationConfig.seed`` mirrors ``--seed``.
    """

    save_dir: str = II("checkpoint.save_dir")
    restore_file: str = II("checkpoint.restore_file")
    distributed_rank: int = II("distributed_training.distributed_rank")
    finetune_from_model: Optional[str] = II("checkpoint.finetune_from_model")
    continue_once: Optional[str] = II("checkpoint.continue_once")
    no_last_checkpoints: bool = II("checkpoint.no_last_checkpoints")
    reset_optimizer: bool = II("checkpoint.reset_optimizer")
    reset_dataloader: bool = II("checkpoint.reset_dataloader")
    write_checkpoints_asynchronously: bool = II("checkpoint.write_checkpoints_asynchronously")
    max_update: int = II("optimization.max_update")
    max_epoch: int = II("optimization.max_epoch")
    stop_time_hours: float = II("optimization.stop_time_hours")


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

    def _checks_files(self) -> bool:
        """Whether this run resumes from ``--save-dir``'s ``checkpoint_last.pt`` (fairseq's default)
        and writes synchronously (so every file is complete once saved). The same on every rank."""
        return bool(
            _option(self.cfg, "save_dir")
            and _option(self.cfg, "restore_file") == LAST
            and not _option(self.cfg, "write_checkpoints_asynchronously")
        )

    def build_model(self, cfg, from_checkpoint=False):
        """Build the model; for training, first check the save directory and the stopping point.

        ``fairseq-train`` builds the model before it loads ``--restore-file`` (default
        ``checkpoint_last.pt`` in ``--save-dir``), so this is where
        :func:`~fairseq_dense.resume.recover_at_restart` runs (on rank 0 only; the
        other ranks wait for it). When the state it resumes from already reached
        ``--max-update``, ``--max-epoch`` or ``--stop-time-hours``, every rank ends with
        :class:`~fairseq_dense.resume.TrainingFinished` (exit status 0): nothing is
        trained and no file changes. Models loaded for inference come with
        ``from_checkpoint=True`` and leave every folder alone.
        """
        if not from_checkpoint and self._checks_files():
            self._recover_and_stop_if_finished()
        return super().build_model(cfg, from_checkpoint)

    def _recover_and_stop_if_finished(self) -> None:
        """:func:`~fairseq_dense.resume.recover_at_restart` on rank 0, then :class:`TrainingFinished` if done."""
        save_dir = _option(self.cfg, "save_dir")
        if not _option(self.cfg, "distributed_rank"):  # recover_at_restart skips a folder that does not exist
            # a missing checkpoint_last.pt means "start from another file" (or "never write one") there
            others = ("finetune_from_model", "continue_once", "no_last_checkpoints")
            recover_at_restart(save_dir, new_last=not any(_option(self.cfg, k) for k in others))
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()  # every rank reads the folder rank 0 left
        resume = read_checkpoint(os.path.join(save_dir, LAST))
        if resume is None:
            return
        reason = finished_reason(
            resume,
            max_update=_option(self.cfg, "max_update") or 0,
            max_epoch=_option(self.cfg, "max_epoch") or 0,
            stop_time_hours=_option(self.cfg, "stop_time_hours") or 0.0,
            count_updates=not _option(self.cfg, "reset_optimizer"),
            count_epochs=not _option(self.cfg, "reset_dataloader"),
        )
        if reason is not None:
            message = (
                f"training already finished: {resume.path} holds {reason}; nothing to train (raise the limit to go on)"
            )
            logger.info(message)
            raise TrainingFinished(message)

    def post_save(self, cp_path: str, num_updates: int) -> None:
        """After every save (on the rank that saved): ``checkpoint_best.pt`` and ``checkpoint_last.pt`` load.

        fairseq calls this after the save's copies, the run's last save included, so
        a run never ends with either of them unreadable
        (:func:`~fairseq_dense.resume.check_after_save`); ``*.unreadable`` files whose
        name was saved again are removed.
        """
        if self._checks_files() and os.path.isdir(os.path.dirname(cp_path)):
            check_after_save(os.path.dirname(cp_path), cp_path)
