"""Train one model with the ``fairseq-train`` CLI in a child process and read its JSON log.

Why the CLI and not an in-process loop: the figures are then those of the tool
users run (same data loading, same Trainer, same logging), every model runs in a
fresh process so peak memory (the child's ``VmHWM``, see ``_train_child.py``; CUDA
allocator peak reported by the child) belongs to that model alone, and the JSON log doubles
as the source of the loss curves (``fairseq-dense-plot`` reads the same files).

Throughput is fairseq's ``wps`` (target tokens per second) per log interval;
steady state is the median over the intervals after the warm-up (the first
``warmup_fraction`` of updates, at least two intervals), which also discounts the
few intervals that contain a validation pass.
"""
import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

import fairseq_dense
from fairseq_dense.cli.plot import parse_log

logger = logging.getLogger("benchmarks.train")
PACKAGE_DIR = os.path.dirname(os.path.abspath(fairseq_dense.__file__))
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_train_child.py")


def default_task() -> str:
    """``translation_weighted`` when registered (fairseq's translation plus the post-step simplex
    projection the Weighted Transformer needs; a no-op for every other model), else ``translation``."""
    from fairseq.tasks import TASK_REGISTRY

    return "translation_weighted" if "translation_weighted" in TASK_REGISTRY else "translation"


# the options of common_args a benchmark's command line exposes, with the harness's defaults
TRAINING_OPTIONS = ("max_tokens", "lr", "warmup_updates", "log_interval", "validate_interval_updates",
                    "max_update", "seed")


def add_training_options(p: argparse.ArgumentParser) -> None:
    """Add :data:`TRAINING_OPTIONS` to a benchmark's parser (one set of defaults for every script)."""
    p.add_argument("--max-tokens", type=int, default=4096, help="fairseq-train --max-tokens of every run")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (Adam, inverse-sqrt schedule)")
    p.add_argument("--warmup-updates", type=int, default=50, help="learning-rate warm-up updates")
    p.add_argument("--log-interval", type=int, default=5, help="updates between training log lines")
    p.add_argument("--validate-interval-updates", type=int, default=25, help="updates between validations")
    p.add_argument("--max-update", type=int, default=0, help="also stop after N updates (0: budget only)")
    p.add_argument("--seed", type=int, default=1, help="fairseq-train --seed of every run")


def training_kwargs(a: argparse.Namespace) -> Dict:
    """The :data:`TRAINING_OPTIONS` of parsed arguments, as keyword arguments of :func:`common_args`."""
    return {name: getattr(a, name) for name in TRAINING_OPTIONS}


def common_args(data_bin: str, save_dir: str, src: str, tgt: str, budget_minutes: float, *,
                device: str = "cpu", amp: bool = False, max_tokens: int = 4096, lr: float = 1e-3,
                warmup_updates: int = 50, log_interval: int = 5, validate_interval_updates: int = 25,
                max_update: int = 0, seed: int = 1, task: str = "") -> List[str]:
    """The ``fairseq-train`` arguments every model shares (same data, budget, optimiser, schedule)."""
    args = [
        data_bin, "--user-dir", PACKAGE_DIR, "--task", task or default_task(),
        "--source-lang", src, "--target-lang", tgt,
        "--criterion", "label_smoothed_cross_entropy_with_stats", "--label-smoothing", "0.1",
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(lr), "--clip-norm", "1.0",
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(warmup_updates), "--warmup-init-lr", "1e-7",
        "--max-tokens", str(max_tokens), "--max-epoch", "100000", "--seed", str(seed),
        "--stop-time-hours", f"{budget_minutes / 60:.6f}",
        "--log-format", "json", "--log-interval", str(log_interval),
        "--validate-interval-updates", str(validate_interval_updates),
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--save-interval", "100000",
        "--num-workers", "0", "--skip-invalid-size-inputs-valid-test",
    ]
    if max_update:
        args += ["--max-update", str(max_update)]
    if device == "cpu":
        args.append("--cpu")
    if amp:  # not --bf16: fairseq's option parsing turns --bf16 into --tpu (torch_xla), on GPUs too
        args.append("--amp")
    return args


def run_training(train_args: List[str], run_dir: str, threads: int, timeout_s: float) -> Dict:
    """Run ``fairseq-train`` with ``train_args`` (arch arguments last) in a child process.

    Returns:
        dict with the log path, return code, wall seconds and peak memory.

    Raises:
        RuntimeError: when training fails (the message holds the log's tail).
    """
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "train.log")
    stats_path = os.path.join(run_dir, "child_stats.json")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, CHILD, stats_path, *train_args]
    with open(os.path.join(run_dir, "command.json"), "w") as f:
        json.dump(["fairseq-train", *train_args], f, indent=1)
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = t0 + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.5)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - t0
    if proc.returncode != 0:
        with open(log_path, errors="replace") as f:
            tail = "".join(f.readlines()[-25:])
        raise RuntimeError(f"fairseq-train failed ({proc.returncode}); log {log_path}:\n{tail}")
    child = {}
    if os.path.isfile(stats_path):
        with open(stats_path) as f:
            child = json.load(f)
    # VmHWM where the child could read it; ru_maxrss (which includes the parent's
    # resident size at the fork on Linux) only as a fallback, and said so
    hwm = child.get("vm_hwm_kib")
    return {
        "log": log_path,
        "wall_s": wall,
        "peak_rss_mib": (hwm if hwm else usage.ru_maxrss) / 1024.0,  # KiB on Linux
        "peak_rss_source": "VmHWM" if hwm else "ru_maxrss",
        "cuda_max_allocated_mib": child.get("cuda_max_allocated_bytes", 0) / 2**20 or None,
    }


def summarise_log(log_path: str, warmup_fraction: float = 0.2) -> Dict:
    """Steady-state throughput, loss curves and validation results of one training log."""
    log = parse_log(log_path)
    inner = [r for r in log["train_inner"] if isinstance(r.get("num_updates"), float)]
    valid = [r for r in log["valid"] if isinstance(r.get("loss"), float)]
    n_updates = max([r["num_updates"] for r in inner + valid] or [0.0])
    warm = max(warmup_fraction * n_updates, inner[1]["num_updates"] if len(inner) > 1 else 0.0)
    steady = [r for r in inner if r["num_updates"] > warm and isinstance(r.get("wps"), float)]
    if not steady:  # too short a run: use whatever there is and say so
        steady = [r for r in inner if isinstance(r.get("wps"), float)]
    wps = [r["wps"] for r in steady]
    wpb = [r["wpb"] for r in steady if isinstance(r.get("wpb"), float)]
    best = min(valid, key=lambda r: r["loss"]) if valid else None
    return {
        "updates": int(n_updates),
        "train_tokens_per_s": statistics.median(wps) if wps else None,
        "train_tokens_per_s_intervals": len(wps),
        "warmup_updates_excluded": int(warm),
        "target_tokens_per_batch": statistics.mean(wpb) if wpb else None,
        "valid_curve": [(int(r["num_updates"]), r["t"], r["loss"]) for r in valid],
        "train_curve": [(int(r["num_updates"]), r["t"], r.get("loss")) for r in inner],
        "best_valid_loss": best["loss"] if best else None,
        "best_valid_updates": int(best["num_updates"]) if best else None,
        "best_valid_t": best["t"] if best else None,
        "final_valid_loss": valid[-1]["loss"] if valid else None,
        "log_wall_s": max([r["t"] for r in inner + valid if r["t"] is not None] or [0.0]),
    }


def time_to_reach(valid_curve, target: Optional[float]) -> Dict:
    """First validation at or below ``target``: ``{"updates", "seconds"}`` or ``None`` values."""
    if target is not None:
        for updates, t, loss in valid_curve:
            if loss <= target + 1e-9:
                return {"updates": updates, "seconds": t}
    return {"updates": None, "seconds": None}
