"""A save directory that survives a kill at any moment: checks at restart and after every save.

How fairseq saves (``checkpoint_utils.save_checkpoint``): the first file due at that
moment (``checkpoint<E>.pt`` at an epoch end, ``checkpoint_<E>_<U>.pt`` every
``--save-interval-updates``, else ``checkpoint_best.pt`` or ``checkpoint_last.pt``) is
written atomically (``<name>.tmp``, then a rename); the other names due are then
*copied* from it (``PathManager.copy``, not atomic), ``checkpoint_best.pt`` before
``checkpoint_last.pt``. A kill can therefore leave

- a partial ``<name>.tmp`` (killed inside ``torch.save``): every finished file is intact;
- a cut copy (killed inside a copy): a prefix of the file it was copied from, which is
  intact;
- a finished first file and older (intact) copies (killed between the rename and the
  copies): the newest save is in a file fairseq's automatic resume does not read.

:func:`recover_at_restart` (run by the ``translation_exact_resume`` and
``translation_weighted`` tasks before fairseq-train loads ``checkpoint_last.pt``) and
:func:`check_after_save` (after every save) undo each of these; :func:`finished_reason`
tells a restart of a finished run. Every file is replaced atomically (a temporary file,
then a rename), so a kill during the recovery is recovered at the next restart. The
guarantee and its limits: docs/reliability.md.
"""

import glob
import logging
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

import torch

logger = logging.getLogger(__name__)

LAST = "checkpoint_last.pt"
BEST = "checkpoint_best.pt"
#: suffix of an unreadable checkpoint that was set aside (kept until a good one of that name exists)
UNREADABLE_SUFFIX = ".unreadable"
#: suffix of fairseq's (and this module's) temporary file of an atomic write
TMP_SUFFIX = ".tmp"
#: names fairseq-train writes: last, best, epoch, interval and ``--keep-best-checkpoints`` files
FAIRSEQ_NAME = re.compile(r"^checkpoint(_last|_best|\d+|_\d+_\d+|\.best_.+)\.pt$")
#: the full training states a run may resume from (``checkpoint.best_*`` are copies of them)
RESUMABLE_NAME = re.compile(r"^checkpoint(_last|_best|\d+|_\d+_\d+)\.pt$")
_CHUNK = 1 << 20


class TrainingFinished(SystemExit):
    """Ends ``fairseq-train`` with exit status 0 before anything is trained or written.

    Raised when a run is started again after it reached its stopping point
    (:func:`finished_reason`); :attr:`message` says which one.
    """

    def __init__(self, message: str):
        super().__init__(0)
        self.message = message


@dataclass
class CheckpointInfo:
    """What the recovery needs to know of a checkpoint that loads."""

    path: str
    num_updates: int
    val_loss: Optional[float]  # the validation score saved with it (None: not validated)
    best: Optional[float]  # the best validation score so far (fairseq's ``extra_state["best"]``)
    next_epoch: int  # the epoch training continues in (``train_iterator["epoch"]``)
    training_seconds: float  # fairseq's cumulative training time
    size: int
    mtime_ns: int

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def is_complete_checkpoint(path: str) -> bool:
    """Whether ``path`` is a complete zip archive (what ``torch.save`` writes; a cut copy is not)."""
    return os.path.isfile(path) and zipfile.is_zipfile(path)


def read_checkpoint(path: str) -> Optional[CheckpointInfo]:
    """The :class:`CheckpointInfo` of ``path``, or None if ``torch.load`` cannot read it.

    Zip checkpoints are memory-mapped (the tensors are not read); a file that is not a
    zip archive (a cut copy, or torch's legacy format) goes through ``torch.load`` as is.
    """
    try:
        st = os.stat(path)
        zipped = zipfile.is_zipfile(path)
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
        history = state.get("optimizer_history") or [{}]
        extra = state.get("extra_state") or {}
        itr = extra.get("train_iterator") or {}
        return CheckpointInfo(
            path=path,
            num_updates=int(history[-1].get("num_updates", 0)),
            val_loss=None if extra.get("val_loss") is None else float(extra["val_loss"]),
            best=None if extra.get("best") is None else float(extra["best"]),
            next_epoch=int(itr.get("epoch", 1)),
            training_seconds=float(extra.get("previous_training_time", 0.0)),
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
        )
    except Exception:  # any failure to read means "does not load" (and a file gone meanwhile too)
        return None


def _newest(infos: Iterable[CheckpointInfo]) -> Optional[CheckpointInfo]:
    """The one with the most updates; on a tie the file a save wrote first (an epoch or interval
    checkpoint, of which ``checkpoint_best.pt``/``checkpoint_last.pt`` are copies), then the later written."""
    return max(infos, key=lambda i: (i.num_updates, i.name not in (BEST, LAST), i.mtime_ns), default=None)


def _checkpoint_paths(save_dir: str) -> List[str]:
    return sorted(glob.glob(os.path.join(glob.escape(save_dir), "checkpoint*.pt")))


def newest_loadable_checkpoint(save_dir: str, exclude: str = LAST) -> Optional[Tuple[str, int]]:
    """The ``checkpoint*.pt`` of ``save_dir`` with the most updates among those that load.

    Args:
        save_dir: the ``--save-dir`` folder.
        exclude: a file name not to consider (the unreadable one).

    Returns:
        ``(path, number of updates)``, or None if no checkpoint loads.
    """
    infos = (read_checkpoint(p) for p in _checkpoint_paths(save_dir) if os.path.basename(p) != exclude)
    found = _newest(i for i in infos if i is not None)
    return None if found is None else (found.path, found.num_updates)


def _same_prefix(path: str, source: str, size: int) -> bool:
    """Whether the first ``size`` bytes of ``source`` are the bytes of ``path``."""
    with open(path, "rb") as a, open(source, "rb") as b:
        left = size
        while left > 0:
            chunk = a.read(min(_CHUNK, left))
            if not chunk or b.read(len(chunk)) != chunk:
                return False
            left -= len(chunk)
    return True


def copy_source(path: str, candidates: Iterable[CheckpointInfo]) -> Optional[CheckpointInfo]:
    """The intact checkpoint that the cut file ``path`` is a partial copy of, if any.

    A copy killed midway holds the first bytes of its source, which was finished before
    the copy began: the latest written candidate that is longer, not newer than
    ``path`` and starts with ``path``'s bytes (any, for an empty file) is it.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    ordered = sorted(
        (c for c in candidates if c.path != path and c.size > st.st_size and c.mtime_ns <= st.st_mtime_ns),
        key=lambda c: (c.mtime_ns, c.num_updates),
        reverse=True,
    )
    for c in ordered:
        try:
            if _same_prefix(path, c.path, st.st_size):
                return c
        except OSError:
            continue
    return None


def atomic_copy(source: str, dest: str) -> None:
    """Copy ``source`` over ``dest`` so that ``dest`` is at all times the old or the new file."""
    tmp = dest + TMP_SUFFIX
    shutil.copyfile(source, tmp)
    os.replace(tmp, dest)


def _info_after_copy(source: CheckpointInfo, dest: str) -> CheckpointInfo:
    st = os.stat(dest)
    return CheckpointInfo(**{**source.__dict__, "path": dest, "size": st.st_size, "mtime_ns": st.st_mtime_ns})


def remove_partial_writes(save_dir: str) -> List[str]:
    """Delete the ``checkpoint*.pt.tmp`` files of writes a kill cut short; returns their paths.

    fairseq renames ``<name>.tmp`` to ``<name>`` as soon as ``torch.save`` returns, and
    this module does the same, so a ``.tmp`` left in the folder is a write that never
    finished (its checkpoint was not saved).
    """
    removed = []
    for tmp in sorted(glob.glob(os.path.join(glob.escape(save_dir), "checkpoint*.pt" + TMP_SUFFIX))):
        size = os.path.getsize(tmp)
        os.remove(tmp)
        removed.append(tmp)
        logger.warning("removed %s (%d bytes): a checkpoint write that an interruption cut short", tmp, size)
    return removed


def drop_superseded_unreadable(save_dir: str) -> List[str]:
    """Delete each ``<name>.unreadable`` whose ``<name>`` now loads; returns the deleted paths."""
    dropped = []
    for kept in sorted(glob.glob(os.path.join(glob.escape(save_dir), "checkpoint*.pt" + UNREADABLE_SUFFIX))):
        good = kept[: -len(UNREADABLE_SUFFIX)]
        if read_checkpoint(good) is not None:
            os.remove(kept)
            dropped.append(kept)
            logger.info("removed %s: %s loads again", kept, os.path.basename(good))
    return dropped


def repair_or_set_aside(path: str, candidates: Iterable[CheckpointInfo]) -> Optional[CheckpointInfo]:
    """Replace the unreadable ``path`` by the checkpoint it was a copy of, else rename it ``<name>.unreadable``.

    Returns:
        the info of the repaired file, or None if it was set aside (or is not a file
        fairseq writes, which is only reported).
    """
    size = os.path.getsize(path)
    source = copy_source(path, candidates)
    if source is not None:
        atomic_copy(source.path, path)
        logger.warning(
            "%s does not load: it is a copy of %s cut at %d of %d bytes (a kill while fairseq copied it); "
            "repaired from %s (%d updates)",
            path,
            source.name,
            size,
            source.size,
            source.path,
            source.num_updates,
        )
        return _info_after_copy(source, path)
    if is_complete_checkpoint(path) or not FAIRSEQ_NAME.match(os.path.basename(path)):
        # not what a kill leaves behind (a whole archive torch.load refuses, or not fairseq's file)
        logger.warning("%s does not load (truncated or not a torch checkpoint); left as it is", path)
        return None
    os.replace(path, path + UNREADABLE_SUFFIX)
    logger.warning(
        "%s does not load (truncated or not a torch checkpoint, %d bytes) and is not a cut copy of a checkpoint "
        "that loads: set aside as %s",
        path,
        size,
        os.path.basename(path + UNREADABLE_SUFFIX),
    )
    return None


def _settle_last(save_dir: str, infos: Dict[str, Optional[CheckpointInfo]], new_last: bool) -> Optional[CheckpointInfo]:
    """Make ``checkpoint_last.pt`` the newest checkpoint that loads; returns its info (None: none)."""
    last = os.path.join(save_dir, LAST)
    current = infos.get(LAST)
    others = [i for n, i in infos.items() if i is not None and n != LAST and RESUMABLE_NAME.match(n)]
    if current is not None:
        newer = [i for i in others if i.num_updates > current.num_updates and i.mtime_ns > current.mtime_ns]
        source = _newest(newer)
        if source is None:
            return current
        atomic_copy(source.path, last)
        logger.warning(
            "%s holds %d updates but %s, written after it, holds %d (a kill before fairseq copied that save to "
            "%s): resuming from %s",
            last,
            current.num_updates,
            source.name,
            source.num_updates,
            LAST,
            source.path,
        )
        return _info_after_copy(source, last)
    source = _newest(others)
    if source is None or is_complete_checkpoint(last):
        return None  # fairseq starts afresh, or its error names the file that does not load
    if os.path.exists(last):
        shutil.copyfile(last, last + UNREADABLE_SUFFIX)
        atomic_copy(source.path, last)
        logger.warning(
            "%s does not load (truncated or not a torch checkpoint, e.g. a crash while fairseq copied it; kept as "
            "%s): resuming from %s (%d updates), the newest checkpoint that loads",
            last,
            os.path.basename(last + UNREADABLE_SUFFIX),
            source.path,
            source.num_updates,
        )
    elif new_last:
        atomic_copy(source.path, last)
        logger.warning(
            "%s is missing but %s loads (a kill before fairseq's first copy to %s): resuming from it (%d updates)",
            last,
            source.path,
            LAST,
            source.num_updates,
        )
    else:
        return None
    return _info_after_copy(source, last)


def _settle_best(save_dir: str, infos: Dict[str, Optional[CheckpointInfo]], resume: CheckpointInfo) -> None:
    """Make ``checkpoint_best.pt`` hold the best validation score that ``resume`` knows of.

    Resuming from a newer file than ``checkpoint_last.pt`` skips the updates that would
    have written ``checkpoint_best.pt`` again: when a kill came before fairseq copied a
    new best to that name, the intact checkpoint of that save is copied there.
    """
    if resume.best is None:
        return
    current = infos.get(BEST)
    if current is not None and current.val_loss == resume.best:
        return
    holders = [
        i
        for n, i in infos.items()
        if i is not None
        and n != BEST
        and RESUMABLE_NAME.match(n)
        and i.val_loss == resume.best
        and i.num_updates <= resume.num_updates
    ]
    source = _newest(holders)
    if source is None:
        return
    best = os.path.join(save_dir, BEST)
    atomic_copy(source.path, best)
    logger.warning(
        "%s %s but the best validation score so far is %s, saved at %d updates (a kill before fairseq copied that "
        "save to %s): replaced by a copy of %s",
        best,
        "is missing" if current is None else f"holds {current.val_loss} ({current.num_updates} updates)",
        resume.best,
        source.num_updates,
        BEST,
        source.path,
    )


def recover_at_restart(save_dir: str, new_last: bool = True) -> Optional[CheckpointInfo]:
    """Check and repair ``save_dir`` before training resumes from its ``checkpoint_last.pt``.

    In order: partial ``*.tmp`` writes are removed, ``*.unreadable`` files whose name
    loads again are removed, every ``checkpoint*.pt`` that does not load is repaired
    from the checkpoint it was a copy of or set aside (:func:`repair_or_set_aside`;
    an unreadable ``checkpoint_last.pt`` is kept as ``checkpoint_last.pt.unreadable``
    and replaced), ``checkpoint_last.pt`` becomes the newest checkpoint that loads and
    ``checkpoint_best.pt`` the best one it knows of. Each change is logged with the
    files it concerns. Nothing is written when the folder is consistent.

    Args:
        save_dir: the ``--save-dir`` folder (nothing happens if it is not a local folder).
        new_last: write ``checkpoint_last.pt`` when it is missing but another checkpoint
            loads (a kill before fairseq's first copy); False where a missing
            ``checkpoint_last.pt`` means something else (``--finetune-from-model``,
            ``--continue-once``, ``--no-last-checkpoints``).

    Returns:
        the checkpoint training resumes from (``checkpoint_last.pt``), or None if there is none.
    """
    if not os.path.isdir(save_dir):
        return None
    remove_partial_writes(save_dir)
    drop_superseded_unreadable(save_dir)
    infos = {os.path.basename(p): read_checkpoint(p) for p in _checkpoint_paths(save_dir)}
    intact = [i for i in infos.values() if i is not None]
    for name, info in list(infos.items()):
        if info is None and name != LAST:
            infos[name] = repair_or_set_aside(os.path.join(save_dir, name), intact)
    resume = _settle_last(save_dir, infos, new_last)
    if resume is not None:
        infos[LAST] = resume
        _settle_best(save_dir, infos, resume)
    return resume


def check_after_save(save_dir: str, saved: str) -> None:
    """After a save: ``checkpoint_best.pt`` and ``checkpoint_last.pt`` load, and old ``*.unreadable`` go.

    A name that does not load is repaired from the file it is a cut copy of (``saved``,
    the file the save wrote first, included) or set aside with a warning; this runs
    after every save, the last one of a run included.
    """
    for name in (BEST, LAST):
        path = os.path.join(save_dir, name)
        if os.path.exists(path) and read_checkpoint(path) is None:
            candidates = (read_checkpoint(p) for p in {saved, *_checkpoint_paths(save_dir)})
            repair_or_set_aside(path, [i for i in candidates if i is not None])
    drop_superseded_unreadable(save_dir)


def finished_reason(
    info: CheckpointInfo,
    max_update: int = 0,
    max_epoch: int = 0,
    stop_time_hours: float = 0.0,
    count_updates: bool = True,
    count_epochs: bool = True,
) -> Optional[str]:
    """Why training resumed from ``info`` would stop before its first update, or None.

    Args:
        info: the checkpoint training resumes from.
        max_update, max_epoch, stop_time_hours: fairseq's stopping options (0: unset).
        count_updates: False with ``--reset-optimizer`` (the update count restarts at 0).
        count_epochs: False with ``--reset-dataloader`` (the epoch restarts at 1).
    """
    if count_updates and max_update and info.num_updates >= max_update:
        return f"{info.num_updates} updates (--max-update {max_update})"
    if count_epochs and max_epoch and info.next_epoch > max_epoch:
        return f"{info.next_epoch - 1} epochs (--max-epoch {max_epoch})"
    if stop_time_hours and stop_time_hours > 0 and info.training_seconds / 3600 > stop_time_hours:
        return f"{info.training_seconds / 3600:.4f} hours of training (--stop-time-hours {stop_time_hours})"
    return None
