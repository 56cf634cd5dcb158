"""The one exception of the hub code, and how its messages stay one line without quoting files.

A model directory comes from strangers, so messages name the file, the key (or
line, or tensor) and what was expected, and never quote what a file says: a
refused value is described by its kind (:func:`describe`), and a key or tensor
name is only spelled out when it is a plain name (:func:`safe_name`). Paths are
the caller's: written with escapes (:func:`printable`) and cut when very long
(:func:`shown`).
"""

import math
import re
from typing import Any

_PLAIN_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


class PretrainedModelError(ValueError):
    """A model directory, hub repository or checkpoint cannot be used.

    The message is one line (characters that are not printable, such as a
    newline in a directory name, are written as escapes) and names the file
    and, where one is at fault, its key, line or tensor.
    """

    def __init__(self, message: str):
        super().__init__(printable(message))


def printable(text: Any) -> str:
    """``text`` with every non-printable character (newline, tab, escape) written as an escape."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def shown(path: Any, limit: int = 200) -> str:
    """A path for a message or a log line: escaped, and cut in the middle when longer than ``limit``."""
    text = printable(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-(limit // 2 - 3) :]}"


def one_line(text: Any, limit: int = 200) -> str:
    """``text`` as one line of at most ``limit`` characters (for messages of fairseq or torch)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def safe_name(name: Any) -> str:
    """``name`` when it is a plain name (letters, digits, ``_.-``, at most 128), else ``<not a plain name>``."""
    return name if isinstance(name, str) and _PLAIN_NAME_RE.fullmatch(name) else "<not a plain name>"


def describe(value: Any) -> str:
    """What kind of value was found, without quoting text: numbers and booleans as such, others by kind."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**12 else "a very large integer"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "a non-finite number"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
