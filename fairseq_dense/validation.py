"""Errors fairseq-dense reports as one line, and checks of input text (``docs/reliability.md``).

How they reach the user as one line: :func:`fairseq_dense.fairseq_compat.install_excepthook`.
"""

from typing import Iterable, Iterator, Optional


class FairseqDenseError(Exception):
    """A user error that fairseq-dense reports as one line."""


class CheckpointMismatchError(FairseqDenseError, RuntimeError):
    """A checkpoint does not fit the model built from the current options/dictionaries."""


class InputError(FairseqDenseError, ValueError):
    """Bad input text (e.g. an empty line for ``fairseq-interactive``)."""


def check_nonempty_lines(lines: Iterable[str], source: str = "input") -> Iterator[str]:
    """Yield ``lines`` unchanged; raise :class:`InputError` naming ``source`` (a file name or ``stdin``) at the
    first empty or whitespace-only one."""
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            raise InputError(
                f"{source}:{i}: empty or whitespace-only line; fairseq would translate it as an empty "
                f"sentence (remove it, or pass --allow-empty-lines to translate it anyway)"
            )
        yield line


def find_non_utf8(path: str) -> Optional[str]:
    """``"<path>:<line>: ..."`` for the first non-UTF-8 byte sequence of ``path``; None if it decodes."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return f"{path}:{line_no}: not valid UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})"
    return None
