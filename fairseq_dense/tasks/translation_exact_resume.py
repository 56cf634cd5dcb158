"""``translation_exact_resume``: fairseq's translation task with bit-exact resume.

fairseq-fixed builds the training batches once per run with ``numpy_seed(seed + first_epoch)`` and reuses them
for every later epoch, so a run resumed in epoch ``e`` batches equal-length sentences differently from an
uninterrupted one. This task sets fairseq's own ``rebuild_batches`` switch (epoch ``e``'s batches from
``seed + e`` in every run), restores what fairseq's resume loses (the LR scheduler's epoch-end step and plateau
counters, the ``--patience`` count) and keeps the save folder loadable across kills (:mod:`fairseq_dense.resume`,
where ``fairseq-train`` starts). Everything else is :class:`fairseq.tasks.translation.TranslationTask`.

``translation_exact_resume_simplex`` (earlier name ``translation_weighted``) adds the Weighted Transformer's (Ahmed et
al., 2017, https://arxiv.org/abs/1711.02132) projection of every ``on_simplex`` parameter (its branch weights kappa and
alpha) onto the probability simplex after each optimizer step: fairseq calls ``task.optimizer_step`` once per update
(also with ``--update-freq``, data-parallel training and fp16/bf16), and the projection acts on the weights the
optimizer keeps (:func:`fairseq_dense.modules.simplex.project_parameters_after_step`).
"""

import contextlib
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from fairseq_dense import fairseq_internals, resume
from fairseq_dense.checkpoints import DATA_KEY, ONE_WRITE_KEY, PATIENCE_KEY, safe_loading
from fairseq_dense.models.option_checks import flag
from fairseq_dense.modules.low_precision import bf16_autocast
from fairseq_dense.modules.simplex import (
    PROJECTED_BY_TASK_ATTR,
    PROJECTION_HOOK_ATTR,
    project_parameters_after_step,
    simplex_parameters,
)
from fairseq_dense.trajectory import task_data_identity


@dataclass
class TranslationExactResumeConfig(TranslationConfig):
    """fairseq's :class:`TranslationConfig` plus the checkpoint options the task reads (mirrors of
    other option groups, no flags of their own, as ``TranslationConfig.seed`` mirrors ``--seed``)."""

    save_dir: str = II("checkpoint.save_dir")
    restore_file: str = II("checkpoint.restore_file")
    checkpoint_suffix: str = II("checkpoint.checkpoint_suffix")
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
    bf16_autocast: bool = field(
        default=False,
        metadata={
            "help": "forward passes and the criterion (training, validation, generation) under bfloat16 autocast "
            "on the GPU or CPU, with float32 weights and optimizer state and no loss scaler; fairseq's --bf16 "
            "means a TPU"
        },
    )
    memory_efficient_fp16: bool = II("common.memory_efficient_fp16")
    memory_efficient_bf16: bool = II("common.memory_efficient_bf16")
    bf16: bool = II("common.bf16")
    fp16: bool = II("common.fp16")
    amp: bool = II("common.amp")
    tpu: bool = II("common.tpu")


#: fairseq's precision options, none of which combines with --bf16-autocast, in the order checked (fairseq
#: turns --memory-efficient-fp16 into --fp16 as well, --memory-efficient-bf16 into --bf16, --bf16 into --tpu)
_OTHER_PRECISIONS = ("memory_efficient_fp16", "memory_efficient_bf16", "bf16", "fp16", "amp", "tpu")


def check_precision(cfg) -> None:
    """A one-line ``ValueError`` where ``--bf16-autocast`` comes with another of fairseq's precisions."""
    other = next((name for name in _OTHER_PRECISIONS if resume.option(cfg, name)), None)
    if resume.option(cfg, "bf16_autocast") and other:
        raise ValueError(
            f"--bf16-autocast cannot be combined with {flag(other)}: --bf16-autocast is a precision of its own "
            "(bfloat16 autocast over float32 weights, no loss scaler); drop one of them"
        )


#: the state of torch's LR schedulers that fairseq's wrappers do not save (``ReduceLROnPlateau``'s)
_TORCH_SCHEDULER_COUNTERS = ("num_bad_epochs", "cooldown_counter")


@register_task("translation_exact_resume", dataclass=TranslationExactResumeConfig)
class TranslationExactResumeTask(fairseq_internals.StartsTrainingAtTheLoad, TranslationTask):
    """Translation whose batches depend on the epoch only, not on where the run started.

    Args:
        cfg: :class:`TranslationExactResumeConfig` (all ``translation`` options apply).
        src_dict: source dictionary.
        tgt_dict: target dictionary.
    """

    def __init__(self, cfg: TranslationExactResumeConfig, src_dict, tgt_dict):
        check_precision(cfg)
        super().__init__(cfg, src_dict, tgt_dict)
        fairseq_internals.rebuild_batches(self.cfg)
        self._valid_best, self._valid_runs = None, 0  # fairseq's --patience count, saved with each checkpoint

    @contextlib.contextmanager
    def start_training(self):
        """Around fairseq-train's load of ``--restore-file`` (:class:`fairseq_internals.StartsTrainingAtTheLoad`):
        :func:`fairseq_dense.resume.start_training`, the wait for fairseq's prefetch threads at exit, and torch's
        safe loader allowed :func:`resume.loading_globals` during the load only."""
        info = resume.start_training(self.cfg)
        if info is not None and not resume.option(self.cfg, "reset_meters"):
            self._valid_best, self._valid_runs = info.best, info.runs_without_improvement
        fairseq_internals.quiesce_prefetch_threads_at_exit()
        with safe_loading(resume.loading_globals()):
            yield

    def begin_valid_epoch(self, epoch, model):
        """Only a validation's first subset counts for ``--patience`` (:meth:`post_validate`)."""
        super().begin_valid_epoch(epoch, model)
        self._first_subset = True

    def post_validate(self, model, stats, agg):
        """Count validations without a better score as fairseq's ``--patience`` does, to save it with the checkpoint."""
        score = stats.get(resume.option(self.cfg, "best_checkpoint_metric") or "loss")
        if not getattr(self, "_first_subset", False) or score is None:
            return
        self._first_subset = False
        maximize = bool(resume.option(self.cfg, "maximize_best_checkpoint_metric"))
        if self._valid_best is None or (score > self._valid_best if maximize else score < self._valid_best):
            self._valid_best, self._valid_runs = score, 0
        else:
            self._valid_runs += 1

    def get_checkpoint_dict(self):
        """Saved in every checkpoint's ``extra_state``: the ``--patience`` count, :class:`resume.OneWrite`, the data
        identity and, under the task's class names (the entry fairseq hands to :meth:`set_checkpoint_dict`), the
        torch LR scheduler counters fairseq leaves out, read from the trainer of fairseq's ``save_checkpoint``."""
        (trainer,) = fairseq_internals.caller_locals("fairseq.checkpoint_utils", "save_checkpoint", "trainer")
        torch_scheduler = getattr(trainer.lr_scheduler, "lr_scheduler", None)
        counters = {k: getattr(torch_scheduler, k) for k in _TORCH_SCHEDULER_COUNTERS if hasattr(torch_scheduler, k)}
        saved = {PATIENCE_KEY: {"runs": self._valid_runs}}
        for cls in type(self).__mro__:  # a run may be resumed under an earlier name of its task
            if issubclass(cls, TranslationExactResumeTask):
                saved[cls.__name__] = {"lr_scheduler_counters": counters}
        if resume.checks_files(self.cfg):
            saved[ONE_WRITE_KEY] = resume.OneWrite(resume.option(self.cfg, "save_dir"))
        if not hasattr(self, "_data_identity"):  # what a restart compares its data with (fairseq_dense.trajectory)
            self._data_identity = task_data_identity(self.cfg)
        saved[DATA_KEY] = self._data_identity
        return saved

    def set_checkpoint_dict(self, state) -> None:
        """After ``fairseq-train`` loaded a checkpoint: the LR-scheduler counters back, and for an end-of-epoch
        checkpoint its epoch's LR-scheduler step.

        fairseq saves an epoch's checkpoint before ``trainer.lr_step(epoch, val_loss)`` and, resuming from it,
        steps with no loss (``reduce_lr_on_plateau`` would miss the halving, the others their ``best``). fairseq's
        ``load_checkpoint`` calls this right before that step, with the trainer and the loaded ``extra_state`` in
        its frame (:data:`fairseq_internals.FRAME_LOCALS`): the missing step is made here.
        """
        trainer, extra, reset = fairseq_internals.caller_locals(
            "fairseq.checkpoint_utils", "load_checkpoint", "trainer", "extra_state", "reset_lr_scheduler"
        )
        if reset:
            return
        torch_scheduler = getattr(trainer.lr_scheduler, "lr_scheduler", None)
        for key, value in (state.get("lr_scheduler_counters") or {}).items():
            if key in _TORCH_SCHEDULER_COUNTERS and hasattr(torch_scheduler, key):
                setattr(torch_scheduler, key, value)
        itr = (extra or {}).get("train_iterator") or {}
        if itr.get("iterations_in_epoch", 1) == 0:
            trainer.lr_scheduler.step(int(itr["epoch"]) - 1, extra.get("val_loss"))

    def post_save(self, cp_path: str, num_updates: int) -> None:
        """After every save's copies (the run's last included): :func:`fairseq_dense.resume.check_after_save`."""
        if resume.checks_files(self.cfg) and os.path.isdir(os.path.dirname(cp_path)):
            resume.check_after_save(os.path.dirname(cp_path), cp_path)

    def precision(self, model):
        """The region forward passes run in: bfloat16 autocast on the model's device under ``--bf16-autocast``."""
        if not resume.option(self.cfg, "bf16_autocast"):
            return contextlib.nullcontext()
        return bf16_autocast(next(model.parameters()).device.type)

    def _in_precision(self, criterion):
        def run(model, sample, *args, **kwargs):
            with self.precision(model):
                return criterion(model, sample, *args, **kwargs)

        return run

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """fairseq's step, its forward and loss in :meth:`precision` and its backward outside it (as torch
        recommends for autocast)."""
        return super().train_step(sample, model, self._in_precision(criterion), optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        """fairseq's validation step (and ``--eval-bleu``'s decoding, :meth:`inference_step`) in :meth:`precision`."""
        return super().valid_step(sample, model, self._in_precision(criterion))

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """``fairseq-generate``'s and ``fairseq-interactive``'s decoding (and scoring) in :meth:`precision`."""
        with self.precision(models[0]):
            return super().inference_step(generator, models, sample, prefix_tokens, constraints)


@register_task("translation_exact_resume_simplex", dataclass=TranslationExactResumeConfig)
class TranslationExactResumeSimplexTask(TranslationExactResumeTask):
    """Translation with exact resume plus the post-step simplex projection of ``on_simplex`` parameters."""

    def build_model(self, cfg, from_checkpoint=False):
        """Build the model and mark it (and its ``on_simplex`` parameters) as projected after every step."""
        model = super().build_model(cfg, from_checkpoint)
        setattr(model, PROJECTION_HOOK_ATTR, True)
        for p in simplex_parameters(model):
            setattr(p, PROJECTED_BY_TASK_ATTR, True)  # the optimizer-step hook leaves them to this task
        return model

    def optimizer_step(self, optimizer, model, update_num):
        """Step, then project every ``on_simplex`` parameter the step changed."""
        super().optimizer_step(optimizer, model, update_num)
        if simplex_parameters(model):
            project_parameters_after_step(model, optimizer)


@register_task("translation_weighted", dataclass=TranslationExactResumeConfig)
class TranslationWeightedTask(TranslationExactResumeSimplexTask):
    """``translation_exact_resume_simplex`` under its earlier name (saved checkpoints and commands name it)."""
