"""``fairseq-dense-push``: upload an exported model directory to the Hugging Face Hub (docs/hub.md).

    fairseq-dense-push exports/gru-deu-eng my-user/gru-deu-eng --private --commit-message "GRU, Tatoeba de-en"
    fairseq-dense-push exports/gru-deu-eng my-user/gru-deu-eng --dry-run   # list and check, upload nothing

The token comes from huggingface_hub's usual lookup (``HF_TOKEN`` or ``hf auth login``), never the command
line. What goes up, and the checks first: :mod:`fairseq_dense.hub.push`.
"""

import argparse
import inspect
import sys
from typing import List, Optional

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="fairseq-dense-push", description=__doc__.split("\n")[0])
    p.add_argument("model_dir", help="directory written by fairseq-dense-export")
    p.add_argument("repo_id", help="hub repository id, owner/name")
    p.add_argument("--private", action="store_true", help="create the repository as private")
    p.add_argument("--commit-message", help="hub commit message")
    p.add_argument("--revision", help="branch to commit to (default: main)")
    p.add_argument("--no-pickle", dest="include_pickle", action="store_false", help="do not upload model.pt")
    p.add_argument("--dry-run", action="store_true", help="print the files that would be uploaded; upload nothing")
    add_verbose_flag(p)
    args = p.parse_args(argv)
    configure_logging(verbose=args.verbose)
    from fairseq_dense.hub import PretrainedModelError, push_to_hub
    from fairseq_dense.hub.schema import shown

    options = {k: v for k, v in vars(args).items() if k in inspect.signature(push_to_hub).parameters}
    verb = "would upload " if args.dry_run else "uploading "
    try:
        url = push_to_hub(announce=lambda line: print(verb + line, flush=True), **options)
    except PretrainedModelError as err:
        print(f"fairseq-dense-push: error: {err}", file=sys.stderr)
        return 1
    print(url or f"{shown(args.model_dir)}: loads as from_pretrained loads it; nothing uploaded (--dry-run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
