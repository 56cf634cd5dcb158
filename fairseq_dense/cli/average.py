"""Average the parameters of the last N checkpoints of a training run (any family).

    fairseq-dense-average ckpt/ --num-update-checkpoints 5 --output ckpt/averaged.pt
    fairseq-dense-average ckpt/ --num-epoch-checkpoints 5 --output ckpt/averaged.pt
    fairseq-dense-average ckpt/checkpoint_1_200.pt ckpt/checkpoint_1_300.pt --output avg.pt

The same result as fairseq's ``scripts/average_checkpoints.py`` (which is not in the
pip package, and under torch >= 2.6 cannot read checkpoints that hold an
``argparse.Namespace`` unless fairseq-dense is imported first): every parameter
is the mean over the checkpoints (floating point; integer buffers by floor
division), the rest of the file is the first checkpoint's. The output is a
fairseq checkpoint: ``fairseq-generate --path averaged.pt``, ``fairseq-interactive``
and ``fairseq-dense-export`` take it as they take any other. Weighted Transformer
branch weights stay on the simplex (a mean of points of the simplex is one).

With a folder, ``--num-update-checkpoints N`` takes the N ``checkpoint_<epoch>_<updates>.pt``
with the most updates (written by ``--save-interval-updates``) and
``--num-epoch-checkpoints N`` the N ``checkpoint<epoch>.pt`` of the latest epochs;
``--checkpoint-upper-bound`` ignores later ones.
"""

import argparse
import collections
import logging
import os
import re
from typing import Dict, List, Optional, Sequence

import torch

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.threads import apply_threads

logger = logging.getLogger("fairseq_dense.average")

UPDATE_PATTERN = re.compile(r"^checkpoint_\d+_(\d+)\.pt$")
EPOCH_PATTERN = re.compile(r"^checkpoint(\d+)\.pt$")


class AverageError(ValueError):
    """Bad input to the averaging; the message names the file or option at fault."""


def last_checkpoints(directory: str, n: int, by_updates: bool, upper_bound: Optional[int] = None) -> List[str]:
    """The ``n`` checkpoints of ``directory`` with the most updates (or latest epochs), oldest first.

    Raises:
        AverageError: fewer than ``n`` such checkpoints in ``directory``.
    """
    pattern = UPDATE_PATTERN if by_updates else EPOCH_PATTERN
    flag = "--num-update-checkpoints" if by_updates else "--num-epoch-checkpoints"
    found = []
    for name in os.listdir(directory):
        m = pattern.match(name)
        if m and (upper_bound is None or int(m.group(1)) <= upper_bound):
            found.append((int(m.group(1)), os.path.join(directory, name)))
    if len(found) < n:
        kind = "checkpoint_<epoch>_<updates>.pt" if by_updates else "checkpoint<epoch>.pt"
        raise AverageError(
            f"{flag} {n}: {directory} holds {len(found)} {kind} files"
            + (f" up to {upper_bound}" if upper_bound is not None else "")
        )
    return [path for _, path in sorted(found)[-n:]]


def _load(path: str) -> dict:
    import fairseq_dense  # noqa: F401  (checkpoints hold an argparse.Namespace: safe loading setup)

    if not os.path.isfile(path):
        raise AverageError(f"no such checkpoint: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise AverageError(f"cannot read checkpoint {path}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise AverageError(f"{path} is not a fairseq checkpoint (no 'model' entry)")
    return state


def average_checkpoints(paths: Sequence[str]) -> dict:
    """The first checkpoint's state with ``"model"`` replaced by the mean over ``paths``.

    Raises:
        AverageError: a file is missing or unreadable, or the checkpoints hold other
            parameter names or shapes (another architecture or other sizes).
    """
    if not paths:
        raise AverageError("no checkpoints to average")
    first, sums, dtypes = None, collections.OrderedDict(), {}
    for path in paths:
        state = _load(path)
        model = state["model"]
        if first is None:
            first, reference = state, path
            for k, v in model.items():
                dtypes[k] = v.dtype
                sums[k] = v.float().clone() if v.dtype in (torch.float16, torch.bfloat16) else v.clone()
            continue
        if list(model) != list(sums):
            missing = sorted(set(sums) - set(model))
            extra = sorted(set(model) - set(sums))
            raise AverageError(
                f"{path} holds other parameters than {reference} (missing {missing[:3]}, extra {extra[:3]}): "
                "average checkpoints of one training run only"
            )
        for k, v in model.items():
            if v.shape != sums[k].shape:
                raise AverageError(f"{path}: {k} has shape {list(v.shape)}, {reference} {list(sums[k].shape)}")
            sums[k] += v.to(sums[k].dtype)
    averaged: Dict[str, torch.Tensor] = collections.OrderedDict()
    for k, v in sums.items():
        mean = v / len(paths) if v.is_floating_point() else torch.div(v, len(paths), rounding_mode="floor")
        averaged[k] = mean.to(dtypes[k])
    first["model"] = averaged
    return first


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Average the parameters of the last N checkpoints of a fairseq training run (any family).",
    )
    parser.add_argument("inputs", nargs="+", help="checkpoint files, or one --save-dir folder")
    parser.add_argument("--output", required=True, help="the averaged checkpoint to write")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--num-update-checkpoints",
        type=int,
        metavar="N",
        help="with a folder: the N checkpoint_<epoch>_<updates>.pt with the most updates",
    )
    group.add_argument(
        "--num-epoch-checkpoints",
        type=int,
        metavar="N",
        help="with a folder: the N checkpoint<epoch>.pt of the latest epochs",
    )
    parser.add_argument(
        "--checkpoint-upper-bound",
        type=int,
        metavar="K",
        help="with a folder: ignore checkpoints after update (or epoch) K",
    )
    add_verbose_flag(parser)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point (``fairseq-dense-average``); returns 0, the process's exit
    status (bad input exits 2 with one line naming the cause)."""
    parser = get_parser()
    args = parser.parse_args(argv)
    configure_logging("%(levelname)s %(message)s", verbose=args.verbose)
    apply_threads()
    n = args.num_update_checkpoints or args.num_epoch_checkpoints
    folder = len(args.inputs) == 1 and os.path.isdir(args.inputs[0])
    if folder != (n is not None):
        parser.error(
            "give one folder with --num-update-checkpoints or --num-epoch-checkpoints N, "
            "or checkpoint files without them"
        )
    if n is not None and n < 1:
        parser.error("the number of checkpoints must be a positive integer")
    try:
        paths = (
            last_checkpoints(args.inputs[0], n, args.num_update_checkpoints is not None, args.checkpoint_upper_bound)
            if folder
            else list(args.inputs)
        )
        state = average_checkpoints(paths)
    except AverageError as e:
        parser.error(str(e))
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    tmp = args.output + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, args.output)  # never leave a half-written checkpoint
    logger.info(
        "averaged %d checkpoints (%s) into %s", len(paths), ", ".join(map(os.path.basename, paths)), args.output
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
