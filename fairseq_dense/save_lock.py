"""One training per save folder: the lock a training holds on its ``--save-dir`` (two trainings on one
folder, e.g. a job requeued while the first still runs, would overwrite each other's checkpoints); one
export per ``--out``: :func:`held_folder`."""

import contextlib
import os
from typing import Callable, Dict, Iterator, Optional

from fairseq_dense.validation import FairseqDenseError

try:
    import fcntl
except ImportError:  # not a POSIX system: no lock
    fcntl = None


class SaveDirBusy(FairseqDenseError):
    """Another live training holds the save folder (:func:`lock_save_dir`)."""


def lock_save_dir(save_dir: str) -> Optional[int]:
    """Lock ``save_dir`` for this process until it ends; returns the locked descriptor (None: no lock here).

    The lock is ``flock`` on the folder itself: no file is written and it ends with the process however
    that ends (no stale lock). Later trainings in the same process go on under its lock.

    Raises:
        SaveDirBusy: another live process holds the folder (naming it where the system says).
    """
    if fcntl is None or not os.path.isdir(save_dir):
        return None
    st = os.stat(save_dir)
    key = (st.st_dev, st.st_ino)
    if key in _HELD:
        return _HELD[key]
    fd = os.open(save_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        holder = _lock_holder(st)
        raise SaveDirBusy(
            f"{save_dir} is in use by another training ({holder}): wait for it to end, or pass another --save-dir"
        ) from None
    _HELD[key] = fd
    return fd


@contextlib.contextmanager
def held_folder(path: str, busy: Callable[[str], Exception]) -> Iterator[None]:
    """Hold the folder ``path`` (created if missing) locked while the block runs; its holder removes it.

    Raises ``busy(holder)`` when a live process holds it. A folder left by a killed holder is taken
    over (``flock`` ends with its process). Taken, the lock is checked to be on the folder still at
    ``path`` (a holder that just ended removed the one it held).
    """
    if fcntl is None:
        yield
        return
    while True:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _lock_holder(os.fstat(fd))
            os.close(fd)
            raise busy(holder) from None
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


def _lock_holder(st: os.stat_result) -> str:
    """``process <pid> (<command>)`` holding a ``flock`` on the folder of ``st``, as Linux's /proc/locks says."""
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if "FLOCK" in fields and inode in fields:
                    pid = fields[fields.index(inode) - 1]
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as c:
                            cmd = " ".join(c.read().decode("utf-8", "replace").split("\0")).strip()[:80]
                    except OSError:
                        cmd = ""
                    return f"process {pid}" + (f": {cmd}" if cmd else "")
    except OSError:
        pass
    return "another process"
