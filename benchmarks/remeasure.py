"""Re-measure the side-by-side speed comparisons of an earlier benchmark run.

    python -m benchmarks.remeasure benchmarks/results/tatoeba-cpu/results.json [--what decode train]

Speed depends on the code, not on how long the checkpoints were trained. After a
change to a model this re-runs, without retraining, on the data and checkpoints the
run left in its work folder:

- ``decode``: :func:`benchmarks.decode.paired_speed` (beam-5, both checkpoints in one
  process, batch by batch), stored under ``decode_paired``;
- ``train``: :func:`benchmarks.paired_train.paired_train_speed` (both models built from
  their recorded ``fairseq-train`` commands, the same real batches, interleaved),
  stored under ``train_paired``;
- ``memory``: peak resident memory of ``fairseq-train`` again, per model in a fresh
  child (the recorded command, ``--max-update`` ``--memory-updates``, nothing saved),
  replacing ``train.peak_rss_mib`` (the record keeps how it was re-measured under
  ``train.peak_rss_remeasured``). For runs made before the harness read the child's
  ``VmHWM``: their figures included the harness's own resident size at the fork.

Each figure keeps the command, date, commit and machine that produced it;
``results.md`` is rewritten. Run ``python -m benchmarks.fill_reports`` afterwards to
update the reports.
"""
import argparse
import datetime
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile

from benchmarks import decode as dec
from benchmarks import machine, paired_train, report, train
from fairseq_dense.logging_setup import configure_logging

logger = logging.getLogger("benchmarks.remeasure")


def _commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+changes" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def run_dirs(entry):
    """``(ours_ckpt, baseline_ckpt, data_bin, ours_train_args, baseline_train_args)`` of one family
    entry, or ``None`` if a file of the run is gone."""
    dirs = [os.path.dirname(entry[side]["train"]["log"]) for side in ("ours", "baseline")]
    ckpts = [os.path.join(d, "checkpoint_best.pt") for d in dirs]
    commands = []
    for d in dirs:
        path = os.path.join(d, "command.json")
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            commands.append(json.load(f)[1:])  # ["fairseq-train", DATA, ...]
    data_bin = commands[0][0]
    if not all(os.path.isfile(p) for p in ckpts) or not os.path.isdir(data_bin):
        return None
    return ckpts[0], ckpts[1], data_bin, commands[0], commands[1]


def _peak_memory(train_args, updates: int, threads: int, measured) -> dict:
    """Peak RSS of ``fairseq-train <train_args>`` for ``updates`` updates in a fresh child."""
    with tempfile.TemporaryDirectory(prefix="remeasure-memory-") as tmp:
        args = list(train_args) + ["--max-update", str(updates), "--stop-time-hours", "0",
                                   "--save-dir", tmp, "--no-save"]
        got = train.run_training(args, tmp, threads, timeout_s=3600)
    if got["peak_rss_source"] != "VmHWM":
        raise RuntimeError("peak memory needs /proc/self/status (Linux); ru_maxrss includes this process")
    return {"peak_rss_mib": got["peak_rss_mib"], "peak_rss_source": got["peak_rss_source"],
            "peak_rss_remeasured": dict(measured, updates=updates)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.remeasure", description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="results.json of a benchmark run whose work folder still exists")
    p.add_argument("--what", nargs="+", choices=("decode", "train", "memory"), default=["decode", "train"])
    p.add_argument("--sentences", type=int, default=200, help="test sentences decoded (decode)")
    p.add_argument("--train-batches", type=int, default=8, help="training batches per round (train)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--memory-updates", type=int, default=30,
                   help="updates per model for the peak-memory measurement (memory); the run's "
                        "validation interval applies, so >= it includes a validation pass")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--families", nargs="*", help="only these result keys (default: all)")
    a = p.parse_args(argv)
    configure_logging("%(asctime)s | %(name)s | %(message)s", datefmt="%H:%M:%S")
    with open(a.results) as f:
        results = json.load(f)
    device, bf16 = results["machine"]["device"], results.get("bf16", False)
    measured = {
        "command": "python -m benchmarks.remeasure " + " ".join(map(shlex.quote, argv or sys.argv[1:])),
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        "machine": machine.describe(device, a.threads),
    }
    done = 0
    for key, entry in results["families"].items():
        if "error" in entry or (a.families and key not in a.families):
            continue
        found = run_dirs(entry)
        if found is None:
            logger.warning("%s: checkpoints or data of the run are gone; skipped", key)
            continue
        ours_ckpt, base_ckpt, data_bin, ours_args, base_args = found
        if "decode" in a.what:
            logger.info("%s: decoding ours and baseline side by side", key)
            batch = (entry["ours"].get("decode") or {}).get("batch_size", 32)
            length = ((entry["ours"].get("decode") or {}).get("cache_subset") or {}).get("fixed_length", 20)
            entry["decode_paired"] = dict(
                dec.paired_speed(ours_ckpt, base_ckpt, data_bin, sentences=a.sentences, rounds=a.rounds,
                                 batch_size=batch, fixed_length=length, device=device, bf16=bf16,
                                 threads=a.threads),
                remeasured=measured)
            logger.info("%s: decoding x%.2f (FLOPs x%.2f)", key, entry["decode_paired"]["ratio"],
                        entry["decode_paired"]["flop_ratio"] or 0)
        if "train" in a.what:
            logger.info("%s: training ours and baseline side by side", key)
            entry["train_paired"] = dict(
                paired_train.paired_train_speed(ours_args, base_args, batches=a.train_batches, rounds=a.rounds,
                                                threads=a.threads, device=device),
                remeasured=measured)
            logger.info("%s: training x%.2f (FLOPs x%.2f)", key, entry["train_paired"]["ratio"],
                        entry["train_paired"]["flop_ratio"] or 0)
        if "memory" in a.what and device == "cpu":
            for side, args in (("ours", ours_args), ("baseline", base_args)):
                entry[side]["train"].update(_peak_memory(args, a.memory_updates, a.threads, measured))
                logger.info("%s %s: peak RSS %.0f MiB", key, side, entry[side]["train"]["peak_rss_mib"])
        done += 1
    with open(a.results, "w") as f:
        json.dump(results, f, indent=1, default=str)
    with open(os.path.join(os.path.dirname(a.results), "results.md"), "w") as f:
        f.write(report.markdown(results))
    logger.info("re-measured %d families; wrote %s and results.md", done, a.results)
    return 0 if done else 1


if __name__ == "__main__":
    raise SystemExit(main())
