"""A save directory that survives a kill at any moment: checks where a training starts and after every save.

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

A save can also end without a file that loads: fairseq retries a failed ``torch.save``
into the same open file, so a moment of full disk gives a "saved" file with the bytes of
the failed try in front of the archive. A checkpoint counts as complete only if it loads.

:func:`start_training` (run by the project's tasks when ``fairseq-train`` is about to load
``checkpoint_last.pt``, never when a model is built) locks the folder, undoes each of these
(:func:`recover_at_restart`) and ends a run that already finished; :func:`check_after_save`
(after every save) stops a run whose save does not load. Every file is replaced
atomically (a temporary file, then a rename), so a kill during the recovery is recovered
at the next restart. The guarantee and its limits: docs/reliability.md.
"""

import collections
import glob
import logging
import os
import shutil
from typing import Dict, Iterable, List, Optional, Tuple

from fairseq_dense.checkpoints import (
    BEST,
    FAIRSEQ_NAME,
    LAST,
    RESUMABLE_NAME,
    TMP_SUFFIX,
    CheckpointError,
    CheckpointInfo,
    atomic_copy,
    checkpoint_paths,
    read_info,
    read_state,
)
from fairseq_dense.save_lock import lock_save_dir
from fairseq_dense.validation import FairseqDenseError

logger = logging.getLogger(__name__)

#: suffix of an unreadable checkpoint that was set aside (kept until a good one of that name exists)
UNREADABLE_SUFFIX = ".unreadable"
_CHUNK = 1 << 20


class TrainingFinished(SystemExit):
    """Ends ``fairseq-train`` with exit status 0 before anything is trained or written.

    Raised when a run is started again after it reached its stopping point
    (:func:`finished_reason`); :attr:`message` says which one.
    """

    def __init__(self, message: str):
        super().__init__(0)
        self.message = message


class SaveFailed(FairseqDenseError):
    """A save did not produce a checkpoint that loads (:func:`check_after_save`)."""


def _newest(infos: Iterable[CheckpointInfo]) -> Optional[CheckpointInfo]:
    """The one with the most updates; on a tie the file a save wrote first (an epoch or interval
    checkpoint, of which ``checkpoint_best.pt``/``checkpoint_last.pt`` are copies), then the later written."""
    return max(infos, key=lambda i: (i.num_updates, i.name not in (BEST, LAST), i.mtime_ns), default=None)


def newest_loadable_checkpoint(save_dir: str, exclude: str = LAST) -> Optional[Tuple[str, int]]:
    """The ``checkpoint*.pt`` of ``save_dir`` with the most updates among those that load.

    Args:
        save_dir: the ``--save-dir`` folder.
        exclude: a file name not to consider (the unreadable one).

    Returns:
        ``(path, number of updates)``, or None if no checkpoint loads.
    """
    infos = (read_info(p) for p in checkpoint_paths(save_dir) if os.path.basename(p) != exclude)
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
        if read_info(good) is not None:
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
    if not FAIRSEQ_NAME.match(os.path.basename(path)):  # not a file fairseq-train writes
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
    if source is None:
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
    infos = {os.path.basename(p): read_info(p) for p in checkpoint_paths(save_dir)}
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
    """After a save: the file it wrote loads, so do ``checkpoint_best.pt`` and ``checkpoint_last.pt``.

    Runs after every save, the last one of a run included. A best or last name that
    does not load is repaired from the file it is a cut copy of (``saved``, the file the
    save wrote first, included) or set aside with a warning; old ``*.unreadable`` go.

    Raises:
        SaveFailed: ``saved`` does not load (e.g. fairseq's retry of a write that failed
            on a full disk appended to the partly written file). Its copies are set
            aside and ``checkpoint_last.pt``/``checkpoint_best.pt`` made from the newest
            checkpoints that load (:func:`recover_at_restart`) before the run stops.
    """
    try:
        read_state(saved, mmap=True)
    except CheckpointError as e:
        recover_at_restart(save_dir)
        resume = read_info(os.path.join(save_dir, LAST))
        then = f"; a restart resumes from {resume.path} ({resume.num_updates} updates)" if resume else ""
        trouble = _save_trouble(save_dir) or "it did not load"
        raise SaveFailed(f"the checkpoint save failed: {e} ({trouble}){then}") from None
    for name in (BEST, LAST):
        path = os.path.join(save_dir, name)
        if os.path.exists(path) and read_info(path) is None:
            candidates = (read_info(p) for p in {saved, *checkpoint_paths(save_dir)})
            repair_or_set_aside(path, [i for i in candidates if i is not None])
    drop_superseded_unreadable(save_dir)


def _save_trouble(save_dir: str) -> Optional[str]:
    """What keeps ``save_dir`` from holding a new checkpoint, as far as can be seen now (None: nothing seen)."""
    if not os.access(save_dir, os.W_OK):
        return f"{save_dir} is read-only"
    free = shutil.disk_usage(save_dir).free
    if free < 16 << 20:
        return f"no space left on the device of {save_dir} ({free} bytes free)"
    try:
        import resource  # POSIX only
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        return f"the file size limit is {soft} bytes (ulimit -f)"
    return None


class RetryRefused(SaveFailed):
    """fairseq would write a checkpoint again into the file its failed write left half-written."""


class OneWrite:
    """Goes into every save's ``extra_state``: a checkpoint is written in one try or not at all.

    fairseq retries a ``torch.save`` that raised (``_torch_persistent_save``, 3 tries,
    2.5 s apart) into the same open file, behind the bytes of the failed try, and then
    renames and copies that file to ``checkpoint_best.pt``/``checkpoint_last.pt`` as if
    it were saved. ``torch.save`` pickles this object once per try: the second time it
    raises :class:`RetryRefused`, so the save fails as a whole (the partial ``.tmp``
    stays, no file is renamed or copied) and the run stops with one line. It is saved
    as an empty ``OrderedDict``, which torch's safe loader reads.
    """

    def __init__(self, save_dir: str):
        self.save_dir = save_dir
        self.tries = 0

    def __reduce__(self):
        self.tries += 1
        if self.tries > 1:
            trouble = _save_trouble(self.save_dir) or "its cause has passed"
            raise RetryRefused(f"the write failed ({trouble}) and fairseq would retry it into the partly written file")
        return (collections.OrderedDict, ())


def finished_reason(
    info: CheckpointInfo,
    max_update: int = 0,
    max_epoch: int = 0,
    stop_time_hours: float = 0.0,
    count_updates: bool = True,
    count_epochs: bool = True,
    patience: int = 0,
) -> Optional[str]:
    """Why training resumed from ``info`` would stop before its first update, or None.

    Args:
        info: the checkpoint training resumes from.
        max_update, max_epoch, stop_time_hours: fairseq's stopping options (0: unset).
        count_updates: False with ``--reset-optimizer`` (the update count restarts at 0).
        count_epochs: False with ``--reset-dataloader`` (the epoch restarts at 1).
        patience: fairseq's ``--patience`` (0: unset); the count of validations without a
            better score is the one the project's tasks save (``PATIENCE_KEY``).
    """
    if count_updates and max_update and info.num_updates >= max_update:
        return f"{info.num_updates} updates (--max-update {max_update})"
    if count_epochs and max_epoch and info.next_epoch > max_epoch:
        return f"{info.next_epoch - 1} epochs (--max-epoch {max_epoch})"
    if stop_time_hours and stop_time_hours > 0 and info.training_seconds / 3600 > stop_time_hours:
        return f"{info.training_seconds / 3600:.4f} hours of training (--stop-time-hours {stop_time_hours})"
    if patience > 0 and info.runs_without_improvement >= patience:
        return f"{info.runs_without_improvement} validations without a better score (--patience {patience})"
    return None


def start_training(
    save_dir: str, is_master: bool, repair: bool = True, new_last: bool = True, **limits
) -> Optional[CheckpointInfo]:
    """Where a training starts, before fairseq loads ``checkpoint_last.pt``: lock, repair, stop if finished.

    On the master rank the folder is locked (:func:`lock_save_dir`), checked
    (:func:`recover_at_restart`) and its ``checkpoint_last.pt`` read; with several ranks
    every rank waits for rank 0's answer (other nodes may not see its folder).

    Args:
        save_dir: the ``--save-dir`` folder.
        is_master: whether this is rank 0 (the one that locks and repairs).
        repair: check the folder and the stopping point (False: only lock it; a run that
            resumes from a ``--restore-file`` of its own or writes asynchronously).
        new_last: see :func:`recover_at_restart`.
        limits: :func:`finished_reason`'s stopping options.

    Returns:
        the checkpoint training resumes from (None: it starts afresh).

    Raises:
        SaveDirBusy: another live training holds the folder.
        TrainingFinished: the run already reached a stopping point (exit status 0; no
            file changed).
    """
    import torch.distributed as dist

    resume, message = None, None
    if is_master:
        lock_save_dir(save_dir)
        if repair:
            recover_at_restart(save_dir, new_last=new_last)
            resume = read_info(os.path.join(save_dir, LAST))
            reason = None if resume is None else finished_reason(resume, **limits)
            if reason is not None:
                message = f"training already finished: {resume.path} holds {reason}; nothing to train"
                message += " (raise the limit to go on)"
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        # rank 0's folder decides for every rank (other nodes may not see it): one answer for all
        decision = [(resume, message)]
        dist.broadcast_object_list(decision, src=0)
        resume, message = decision[0]
    if message is not None:
        logger.info(message)
        raise TrainingFinished(message)
    return resume
