"""Run ``fairseq-train`` in this process and record its peak memory.

    python benchmarks/_train_child.py STATS.json <fairseq-train arguments>

The benchmark harness starts one of these per model so that peak memory belongs
to that model alone. It records ``VmHWM`` (Linux: the peak resident set of this
process's address space since ``exec``) and the CUDA allocator peak, which only the
process that trained can see. ``ru_maxrss`` (``getrusage`` or the parent's
``os.wait4``) is no substitute: Linux carries the high-water mark of the pre-``exec``
image, a copy of the parent, into it, so every child would report at least the
harness's own resident size at the time of the fork.
"""
import json
import resource
import sys
from typing import Optional


def vm_hwm_kib() -> Optional[int]:
    """Peak resident set size of this process since ``exec`` (KiB), or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main() -> None:
    stats_path = sys.argv[1]
    sys.argv = ["fairseq-train"] + sys.argv[2:]
    from fairseq_cli.train import cli_main

    try:
        cli_main()
    finally:
        stats = {"ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                 "vm_hwm_kib": vm_hwm_kib()}
        try:
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                stats["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        except Exception:  # memory statistics must never hide the training error
            pass
        with open(stats_path, "w") as f:
            json.dump(stats, f)


if __name__ == "__main__":
    main()
