"""Logging set-up shared by the command-line entry points and benchmark scripts."""

import logging
from typing import Optional


def configure_logging(fmt: str, datefmt: Optional[str] = None) -> None:
    """Log INFO and above to stderr in ``fmt``.

    Importing fairseq configures the root logger itself (level DEBUG, a stderr
    handler), which turns a plain ``logging.basicConfig`` into a no-op: the format
    is ignored and third-party DEBUG output (matplotlib's font search, for one)
    floods the terminal. ``force=True`` replaces that configuration.
    """
    logging.basicConfig(level=logging.INFO, format=fmt, datefmt=datefmt, force=True)
