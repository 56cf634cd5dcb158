"""``python benchmarks/_train_child.py STATS.json <fairseq-train arguments>``: ``fairseq-train`` in this
process (one per model, ``measure.start_training``), then its peak memory into STATS.json: ``VmHWM``, the
peak resident set since ``exec`` (Linux carries the parent's high-water mark into ``ru_maxrss``), and the
CUDA allocator's peak, visible only here."""

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
