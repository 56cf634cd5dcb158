"""``fairseq-dense-export``: a fairseq checkpoint -> a pickle-free model directory (docs/hub.md).

    fairseq-dense-export checkpoints/checkpoint_best.pt --data data-bin/deu-eng \\
        --bpe-codes data/bpecodes --out exports/gru-deu-eng --dataset tatoeba --bleu 21.3 --license cc-by-4.0
    fairseq-dense-export checkpoints --average-last 5 --fp16 --out exports/gru-avg5 ...
"""

import argparse
import dataclasses
import inspect
import logging
import sys
from typing import List, Optional

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.threads import apply_threads, phrase


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="fairseq-dense-export",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("checkpoints", nargs="+", help="checkpoint file(s), averaged; with --average-last: a folder")
    p.add_argument("--out", required=True, help="model directory to create")
    p.add_argument("--data", help="directory with dict.<lang>.txt (default: the checkpoint's data directory)")
    p.add_argument("--source-lang", help="default: the checkpoint's")
    p.add_argument("--target-lang", help="default: the checkpoint's")
    p.add_argument("--bpe-codes", help="subword-nmt codes used to prepare the data (the model then applies BPE)")
    p.add_argument("--tokenizer", choices=["moses", "none"], default="moses", help="text tokenizer")
    p.add_argument("--moses-source-lang", help="sacremoses language of the input (default: --source-lang)")
    p.add_argument("--moses-target-lang", help="sacremoses language of the output (default: --target-lang)")
    for flag, what in (  # fairseq-dense-prepare's record in --data sets these four by itself
        ("--moses-no-escape", "tokenized without escaping (fairseq's option)"),
        ("--moses-no-dash-splits", "tokenized without splitting hyphens (fairseq's option)"),
        ("--moses-normalize-punctuation", "punctuation-normalised (Moses) before tokenizing"),
        ("--moses-lowercase", "lower-cased after tokenizing"),
    ):
        p.add_argument(flag, action="store_true", help=f"the data was {what}: the model does the same")
    p.add_argument("--fp16", action="store_true", help="store float16 weights (half the size)")
    p.add_argument("--average-last", type=int, metavar="N", help="average the last N checkpoints of the directory")
    p.add_argument("--update-based", action="store_true", help="with --average-last: checkpoint_E_U.pt files")
    p.add_argument("--pickle-checkpoint", action="store_true", help="also write model.pt (a PICKLE) for fairseq")
    p.add_argument("--force", action="store_true", help="replace an existing --out directory")
    card_group = p.add_argument_group("model card")
    card_group.add_argument("--model-name", help="title of the card (default: <arch>-<src>-<tgt>)")
    card_group.add_argument("--license", default="other", help="licence identifier of the weights, e.g. cc-by-4.0")
    card_group.add_argument("--dataset", help="training data set name (hub id), e.g. tatoeba")
    card_group.add_argument("--training-data", help="free-text description of the training data")
    card_group.add_argument("--test-set", help="name of the test set the score was measured on")
    card_group.add_argument("--bleu", type=float, help="sacreBLEU score on the test set")
    card_group.add_argument("--bleu-signature", help="sacreBLEU signature of that score")
    card_group.add_argument("--intended-use", help="intended-use paragraph")
    card_group.add_argument("--paper", help="paper link (default: the one the model class cites)")
    card_group.add_argument("--languages", nargs="+", help="language codes for the hub metadata (default: the task's)")
    add_verbose_flag(p)
    args = p.parse_args(argv)
    configure_logging(verbose=args.verbose)
    threads = phrase(*apply_threads(say=False))  # said once the export is done: a refusal stays one line
    from fairseq_dense.hub import ModelCardInfo, PretrainedModelError, export_checkpoint

    card = ModelCardInfo(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ModelCardInfo)})
    options = {k: v for k, v in vars(args).items() if k in inspect.signature(export_checkpoint).parameters}
    options["tokenizer"] = None if args.tokenizer == "none" else args.tokenizer
    try:
        out = export_checkpoint(out_dir=args.out, write_pickle=args.pickle_checkpoint, card=card, **options)
    except PretrainedModelError as err:
        print(f"fairseq-dense-export: error: {err}", file=sys.stderr)
        return 1
    logging.getLogger("fairseq_dense.cli.export").info("exported with %s", threads)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
