#!/usr/bin/env python
"""Training throughput of ``dense_lstm`` vs fairseq's ``lstm`` at matched parameter counts.

    python benchmarks/dense_lstm_throughput.py DATA_BIN --arch dense_lstm_small \
        --max-update 60 [--compare dense_lstm_baseline_small]

Counts our model's parameters on DATA_BIN's dictionaries, searches the width of a
fairseq ``lstm`` (bidirectional encoder, attention, as many layers as ours up to
4, tied softmax) whose count is closest, then trains each for ``--max-update``
updates with the same batch settings (``--cpu`` unless ``--gpu``) and reports the
target tokens per second fairseq logs (``wps``) and their ratio. The first
``--log-interval`` updates are excluded from the rate where fairseq logs them
separately. Nothing is written outside ``--workdir``.
"""
import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile

import torch

from fairseq_dense.logging_setup import configure_logging

logger = logging.getLogger("benchmarks.dense_lstm_throughput")
BIN = os.path.dirname(sys.executable)
USER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "user_dir")


def count_params(data: str, model_args: list) -> int:
    """Build the model fairseq-train would build (on the meta device) and count its parameters."""
    import fairseq_dense  # noqa: F401
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [data, "--task", "translation", *model_args])
    task = tasks.setup_task(args)
    with torch.device("meta"):
        model = task.build_model(args)
    return sum(p.numel() for p in model.parameters())


def our_layers(data: str, model_args: list) -> int:
    """Encoder depth of the parsed model arguments."""
    from fairseq import options

    args = options.parse_args_and_arch(options.get_training_parser(), [data, "--task", "translation", *model_args])
    return args.encoder_layers


def lstm_args(width: int, layers: int) -> list:
    w = str(width)
    return ["--arch", "lstm", "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-bidirectional", "--encoder-embed-dim", w, "--encoder-hidden-size", w,
            "--decoder-embed-dim", w, "--decoder-hidden-size", w, "--decoder-out-embed-dim", w,
            "--share-decoder-input-output-embed"]


def match_lstm(data: str, target: int, layers: int) -> tuple:
    """Bisect the fairseq ``lstm`` width whose parameter count is closest to ``target``."""
    lo, hi = 16, 2048
    while hi - lo > 8:
        mid = (lo + hi) // 2
        if count_params(data, lstm_args(mid, layers)) < target:
            lo = mid
        else:
            hi = mid
    best = min((lo, hi), key=lambda w: abs(count_params(data, lstm_args(w, layers)) - target))
    return best, count_params(data, lstm_args(best, layers))


def train_wps(data: str, model_args: list, opts, workdir: str, name: str) -> float:
    """Run fairseq-train for ``opts.max_update`` updates; return the last logged train wps."""
    cmd = [os.path.join(BIN, "fairseq-train"), data, "--user-dir", USER_DIR, "--task", "translation",
           *model_args, "--criterion", "label_smoothed_cross_entropy_with_stats", "--label-smoothing", "0.1",
           "--optimizer", "adadelta", "--lr", "1.0", "--clip-norm", "1.0", "--max-tokens", str(opts.max_tokens),
           "--max-update", str(opts.max_update), "--seed", "1", "--num-workers", "0", "--dropout", "0.2",
           "--disable-validation", "--no-save", "--log-format", "simple", "--log-interval", str(opts.log_interval),
           "--save-dir", os.path.join(workdir, name)]
    if not opts.gpu:
        cmd.append("--cpu")
    logger.info("%s: %s", name, " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(opts.threads)))
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    # interval lines after the first one exclude start-up; fall back to the epoch line
    rates = [float(m.group(1)) for m in re.finditer(r"\| wps ([\d.]+)", proc.stdout + proc.stderr)]
    interval = rates[1:-1] if len(rates) > 2 else rates
    return sum(interval) / len(interval)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="fairseq binarised translation data (joined dictionary)")
    parser.add_argument("--arch", default="dense_lstm_small", help="our architecture")
    parser.add_argument("--compare", nargs="*", default=[], help="more of our archs to time as well")
    parser.add_argument("--max-update", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gpu", action="store_true", help="train on the GPU instead of --cpu")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    opts = parser.parse_args(argv)
    configure_logging("%(asctime)s | %(message)s")
    ours = ["--arch", opts.arch]
    n_ours = count_params(opts.data, ours)
    layers = min(4, our_layers(opts.data, ours))
    width, n_lstm = match_lstm(opts.data, n_ours, layers)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = opts.workdir or tmp
        results = {"ours": {"arch": opts.arch, "params": n_ours,
                            "wps": train_wps(opts.data, ours, opts, workdir, opts.arch)},
                   "lstm": {"args": " ".join(lstm_args(width, layers)), "params": n_lstm,
                            "wps": train_wps(opts.data, lstm_args(width, layers), opts, workdir, "lstm")}}
        for arch in opts.compare:
            results[arch] = {"arch": arch, "params": count_params(opts.data, ["--arch", arch]),
                             "wps": train_wps(opts.data, ["--arch", arch], opts, workdir, arch)}
    results["ratio_ours_over_lstm"] = results["ours"]["wps"] / results["lstm"]["wps"]
    print(json.dumps(results, indent=2))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
