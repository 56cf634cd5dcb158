"""``fairseq-dense-plot``: loss curves from the logs (JSON or simple format) of any fairseq run.

    fairseq-train ... --log-format json --log-interval 10 > run.log
    fairseq-dense-plot run_a.log run_b.log --labels ours baseline --out loss.png

Reads the lines fairseq writes with ``--log-format json`` (``... | train_inner |
{...}``, ``... | valid | {...}``, ``... | train | {...}``) from log files (a file
of pure JSON objects, one per line, works too), and draws training loss (per log
interval) and validation loss against updates or wall-clock seconds, one line per
run. Statistics that models expose through the ``model/<name>`` keys of the
``label_smoothed_cross_entropy_with_stats`` criterion (e.g. Weighted Transformer
branch weights) can be plotted with ``--model-stats``.

The parsing functions are also the benchmark harness' log reader.
"""

import argparse
import json
import logging
import os
import re
from datetime import datetime
from typing import Dict, List, Optional, Sequence

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging

logger = logging.getLogger("fairseq_dense.plot")

_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*\|\s*\w+\s*\|\s*(?P<tag>[\w.\-/]+)\s*\|\s*(?P<json>\{.*\})\s*$"
)
TAGS = ("train_inner", "train", "valid")
# --log-format simple: "... | train_inner | epoch 001:     50 / 436 loss=10.2, nll_loss=9.7, ..."
# and "... | valid | epoch 001 | valid on 'valid' subset | loss 8.45 | nll_loss 7.69 | ... | num_updates 135"
_SIMPLE = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*\|\s*\w+\s*\|\s*(?P<tag>train_inner|train|valid)\s*\|"
    r"\s*epoch \d+(?P<rest>.*)$"
)


def _simple_stats(tag: str, rest: str) -> Optional[Dict[str, str]]:
    """The statistics of one ``--log-format simple`` line (after ``epoch NNN``), or None."""
    if tag == "train_inner":  # ":     50 / 436 key=value, key=value"
        body = re.sub(r"^:\s*\d+\s*/\s*\d+\s*", "", rest)
        pairs = [item.split("=", 1) for item in body.split(", ") if "=" in item]
        return {k.strip(): v.strip() for k, v in pairs} or None
    parts = [p.strip() for p in rest.split(" | ") if p.strip()]
    stats = {}
    for part in parts:
        key, _, value = part.rpartition(" ")
        if key and " " not in key:  # "valid on 'valid' subset" and the like have spaces
            stats[key] = value
    return stats or None


def _number(value):
    """fairseq formats every statistic as a string; turn numbers back into floats."""
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def parse_log(path: str) -> Dict[str, List[Dict]]:
    """Parse a fairseq log (``--log-format json``, or ``simple`` as the recipes in ``examples/`` write).

    Args:
        path: a log file of ``fairseq-train --log-format json`` (or ``simple``).

    Returns:
        ``{"train_inner": [...], "train": [...], "valid": [...]}``, each a list of
        dicts with numeric values as floats, keys without the ``train_``/``valid_``
        prefix (``loss``, ``num_updates``, ``wps``...), and ``t``: seconds since the
        first timestamped line of the log (``None`` for untimed lines).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: log file not found")
    out: Dict[str, List[Dict]] = {tag: [] for tag in TAGS}
    start: Optional[datetime] = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            m = _LINE.match(line)
            simple = None if m else _SIMPLE.match(line)
            if m:
                ts = datetime.strptime(m.group("ts"), "%Y-%m-%d %H:%M:%S")
                start = start or ts
                tag, payload, t = m.group("tag"), m.group("json"), (ts - start).total_seconds()
            elif simple:
                stats = _simple_stats(simple.group("tag"), simple.group("rest"))
                if stats is None:
                    continue
                ts = datetime.strptime(simple.group("ts"), "%Y-%m-%d %H:%M:%S")
                start = start or ts
                tag, payload, t = simple.group("tag"), json.dumps(stats), (ts - start).total_seconds()
            elif line.startswith("{") and line.endswith("}"):
                tag, payload, t = None, line, None
            else:
                if start is None:
                    m2 = re.match(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", line)
                    if m2:
                        start = datetime.strptime(m2.group(1), "%Y-%m-%d %H:%M:%S")
                continue
            try:
                stats = json.loads(payload)
            except json.JSONDecodeError:
                continue
            if tag is None:  # bare JSON lines: infer the kind from the keys
                tag = "valid" if "valid_loss" in stats else "train" if "train_loss" in stats else "train_inner"
            if tag not in out:
                continue
            rec = {}
            for k, v in stats.items():
                if tag != "train_inner" and k.startswith(tag + "_"):
                    k = k[len(tag) + 1 :]
                rec[k] = _number(v)
            rec["t"] = t
            out[tag].append(rec)
    return out


def series(records: Sequence[Dict], key: str, x: str = "num_updates"):
    """``(xs, ys)`` of the records that have both keys (``x="t"`` for wall-clock seconds)."""
    pts = [(r[x], r[key]) for r in records if isinstance(r.get(x), float) and isinstance(r.get(key), float)]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_loss_curves(
    runs: Dict[str, Dict[str, List[Dict]]], out_png: str, title: str = "", x: str = "num_updates"
) -> str:
    """Draw training and validation loss of several runs side by side.

    Args:
        runs: ``{label: parse_log(...)}``.
        out_png: where to write the PNG.
        title: figure title.
        x: ``"num_updates"`` or ``"t"`` (seconds since the start of the log).

    Returns:
        ``out_png``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, log in runs.items():
        for ax, tag in zip(axes, ("train_inner", "valid")):
            xs, ys = series(log[tag], "loss", x)
            if xs:
                ax.plot(xs, ys, marker="o" if tag == "valid" or len(xs) < 20 else None, ms=3, label=label)
    xlabel = "updates" if x == "num_updates" else "seconds"
    for ax, name in zip(axes, ("training loss (per log interval)", "validation loss")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("loss (base 2)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if ax.lines:  # a log without validation lines leaves its panel empty: no legend to draw
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def model_stat_keys(log: Dict[str, List[Dict]]) -> List[str]:
    """Names of the ``model/<name>`` statistics logged during training."""
    keys = set()
    for r in log["train_inner"]:
        keys.update(k for k, v in r.items() if k.startswith("model/") and isinstance(v, float))
    return sorted(keys)


def plot_model_stats(log: Dict[str, List[Dict]], out_png: str, title: str = "") -> Optional[str]:
    """Trajectories of every ``model/<name>`` statistic (e.g. kappa/alpha); ``None`` if there is none."""
    keys = model_stat_keys(log)
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k in keys:
        xs, ys = series(log["train_inner"], k)
        ax.plot(xs, ys, label=k[len("model/") :], lw=1)
    ax.set_xlabel("updates")
    ax.set_title(title or "model statistics")
    ax.grid(alpha=0.3)
    if len(keys) <= 16:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-dense-plot",
        description="Plot training/validation loss curves from fairseq-train logs (--log-format json or simple)",
    )
    parser.add_argument("logs", nargs="+", help="fairseq-train log files (stdout of --log-format json or simple)")
    parser.add_argument("--labels", nargs="+", help="one label per log (default: file names)")
    parser.add_argument("--out", default="loss.png", help="output PNG (default: loss.png)")
    parser.add_argument(
        "--x", choices=("updates", "wall"), default="updates", help="x axis: updates or wall-clock seconds"
    )
    parser.add_argument("--title", default="", help="figure title")
    parser.add_argument(
        "--model-stats", metavar="PNG", help="also plot the model/<name> statistics of the first log into PNG"
    )
    add_verbose_flag(parser)
    return parser


def main(argv=None) -> int:
    """Command-line entry point (``fairseq-dense-plot``); returns 0, the exit status."""
    args = get_parser().parse_args(argv)
    configure_logging("%(message)s", verbose=args.verbose)
    labels = args.labels or [os.path.basename(p) for p in args.logs]
    if len(labels) != len(args.logs):
        raise SystemExit(f"error: --labels has {len(labels)} names for {len(args.logs)} logs")
    runs = {}
    for label, path in zip(labels, args.logs):
        try:
            log = parse_log(path)
        except FileNotFoundError as e:
            raise SystemExit(f"error: {e}")
        if not log["train_inner"] and not log["valid"]:
            raise SystemExit(f"error: {path}: no fairseq JSON statistics found (train with --log-format json)")
        runs[label] = log
    plot_loss_curves(runs, args.out, args.title, "num_updates" if args.x == "updates" else "t")
    logger.info("wrote %s", args.out)
    if args.model_stats:
        first = next(iter(runs.values()))
        if plot_model_stats(first, args.model_stats, args.title) is None:
            logger.warning("%s: no model/<name> statistics logged", args.logs[0])
        else:
            logger.info("wrote %s", args.model_stats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
