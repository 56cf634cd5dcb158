"""Run ``fairseq-train`` in this process and record its peak memory.

    python benchmarks/_train_child.py STATS.json <fairseq-train arguments>

The harness starts one of these per model. ``VmHWM`` is the peak resident set of this
process since ``exec``; ``ru_maxrss`` is no substitute, as Linux carries the pre-``exec``
high-water mark (a copy of the parent) into it. The CUDA allocator peak is only visible here.
"""

import json
import sys
from typing import Optional


def vm_hwm_kib() -> Optional[int]:
    """Peak resident set size of this process since ``exec`` (KiB), or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def main() -> None:
    stats_path, sys.argv = sys.argv[1], ["fairseq-train"] + sys.argv[2:]
    from fairseq_cli.train import cli_main

    try:
        cli_main()
    finally:
        stats = {"vm_hwm_kib": vm_hwm_kib()}
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            stats["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        with open(stats_path, "w") as f:
            json.dump(stats, f)


if __name__ == "__main__":
    main()
