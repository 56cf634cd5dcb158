"""``fairseq-dense-interactive``: ``fairseq-interactive`` that refuses empty input lines.

fairseq-interactive translates an empty or whitespace-only line as an empty sentence, silently. This
runs fairseq's own ``fairseq_cli.interactive`` in this process (all its options apply) on a checking
reader: at the first empty or non-UTF-8 line it stops with one line ``fairseq-dense-interactive: error:
<source>:<line>: ...``. ``--tokenizer moses`` on data of ``fairseq-dense-prepare``: :func:`fairseq_config`.

    fairseq-dense-interactive data-bin --path ckpt.pt --user-dir ... < input.txt
"""

import argparse
import io
import os
import sys
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Sequence

from fairseq_dense.cli.fairseq_tools import clear_error_message, set_up
from fairseq_dense.logging_setup import add_verbose_flag, configure_logging
from fairseq_dense.threads import apply_threads
from fairseq_dense.validation import FairseqDenseError, InputError, check_nonempty_lines

PROG = "fairseq-dense-interactive"


def _decoded(stream: BinaryIO, source: str) -> Iterator[str]:
    for i, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{source}:{i}: not valid UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})")


class CheckedLines(io.TextIOBase):
    """A read-only text stream over binary ``stream`` (named ``source`` in messages) that checks each line."""

    def __init__(self, stream: BinaryIO, source: str, allow_empty: bool = False):
        super().__init__()
        lines = _decoded(stream, source)
        self._lines = lines if allow_empty else check_nonempty_lines(lines, source)

    def readable(self) -> bool:
        return True

    def readline(self, size: int = -1) -> str:  # io's iteration reads through it
        return next(self._lines, "")


def fairseq_config(args):
    """fairseq's configuration of ``args``; ``--tokenizer moses`` becomes ``dense_moses`` with the steps and the
    Moses languages of the data's record (its preparation mapped the task's languages to Moses' codes)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_dense.hub.schema import MOSES_OPTIONS
    from fairseq_dense.hub.text import read_record

    record = read_record(Path(args.data.split(os.pathsep)[0])) if args.tokenizer == "moses" and args.data else {}
    if record:
        args.tokenizer = "dense_moses"
        steps = [key for key in MOSES_OPTIONS if getattr(args, key, False) or record.get(key)]
        for key in MOSES_OPTIONS:
            setattr(args, key, key in steps)
        print(f"{PROG}: the data's text preparation applied: {', '.join(steps)}", file=sys.stderr, flush=True)
    cfg = convert_namespace_to_omegaconf(args)
    if record:
        cfg.tokenizer.update({k: record[k] for k in ("source_lang", "target_lang") if k in record})
    return cfg


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run fairseq-interactive on checked input; returns 0, ``SystemExit`` with one line on bad input."""
    own = argparse.ArgumentParser(add_help=False, allow_abbrev=False)  # the rest is fairseq's
    own.add_argument("--input", default="-", help="the file to translate, as fairseq-interactive's (default -: stdin)")
    own.add_argument("--allow-empty-lines", action="store_true", help="translate empty lines (fairseq's behaviour)")
    add_verbose_flag(own)
    ours, argv = own.parse_known_args(sys.argv[1:] if argv is None else argv)
    source = ours.input
    try:
        stream = sys.stdin.buffer if source == "-" else open(source, "rb")
    except OSError as e:  # missing, a folder, no permission
        raise SystemExit(f"{PROG}: error: {source}: cannot be read ({e.strerror})") from None
    set_up(PROG)  # one line for checkpoint/dictionary errors too, fairseq's checkpoints read, a clean exit
    # fairseq's format, but on stderr (fairseq-interactive logs to stdout): stdout holds the translations
    configure_logging(datefmt="%Y-%m-%d %H:%M:%S", verbose=ours.verbose)
    saved = sys.stdin, sys.argv
    sys.stdin = CheckedLines(stream, "stdin" if source == "-" else source, ours.allow_empty_lines)
    sys.argv = ["fairseq-interactive", *argv, "--input", "-"]
    try:
        from fairseq import distributed_utils, options
        from fairseq_cli import interactive

        apply_threads()
        args = options.parse_args_and_arch(options.get_interactive_generation_parser())  # fairseq's cli_main
        distributed_utils.call_main(fairseq_config(args), interactive.main)
    except FairseqDenseError as e:
        raise SystemExit(f"{PROG}: error: {clear_error_message(e) or e}")
    finally:
        sys.stdin, sys.argv = saved
        if stream is not sys.stdin.buffer:
            stream.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
