"""A save folder that survives a kill at any moment: checked where a training starts and after every save.

fairseq's ``checkpoint_utils.save_checkpoint`` writes the first file due atomically (``<name>.tmp``, then a
rename) and then *copies* it to the other names due (``PathManager.copy``, not atomic), best before last, with
no hook between (the task's ``post_save`` comes after). A kill can leave a partial ``<name>.tmp``, a cut copy
(a prefix of its intact source), or a finished first file beside older copies; a moment of full disk, a
"saved" file that does not load (fairseq retries ``torch.save`` into the same open file). So
:func:`start_training` undoes each of these before ``fairseq-train`` loads ``checkpoint_last.pt``, and
:func:`check_after_save` stops a run whose save does not load. Every repair replaces a file atomically: a
kill during one is repaired at the next restart (docs/reliability.md).
"""

import collections
import glob
import logging
import os
import resource
import shutil
from typing import Dict, Iterable, List, Optional, Tuple

from fairseq_dense.checkpoints import (
    BEST,
    DATA_KEY,
    FAIRSEQ_GLOBALS,
    FAIRSEQ_NAME,
    LAST,
    RESUMABLE_NAME,
    TMP_SUFFIX,
    CheckpointError,
    CheckpointInfo,
    atomic_copy,
    checkpoint_paths,
    crc_error,
    read_info,
    read_state,
)
from fairseq_dense.save_lock import SaveDirError, lock_save_dir, own_files
from fairseq_dense.trajectory import changes, root_config, task_data_identity
from fairseq_dense.validation import FairseqDenseError

logger = logging.getLogger(__name__)

#: suffix of an unreadable checkpoint that was set aside (kept until a good one of that name exists)
UNREADABLE_SUFFIX = ".unreadable"


class TrainingFinished(SystemExit):
    """Ends ``fairseq-train`` with exit status 0: the run already reached its stopping point."""

    def __init__(self, message: str):
        super().__init__(0)
        self.message = message


class SaveFailed(FairseqDenseError):
    """A save did not produce a checkpoint that loads (:func:`check_after_save`)."""


class RetryRefused(SaveFailed):
    """fairseq would write a checkpoint again into the file its failed write left half-written."""


def _newest(infos: Iterable[CheckpointInfo]) -> Optional[CheckpointInfo]:
    """The most updates; on a tie the file a save wrote first (best and last are copies), then the later."""
    return max(infos, key=lambda i: (i.num_updates, i.name not in (BEST, LAST), i.mtime_ns), default=None)


def newest_loadable_checkpoint(save_dir: str, exclude: str = LAST) -> Optional[Tuple[str, int]]:
    """``(path, updates)`` of the ``checkpoint*.pt`` of ``save_dir`` but ``exclude`` that loads with most updates."""
    infos = (read_info(p) for p in checkpoint_paths(save_dir) if os.path.basename(p) != exclude)
    found = _newest(i for i in infos if i is not None)
    return None if found is None else (found.path, found.num_updates)


def unreadable_message(path: str) -> str:
    """One line for a checkpoint fairseq was asked to load and cannot read, naming the newest that loads."""
    found = newest_loadable_checkpoint(os.path.dirname(path), exclude=os.path.basename(path))
    hint = (
        f"the newest checkpoint that loads is {found[0]} ({found[1]} updates): rerun with --restore-file {found[0]}"
        if found
        else "restore from an intact one (checkpoint_best.pt, checkpoint<N>.pt) with --restore-file, or copy it "
        f"over {os.path.basename(path)}"
    )
    return (
        f"cannot read checkpoint {path}: the file is truncated or not a torch checkpoint (e.g. a crash while fairseq "
        f"copied it); {hint}"
    )


def copy_source(path: str, candidates: Iterable[CheckpointInfo]) -> Optional[CheckpointInfo]:
    """The intact checkpoint that the cut file ``path`` is a partial copy of: the latest written candidate
    that is longer, not newer than ``path`` and starts with its bytes (its source was finished first)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    for c in sorted(
        (c for c in candidates if c.path != path and c.size > st.st_size and c.mtime_ns <= st.st_mtime_ns),
        key=lambda c: (c.mtime_ns, c.num_updates),
        reverse=True,
    ):
        try:
            with open(path, "rb") as a, open(c.path, "rb") as b:
                while (chunk := a.read(1 << 20)) and b.read(len(chunk)) == chunk:
                    pass
            if not chunk:  # every byte of path matched
                return c
        except OSError:
            continue
    return None


def _copy_over(source: CheckpointInfo, dest: str) -> CheckpointInfo:
    atomic_copy(source.path, dest)
    st = os.stat(dest)
    return CheckpointInfo(**{**source.__dict__, "path": dest, "size": st.st_size, "mtime_ns": st.st_mtime_ns})


def _tidy(save_dir: str, partial: bool = True) -> None:
    """Delete each ``<name>.unreadable`` whose ``<name>`` loads again and (``partial``) each ``checkpoint*.pt.tmp``
    and ``checkpoint*.pt.unreadable.tmp`` (a kill while a restart kept a file aside)."""
    pattern = os.path.join(glob.escape(save_dir), "checkpoint*.pt")
    partials = glob.glob(pattern + TMP_SUFFIX) + glob.glob(pattern + UNREADABLE_SUFFIX + TMP_SUFFIX)
    for tmp in sorted(partials) if partial else ():
        size = os.path.getsize(tmp)
        os.remove(tmp)
        logger.warning("removed %s (%d bytes): a checkpoint write that an interruption cut short", tmp, size)
    for kept in sorted(glob.glob(pattern + UNREADABLE_SUFFIX)):
        if read_info(kept[: -len(UNREADABLE_SUFFIX)]) is not None:
            os.remove(kept)
            logger.info("removed %s: %s loads again", kept, os.path.basename(kept[: -len(UNREADABLE_SUFFIX)]))


def repair_or_set_aside(path: str, candidates: Iterable[CheckpointInfo]) -> Optional[CheckpointInfo]:
    """Replace the unreadable ``path`` by the checkpoint it was a copy of (returns its info), else rename
    it ``<name>.unreadable`` (a name fairseq-train writes) or only report it (None)."""
    size = os.path.getsize(path)
    source = copy_source(path, candidates)
    if source is not None:
        logger.warning(
            f"{path} does not load: it is a copy of {source.name} cut at {size} of {source.size} bytes (a kill "
            f"while fairseq copied it); repaired from {source.path} ({source.num_updates} updates)"
        )
        return _copy_over(source, path)
    if not FAIRSEQ_NAME.match(os.path.basename(path)):
        logger.warning("%s does not load (truncated or not a torch checkpoint); left as it is", path)
        return None
    os.replace(path, path + UNREADABLE_SUFFIX)
    logger.warning(
        f"{path} does not load (truncated or not a torch checkpoint, {size} bytes) and is not a cut copy of a "
        f"checkpoint that loads: set aside as {os.path.basename(path + UNREADABLE_SUFFIX)}"
    )
    return None


def _trusted(infos: Dict[str, Optional[CheckpointInfo]]):
    """A check, once per file, that a checkpoint's archive passes its CRC check; a file that fails leaves ``infos``
    and (but ``checkpoint_last.pt``: :func:`_settle_last`) is renamed ``<name>.unreadable``."""
    seen: Dict[str, bool] = {}

    def trust(info: CheckpointInfo) -> bool:
        if info.path not in seen:
            error = crc_error(info.path)
            seen[info.path] = error is None
            if error is not None:
                infos[info.name] = None
                aside = info.name != LAST
                if aside:
                    os.replace(info.path, info.path + UNREADABLE_SUFFIX)
                logger.warning(
                    f"{info.path} loads but its archive is damaged ({error}: a byte changed since it was written)"
                    + (f"; set aside as {info.name}{UNREADABLE_SUFFIX}" if aside else "")
                )
        return seen[info.path]

    return trust


def _others(infos: Dict[str, Optional[CheckpointInfo]], but: str) -> List[CheckpointInfo]:
    """The full training states of ``infos`` that load, but the file ``but``."""
    return [i for n, i in infos.items() if i is not None and n != but and RESUMABLE_NAME.match(n)]


def _newest_trusted(infos: Iterable[CheckpointInfo], trust) -> Optional[CheckpointInfo]:
    pool = list(infos)
    while (found := _newest(pool)) is not None and not trust(found):
        pool.remove(found)
    return found


def _settle_last(
    save_dir: str, infos: Dict[str, Optional[CheckpointInfo]], new_last: bool, trust
) -> Tuple[Optional[CheckpointInfo], Optional[CheckpointInfo]]:
    """Make ``checkpoint_last.pt`` the newest trusted checkpoint; returns its info and the one it was copied from."""
    last, current = os.path.join(save_dir, LAST), infos.get(LAST)
    others = _others(infos, LAST)
    damaged = current is not None and not trust(current)
    if current is not None and not damaged:
        newer = (i for i in others if i.num_updates > current.num_updates and i.mtime_ns > current.mtime_ns)
        source = _newest_trusted(newer, trust)
        if source is None:
            return current, None
        logger.warning(
            f"{last} holds {current.num_updates} updates but {source.name}, written after it, holds "
            f"{source.num_updates} (a kill before fairseq copied that save to {LAST}): resuming from {source.path}"
        )
    elif (source := _newest_trusted(others, trust)) is None:
        if damaged:
            raise CheckpointError(
                f"{last} is damaged (its archive fails its CRC check) and no other checkpoint of {save_dir} is intact: "
                "restore an intact copy over it"
            )
        return None, None  # fairseq starts afresh, or its error names the file that does not load
    elif os.path.exists(last):
        atomic_copy(last, last + UNREADABLE_SUFFIX)
        state = "is damaged (its archive fails its CRC check" if damaged else "does not load (truncated or not a "
        state += "" if damaged else "torch checkpoint, e.g. a crash while fairseq copied it"
        logger.warning(
            f"{last} {state}; kept as {LAST}{UNREADABLE_SUFFIX}): resuming from {source.path} ({source.num_updates} "
            "updates), the newest checkpoint that loads"
        )
    elif new_last:
        logger.warning(
            f"{last} is missing but {source.path} loads (a kill before fairseq's first copy to {LAST}): resuming "
            f"from it ({source.num_updates} updates)"
        )
    else:
        return None, None
    return _copy_over(source, last), source


def _settle_best(save_dir: str, infos: Dict[str, Optional[CheckpointInfo]], resume: CheckpointInfo, trust) -> None:
    """Make ``checkpoint_best.pt`` hold the best validation score ``resume`` knows of (a kill can come before fairseq
    copied a new best there, and resuming from a newer file skips the saves that would)."""
    current = infos.get(BEST)
    if current is not None and not trust(current):
        current = None
    if resume.best is None or (current is not None and current.val_loss == resume.best):
        return
    candidates = (i for i in _others(infos, BEST) if i.val_loss == resume.best and i.num_updates <= resume.num_updates)
    source = _newest_trusted(candidates, trust)
    if source is None:
        return
    best = os.path.join(save_dir, BEST)
    held = "is missing" if current is None else f"holds {current.val_loss} ({current.num_updates} updates)"
    logger.warning(
        f"{best} {held} but the best validation score so far is {resume.best}, saved at {source.num_updates} "
        f"updates (a kill before fairseq copied that save to {BEST}): replaced by a copy of {source.path}"
    )
    _copy_over(source, best)


def _finish_save(save_dir: str, save: CheckpointInfo, cfg) -> None:
    """What fairseq's ``save_checkpoint`` does after its copies, for the ``save`` a kill cut short: the
    ``--keep-best-checkpoints`` copy (fairseq's name and condition) and the removals of the ``--keep-*`` options."""
    import numpy as np
    from fairseq.checkpoint_utils import checkpoint_paths as fairseq_paths
    from fairseq.data import data_utils

    keep_best = option(cfg, "keep_best_checkpoints") or 0
    metric, maximize = option(cfg, "best_checkpoint_metric") or "loss", option(cfg, "maximize_best_checkpoint_metric")
    best_pattern = r"checkpoint\.best_{}_(\d+\.?\d*)\.pt".format(metric)
    if keep_best > 0 and save.val_loss is not None:
        kept = fairseq_paths(save_dir, pattern=best_pattern)
        worst = float(os.path.basename(kept[-1 if maximize else 0]).rsplit("_")[-1][:-3]) if kept else save.best
        itr_epoch = save.next_epoch - (1 if save.end_of_epoch else 0)
        with data_utils.numpy_seed(itr_epoch, save.num_updates, save.val_loss):
            suffix = np.random.randint(0, keep_best)
        name = f"checkpoint.best_{metric}_{save.val_loss:.3f}{suffix}.pt"
        better = worst is None or (save.val_loss >= worst if maximize else save.val_loss <= worst)
        if better and not os.path.exists(os.path.join(save_dir, name)):
            logger.warning(f"{name} was missing (a kill before fairseq copied {save.name} there): copied from it")
            atomic_copy(save.path, os.path.join(save_dir, name))
    removed = []
    interval, pattern = option(cfg, "keep_interval_updates") or 0, option(cfg, "keep_interval_updates_pattern")
    if interval > 0 and not save.end_of_epoch:
        found = fairseq_paths(save_dir, pattern=r"checkpoint_\d+_(\d+)\.pt", keep_match=True)
        removed += [p for p, u in found if pattern in (None, -1) or u % pattern != 0][interval:]
    if (epochs := option(cfg, "keep_last_epochs") or 0) > 0:
        removed += fairseq_paths(save_dir, pattern=r"checkpoint(\d+)\.pt")[epochs:]
    if keep_best > 0:
        kept = fairseq_paths(save_dir, pattern=best_pattern)
        removed += (kept if maximize else kept[::-1])[keep_best:]
    for path in removed:
        os.remove(path)
        logger.warning(f"removed {path}, as fairseq would have after the save of {save.name} (--keep-* options)")


def recover_at_restart(save_dir: str, new_last: bool = True, checkpoint_cfg=None) -> Optional[CheckpointInfo]:
    """Repair ``save_dir`` before training resumes from its ``checkpoint_last.pt``; returns that checkpoint's info.

    A ``checkpoint*.pt`` that does not load is repaired from the file it was a copy of or set aside;
    ``checkpoint_last.pt`` becomes the newest checkpoint that loads and passes its CRC check,
    ``checkpoint_best.pt`` the best it knows of, and a save a kill cut short is finished (:func:`_finish_save`,
    with ``checkpoint_cfg``). Each change is logged; a consistent folder is not written. ``new_last``: write a
    missing ``checkpoint_last.pt`` (False where a missing one means another start).

    Raises:
        CheckpointError: ``checkpoint_last.pt`` is damaged and no other checkpoint is intact.
    """
    if not os.path.isdir(save_dir):
        return None
    _tidy(save_dir)
    infos = {os.path.basename(p): read_info(p) for p in checkpoint_paths(save_dir)}
    intact = [i for i in infos.values() if i is not None]
    for name, info in list(infos.items()):
        if info is None and name != LAST:
            infos[name] = repair_or_set_aside(os.path.join(save_dir, name), intact)
    trust = _trusted(infos)
    resume, source = _settle_last(save_dir, infos, new_last, trust)
    if resume is not None:
        infos[LAST] = resume
        _settle_best(save_dir, infos, resume, trust)
        if source is not None and checkpoint_cfg is not None:
            _finish_save(save_dir, source, checkpoint_cfg)
    return resume


def check_after_save(save_dir: str, saved: str) -> None:
    """After every save: ``saved`` must load (else :class:`SaveFailed`, the folder recovered first); a
    ``checkpoint_best.pt`` or ``checkpoint_last.pt`` that does not is repaired or set aside."""
    try:
        read_state(saved, mmap=True)
    except CheckpointError as e:
        recover_at_restart(save_dir)
        resume = read_info(os.path.join(save_dir, LAST))
        then = f"; a restart resumes from {resume.path} ({resume.num_updates} updates)" if resume else ""
        trouble = save_trouble(save_dir) or "it did not load"
        raise SaveFailed(f"the checkpoint save failed: {e} ({trouble}){then}") from None
    for name in (BEST, LAST):
        path = os.path.join(save_dir, name)
        if os.path.exists(path) and read_info(path) is None:
            candidates = (read_info(p) for p in {saved, *checkpoint_paths(save_dir)})
            repair_or_set_aside(path, [i for i in candidates if i is not None])
    _tidy(save_dir, partial=False)


def save_trouble(save_dir: str) -> Optional[str]:
    """What keeps ``save_dir`` from holding a new checkpoint, as far as can be seen now (None: nothing seen)."""
    if not os.access(save_dir, os.W_OK):
        return f"{save_dir} is read-only"
    free = shutil.disk_usage(save_dir).free
    if free < 16 << 20:
        return f"no space left on the device of {save_dir} ({free} bytes free)"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else f"the file size limit is {soft} bytes (ulimit -f)"


class OneWrite:
    """Goes into every save's ``extra_state``: a checkpoint is written in one try or not at all.

    fairseq retries a ``torch.save`` that raised into the same open file, behind the bytes of the failed try, then
    renames and copies it as if saved. ``torch.save`` pickles this once per try: the second raises
    :class:`RetryRefused`. Saved as an empty ``OrderedDict``."""

    def __init__(self, save_dir: str):
        self.save_dir = save_dir
        self.tries = 0

    def __reduce__(self):
        self.tries += 1
        if self.tries > 1:
            trouble = save_trouble(self.save_dir) or "its cause has passed"
            raise RetryRefused(f"the write failed ({trouble}) and fairseq would retry it into the partly written file")
        return (collections.OrderedDict, ())


def finished_reason(info: CheckpointInfo, cfg) -> Optional[str]:
    """Why training resumed from ``info`` would stop before its first update, or None. ``cfg``: fairseq's limits
    (unset or 0: none); ``--reset-optimizer`` restarts the update count, ``--reset-dataloader`` the epochs,
    ``--reset-meters`` the ``--patience`` count."""
    max_update, max_epoch = option(cfg, "max_update") or 0, option(cfg, "max_epoch") or 0
    hours, patience = option(cfg, "stop_time_hours") or 0, option(cfg, "patience") or 0
    if max_update and not option(cfg, "reset_optimizer") and info.num_updates >= max_update:
        return f"{info.num_updates} updates (--max-update {max_update})"
    if max_epoch and not option(cfg, "reset_dataloader") and info.next_epoch > max_epoch:
        return f"{info.next_epoch - 1} epochs (--max-epoch {max_epoch})"
    if hours > 0 and info.training_seconds / 3600 > hours:
        return f"{info.training_seconds / 3600:.4f} hours of training (--stop-time-hours {hours})"
    if patience > 0 and not option(cfg, "reset_meters") and info.runs_without_improvement >= patience:
        return f"{info.runs_without_improvement} validations without a better score (--patience {patience})"
    return None


def option(cfg, name: str):
    """``cfg.name``, or None where it is unset or an interpolation that cannot be resolved."""
    try:
        value = getattr(cfg, name, None)
    except Exception:  # an interpolation into a config group that does not exist
        return None
    return None if isinstance(value, str) and value.startswith("${") else value


def checks_files(cfg) -> bool:
    """Whether the run resumes from ``--save-dir``'s ``checkpoint_last.pt`` (fairseq's default, with no
    ``--checkpoint-suffix``: the files of the folder are this run's) and writes synchronously (every file complete
    once saved); the same on every rank."""
    return bool(
        option(cfg, "save_dir")
        and option(cfg, "restore_file") == LAST
        and not option(cfg, "checkpoint_suffix")
        and not option(cfg, "write_checkpoints_asynchronously")
    )


def broadcast_globals() -> list:
    """What fairseq's resume under data parallelism sends through torch's safe ``torch.load`` besides tensors:
    rank 0 broadcasts its checkpoint's state, OmegaConf ``cfg`` included (``distributed_utils.broadcast_object``)."""
    import typing

    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    from fairseq_dense.fairseq_internals import private

    placeholder = private("fairseq.distributed.utils", "_TensorPlaceholder")  # stands for each tensor sent apart
    classes = [placeholder, DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode, typing.Any]
    return classes + [collections.defaultdict, dict, list, int]


def loading_globals() -> list:
    """What torch's safe loader reads while ``fairseq-train`` loads ``--restore-file`` (the task's start)."""
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    return FAIRSEQ_GLOBALS + (broadcast_globals() if distributed else [])


def _without_refused_retry(record: logging.LogRecord) -> bool:
    """A filter of fairseq's checkpoint logger: fairseq logs the traceback of its last failed write try before it
    raises; where that try was refused (:class:`RetryRefused`), the error's one line says it all."""
    return not (record.levelno >= logging.ERROR and RetryRefused.__name__ in str(record.msg))


def _prepare(cfg, save_dir: str) -> Tuple[Optional[CheckpointInfo], Optional[str]]:
    """Rank 0's part of :func:`start_training`: ``(resume, why the run already finished or None)``."""
    if os.path.isdir(save_dir):
        own_files(save_dir)
    if not checks_files(cfg):
        return None, None
    root = root_config(cfg)
    # a missing checkpoint_last.pt means "start from another file" (or "never write one") there
    others = ("finetune_from_model", "continue_once", "no_last_checkpoints")
    new_last = not any(option(cfg, k) for k in others)
    resume = recover_at_restart(save_dir, new_last, root.checkpoint if root is not None else None)
    other = ""  # what this command changes of the run that wrote the checkpoint
    if resume is not None and root is not None:
        state = read_state(resume.path, mmap=True)
        extra = state.get("extra_state") or {}
        if found := changes(root, state.get("cfg"), task_data_identity(cfg), extra.get(DATA_KEY)):
            more = f" and {len(found) - 8} more" if len(found) > 8 else ""
            other = f"written by a run with other options or data than this command ({'; '.join(found[:8])}{more})"
    if reason := resume and finished_reason(resume, cfg):
        return resume, f"training already finished: {resume.path} holds {reason}" + (
            f", {other}; nothing to train (raise the limit to go on from it, or pass another --save-dir for a new run)"
            if other
            else "; nothing to train (raise the limit to go on)"
        )
    if other:
        logger.warning(f"{resume.path} was {other}: training goes on from it, but no longer as an exact continuation")
    return resume, None


def start_training(cfg) -> Optional[CheckpointInfo]:
    """Where a training starts, before fairseq loads ``checkpoint_last.pt``: rank 0 locks ``--save-dir``
    (:func:`lock_save_dir`), makes its files its own (:func:`own_files`) and, where :func:`checks_files`, repairs
    it (:func:`recover_at_restart`) and warns if the command or data differ from the checkpoint's
    (:func:`fairseq_dense.trajectory.changes`); other ranks take rank 0's answer.

    Returns:
        the checkpoint training resumes from (None: it starts afresh); ``cfg`` is the task's config.

    Raises:
        SaveDirBusy: another live training holds the folder.
        SaveDirError: a file there cannot be made the run's own, or a repair cannot be written (a full disk).
        CheckpointError: ``checkpoint_last.pt`` is damaged and no other checkpoint is intact.
        TrainingFinished: the run already reached a stopping point (exit status 0; no file changed).
    """
    import torch.distributed as dist

    save_dir = option(cfg, "save_dir")
    if not save_dir:
        return None
    resume, message = None, None
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if not option(cfg, "distributed_rank"):
        lock_save_dir(save_dir)
        logging.getLogger("fairseq.checkpoint_utils").addFilter(_without_refused_retry)
        try:
            resume, message = _prepare(cfg, save_dir)
        except OSError as e:  # every write above is a copy and a rename: the folder is as it was, or repaired
            what = f"{e.strerror or e}" + (f" ({e.filename})" if e.filename else "")
            raise SaveDirError(
                f"cannot prepare {save_dir} for training: {what}; its checkpoints are intact: free space (or fix "
                "the folder) and run the same command again"
            ) from None
    if distributed:
        decision = [(resume, message)]  # rank 0's folder decides for every rank
        dist.broadcast_object_list(decision, src=0)
        resume, message = decision[0]
    if message is not None:
        logger.info(message)
        raise TrainingFinished(message)
    return resume
