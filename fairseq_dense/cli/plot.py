"""``fairseq-dense-plot``: loss curves from the logs (JSON or simple format) of any fairseq run.

    fairseq-train ... --log-format json --log-interval 10 > run.log
    fairseq-dense-plot run_a.log run_b.log --labels ours baseline --out loss.png

Training loss (per log interval) and validation loss against updates or wall-clock seconds, one line per
run, from the logs :mod:`fairseq_dense.logs` reads; ``--model-stats``: the ``model/<name>`` statistics of
the ``label_smoothed_cross_entropy_with_stats`` criterion (e.g. Weighted Transformer branch weights).
"""

import argparse
import logging
import os
from typing import Dict, List, Optional

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.logs import parse_log, series

logger = logging.getLogger("fairseq_dense.plot")


def figure(rows: int = 1, cols: int = 1, **kwargs):
    """``(fig, axes)`` from matplotlib's file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, **kwargs)


def save(fig, out_png: str, dpi: int = 110, legend=None) -> str:
    """Lay out ``fig``, write it to ``out_png`` (creating its folder) and free it; returns ``out_png``.
    ``legend``: one drawn outside the panels, which keep their width: the saved figure grows to hold it."""
    import matplotlib.pyplot as plt

    if legend is not None:
        legend.set_in_layout(False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_png)), exist_ok=True)
    if legend is not None:
        legend.set_in_layout(True)  # for bbox_inches="tight"
    fig.savefig(out_png, dpi=dpi, bbox_inches=None if legend is None else "tight")
    plt.close(fig)
    return out_png


def plot_loss_curves(runs: Dict[str, Dict], out_png: str, title: str = "", x: str = "num_updates") -> str:
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


def main(argv=None) -> int:
    """``fairseq-dense-plot``; returns 0, the exit status."""
    parser = argparse.ArgumentParser(prog="fairseq-dense-plot", description=__doc__.split("\n")[0])
    parser.add_argument("logs", nargs="+", help="fairseq-train log files (stdout of --log-format json or simple)")
    parser.add_argument("--labels", nargs="+", help="one label per log (default: file names, or paths)")
    parser.add_argument("--out", default="loss.png", help="output PNG (default: loss.png)")
    parser.add_argument("--x", choices=("updates", "wall"), default="updates", help="x axis: updates or seconds")
    parser.add_argument("--title", default="", help="figure title")
    parser.add_argument("--model-stats", metavar="PNG", help="also plot the first log's model/<name> statistics")
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    configure_logging("%(message)s", verbose=args.verbose)
    names = [os.path.basename(p) for p in args.logs]
    labels = args.labels or (names if len(set(names)) == len(names) else args.logs)  # paths where names repeat
    if len(labels) != len(args.logs):
        raise SystemExit(f"error: --labels has {len(labels)} names for {len(args.logs)} logs")
    if twice := next((label for label in labels if labels.count(label) > 1), None):
        raise SystemExit(f"error: two logs have the label {twice!r}: give each its own --labels name")
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
