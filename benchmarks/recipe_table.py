"""Markdown table and loss-curve plot of several recipe runs (the scripts in ``examples/``).

    python -m benchmarks.recipe_table OUT/*.train.log [--plot curves.png] [--title "..."]

For each ``NAME.train.log`` (``fairseq-train`` output, ``--log-format simple`` or
``json``) it reports the updates reached, the validation loss at every validation,
the best one, and, when ``NAME.test.txt`` or ``NAME.gen.txt`` (``fairseq-generate``
output) lies beside it, fairseq's BLEU4 line of that decoding. ``--plot`` draws
the training and validation curves of all runs in one PNG.
"""
import argparse
import logging
import os
import re
from typing import Dict, List, Optional

from fairseq_dense.cli.plot import parse_log, plot_loss_curves, series


def _stem(log_path: str) -> str:
    """``DIR/NAME`` of ``DIR/NAME.train.log`` (or of any other ``DIR/NAME.ext``)."""
    return log_path[: -len(".train.log")] if log_path.endswith(".train.log") else os.path.splitext(log_path)[0]


def run_name(log_path: str) -> str:
    return os.path.basename(_stem(log_path))


def unique_names(paths: List[str]) -> List[str]:
    """Run names from the log file names; where two runs share one (the same arch trained
    with different flags into different folders), the folder name goes in front."""
    names = [run_name(p) for p in paths]
    clash = {n for n in names if names.count(n) > 1}
    return [f"{os.path.basename(os.path.dirname(os.path.abspath(p)))}/{n}" if n in clash else n
            for p, n in zip(paths, names)]


def generate_bleu(log_path: str) -> Optional[str]:
    """fairseq-generate's ``BLEU4 = ...`` score from the decoding output beside a training log."""
    stem = _stem(log_path)
    for suffix in (".test.txt", ".gen.txt"):
        path = stem + suffix
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                found = re.findall(r"BLEU4? = ([0-9.]+)", f.read())
            if found:
                return found[-1]
    return None


def summarise(logs: List[str]) -> List[Dict]:
    rows = []
    for path, name in zip(logs, unique_names(logs)):
        log = parse_log(path)
        updates, losses = series(log["valid"], "loss")
        last_train = [r for r in log["train_inner"] + log["train"] if isinstance(r.get("num_updates"), float)]
        rows.append({
            "name": name,
            "updates": int(max([r["num_updates"] for r in last_train] + updates, default=0)),
            "valid": list(zip((int(u) for u in updates), losses)),
            "best": min(losses) if losses else None,
            "bleu": generate_bleu(path),
            "log": log,
        })
    return rows


def markdown(rows: List[Dict]) -> str:
    lines = ["| run | updates | validation loss (at updates) | best | test BLEU4 (fairseq-generate) |",
             "|---|---|---|---|---|"]
    for r in rows:
        curve = ", ".join(f"{loss:.3f} ({u})" for u, loss in r["valid"]) or "n/a"
        best = f"{r['best']:.3f}" if r["best"] is not None else "n/a"
        lines.append(f"| {r['name']} | {r['updates']} | {curve} | {best} | {r['bleu'] or 'n/a'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.recipe_table", description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", help="NAME.train.log files of fairseq-train")
    p.add_argument("--plot", help="write the loss curves of all runs to this PNG")
    p.add_argument("--title", default="")
    a = p.parse_args(argv)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    missing = [x for x in a.logs if not os.path.isfile(x)]
    if missing:
        raise SystemExit(f"error: log file not found: {', '.join(missing)}")
    rows = summarise(a.logs)
    print(markdown(rows))
    if a.plot:
        plot_loss_curves({r["name"]: r["log"] for r in rows}, a.plot, a.title)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
