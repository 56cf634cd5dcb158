"""Convergence of several models trained at the same time, one CPU thread (or one share of
the GPU) each, on the same prepared data: who reaches whose validation loss first.

    python -m benchmarks.concurrent_convergence DATA_BIN --src de --tgt en --budget-minutes 60 \
        --model dense=--arch,dense_lstm_small --model stacked=--arch,dense_lstm_baseline_small \
        --reference stacked --out benchmarks/results/NAME

``benchmarks.run`` trains its models one after the other, each with every core; that
suits throughput, but a convergence run of an hour per model then takes hours, and a
change in the machine's load between the runs enters the wall-time ratio. Here every
model starts at the same moment with ``--threads`` threads (default 1; give the runs no
more threads in all than the machine has cores), so load changes hit all of them alike.
Each run is ``fairseq-train`` with the harness's common arguments
(:func:`benchmarks.train.common_args`: optimiser, schedule, batch size, validation
interval) followed by the model's own arguments.

Written to ``--out``: ``results.json`` (every run's command, parameter count, loss
curves, and the updates and seconds it took to reach the reference run's best
validation loss), ``results.md`` (the table) and ``curves.png`` (training and
validation loss against updates and against wall-clock seconds).
"""
import argparse
import json
import logging
import os
import shlex
import sys
import threading
import time
from typing import Dict, List

from benchmarks import machine, train
from fairseq_dense.logging_setup import configure_logging

logger = logging.getLogger("benchmarks.concurrent_convergence")


def parse_model(spec: str):
    """``NAME=ARG,ARG,...`` -> ``(NAME, [ARG, ...])``."""
    name, sep, args = spec.partition("=")
    if not sep or not name or not args:
        raise argparse.ArgumentTypeError(f"--model wants NAME=--arch,ARCH[,ARG...], got {spec!r}")
    return name, [a for a in args.split(",") if a]


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_bin", help="fairseq-preprocess output folder")
    p.add_argument("--src", required=True, help="source language code of DATA_BIN")
    p.add_argument("--tgt", required=True, help="target language code of DATA_BIN")
    p.add_argument("--model", action="append", type=parse_model, required=True,
                   help="NAME=ARGS, the model's fairseq-train arguments comma-separated (repeat)")
    p.add_argument("--reference", required=True, help="NAME of the run whose best validation loss is the target")
    p.add_argument("--budget-minutes", type=float, required=True, help="wall-clock training budget of every run")
    p.add_argument("--out", required=True, help="folder for results.json/.md, curves.png and the runs")
    p.add_argument("--threads", type=int, default=1, help="threads per run")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where every run trains")
    train.add_training_options(p)
    return p


def check_args(a) -> None:
    names = [n for n, _ in a.model]
    if len(names) < 2:
        raise SystemExit("error: give at least two --model runs to compare")
    if len(set(names)) != len(names):
        raise SystemExit(f"error: --model names must differ, got {names}")
    if a.reference not in names:
        raise SystemExit(f"error: --reference {a.reference!r} is none of the --model names {names}")
    if a.budget_minutes <= 0:
        raise SystemExit("error: --budget-minutes must be positive")
    if not os.path.isfile(os.path.join(a.data_bin, f"dict.{a.tgt}.txt")):
        raise SystemExit(f"error: {a.data_bin} has no dict.{a.tgt}.txt (not a fairseq-preprocess folder?)")


def count_params(train_args: List[str]) -> int:
    """Parameters of the model ``fairseq-train <train_args>`` would build (meta device)."""
    import torch

    import fairseq_dense  # noqa: F401
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), input_args=list(train_args))
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    with torch.device("meta"):
        return sum(p.numel() for p in task.build_model(cfg.model).parameters())


def table(results: Dict) -> str:
    ref = results["reference"]
    target = results["target_valid_loss"]
    lines = [
        f"Reference: `{ref}`, best validation loss {target:.3f}. Budget {results['budget_minutes']:g} min "
        f"of wall-clock time per run, all runs at once, {results['threads_per_run']} thread(s) each on "
        f"{results['machine']['device']} ({results['machine'].get('cpu', '')}, "
        f"{results['machine'].get('logical_cpus', '?')} logical CPUs).",
        "",
        "| run | params | updates | best valid loss (update) | reached reference best: update / s "
        "| updates ratio | wall-time ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    base = results["runs"][ref]["reached"]
    for name, run in results["runs"].items():
        s, r = run["summary"], run["reached"]
        u_ratio = (f"x{r['updates'] / base['updates']:.2f}" if r["updates"] and base["updates"] else "n/a")
        t_ratio = (f"x{r['seconds'] / base['seconds']:.2f}" if r["seconds"] and base["seconds"] else "n/a")
        reached = f"{r['updates']} / {r['seconds']:.0f}" if r["updates"] else "not reached"
        lines.append(
            f"| `{name}` | {run['params'] / 1e6:.2f}M | {s['updates']} | {s['best_valid_loss']:.3f} "
            f"({s['best_valid_updates']}) | {reached} | {u_ratio} | {t_ratio} |")
    lines += ["", "Ratios are against the reference run (< 1: reached the reference's best sooner). "
              "Seconds are fairseq's log clock of each run (from its start).", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    a = get_parser().parse_args(argv)
    configure_logging("%(asctime)s | %(name)s | %(message)s", datefmt="%H:%M:%S")
    check_args(a)
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    runs: Dict[str, Dict] = {}
    for name, model_args in a.model:
        run_dir = os.path.join(out, "runs", name)
        common = train.common_args(os.path.abspath(a.data_bin), os.path.join(run_dir, "checkpoints"), a.src, a.tgt,
                                   a.budget_minutes, device=a.device, **train.training_kwargs(a))
        runs[name] = {"command": ["fairseq-train", *common, *model_args], "run_dir": run_dir,
                      "params": count_params(common + model_args)}
    desc = machine.describe(a.device, a.threads)
    errors: Dict[str, str] = {}

    def worker(name: str) -> None:
        try:
            runs[name]["train"] = train.run_training(runs[name]["command"][1:], runs[name]["run_dir"], a.threads,
                                                     timeout_s=a.budget_minutes * 60 * 1.5 + 600)
        except Exception as e:  # reported after every run has ended
            errors[name] = str(e)

    started = time.time()
    threads = [threading.Thread(target=worker, args=(n,)) for n in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for name, msg in errors.items():
            logger.error("%s failed: %s", name, msg)
        return 1
    for run in runs.values():
        run["summary"] = train.summarise_log(run["train"]["log"])
    target = runs[a.reference]["summary"]["best_valid_loss"]
    if target is None:
        logger.error("the reference run %s logged no validation loss", a.reference)
        return 1
    for run in runs.values():
        run["reached"] = train.time_to_reach(run["summary"]["valid_curve"], target)
    command = "python -m benchmarks.concurrent_convergence " + " ".join(map(shlex.quote, argv or sys.argv[1:]))
    results = {"command": command,
               "machine": desc, "threads_per_run": a.threads, "budget_minutes": a.budget_minutes,
               "reference": a.reference, "target_valid_loss": target, "runs": runs,
               "total_wall_s": time.time() - started}
    from fairseq_dense.cli.plot import parse_log, plot_loss_curves

    logs = {name: parse_log(run["train"]["log"]) for name, run in runs.items()}
    plot_loss_curves(logs, os.path.join(out, "curves.png"), title="loss against updates")
    plot_loss_curves(logs, os.path.join(out, "curves_wall.png"), title="loss against seconds", x="t")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    md = "# Concurrent convergence\n\nCommand: `" + results["command"] + "`\n\n" + table(results)
    md += "\nCurves: `curves.png` (updates), `curves_wall.png` (seconds)\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
