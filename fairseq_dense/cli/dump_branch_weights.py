"""Dump the Weighted Transformer's branch weights (kappa, alpha) of checkpoints.

    fairseq-dense-branch-weights ckpt/checkpoint_*_*.pt ckpt/checkpoint_last.pt --out weights

writes ``weights.json`` (``{"checkpoints": [{"path", "num_updates", "weights": {name: [floats]}}, ...]}``,
sorted by update) and ``weights.png``: one panel per weight vector, one line per branch, against updates,
like Figure 3 of Ahmed et al., 2017 (https://arxiv.org/abs/1711.02132). Only the state dicts are read (no
model is built, no ``--user-dir``): every parameter named ``*.kappa`` or ``*.alpha``. The plot needs
matplotlib (``pip install fairseq-dense[plot]``); ``--no-plot`` skips it.
"""

import argparse
import logging
import math
import os
from typing import List, Optional

import torch

from fairseq_dense.checkpoints import num_updates, read_state
from fairseq_dense.data.prepare import write_json
from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.threads import apply_threads

logger = logging.getLogger("fairseq_dense.dump_branch_weights")


def read_checkpoint(path: str) -> dict:
    """One checkpoint's entry of ``OUT.json``; ``ValueError`` if it is not one or holds no kappa/alpha."""
    state = read_state(path)
    weights = {
        k: [float(x) for x in v.float().reshape(-1)]
        for k, v in state["model"].items()
        if k.endswith((".kappa", ".alpha")) and torch.is_tensor(v)
    }
    if not weights:
        raise ValueError(
            f"{path} holds no kappa/alpha parameters (not a weighted_transformer, or one trained with "
            "fixed branch weights, as weighted_transformer_small does by default; --learned-branch-weights "
            "learns them)"
        )
    return {"path": path, "num_updates": num_updates(state), "weights": weights}


def plot(ckpts: List[dict], out_png: str) -> None:
    """One panel per kappa/alpha vector, one line per branch, against updates."""
    from fairseq_dense.cli.plot import figure, save

    names = list(ckpts[-1]["weights"])
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = figure(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    xs = [c["num_updates"] for c in ckpts]
    for ax, name in zip(axes.flat, names):
        values = [c["weights"].get(name) for c in ckpts]
        for i in range(len(values[-1])):
            ax.plot(xs, [v[i] if v else float("nan") for v in values], marker=".", label=f"{i + 1}")
        ax.set_title(name.replace("decoder.layers.", "dec").replace("encoder.layers.", "enc"), fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.supxlabel("updates")
    save(fig, out_png, dpi=100)


def main(argv: Optional[List[str]] = None) -> int:
    """``fairseq-dense-branch-weights``: writes OUT.json and OUT.png, returns 0 (the exit status)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="checkpoint files (any order)")
    parser.add_argument("--out", required=True, help="output prefix: writes OUT.json and OUT.png")
    parser.add_argument("--no-plot", action="store_true", help="write the JSON only")
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    configure_logging("%(levelname)s %(message)s", verbose=args.verbose)
    apply_threads()
    try:
        ckpts = sorted((read_checkpoint(p) for p in args.checkpoints), key=lambda c: c["num_updates"])
    except ValueError as e:
        parser.error(str(e))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_json(args.out + ".json", {"checkpoints": ckpts}, indent=1)
    logger.info("wrote %s.json (%d checkpoints)", args.out, len(ckpts))
    if not args.no_plot:
        plot(ckpts, args.out + ".png")
        logger.info("wrote %s.png", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
