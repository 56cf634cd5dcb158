"""fairseq checkpoint files, in one place: their names, the one reader, last-N selection, averaging.

Used by the restart checks, ``fairseq-dense-export``, ``fairseq-dense-average`` and the quick-start. Files are read with
torch's safe ``weights_only`` loader only, and written to ``<name>.tmp`` and renamed into place (a kill leaves the old
file or the new one).
"""

import argparse
import collections
import contextlib
import glob
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence

import torch

from fairseq_dense.validation import FairseqDenseError

LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
#: suffix of the temporary file of an atomic write (fairseq's too)
TMP_SUFFIX = ".tmp"
#: names fairseq-train writes: last, best, epoch, interval and ``--keep-best-checkpoints`` files
FAIRSEQ_NAME = re.compile(r"^checkpoint(_last|_best|\d+|_\d+_\d+|\.best_.+)\.pt$")
#: the full training states a run may resume from (``checkpoint.best_*`` are copies of them)
RESUMABLE_NAME = re.compile(r"^checkpoint(_last|_best|\d+|_\d+_\d+)\.pt$")
#: ``extra_state`` key of the project's tasks: validations since the best score (``--patience``)
PATIENCE_KEY = "fairseq_dense_patience"
#: ``extra_state`` key of the project's tasks: the identity of the data files (:mod:`fairseq_dense.trajectory`)
DATA_KEY = "fairseq_dense_data"
#: ``extra_state`` key of :class:`fairseq_dense.resume.OneWrite` (an empty dict once saved)
ONE_WRITE_KEY = "fairseq_dense_one_write"


#: what fairseq checkpoints hold besides tensors and containers: the ``argparse.Namespace`` of the options of
#: a component registered without a dataclass (``--optimizer sgd``, fairseq's ``lstm``)
FAIRSEQ_GLOBALS = [argparse.Namespace]


@contextlib.contextmanager
def safe_loading(classes: Sequence = FAIRSEQ_GLOBALS):
    """torch's safe loader (``weights_only``) also reads ``classes`` inside the block, not after it; what the
    program allowed before stays allowed (blocks nest; overlapping blocks of two threads do not)."""
    added = [c for c in classes if c not in torch.serialization.get_safe_globals()]
    with torch.serialization.safe_globals(added):
        yield


class CheckpointError(FairseqDenseError, ValueError):
    """A file that is not a readable fairseq checkpoint, or checkpoints that cannot be combined."""


def read_state(path: str, mmap: bool = False) -> dict:
    """The state a fairseq checkpoint holds, read with torch's ``weights_only`` loader on the CPU (``mmap``: tensors
    memory-mapped, not read until used); a :class:`CheckpointError` names ``path`` and why it cannot be read."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with safe_loading():
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
    except Exception as e:  # a cut copy, a file of something else, a pickle that is not only weights
        text = re.sub(r"\x1b\[[\d;]*m", "", str(e))  # torch's refusal: bold codes, its cause on a later line
        cause = re.search(r"WeightsUnpickler error: (.+?)(?:\. |$)", text, re.M) or re.search(r"(\S.*|$)", text)
        why = f"{type(e).__name__}: {cause[1][:160]}"
        raise CheckpointError(f"{path}: cannot be read safely as a fairseq checkpoint ({why})") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise CheckpointError(f"{path}: not a fairseq checkpoint (no 'model' state dict)")
    return state


def num_updates(state: dict) -> int:
    """The updates a checkpoint's state records (0 if none)."""
    return int(((state.get("optimizer_history") or [{}])[-1]).get("num_updates", 0))


@dataclass
class CheckpointInfo:
    """The counters of a checkpoint that loads (what restarts, selection and the quick-start read)."""

    path: str
    num_updates: int
    val_loss: Optional[float]  # the validation score saved with it (None: not validated)
    best: Optional[float]  # the best validation score so far (fairseq's ``extra_state["best"]``)
    next_epoch: int  # the epoch training continues in (``train_iterator["epoch"]``)
    training_seconds: float  # fairseq's cumulative training time
    size: int
    mtime_ns: int
    runs_without_improvement: int = 0  # validations since the best score (saved by the project's tasks)
    end_of_epoch: bool = False  # saved at an epoch's end (no iterations into ``next_epoch`` yet)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def read_info(path: str) -> Optional[CheckpointInfo]:
    """The :class:`CheckpointInfo` of ``path``, or None if it does not load (tensors memory-mapped, not read)."""
    try:
        st = os.stat(path)
        state = read_state(path, mmap=True)
    except (OSError, CheckpointError):  # a file gone meanwhile too
        return None
    extra = state.get("extra_state") or {}
    itr = extra.get("train_iterator") or {}
    return CheckpointInfo(
        path=path,
        num_updates=num_updates(state),
        val_loss=None if extra.get("val_loss") is None else float(extra["val_loss"]),
        best=None if extra.get("best") is None else float(extra["best"]),
        next_epoch=int(itr.get("epoch", 1)),
        training_seconds=float(extra.get("previous_training_time", 0.0)),
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        runs_without_improvement=int((extra.get(PATIENCE_KEY) or {}).get("runs", 0)),
        end_of_epoch=int(itr.get("iterations_in_epoch", 0)) == 0,
    )


def crc_error(path: str) -> Optional[str]:
    """Why the zip archive ``path`` (torch's format) fails its CRC check, or None if every member passes (and for a
    file in torch's legacy format, which has no checksums). Reads the whole file, not its tensors into memory."""
    try:
        if not zipfile.is_zipfile(path):
            return None
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except Exception as e:  # a damaged header or directory entry
        return f"{type(e).__name__}: {e}"
    return None if bad is None else f"{bad} fails its CRC check"


def checkpoint_paths(save_dir: str) -> List[str]:
    """Every ``checkpoint*.pt`` of ``save_dir``, sorted by name."""
    return sorted(glob.glob(os.path.join(glob.escape(save_dir), "checkpoint*.pt")))


def last_checkpoints(directory: str, n: int, by_updates: bool, upper_bound: Optional[int] = None) -> List[str]:
    """The ``n`` checkpoints of ``directory`` with the most updates (or latest epochs), oldest first (fewer: a
    :class:`CheckpointError`). ``by_updates``: ``checkpoint_<epoch>_<updates>.pt`` instead of ``checkpoint<epoch>.pt``;
    ``upper_bound``: ignore checkpoints after this update (or epoch)."""
    from fairseq.checkpoint_utils import checkpoint_paths as numbered  # most updates (or latest epoch) first

    pattern = r"checkpoint_\d+_(\d+)\.pt" if by_updates else r"checkpoint(\d+)\.pt"
    found = [p for p, k in numbered(directory, pattern, keep_match=True) if upper_bound is None or k <= upper_bound]
    if len(found) < n:
        kind = "checkpoint_<epoch>_<updates>.pt" if by_updates else "checkpoint<epoch>.pt"
        bound = f" up to {upper_bound}" if upper_bound is not None else ""
        raise CheckpointError(f"{directory} holds {len(found)} {kind} files{bound}, {n} needed")
    return found[:n][::-1]


def average_models(models: Sequence[Dict[str, torch.Tensor]], paths: Sequence[str]) -> Dict[str, torch.Tensor]:
    """The element-wise mean of the ``"model"`` state dicts of one training run's checkpoints (other names or shapes:
    a :class:`CheckpointError`): floats summed in float64 and rounded once to their dtype, other tensors
    floor-divided (as fairseq's ``scripts/average_checkpoints.py``)."""
    if not models:
        raise CheckpointError("no checkpoints to average")
    reference, ref_path = models[-1], paths[-1]
    for model, path in zip(models, paths):
        if list(model) != list(reference):
            missing = sorted(set(reference) - set(model))[:3]
            extra = sorted(set(model) - set(reference))[:3]
            raise CheckpointError(
                f"{path} holds other parameters than {ref_path} (missing {missing}, extra {extra}): "
                "average checkpoints of one training run only"
            )
        for k, v in model.items():
            if v.shape != reference[k].shape:
                raise CheckpointError(f"{path}: {k} has shape {list(v.shape)}, {ref_path} {list(reference[k].shape)}")
    if len(models) == 1:
        return collections.OrderedDict(reference)
    averaged = collections.OrderedDict()
    for k, last in reference.items():
        if last.is_floating_point():
            averaged[k] = (sum(m[k].double() for m in models) / len(models)).to(last.dtype)
        else:
            averaged[k] = torch.div(sum(m[k] for m in models), len(models), rounding_mode="floor").to(last.dtype)
    return averaged


def average_checkpoints(paths: Sequence[str]) -> dict:
    """The last checkpoint's state with ``"model"`` replaced by the mean over ``paths`` (:func:`average_models`)."""
    states = [read_state(p) for p in paths]
    state = states[-1]
    state["model"] = average_models([s["model"] for s in states], paths)
    return state


@contextlib.contextmanager
def replacing(dest: str) -> Iterator[str]:
    """The name ``<dest>.tmp`` to write, renamed over ``dest`` when the block succeeds and removed when it fails:
    ``dest`` is at all times the old file or the new one (every atomic file write of the project)."""
    tmp = dest + TMP_SUFFIX
    try:
        yield tmp
        os.replace(tmp, dest)
    except BaseException:
        if os.path.lexists(tmp):
            os.remove(tmp)
        raise


def atomic_copy(source: str, dest: str, times: Optional[os.stat_result] = None) -> None:
    """Copy ``source`` over ``dest`` (:func:`replacing`); ``times``: the copy's access and modification times."""
    with replacing(dest) as tmp:
        shutil.copyfile(source, tmp)
        if times is not None:
            os.utime(tmp, ns=(times.st_atime_ns, times.st_mtime_ns))


def atomic_save(state: dict, dest: str) -> None:
    """``torch.save(state)`` to ``dest`` (:func:`replacing`)."""
    with replacing(dest) as tmp:
        torch.save(state, tmp)
