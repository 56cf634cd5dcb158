"""The one exception of the hub code, and how its messages are kept to one line."""

from typing import Any


class PretrainedModelError(ValueError):
    """A model directory, hub repository or checkpoint cannot be used.

    The message is one line and names the file (and, for ``config.json``, the key)
    at fault.
    """


def one_line(text: Any, limit: int = 200) -> str:
    """``text`` as one line of at most ``limit`` characters (for messages quoting foreign input)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_repr(value: Any, limit: int = 60) -> str:
    """A one-line ``repr`` of a value read from a file, cut to ``limit`` characters."""
    return one_line(repr(value), limit)
