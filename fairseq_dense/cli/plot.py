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

The parsing functions are also the quick-start's and the benchmark harness' log reader.
"""

import argparse
import json
import logging
import os
import re
from datetime import datetime
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging

logger = logging.getLogger("fairseq_dense.plot")

TAGS = ("train_inner", "train", "valid")
_TIME = r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
_LINE = re.compile(_TIME + r"\s*\|\s*\w+\s*\|\s*(?P<tag>[\w.\-/]+)\s*\|\s*(?P<json>\{.*\})\s*$")
# --log-format simple: "... | train_inner | epoch 001:     50 / 436 loss=10.2, nll_loss=9.7, ..."
# and "... | valid | epoch 001 | valid on 'valid' subset | loss 8.45 | nll_loss 7.69 | ... | num_updates 135"
_SIMPLE = re.compile(_TIME + r"\s*\|\s*\w+\s*\|\s*(?P<tag>train_inner|train|valid)\s*\|\s*epoch \d+(?P<rest>.*)$")


def _simple_stats(tag: str, rest: str) -> Dict[str, str]:
    """The statistics of one ``--log-format simple`` line (after ``epoch NNN``)."""
    if tag == "train_inner":  # ":     50 / 436 key=value, key=value"
        body = re.sub(r"^:\s*\d+\s*/\s*\d+\s*", "", rest)
        pairs = [item.split("=", 1) for item in body.split(", ") if "=" in item]
        return {k.strip(): v.strip() for k, v in pairs}
    stats = {}
    for part in rest.split(" | "):
        key, _, value = part.strip().rpartition(" ")
        if key and " " not in key:  # "valid on 'valid' subset" and the like have spaces
            stats[key] = value
    return stats


def _number(value):
    """fairseq formats every statistic as a string; numbers become floats again."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def parse_line(line: str) -> Tuple[Optional[str], Dict, Optional[datetime]]:
    """``(tag, statistics, timestamp)`` of one line of a fairseq log.

    The tag is ``train_inner`` (every ``--log-interval`` updates), ``train`` (end of an epoch),
    ``valid`` or another progress bar's name, and ``None`` for a line without statistics; the
    statistics are numbers as floats, keys without the tag's prefix (``valid_loss`` -> ``loss``).
    A bare JSON object (a file of them, one a line) has no timestamp and a tag inferred from its keys.
    """
    line = line.strip()
    m, simple = _LINE.match(line), _SIMPLE.match(line)
    ts = m or simple or re.match(_TIME, line)
    ts = datetime.strptime(ts.group("ts"), "%Y-%m-%d %H:%M:%S") if ts else None
    try:
        if m:
            tag, stats = m.group("tag"), json.loads(m.group("json"))
        elif simple:
            tag, stats = simple.group("tag"), _simple_stats(simple.group("tag"), simple.group("rest"))
        elif line.startswith("{") and line.endswith("}"):
            stats = json.loads(line)
            tag = "valid" if "valid_loss" in stats else "train" if "train_loss" in stats else "train_inner"
        else:
            return None, {}, ts
    except json.JSONDecodeError:
        return None, {}, ts
    if not stats:
        return None, {}, ts
    return tag, {k.removeprefix(tag + "_"): _number(v) for k, v in stats.items()}, ts


def parse_log(path: str) -> Dict[str, List[Dict]]:
    """Parse a fairseq log (``--log-format json``, or ``simple`` as the recipes in ``examples/`` write).

    Returns:
        ``{"train_inner": [...], "train": [...], "valid": [...]}``, each a list of the
        :func:`parse_line` statistics with ``t``: seconds since the first timestamped line of
        the log (``None`` for untimed lines).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: log file not found")
    out: Dict[str, List[Dict]] = {tag: [] for tag in TAGS}
    start: Optional[datetime] = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            tag, stats, ts = parse_line(line)
            start = start or ts
            if tag in out:
                out[tag].append({**stats, "t": None if ts is None else (ts - start).total_seconds()})
    return out


def series(records: Sequence[Dict], key: str, x: str = "num_updates"):
    """``(xs, ys)`` of the records that have both keys (``x="t"`` for wall-clock seconds)."""
    pts = [(r[x], r[key]) for r in records if isinstance(r.get(x), float) and isinstance(r.get(key), float)]
    return [p[0] for p in pts], [p[1] for p in pts]


def figure(rows: int = 1, cols: int = 1, **kwargs):
    """``(fig, axes)`` from matplotlib's file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, **kwargs)


def save(fig, out_png: str, dpi: int = 110) -> str:
    """Lay out ``fig``, write it to ``out_png`` (creating its folder) and free it; returns ``out_png``."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    fig.savefig(out_png, dpi=dpi)
    plt.close(fig)
    return out_png


def plot_loss_curves(
    runs: Dict[str, Dict[str, List[Dict]]], out_png: str, title: str = "", x: str = "num_updates"
) -> str:
    """Training and validation loss of ``runs`` (``{label: parse_log(...)}``) side by side against
    ``x`` (``"num_updates"`` or ``"t"``, seconds since the start of the log); returns ``out_png``."""
    fig, axes = figure(1, 2, figsize=(11, 4))
    for label, log in runs.items():
        for ax, tag in zip(axes, ("train_inner", "valid")):
            xs, ys = series(log[tag], "loss", x)
            if xs:
                ax.plot(xs, ys, marker="o" if tag == "valid" or len(xs) < 20 else None, ms=3, label=label)
    for ax, name in zip(axes, ("training loss (per log interval)", "validation loss")):
        ax.set_xlabel("updates" if x == "num_updates" else "seconds")
        ax.set_ylabel("loss (base 2)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if ax.lines:  # a log without validation lines leaves its panel empty: no legend to draw
            ax.legend()
    if title:
        fig.suptitle(title)
    return save(fig, out_png)


def model_stat_keys(log: Dict[str, List[Dict]]) -> List[str]:
    """Names of the ``model/<name>`` statistics logged during training."""
    return sorted(
        {k for r in log["train_inner"] for k, v in r.items() if k.startswith("model/") and isinstance(v, float)}
    )


def plot_model_stats(log: Dict[str, List[Dict]], out_png: str, title: str = "") -> Optional[str]:
    """Trajectories of every ``model/<name>`` statistic (e.g. kappa/alpha); ``None`` if there is none."""
    keys = model_stat_keys(log)
    if not keys:
        return None
    fig, ax = figure(figsize=(8, 4.5))
    for k in keys:
        ax.plot(*series(log["train_inner"], k), label=k.removeprefix("model/"), lw=1)
    ax.set_xlabel("updates")
    ax.set_title(title or "model statistics")
    ax.grid(alpha=0.3)
    if len(keys) <= 16:
        ax.legend(fontsize=7, ncol=2)
    return save(fig, out_png)


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
