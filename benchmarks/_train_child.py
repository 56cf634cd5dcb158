"""Run ``fairseq-train`` in this process and record its peak memory.

    python benchmarks/_train_child.py STATS.json <fairseq-train arguments>

The benchmark harness starts one of these per model so that peak memory belongs
to that model alone: the parent also reads the child's ``ru_maxrss`` through
``os.wait4``; this file adds the CUDA allocator peak, which only the process that
trained can see.
"""
import json
import resource
import sys


def main() -> None:
    stats_path = sys.argv[1]
    sys.argv = ["fairseq-train"] + sys.argv[2:]
    from fairseq_cli.train import cli_main

    try:
        cli_main()
    finally:
        stats = {"ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
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
