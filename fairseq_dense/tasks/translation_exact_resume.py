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

It also keeps the save directory loadable across kills and refuses a second training on
it (:mod:`fairseq_dense.resume`): when ``fairseq-train`` is about to load
``checkpoint_last.pt``, the folder is locked, checked and repaired, and training resumes
from the newest checkpoint that loads; after every save the new checkpoint must load
and ``checkpoint_best.pt``/``checkpoint_last.pt`` are checked; a run started again after
it reached ``--max-update``/``--max-epoch``/``--stop-time-hours``/``--patience`` ends at once
(exit status 0) without training or writing anything. Building a model or a task does
none of this: it never opens a file.
Everything else is :class:`fairseq.tasks.translation.TranslationTask`.
"""

import logging
import os
import sys
from dataclasses import dataclass
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II, OmegaConf, open_dict

from fairseq_dense.checkpoints import LAST, ONE_WRITE_KEY, PATIENCE_KEY
from fairseq_dense.resume import OneWrite, check_after_save, start_training

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
    reset_meters: bool = II("checkpoint.reset_meters")
    write_checkpoints_asynchronously: bool = II("checkpoint.write_checkpoints_asynchronously")
    max_update: int = II("optimization.max_update")
    max_epoch: int = II("optimization.max_epoch")
    stop_time_hours: float = II("optimization.stop_time_hours")
    patience: int = II("checkpoint.patience")
    best_checkpoint_metric: str = II("checkpoint.best_checkpoint_metric")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")


#: the state of torch's LR schedulers that fairseq's wrappers do not save (``ReduceLROnPlateau``'s)
_TORCH_SCHEDULER_COUNTERS = ("num_bad_epochs", "cooldown_counter")


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
        self._started = False  # start_training ran
        self._valid_best, self._valid_runs = None, 0  # fairseq's --patience count, saved with each checkpoint

    def _checks_files(self) -> bool:
        """Whether this run resumes from ``--save-dir``'s ``checkpoint_last.pt`` (fairseq's default)
        and writes synchronously (so every file is complete once saved). The same on every rank."""
        return bool(
            _option(self.cfg, "save_dir")
            and _option(self.cfg, "restore_file") == LAST
            and not _option(self.cfg, "write_checkpoints_asynchronously")
        )

    def has_sharded_data(self, split):
        """fairseq's answer; ``fairseq-train`` asks it for ``"train"`` right before it loads
        ``--restore-file``, which is where a training starts (:meth:`start_training`).

        No other fairseq code path asks for ``"train"``: building the task or a model,
        ``checkpoint_utils.load_model_ensemble``, the hub and ``fairseq-generate`` never
        get here.
        """
        if split == "train" and not self._started:
            self.start_training()
        return super().has_sharded_data(split)

    def start_training(self) -> None:
        """Lock ``--save-dir``, repair it and end a finished run (:func:`~fairseq_dense.resume.start_training`).

        Runs once per process, on every rank (rank 0 locks and repairs, the others wait),
        before fairseq loads ``checkpoint_last.pt``.
        """
        self._started = True
        if not _option(self.cfg, "save_dir"):
            return
        # a missing checkpoint_last.pt means "start from another file" (or "never write one") there
        others = ("finetune_from_model", "continue_once", "no_last_checkpoints")
        resume = start_training(
            _option(self.cfg, "save_dir"),
            is_master=not _option(self.cfg, "distributed_rank"),
            repair=self._checks_files(),
            new_last=not any(_option(self.cfg, k) for k in others),
            max_update=_option(self.cfg, "max_update") or 0,
            max_epoch=_option(self.cfg, "max_epoch") or 0,
            stop_time_hours=_option(self.cfg, "stop_time_hours") or 0.0,
            count_updates=not _option(self.cfg, "reset_optimizer"),
            count_epochs=not _option(self.cfg, "reset_dataloader"),
            patience=_option(self.cfg, "patience") or 0,
        )
        if resume is not None and not _option(self.cfg, "reset_meters"):
            self._valid_best, self._valid_runs = resume.best, resume.runs_without_improvement

    def begin_valid_epoch(self, epoch, model):
        """A validation starts: its first subset's score counts for ``--patience`` (:meth:`post_validate`)."""
        super().begin_valid_epoch(epoch, model)
        self._first_subset = True

    def post_validate(self, model, stats, agg):
        """Count validations without a better score as fairseq's ``--patience`` does, to save it with the checkpoint."""
        score = stats.get(_option(self.cfg, "best_checkpoint_metric") or "loss")
        if not getattr(self, "_first_subset", False) or score is None:
            return
        self._first_subset = False
        maximize = bool(_option(self.cfg, "maximize_best_checkpoint_metric"))
        if self._valid_best is None or (score > self._valid_best if maximize else score < self._valid_best):
            self._valid_best, self._valid_runs = score, 0
        else:
            self._valid_runs += 1

    def get_checkpoint_dict(self):
        """Saved in every checkpoint's ``extra_state``: the ``--patience`` count (a restart of a run it ended
        stops), :class:`~fairseq_dense.resume.OneWrite` (a failed write is not retried into its own
        partial file) and, under the task's class names (fairseq hands that entry to :meth:`set_checkpoint_dict`),
        the counters of a torch LR scheduler that fairseq's own state leaves out.

        ``reduce_lr_on_plateau`` saves ``best`` and ``last_epoch`` only: its
        ``num_bad_epochs`` (``--lr-patience``) and ``cooldown_counter`` start again at 0 on
        a resume. fairseq calls this from ``checkpoint_utils.save_checkpoint(cfg, trainer,
        ...)`` with no other handle on the trainer: its frame gives it.
        """
        trainer = sys._getframe(1).f_locals.get("trainer")
        torch_scheduler = getattr(getattr(trainer, "lr_scheduler", None), "lr_scheduler", None)
        counters = {k: getattr(torch_scheduler, k) for k in _TORCH_SCHEDULER_COUNTERS if hasattr(torch_scheduler, k)}
        saved = {PATIENCE_KEY: {"runs": self._valid_runs}}
        for cls in type(self).__mro__:  # a run may be resumed under an earlier name of its task
            if issubclass(cls, TranslationExactResumeTask):
                saved[cls.__name__] = {"lr_scheduler_counters": counters}
        if self._checks_files():
            saved[ONE_WRITE_KEY] = OneWrite(_option(self.cfg, "save_dir"))  # a failed write is not retried
        return saved

    def set_checkpoint_dict(self, state) -> None:
        """After ``fairseq-train`` loaded a checkpoint: the LR-scheduler counters back, and an end-of-epoch
        checkpoint its epoch's LR-scheduler step.

        fairseq saves the checkpoint of an epoch's end before ``trainer.lr_step(epoch,
        val_loss)`` and, resuming from it, steps with no loss: ``reduce_lr_on_plateau``
        would keep the LR the uninterrupted run halves, ``inverse_sqrt`` and the others
        their ``best``. fairseq calls this hook from ``checkpoint_utils.load_checkpoint(cfg,
        trainer, ...)`` right before that step, with no other handle on the trainer: its
        frame gives the trainer and the loaded ``extra_state``, and the missing
        ``lr_scheduler.step(epoch, val_loss)`` is made here.
        """
        caller = sys._getframe(1).f_locals
        trainer, extra = caller.get("trainer"), caller.get("extra_state")
        if trainer is None or caller.get("reset_lr_scheduler"):
            return
        torch_scheduler = getattr(trainer.lr_scheduler, "lr_scheduler", None)
        for key, value in (state.get("lr_scheduler_counters") or {}).items():
            if key in _TORCH_SCHEDULER_COUNTERS and hasattr(torch_scheduler, key):
                setattr(torch_scheduler, key, value)
        itr = (extra or {}).get("train_iterator") or {}
        if itr.get("iterations_in_epoch", 1) == 0:
            trainer.lr_scheduler.step(int(itr["epoch"]) - 1, extra.get("val_loss"))

    def post_save(self, cp_path: str, num_updates: int) -> None:
        """After every save (on the rank that saved): ``checkpoint_best.pt`` and ``checkpoint_last.pt`` load.

        fairseq calls this after the save's copies, the run's last save included, so
        a run never ends with either of them unreadable
        (:func:`~fairseq_dense.resume.check_after_save`); ``*.unreadable`` files whose
        name was saved again are removed. A save whose file does not load stops the run
        with one line naming it (:class:`~fairseq_dense.resume.SaveFailed`).
        """
        if self._checks_files() and os.path.isdir(os.path.dirname(cp_path)):
            check_after_save(os.path.dirname(cp_path), cp_path)
