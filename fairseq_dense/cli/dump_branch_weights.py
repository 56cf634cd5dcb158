"""Dump the Weighted Transformer's branch weights (kappa, alpha) of checkpoints.

    fairseq-dense-branch-weights ckpt/checkpoint_*_*.pt ckpt/checkpoint_last.pt --out weights

writes ``weights.json``::

    {"checkpoints": [{"path": ..., "num_updates": 1000,
                      "weights": {"encoder.layers.0.branched.kappa": [0.12, ...], ...}},
                     ...]}

(checkpoints sorted by update number) and ``weights.png``: one panel per weight
vector, one line per branch, value against training updates, like Figure 3 of
Ahmed et al., 2017 (https://arxiv.org/abs/1711.02132). Only the checkpoints'
state dicts are read (no model is built, no ``--user-dir`` needed); any
parameter whose name ends in ``.kappa`` or ``.alpha`` is taken. The plot needs
matplotlib (``pip install fairseq-dense[plot]``); ``--no-plot`` skips it.
"""

import argparse
import json
import logging
import math
import os
from typing import List, Optional, Sequence

import torch

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.threads import apply_threads

logger = logging.getLogger("fairseq_dense.dump_branch_weights")

SUFFIXES = (".kappa", ".alpha")


def read_checkpoint(path: str) -> dict:
    """``{"path", "num_updates", "weights": {name: [floats]}}`` of one checkpoint.

    Raises:
        ValueError: ``path`` is missing or not a checkpoint
            (:class:`~fairseq_dense.checkpoints.CheckpointError`), or holds no kappa/alpha parameters.
    """
    from fairseq_dense.checkpoints import read_state

    state = read_state(path)
    weights = {
        k: [float(x) for x in v.float().reshape(-1)]
        for k, v in state["model"].items()
        if k.endswith(SUFFIXES) and torch.is_tensor(v)
    }
    if not weights:
        raise ValueError(
            f"{path} holds no kappa/alpha parameters (not a weighted_transformer, or one trained with "
            "fixed branch weights, as weighted_transformer_small does by default; --learned-branch-weights "
            "learns them)"
        )
    history = state.get("optimizer_history") or [{}]
    return {"path": path, "num_updates": int(history[-1].get("num_updates", 0)), "weights": weights}


def dump(paths: Sequence[str]) -> dict:
    """Read every checkpoint; the series sorted by update number."""
    series = sorted((read_checkpoint(p) for p in paths), key=lambda c: c["num_updates"])
    return {"checkpoints": series}


def plot(series: dict, out_png: str) -> None:
    """One panel per kappa/alpha vector, one line per branch, against updates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ckpts = series["checkpoints"]
    names = list(ckpts[-1]["weights"])
    cols = 4 if len(names) >= 4 else len(names)
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    xs = [c["num_updates"] for c in ckpts]
    for ax, name in zip(axes.flat, names):
        values = [c["weights"].get(name) for c in ckpts]
        m = len(values[-1])
        for i in range(m):
            ax.plot(xs, [v[i] if v else float("nan") for v in values], marker=".", label=f"{i + 1}")
        short = name.replace("decoder.layers.", "dec").replace("encoder.layers.", "enc")
        ax.set_title(short, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.supxlabel("updates")
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point (``fairseq-dense-branch-weights``); writes OUT.json and OUT.png,
    returns 0 (the exit status)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="checkpoint files (any order)")
    parser.add_argument("--out", required=True, help="output prefix: writes OUT.json and OUT.png")
    parser.add_argument("--no-plot", action="store_true", help="write the JSON only")
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    configure_logging("%(levelname)s %(message)s", verbose=args.verbose)
    apply_threads()
    try:
        series = dump(args.checkpoints)
    except ValueError as e:
        parser.error(str(e))
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = args.out + ".json.tmp"
    with open(tmp, "w") as f:
        json.dump(series, f, indent=1)
    os.replace(tmp, args.out + ".json")  # never leave a half-written file
    logger.info("wrote %s.json (%d checkpoints)", args.out, len(series["checkpoints"]))
    if not args.no_plot:
        plot(series, args.out + ".png")
        logger.info("wrote %s.png", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
