"""What a command-line process gets beyond the registrations: fairseq's tools with ``FAIRSEQ_DENSE_CLI=1``, the
project's own commands from their ``main`` (:func:`set_up`; docs/cli.md): one-line errors (:func:`clear_error_message`)
and a clean exit.
"""

import os
import sys
import traceback
from typing import Iterator, Optional

from fairseq_dense.checkpoints import CheckpointError, read_info, read_state
from fairseq_dense.fairseq_internals import FRAME_LOCALS, quiesce_prefetch_threads_at_exit, traceback_locals
from fairseq_dense.logging_setup import env_flag
from fairseq_dense.validation import CheckpointMismatchError, FairseqDenseError, find_non_utf8

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the environment variable that asks for :func:`set_up` in fairseq's own command-line tools
CLI_ENV = "FAIRSEQ_DENSE_CLI"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _raised_in_package(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__, limit=-1)  # the frame that raised
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(PACKAGE_DIR + os.sep)


def _checkpoint_name(exc: BaseException) -> Optional[str]:
    for e in _chain(exc):
        msg = str(e)
        if msg.startswith("Cannot load model parameters from checkpoint "):
            return msg[len("Cannot load model parameters from checkpoint ") :].split(";")[0]
        for function in ("load_model_ensemble_and_task", "load_checkpoint_to_cpu"):
            for local in traceback_locals(e, "fairseq.checkpoint_utils", function):
                name = local.get("filename") or local.get("path")
                if isinstance(name, str):
                    return name
    return None


def checkpoint_arch(path: str) -> Optional[str]:
    """The ``--arch`` a fairseq checkpoint was trained with, or None if it cannot be read."""
    try:
        state = read_state(path, mmap=True)
    except CheckpointError:
        return None
    model = (state.get("cfg") or {}).get("model") or {}  # a dict, or a Namespace for archs without a dataclass
    get = model.get if isinstance(model, dict) else lambda k: getattr(model, k, None)
    return get("arch") or get("_name") or getattr(state.get("args"), "arch", None)


def _failed_save(exc: BaseException) -> Optional[str]:
    """One line for a failed write while fairseq saved or copied a checkpoint, else None."""
    target = None
    for local in traceback_locals(exc, "fairseq.checkpoint_utils", "save_checkpoint"):
        target = local.get("cp") or (local.get("checkpoints") or ["?"])[0]
    if target is None:
        return None
    from fairseq_dense.resume import RetryRefused, save_trouble

    chain = list(_chain(exc))
    refused = next((e for e in chain if isinstance(e, RetryRefused)), None)
    if refused is not None:
        reason = str(refused)
    elif any(isinstance(e, OSError) or "write failed" in str(e) for e in chain):  # torch.save's own: RuntimeError
        reason = save_trouble(os.path.dirname(target)) or "the write failed"
    else:
        return None
    return (
        f"cannot save checkpoint {target}: {reason}; the checkpoints saved before it are intact: free space (or "
        "fix the folder) and run the same command again to resume"
    )


def _fairseq_start_error(exc: BaseException) -> Optional[str]:
    """One line for two errors of ``fairseq-train``'s start: its check that ``--save-dir`` is writable (a file
    ``dummy`` written before any plugin code runs) and a mid-epoch resume into fewer batches than it had done."""
    if isinstance(exc, OSError):
        for local in traceback_locals(exc, "fairseq.checkpoint_utils", "verify_checkpoint_directory"):
            return (
                f"cannot write to the save folder {local.get('save_dir')} ({exc.strerror or exc}): fairseq-train "
                "writes a test file there before anything else, so a run in a folder it cannot write (a finished one "
                "too) cannot be resumed or checked; copy the folder somewhere writable and pass that --save-dir"
            )
    if isinstance(exc, RuntimeError) and "dataloader mismatch" in str(exc):
        for local in traceback_locals(exc, "fairseq.data.iterators", "EpochBatchIterator.load_state_dict"):
            state = local.get("state_dict") or {}
            return (
                f"cannot resume in the middle of epoch {state.get('epoch')}: the checkpoint had done "
                f"{state.get('iterations_in_epoch')} of its batches, and the training data or batch options of this "
                "command give no more than that (a smaller or other training set: see the warning above); resume "
                "from an end-of-epoch checkpoint (--restore-file checkpoint<N>.pt) or train in a new --save-dir"
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
    if failed_save := _failed_save(first):
        return failed_save
    for e in chain:
        if isinstance(e, FairseqDenseError) or (isinstance(e, ValueError) and _raised_in_package(e)):
            return str(e)
    msg = str(first)
    if special := _fairseq_start_error(first):
        return special
    corrupt = _checkpoint_name(first)  # a file that does not load (not one whole but refused by torch's safe loader)
    if corrupt and os.path.isfile(corrupt) and read_info(corrupt) is None and "Weights only load failed" not in msg:
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
        readers = [w for w in FRAME_LOCALS if w[0] in ("fairseq.data.dictionary", "fairseq.binarizer")]
        for local in (local for where in readers for local in traceback_locals(first, *where)):
            name = local.get("filename")
            if isinstance(name, str) and os.path.isfile(name) and (bad := find_non_utf8(name)):
                return bad
    return None


def tool_name(argv0: str) -> str:
    """The command a process runs, from its ``sys.argv[0]`` (``python -m fairseq_cli.train``: fairseq-train)."""
    base = os.path.basename(argv0)
    norm = argv0.replace(os.sep, "/")
    if "/fairseq_cli/" in norm:
        return "fairseq-" + os.path.splitext(base)[0]
    if "/fairseq_dense/cli/" in norm:
        return "fairseq-dense-" + os.path.splitext(base)[0].replace("_", "-")
    return base or "python"


def set_up(tool: Optional[str] = None) -> None:
    """For this process's whole life (idempotent): fairseq's prefetch threads are waited for at exit and, unless
    ``FAIRSEQ_DENSE_TRACEBACK=1``, ``sys.excepthook`` prints ``<tool>: error: <message>`` for the errors
    :func:`clear_error_message` knows (any other keeps its traceback; the exit status stays 1)."""
    quiesce_prefetch_threads_at_exit()
    if env_flag("FAIRSEQ_DENSE_TRACEBACK") or getattr(sys.excepthook, "_fairseq_dense", False):
        return
    previous = sys.excepthook

    def excepthook(etype, value, tb):
        try:
            msg = clear_error_message(value)
        except Exception:  # never hide the original error behind a bug of ours
            msg = None
        if msg is None:
            return previous(etype, value, tb)
        name = tool or tool_name(sys.argv[0] if sys.argv else "")
        sys.stderr.write(f"{name}: error: {' '.join(msg.split())}\n")

    excepthook._fairseq_dense = True
    sys.excepthook = excepthook
