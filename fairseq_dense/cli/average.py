"""Average the parameters of the last N checkpoints of a training run (any family).

    fairseq-dense-average ckpt/ --num-update-checkpoints 5 --output ckpt/averaged.pt
    fairseq-dense-average ckpt/ --num-epoch-checkpoints 5 --output ckpt/averaged.pt
    fairseq-dense-average ckpt/checkpoint_1_200.pt ckpt/checkpoint_1_300.pt --output avg.pt

Every parameter is the mean over the checkpoints (:func:`fairseq_dense.checkpoints.average_models`,
as ``fairseq-dense-export --average-last``); the rest of the file is the last checkpoint's, a fairseq
checkpoint that ``fairseq-generate``, ``fairseq-interactive`` and ``fairseq-dense-export`` take.
(fairseq's ``scripts/average_checkpoints.py`` is not in the pip package.)
"""

import argparse
import logging
import os
from typing import List, Optional

from fairseq_dense.checkpoints import CheckpointError, atomic_save, average_checkpoints, last_checkpoints
from fairseq_dense.data.prepare import positive
from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.threads import apply_threads, phrase

logger = logging.getLogger("fairseq_dense.average")


def main(argv: Optional[List[str]] = None) -> int:
    """``fairseq-dense-average``; returns 0 (bad input exits 2 with one line naming the cause)."""
    parser = argparse.ArgumentParser(prog="fairseq-dense-average", description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", help="checkpoint files, or one --save-dir folder")
    parser.add_argument("--output", required=True, help="the averaged checkpoint to write")
    group = parser.add_mutually_exclusive_group()
    text = "with a folder: the N checkpoint_<epoch>_<updates>.pt with the most updates"
    group.add_argument("--num-update-checkpoints", type=positive(int), metavar="N", help=text)
    text = "with a folder: the N checkpoint<epoch>.pt of the latest epochs"
    group.add_argument("--num-epoch-checkpoints", type=positive(int), metavar="N", help=text)
    text = "with a folder: ignore checkpoints after update (or epoch) K"
    parser.add_argument("--checkpoint-upper-bound", type=positive(int), metavar="K", help=text)
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    configure_logging("%(levelname)s %(message)s", verbose=args.verbose)
    threads = phrase(*apply_threads(say=False))
    n = args.num_update_checkpoints or args.num_epoch_checkpoints
    folder = len(args.inputs) == 1 and os.path.isdir(args.inputs[0])
    if folder != (n is not None) or (args.checkpoint_upper_bound and not folder):
        parser.error(
            "give one folder with --num-update-checkpoints or --num-epoch-checkpoints N (and --checkpoint-upper-bound "
            "K), or checkpoint files without them"
        )
    flag = "--num-update-checkpoints" if args.num_update_checkpoints else "--num-epoch-checkpoints"
    try:
        paths = (
            last_checkpoints(args.inputs[0], n, args.num_update_checkpoints is not None, args.checkpoint_upper_bound)
            if folder
            else list(args.inputs)
        )
        state = average_checkpoints(paths)
    except CheckpointError as e:
        parser.error(f"{flag} {n}: {e}" if folder else str(e))
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        atomic_save(state, args.output)  # never leave a half-written checkpoint
    except OSError as e:  # a folder, a full disk, a parent that is a file
        parser.error(f"cannot write {args.output}: {e.strerror or e}")
    names = ", ".join(map(os.path.basename, paths))
    logger.info("averaged %d checkpoints (%s) into %s with %s", len(paths), names, args.output, threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
