"""How many CPU threads a command of this project gives torch, and why.

torch starts one thread per core. When other jobs keep those cores busy, its threads wait for each other at every
operator: on a 2-core machine with a load average of about 6, two threads made fewer than 50 training updates in 17
minutes where one thread made 1,600 in 25, and ``fairseq-dense-interactive`` took 2 s a sentence instead of 0.1 s.
:func:`choose_threads` therefore leaves out the cores the load average says are busy, unless ``OMP_NUM_THREADS``
chooses. The console scripts apply it (:func:`apply_threads`); the Python API leaves torch's setting alone, as loading a
model changes no global state.
"""

import logging
import os
from typing import Mapping, Optional, Tuple

logger = logging.getLogger(__name__)

#: the environment variable that chooses the thread count (torch and OpenMP read it too)
THREADS_ENV = "OMP_NUM_THREADS"


def load_average() -> Optional[float]:
    """The 1-minute load average, or ``None`` where the system has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def choose_threads(
    environ: Optional[Mapping[str, str]] = None, cpus: Optional[int] = None, load: Optional[float] = None
) -> Tuple[int, str]:
    """``(n, reason)``, e.g. ``(1, "2 CPUs, load average 5.9")``: ``OMP_NUM_THREADS`` when it is a
    whole number from 1 to 2**31-1 (else named in the reason and ignored), otherwise the usable CPUs minus
    the busy ones (the rounded load average), at least 1. The arguments default to this process's."""
    environ = os.environ if environ is None else environ
    if cpus is None:  # the CPUs this process may run on
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not on Linux
            cpus = os.cpu_count() or 1
    load = load_average() if load is None else load
    given = environ.get(THREADS_ENV, "").strip()
    ignored = ""
    if given:
        if given.isascii() and given.isdigit() and 0 < int(given) < 2**31:  # digits as torch reads them, a C int
            return int(given), f"{THREADS_ENV}={given}"
        ignored = f"; {THREADS_ENV}={given!r} ignored: not a whole number from 1 to 2**31-1"
    if load is None:
        return cpus, f"{cpus} CPUs{ignored}"
    n = max(1, min(cpus, cpus - int(load + 0.5)))
    return n, f"{cpus} CPU{'s' * (cpus != 1)}, load average {load:.1f}{ignored}"


def apply_threads(environ: Optional[Mapping[str, str]] = None, *, say: bool = True) -> Tuple[int, str]:
    """Set torch's thread count to :func:`choose_threads`' choice and return it; ``say``: log it in one
    line now (else the command says it in its own last line, so that a refusal stays one line)."""
    import torch

    n, reason = choose_threads(environ)
    torch.set_num_threads(n)
    if say:
        logger.info("%s", phrase(n, reason))
    return n, reason


def phrase(n: int, reason: str) -> str:
    """``1 CPU thread (2 CPUs, load average 3.1; set OMP_NUM_THREADS to choose)``."""
    return f"{n} CPU thread{'' if n == 1 else 's'} ({reason}; set {THREADS_ENV} to choose)"
