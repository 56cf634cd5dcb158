"""The machine a benchmark ran on, and the dense matmul FLOP/s it reaches (the MFU denominator)."""
import os
import platform
import time
from typing import Dict


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe(device: str, threads: int) -> Dict:
    """CPU model, cores, load, library versions and (on CUDA) the GPU name."""
    import fairseq
    import torch

    info = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "threads_per_run": threads,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fairseq": getattr(fairseq, "__version__", "?"),
        "platform": platform.platform(),
        "device": device,
    }
    try:
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def matmul_flops(device: str = "cpu", dtype: str = "float32", n: int = 2048, threads: int = 0,
                 min_seconds: float = 1.0) -> float:
    """Measured dense ``n x n`` matmul FLOP/s (``2 n^3`` per product), best of several repeats.

    Args:
        device: ``cpu`` or ``cuda``.
        dtype: ``float32`` or ``bfloat16``.
        n: matrix size.
        threads: CPU threads (0: leave torch's setting).
        min_seconds: keep repeating for at least this long.
    """
    import torch

    if threads:
        torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    torch.mm(a, b)  # warm-up
    sync()
    best, spent = 0.0, 0.0
    while spent < min_seconds:
        reps = 1 if device == "cpu" else 20
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        sync()
        dt_s = time.perf_counter() - t0
        spent += dt_s
        best = max(best, reps * 2 * n**3 / dt_s)
    return best
