"""Workarounds for fairseq 0.12 on modern Python and torch, in one place (none patches fairseq's code).

``import fairseq_dense`` calls :func:`install`; each workaround is turned off by listing its name in
``FAIRSEQ_DENSE_COMPAT_OFF`` (comma-separated) before the import, or undone as its docstring says:
``safe_loading`` (:func:`allow_namespace_in_safe_loader`), ``prefetch_exit``
(:func:`quiesce_prefetch_threads`) and ``error_hook`` (:func:`install_excepthook`). The clear message of
a checkpoint that does not fit is no workaround: the model classes carry it
(:class:`ExplainsCheckpointMismatch`).
"""

import argparse
import atexit
import errno
import logging
import os
import sys
import threading
import time
from typing import Dict, Iterator, Optional

import torch

from fairseq_dense.validation import CheckpointMismatchError, FairseqDenseError, find_non_utf8

logger = logging.getLogger(__name__)

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def install() -> None:
    """Apply every workaround not listed in ``FAIRSEQ_DENSE_COMPAT_OFF`` (idempotent; after the registrations)."""
    off = {name.strip() for name in os.environ.get("FAIRSEQ_DENSE_COMPAT_OFF", "").split(",")}
    if "safe_loading" not in off:
        allow_namespace_in_safe_loader()
    if "prefetch_exit" not in off:
        atexit.unregister(quiesce_prefetch_threads)
        atexit.register(quiesce_prefetch_threads)
    if "error_hook" not in off:
        install_excepthook()


# ---------------------------------------------------------------- safe_loading


def allow_namespace_in_safe_loader() -> None:
    """Let torch's safe loader (``weights_only=True``, the default since torch 2.6) read the
    ``argparse.Namespace`` fairseq checkpoints hold, and nothing more. Undo:
    ``torch.serialization.clear_safe_globals()``."""
    if hasattr(torch.serialization, "add_safe_globals"):
        torch.serialization.add_safe_globals([argparse.Namespace])


# ---------------------------------------------------------------- prefetch_exit

WAIT_SECONDS = 30.0


def _prefetch_threads():
    try:
        from fairseq.data.iterators import BackgroundConsumer
    except ImportError:  # fairseq not importable: nothing of it is running
        return []
    return [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer)]


def _parked(thread) -> bool:
    """The thread is blocked in ``queue.put`` on its full queue (``queue.full()`` is not enough: after
    the put that filled it the thread collates one more batch)."""
    # a waiter on ``not_full`` exists only while a put blocks; the deque's length is read atomically
    return len(thread._queue.not_full._waiters) > 0


def quiesce_prefetch_threads(timeout: float = WAIT_SECONDS, threads=None) -> bool:
    """Wait until fairseq's prefetch threads (default: all) are done or parked; True when they are.

    fairseq's daemon ``BackgroundConsumer`` fills a queue of batches. When ``fairseq-train`` ends while
    it collates one, Python 3.11 finalises the interpreter under it inside a torch destructor and the
    process aborts (exit code 134) after every checkpoint is written. Run at exit, this waits (at most
    ``timeout`` seconds) until each such thread is finished or parked in ``queue.put`` on its full queue,
    where finalisation cannot catch it inside a destructor. Undo:
    ``atexit.unregister(fairseq_dense.fairseq_compat.quiesce_prefetch_threads)``.
    """
    deadline = time.monotonic() + timeout
    busy = _prefetch_threads() if threads is None else list(threads)
    while busy and time.monotonic() < deadline:
        busy = [t for t in busy if t.is_alive() and not _parked(t)]
        if busy:
            time.sleep(0.01)
    return not busy


# ---------------------------------------------------------------- checkpoint_mismatch


def explain_state_dict_mismatch(model, state_dict: Dict, model_cfg=None) -> Optional[str]:
    """Why ``state_dict`` (a checkpoint's ``"model"``) does not load into ``model``, in one sentence; None
    when the keys and shapes fit. The cause named: the model's own reading of differing names
    (``model.state_dict_mismatch_hint(missing, unexpected)``), another ``--arch`` (names differ), other
    dictionaries (only vocabulary-sized rows differ) or other sizes (the first differing tensor)."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    arch = (
        getattr(model_cfg, "arch", None)
        or getattr(model_cfg, "_name", None)
        or getattr(getattr(model, "cfg", None), "_name", None)
        or type(model).__name__
    )
    if missing or unexpected:
        hint = getattr(model, "state_dict_mismatch_hint", None)
        reason = hint(missing, unexpected) if hint is not None else None
        if reason:
            return reason
        shared = len(set(own) & set(state_dict))
        return (
            f"the checkpoint's parameters do not match {arch} ({len(missing)} missing, e.g. "
            f"{(missing or ['-'])[0]!r}; {len(unexpected)} unexpected, e.g. {(unexpected or ['-'])[0]!r}; "
            f"{shared} shared): it was trained with another --arch or model options"
        )
    shape_diffs = [
        (k, tuple(state_dict[k].shape), tuple(v.shape))
        for k, v in own.items()
        if hasattr(state_dict[k], "shape") and tuple(state_dict[k].shape) != tuple(v.shape)
    ]
    if not shape_diffs:
        return None
    sides = ((side, getattr(getattr(model, side, None), "dictionary", None)) for side in ("encoder", "decoder"))
    vocab = {side: len(d) for side, d in sides if d is not None}
    vocab_rows = set(vocab.values())
    if all(len(c) == len(m) and c[1:] == m[1:] and m[0] in vocab_rows for _, c, m in shape_diffs):
        key, ckpt, mine = shape_diffs[0]
        sizes = ", ".join(f"{side} {n}" for side, n in vocab.items())
        return (
            f"the dictionaries do not match the checkpoint: they hold {sizes} symbols, the checkpoint was trained "
            f"with {ckpt[0]} ({key}); use the dict.*.txt files of the data the model was trained on"
        )
    key, ckpt, mine = shape_diffs[0]
    return (
        f"checkpoint parameter {key!r} has shape {list(ckpt)} but {arch} built from the current "
        f"options has {list(mine)} ({len(shape_diffs)} tensors differ): it was trained with other sizes"
    )


class ExplainsCheckpointMismatch:
    """First base of every fairseq-dense model class: a ``load_state_dict`` torch rejects with its list
    of differing tensors is re-raised as :class:`CheckpointMismatchError` naming the cause
    (:func:`explain_state_dict_mismatch`); nothing else changes."""

    def load_state_dict(self, state_dict, *args, **kwargs):
        try:
            return super().load_state_dict(state_dict, *args, **kwargs)
        except RuntimeError as e:
            if isinstance(e, CheckpointMismatchError) or "state_dict" not in str(e):
                raise
            model_cfg = kwargs.get("model_cfg", args[1] if len(args) > 1 else None)
            reason = explain_state_dict_mismatch(self, state_dict, model_cfg)
            if reason is None:
                raise
            raise CheckpointMismatchError(reason) from e


# ---------------------------------------------------------------- error_hook


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _frames(tb):
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _raised_in_package(exc: BaseException) -> bool:
    frames = list(_frames(exc.__traceback__))
    return bool(frames) and os.path.abspath(frames[-1].f_code.co_filename).startswith(PACKAGE_DIR + os.sep)


def _checkpoint_name(exc: BaseException) -> Optional[str]:
    for e in _chain(exc):
        msg = str(e)
        if msg.startswith("Cannot load model parameters from checkpoint "):
            return msg[len("Cannot load model parameters from checkpoint ") :].split(";")[0]
        for frame in _frames(e.__traceback__):
            if frame.f_code.co_name in ("load_model_ensemble_and_task", "load_checkpoint_to_cpu"):
                name = frame.f_locals.get("filename") or frame.f_locals.get("path")
                if isinstance(name, str):
                    return name
    return None


def checkpoint_arch(path: str) -> Optional[str]:
    """The ``--arch`` a fairseq checkpoint was trained with, or None if it cannot be read."""
    from fairseq_dense.checkpoints import CheckpointError, read_state

    try:
        state = read_state(path, mmap=True)
    except CheckpointError:
        return None
    model = (state.get("cfg") or {}).get("model") or {}  # a dict, or a Namespace for archs without a dataclass
    get = model.get if isinstance(model, dict) else lambda k: getattr(model, k, None)
    return get("arch") or get("_name") or getattr(state.get("args"), "arch", None)


def _unreadable_checkpoint(exc: BaseException) -> Optional[str]:
    """The checkpoint path if ``exc`` came from fairseq's load of a file that does not load."""
    from fairseq_dense.checkpoints import read_info

    for frame in _frames(exc.__traceback__):
        if frame.f_code.co_name == "load_checkpoint_to_cpu":
            path = frame.f_locals.get("local_path") or frame.f_locals.get("path")
            if isinstance(path, str) and os.path.isfile(path) and read_info(path) is None:
                return path
    return None


#: what a failed write says, by ``errno``
_WRITE_ERRORS = {
    errno.ENOSPC: "no space left on device",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large (ulimit -f)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
}


def _failed_save(exc: BaseException) -> Optional[str]:
    """One line for an error raised while fairseq saved or copied a checkpoint, else None."""
    target = None
    for frame in _frames(exc.__traceback__):
        if frame.f_code.co_name == "save_checkpoint" and "checkpoints" in frame.f_locals:
            target = frame.f_locals.get("cp") or (frame.f_locals.get("checkpoints") or ["?"])[0]
    if target is None:
        return None
    from fairseq_dense.resume import RetryRefused

    reason = None
    for e in _chain(exc):
        if isinstance(e, RetryRefused):
            reason = str(e)
        elif isinstance(e, OSError) and e.errno in _WRITE_ERRORS:
            reason = _WRITE_ERRORS[e.errno]
        elif reason is None:  # torch.save reports a failed write of its own as a RuntimeError
            reason = next((r for n, r in _WRITE_ERRORS.items() if os.strerror(n).lower() in str(e).lower()), None)
            if reason is None and "write failed" in str(e):
                reason = "the write failed"
    if reason is None:
        return None
    return (
        f"cannot save checkpoint {target}: {reason}; the checkpoints saved before it are intact: free space (or "
        "fix the folder) and run the same command again to resume"
    )


def _fairseq_start_error(exc: BaseException) -> Optional[str]:
    """One line for two errors of ``fairseq-train``'s start: its check that ``--save-dir`` is writable (a file
    ``dummy`` written before any plugin code runs) and a mid-epoch resume into fewer batches than it had done."""
    frames = {f.f_code.co_name: f for f in _frames(exc.__traceback__)}
    if isinstance(exc, OSError) and "verify_checkpoint_directory" in frames:
        save_dir = frames["verify_checkpoint_directory"].f_locals.get("save_dir")
        return (
            f"cannot write to the save folder {save_dir} ({exc.strerror or exc}): fairseq-train writes a test file "
            "there before anything else, so a run in a folder it cannot write (a finished one too) cannot be resumed "
            "or checked; copy the folder somewhere writable and pass that --save-dir"
        )
    if isinstance(exc, RuntimeError) and "dataloader mismatch" in str(exc) and "load_state_dict" in frames:
        state = frames["load_state_dict"].f_locals.get("state_dict") or {}
        return (
            f"cannot resume in the middle of epoch {state.get('epoch')}: the checkpoint had done "
            f"{state.get('iterations_in_epoch')} of its batches, and the training data or batch options of this "
            "command give no more than that (a smaller or other training set: see the warning above); resume from "
            "an end-of-epoch checkpoint (--restore-file checkpoint<N>.pt) or train in a new --save-dir"
        )
    return None


def clear_error_message(exc: BaseException, argv=None) -> Optional[str]:
    """The one-line message for ``exc`` (its ``__cause__``/``__context__`` chain searched), or None to keep
    Python's traceback; ``argv`` (default ``sys.argv``) for the ``--bf16`` hint."""
    argv = sys.argv if argv is None else argv
    chain = list(_chain(exc))
    for e in chain:
        if isinstance(e, CheckpointMismatchError):
            name = _checkpoint_name(exc)
            if not name:
                return str(e)
            arch = checkpoint_arch(name)
            return f"cannot load {name}{f' (a {arch} checkpoint)' if arch else ''}: {e}"
    first = chain[0]
    failed_save = _failed_save(first)
    if failed_save:
        return failed_save
    for e in chain:
        if isinstance(e, FairseqDenseError) or (isinstance(e, ValueError) and _raised_in_package(e)):
            return str(e)
    msg = str(first)
    special = _fairseq_start_error(first)
    if special:
        return special
    corrupt = _unreadable_checkpoint(first)
    if corrupt:
        from fairseq_dense.resume import unreadable_message

        return unreadable_message(corrupt)
    if msg.startswith("Size of sample #"):
        return msg + " (or --truncate-source when training/generating from binarised data)"
    if any(a in ("--bf16", "--memory-efficient-bf16") for a in argv) and any(
        "xla" in str(e).lower() or "tpu" in str(e).lower() for e in chain
    ):
        return (
            "--bf16 needs a TPU in fairseq: fairseq/options.py turns --bf16 into --tpu, which needs "
            "torch_xla; for bfloat16 on CPUs and GPUs use --bf16-autocast (--task translation_exact_resume or "
            "another fairseq-dense task)"
        )
    if isinstance(first, ValueError) and "negative seek position" in msg:
        for frame in _frames(first.__traceback__):
            name = frame.f_locals.get("filename")
            if isinstance(name, str) and os.path.isfile(name):
                bad = find_non_utf8(name)
                if bad:
                    return bad
    return None


def _tool_name(argv0: str) -> Optional[str]:
    base = os.path.basename(argv0)
    if base.startswith("fairseq-"):
        return base
    norm = argv0.replace(os.sep, "/")
    if "/fairseq_cli/" in norm:
        return "fairseq-" + os.path.splitext(base)[0]
    if "/fairseq_dense/cli/" in norm:
        return "fairseq-dense-" + os.path.splitext(base)[0].replace("_", "-")
    return None


def install_excepthook(argv0: Optional[str] = None) -> bool:
    """Install the one-line error hook when a fairseq command-line tool runs (idempotent); True if installed.

    fairseq reports several user mistakes with a traceback from deep inside torch or fairseq. Only in a
    command-line tool (``fairseq-*``, ``python -m fairseq_cli.*``, our launchers), never in a library or
    notebook, ``sys.excepthook`` prints ``<tool>: error: <what is wrong>`` for our own errors, for
    ``ValueError`` raised by fairseq-dense code and for the fairseq errors :func:`clear_error_message`
    knows; any other exception keeps its traceback; the exit status stays 1.
    ``FAIRSEQ_DENSE_TRACEBACK=1`` keeps full tracebacks.
    """
    if os.environ.get("FAIRSEQ_DENSE_TRACEBACK", "0") not in ("", "0"):
        return False
    tool = _tool_name(argv0 if argv0 is not None else (sys.argv[0] if sys.argv else ""))
    if tool is None:
        return False
    if getattr(sys.excepthook, "_fairseq_dense", False):
        return True
    previous = sys.excepthook

    def excepthook(etype, value, tb):
        try:
            msg = clear_error_message(value)
        except Exception:  # never hide the original error behind a bug of ours
            msg = None
        if msg is None:
            return previous(etype, value, tb)
        sys.stderr.write(f"{tool}: error: {' '.join(msg.split())}\n")

    excepthook._fairseq_dense = True
    sys.excepthook = excepthook
    return True
