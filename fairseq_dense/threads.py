"""How many CPU threads a command of this project gives torch, and why.

torch starts one thread per core. When other jobs keep those cores busy, its threads
wait for each other at every operator: on a 2-core machine with a load average of
about 6, two threads made fewer than 50 training updates in 17 minutes where one
thread made 1,600 in 25, and ``fairseq-dense-interactive`` took 2 s a sentence
instead of 0.1 s. :func:`choose_threads` therefore counts the cores this process may
use and leaves out those the load average says are busy (at least one thread);
``OMP_NUM_THREADS`` chooses instead when it is set. :func:`apply_threads` applies the
choice to torch and logs it in one line.

The console scripts call :func:`apply_threads` in their ``main``; the Python API
(``fairseq_dense.from_pretrained``) leaves torch's setting alone, as loading a model
changes no global state (call ``apply_threads()`` yourself, or ``torch.set_num_threads``).
"""

import logging
import os
from typing import Mapping, Optional, Tuple

logger = logging.getLogger(__name__)

#: the environment variable that chooses the thread count (torch and OpenMP read it too)
THREADS_ENV = "OMP_NUM_THREADS"


def usable_cpus() -> int:
    """The number of CPUs this process may run on (its affinity mask, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def load_average() -> Optional[float]:
    """The 1-minute load average, or ``None`` where the system has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def choose_threads(
    environ: Optional[Mapping[str, str]] = None, cpus: Optional[int] = None, load: Optional[float] = None
) -> Tuple[int, str]:
    """The thread count for this process's torch, and the reason in words.

    ``OMP_NUM_THREADS`` wins when it is a positive whole number (an invalid value is
    named in the reason and ignored). Otherwise: the usable CPUs minus the busy ones
    (the 1-minute load average, rounded), at least 1.

    Args:
        environ: the environment to read (default ``os.environ``).
        cpus: usable CPUs (default :func:`usable_cpus`).
        load: the load average (default :func:`load_average`).

    Returns:
        ``(n, reason)``, e.g. ``(1, "2 CPUs, load average 5.9: 1 idle at most")``.
    """
    environ = os.environ if environ is None else environ
    cpus = usable_cpus() if cpus is None else cpus
    load = load_average() if load is None else load
    given = environ.get(THREADS_ENV, "").strip()
    ignored = ""
    if given:
        if given.isdigit() and int(given) > 0:
            return int(given), f"{THREADS_ENV}={given}"
        ignored = f"; {THREADS_ENV}={given!r} ignored: not a positive whole number"
    if load is None:
        return cpus, f"{cpus} CPUs{ignored}"
    n = max(1, min(cpus, cpus - int(load + 0.5)))
    word = "CPU" if cpus == 1 else "CPUs"
    return n, f"{cpus} {word}, load average {load:.1f}{ignored}"


def apply_threads(environ: Optional[Mapping[str, str]] = None, *, say: bool = True) -> Tuple[int, str]:
    """Set torch's thread count to :func:`choose_threads`' choice and log it (INFO, one line;
    ``say=False``: the command says it in its own last line, see :func:`phrase`, so that a
    refusal before any work stays one line).

    Returns:
        ``(n, reason)`` as :func:`choose_threads` gives them; a command that starts
        child processes passes ``OMP_NUM_THREADS=n`` on to them.
    """
    import torch

    n, reason = choose_threads(environ)
    torch.set_num_threads(n)
    if say:
        logger.info("%s", phrase(n, reason))
    return n, reason


def phrase(n: int, reason: str) -> str:
    """``1 CPU thread (2 CPUs, load average 3.1; set OMP_NUM_THREADS to choose)``."""
    return f"{n} CPU thread{'' if n == 1 else 's'} ({reason}; set {THREADS_ENV} to choose)"
