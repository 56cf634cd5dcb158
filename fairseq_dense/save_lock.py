"""One training per save folder, and a folder of its own: the lock a training holds on its ``--save-dir`` (two
trainings on one folder, e.g. a job requeued while the first still runs, would overwrite each other's checkpoints), and
its checkpoint files made its own before it writes (:func:`own_files`); one export per ``--out`` (:func:`held_folder`).
"""

import contextlib
import fcntl
import logging
import os
import stat
from typing import Callable, Dict, Iterator

from fairseq_dense.checkpoints import TMP_SUFFIX, atomic_copy
from fairseq_dense.validation import FairseqDenseError

logger = logging.getLogger(__name__)


class SaveDirBusy(FairseqDenseError):
    """Another live training holds the save folder (:func:`lock_save_dir`)."""


class SaveDirError(FairseqDenseError):
    """A ``--save-dir`` entry that a training cannot make its own (:func:`own_files`)."""


def lock_save_dir(save_dir: str) -> None:
    """Lock ``save_dir`` for this process until it ends (later trainings of the process go on under it). ``flock``
    on the folder itself writes no file and ends with the process however that ends (no stale lock);
    :class:`SaveDirBusy` names a live holder."""
    if not os.path.isdir(save_dir):
        return
    st = os.stat(save_dir)
    if (st.st_dev, st.st_ino) not in _HELD:
        _HELD[st.st_dev, st.st_ino] = _flock(
            save_dir,
            lambda holder: SaveDirBusy(
                f"{save_dir} is in use by another training ({holder}): wait for it to end, or pass another --save-dir"
            ),
        )


@contextlib.contextmanager
def held_folder(path: str, busy: Callable[[str], Exception]) -> Iterator[None]:
    """Hold the folder ``path`` (created if missing) locked while the block runs, then remove it; raise
    ``busy(holder)`` when a live process holds it. A killed holder's folder is taken over (``flock`` ends with its
    process); the lock taken is checked to be on the folder still at ``path`` (a holder that just ended removes it).
    """
    while True:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        try:
            fd = _flock(path, busy, os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        os.close(fd)


#: the folders this process holds, by (device, inode): their locked descriptors
_HELD: Dict[tuple, int] = {}


def _forget_locks_in_child() -> None:
    """A forked child (a data-loading worker) closes its copies: the lock ends with the training process."""
    for fd in _HELD.values():
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def _flock(path: str, busy: Callable[[str], Exception], flags: int = 0) -> int:
    """A descriptor of the folder ``path`` locked for this process, or ``busy(holder)`` raised, the holder named
    ``process <pid>: <command>`` as Linux's /proc/locks says, else ``another process``."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError:
        st = os.fstat(fd)
        os.close(fd)
    holder = "another process"
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if "FLOCK" in fields and inode in fields:
                    pid = fields[fields.index(inode) - 1]
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as c:
                            cmd = " ".join(c.read().decode("utf-8", "replace").split("\0")).strip()
                    except OSError:
                        cmd = ""
                    holder = f"process {pid}" + (f": {cmd}" if cmd else "")
                    break
    except OSError:
        pass
    raise busy(holder)


def own_files(save_dir: str) -> None:
    """Make every ``checkpoint*`` entry of ``save_dir`` a file of this folder alone, before a training writes there.

    fairseq copies each save over ``checkpoint_best.pt``, ``checkpoint_last.pt`` (and more) by opening the old file for
    writing: through a symbolic link it would write the link's target, through a hard link (``cp -al``) the other
    folder's file. Either is replaced by a copy (of a link's target as it is now, so ``checkpoint_last.pt ->
    checkpoint_1_25.pt`` resumes from update 25); an entry that is not a file is a :class:`SaveDirError`.
    """
    for name in sorted(os.listdir(save_dir)):
        path = os.path.join(save_dir, name)
        if not name.startswith("checkpoint") or name.endswith(TMP_SUFFIX):
            continue
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(path)
            if not os.path.isfile(path):
                what = "is missing" if not os.path.lexists(target) else "is not a file"
                raise SaveDirError(f"{path} is a link to {target}, which {what}: remove the link or copy a file there")
            atomic_copy(path, path)
            logger.warning(f"{path} was a link to {target}: replaced by a copy of it (a run writes only its own files)")
        elif not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise SaveDirError(f"{path} is {kind}, not a checkpoint: move it out of {save_dir}")
        elif st.st_nlink > 1:
            atomic_copy(path, path, times=st)
            logger.warning(
                f"{path} shared its data with {st.st_nlink - 1} other hard link(s) (a folder copied with cp -al?): "
                "replaced by a copy of its own, so this run's saves leave the other copy as it is"
            )
