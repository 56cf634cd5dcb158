"""``fairseq-dense-interactive``: ``fairseq-interactive`` that refuses empty input lines.

fairseq-interactive translates an empty or whitespace-only line as an empty
sentence, silently. This runs fairseq's own ``fairseq_cli.interactive`` in this
process (all its options apply) on a checking reader: at the first empty or
non-UTF-8 line it stops with one line ``fairseq-dense-interactive: error:
<source>:<line>: ...`` and exit status 1 (``--allow-empty-lines``: fairseq's
behaviour). Quiet unless ``-v``; logs on stderr, translations on stdout. With
``--tokenizer moses`` on data of ``fairseq-dense-prepare``, the text steps recorded
beside its dictionaries are applied (``dense_moses``), said in one line on stderr.

Usage::

    fairseq-dense-interactive data-bin --path ckpt.pt --user-dir ... < input.txt
    python -m fairseq_dense.cli.interactive data-bin --path ckpt.pt --input input.txt
"""

import io
import os
import sys
from pathlib import Path
from typing import BinaryIO, Iterator, List, Optional, Sequence

from fairseq_dense.cli.fairseq_tools import clear_error_message, set_up
from fairseq_dense.logging_setup import configure_logging, verbose_from_env
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
    """A read-only text stream over ``stream`` that validates each line as it is read.

    Args:
        stream: binary input (``sys.stdin.buffer`` or an opened file).
        source: its name in error messages.
        allow_empty: let empty/whitespace-only lines through.
    """

    def __init__(self, stream: BinaryIO, source: str, allow_empty: bool = False):
        super().__init__()
        lines = _decoded(stream, source)
        self._lines = lines if allow_empty else check_nonempty_lines(lines, source)

    def readable(self) -> bool:
        return True

    def readline(self, size: int = -1) -> str:
        return next(self._lines, "")

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def _pop_option(argv: List[str], flag: str, default: Optional[str]) -> Optional[str]:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i : i + 2]
            return value
        if a.startswith(flag + "="):
            del argv[i]
            return a.split("=", 1)[1]
    return default


def fairseq_config(args):
    """fairseq's configuration of ``args``; ``--tokenizer moses`` becomes ``dense_moses`` with the data's record.

    The record gives the steps and the Moses languages (the data's preparation mapped the task's to Moses' codes).
    """
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
    for key in ("source_lang", "target_lang"):
        if key in record:
            cfg.tokenizer[key] = record[key]
    return cfg


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run fairseq-interactive on checked input; returns 0, ``SystemExit`` with one line on bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    set_up(PROG)  # one line for checkpoint/dictionary errors too, fairseq's checkpoints read, a clean exit
    verbose = any(a in ("-v", "--verbose") for a in argv) or verbose_from_env()
    argv = [a for a in argv if a not in ("-v", "--verbose")]
    # fairseq's format, but on stderr (fairseq-interactive logs to stdout): stdout holds the translations
    configure_logging("%(asctime)s | %(levelname)s | %(name)s | %(message)s", "%Y-%m-%d %H:%M:%S", verbose)
    allow_empty = "--allow-empty-lines" in argv
    argv = [a for a in argv if a != "--allow-empty-lines"]
    source = _pop_option(argv, "--input", "-")
    stream = sys.stdin.buffer if source == "-" else open(source, "rb")
    saved = sys.stdin, sys.argv
    sys.stdin = CheckedLines(stream, "stdin" if source == "-" else source, allow_empty)
    sys.argv = ["fairseq-interactive", *argv, "--input", "-"]
    try:
        from fairseq import distributed_utils, options
        from fairseq_cli import interactive

        import fairseq_dense  # noqa: F401  (registers the architectures and dense_moses even without --user-dir)

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
