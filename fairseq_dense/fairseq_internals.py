"""Every reach of fairseq-dense into fairseq's internals, each beside the behaviour of fairseq-fixed 0.12.3.1 it needs.

fairseq offers plugins registries, config dataclasses and task/model hooks; what they do not reach is reached here and
nowhere else. Each reach checks its assumption where it runs and raises :class:`FairseqInternalsChanged` naming it when
fairseq differs (never a silent no-op); ``tests/test_fairseq_internals.py`` checks each against the installed fairseq.
"""

import atexit
import contextlib
import importlib
import os
import sys
import threading
import time
from typing import Iterator, Optional

from fairseq_dense.validation import FairseqDenseError


class FairseqInternalsChanged(FairseqDenseError, RuntimeError):
    """The installed fairseq does not do what this module says fairseq-fixed 0.12.3.1 does."""

    def __init__(self, what: str):
        super().__init__(f"{what}: this fairseq is not fairseq-fixed 0.12.3.1 (see fairseq_dense/fairseq_internals.py)")


def _is(frame, module: str, function: str) -> bool:
    """``frame`` runs fairseq's ``module.function`` (``Class.method``; also where the module runs as ``__main__``)."""
    path = "/" + module.replace(".", "/") + ".py"
    code = frame.f_code
    return code.co_name == function.split(".")[-1] and code.co_filename.replace(os.sep, "/").endswith(path)


# ---------------------------------------------------------------- local variables of fairseq's functions

#: ``(module, function) -> names``: the local variables of fairseq's functions that fairseq-dense reads
FRAME_LOCALS = {
    # ``save_checkpoint(cfg, trainer, ...)`` calls ``task.get_checkpoint_dict()`` with no handle on the trainer
    # (whose LR scheduler's counters the task saves); it writes ``checkpoints[0]``, copies it to each ``cp``
    ("fairseq.checkpoint_utils", "save_checkpoint"): ("trainer", "checkpoints", "cp"),
    # ``load_checkpoint(cfg, trainer, ...)`` calls ``task.set_checkpoint_dict(state)`` (the task's entry only)
    # after loading ``extra_state``, before its ``trainer.lr_step(epoch)`` (which has no loss)
    ("fairseq.checkpoint_utils", "load_checkpoint"): ("trainer", "extra_state", "reset_lr_scheduler"),
    # the folder fairseq-train's first write fails in; a mid-epoch resume into fewer batches (one-line errors)
    ("fairseq.checkpoint_utils", "verify_checkpoint_directory"): ("save_dir",),
    ("fairseq.data.iterators", "EpochBatchIterator.load_state_dict"): ("state_dict",),
    # the file of a failed load (one-line errors)
    ("fairseq.checkpoint_utils", "load_checkpoint_to_cpu"): ("path",),
    ("fairseq.checkpoint_utils", "load_model_ensemble_and_task"): ("filename",),
    # fairseq-preprocess reads a non-UTF-8 file to ``ValueError: negative seek position -1`` (one-line errors)
    ("fairseq.data.dictionary", "Dictionary.add_file_to_dictionary"): ("filename",),
    ("fairseq.binarizer", "FileBinarizer._binarize_file_chunk"): ("filename",),
}


def caller_locals(module: str, function: str, *names: str) -> tuple:
    """The values of ``names`` in the nearest frame of fairseq's ``module.function`` above the caller.

    Raises:
        FairseqInternalsChanged: no such frame (fairseq calls the hook from elsewhere) or a name is unbound.
    """
    frame = sys._getframe(2)
    while frame is not None and not _is(frame, module, function):
        frame = frame.f_back
    if frame is None or any(n not in frame.f_locals for n in names):
        raise FairseqInternalsChanged(f"{sys._getframe(1).f_code.co_name} expects a call from {module}.{function}")
    return tuple(frame.f_locals[n] for n in names)


def traceback_locals(exc: BaseException, module: str, function: str) -> Iterator[dict]:
    """The local variables of each frame of fairseq's ``module.function`` in ``exc``'s traceback."""
    tb = exc.__traceback__
    while tb is not None:
        if _is(tb.tb_frame, module, function):
            yield tb.tb_frame.f_locals
        tb = tb.tb_next


# ---------------------------------------------------------------- the start of a training


class StartsTrainingAtTheLoad:
    """Task mixin: the task's ``start_training()`` context is entered where fairseq-train starts a training,
    right before it loads ``--restore-file``, and left when that load is done.

    No hook exists there. In ``fairseq_cli/train.py``'s ``main``, ``setup_task``, ``build_model``,
    ``build_criterion`` and the valid sets' ``load_dataset`` come first but also run in fairseq-generate,
    -validate and hub loads; ``set_checkpoint_dict`` and ``begin_epoch`` come after the load. The one
    training-only call before it is the query ``task.has_sharded_data("train")``, an argument of
    ``checkpoint_utils.load_checkpoint``: its first call from that ``main`` (from nowhere else) enters the
    start; the load's next task call, ``load_dataset`` (the training data), leaves it (a load that raises
    leaves it open: the failure ends fairseq-train). ``begin_epoch`` raises if a training gets there without
    the start.
    """

    _training = None  # None: not started; an ExitStack while fairseq loads the checkpoint; True afterwards

    def has_sharded_data(self, split):
        """fairseq's answer; the first call from fairseq-train's ``main`` also enters ``self.start_training()``."""
        if split == "train" and self._training is None and _is(sys._getframe(1), "fairseq_cli.train", "main"):
            stack = contextlib.ExitStack()
            stack.enter_context(self.start_training())
            self._training = stack
        return super().has_sharded_data(split)

    def load_dataset(self, split, *args, **kwargs):
        if isinstance(self._training, contextlib.ExitStack):  # fairseq's checkpoint load is done
            self._training.close()
            self._training = True
        return super().load_dataset(split, *args, **kwargs)

    def begin_epoch(self, epoch, model):
        if self._training is None:
            raise FairseqInternalsChanged(
                f"fairseq-train began epoch {epoch} without asking task.has_sharded_data('train') before loading its "
                "checkpoint, so the task's start of training (lock, restart checks) did not run"
            )
        super().begin_epoch(epoch, model)


def rebuild_batches(cfg) -> None:
    """Have ``FairseqTask.get_batch_iterator`` build every epoch's batches with ``seed + epoch``: it does so when
    ``getattr(task.cfg, "rebuild_batches", False)`` (a field of fairseq's audio task configs only)."""
    from fairseq.tasks import FairseqTask
    from omegaconf import OmegaConf, open_dict

    if "rebuild_batches" not in FairseqTask.get_batch_iterator.__code__.co_consts:
        raise FairseqInternalsChanged("FairseqTask.get_batch_iterator no longer reads cfg.rebuild_batches")
    with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.nullcontext():
        cfg.rebuild_batches = True


# ---------------------------------------------------------------- private names


#: fairseq's private names that fairseq-dense uses (:func:`private`), and what they are
PRIVATE_NAMES = {
    # what ``broadcast_object`` pickles in place of each tensor it sends apart (a data-parallel resume)
    ("fairseq.distributed.utils", "_TensorPlaceholder"),
    # fills an ``argparse.Namespace`` with a model's registered arguments (models without a dataclass)
    ("fairseq.dataclass.utils", "_set_legacy_defaults"),
}


def private(module: str, name: str):
    """fairseq's private ``module.name`` (one of :data:`PRIVATE_NAMES`)."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise FairseqInternalsChanged(f"{module}.{name} is gone") from None


def prefetch_threads() -> list:
    """fairseq's running prefetch threads (``fairseq.data.iterators.BackgroundConsumer``)."""
    from fairseq.data.iterators import BackgroundConsumer

    return [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer)]


def parked(thread) -> bool:
    """The prefetch thread is blocked in ``queue.put`` on its full queue ``thread._queue`` (``queue.full()`` is
    not enough: after the put that filled it the thread collates one more batch). A waiter on the queue's
    ``not_full`` condition (CPython's ``Condition._waiters``) exists only while a put blocks."""
    try:
        return len(thread._queue.not_full._waiters) > 0
    except AttributeError:
        raise FairseqInternalsChanged("a fairseq prefetch thread has no _queue.not_full._waiters") from None


def quiesce_prefetch_threads(timeout: float = 30.0, threads: Optional[list] = None) -> bool:
    """Wait until fairseq's prefetch threads (default: all) are done or parked; True when they are.

    fairseq's daemon ``BackgroundConsumer`` fills a queue of batches. When ``fairseq-train`` ends while it
    collates one, Python 3.11 finalises the interpreter under it inside a torch destructor and the process
    aborts (exit code 134) after every checkpoint is written. Run at exit, this waits (at most ``timeout``
    seconds) until each is finished or parked (:func:`parked`), where finalisation cannot catch it.
    """
    deadline = time.monotonic() + timeout
    busy = prefetch_threads() if threads is None else list(threads)
    while busy and time.monotonic() < deadline:
        busy = [t for t in busy if t.is_alive() and not parked(t)]
        if busy:
            time.sleep(0.01)
    return not busy


def quiesce_prefetch_threads_at_exit() -> None:
    """Run :func:`quiesce_prefetch_threads` at exit (registered once)."""
    atexit.unregister(quiesce_prefetch_threads)
    atexit.register(quiesce_prefetch_threads)
