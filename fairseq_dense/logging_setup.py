"""Logging set-up of the project's own programs: the console scripts, benchmark and example scripts.

fairseq and the libraries under it print notices the user cannot act on (a speech task's optional package, hydra's and
torch's deprecation notices about fairseq's calls, ``pin_memory`` without a GPU), and fairseq logs its whole
configuration at INFO. ``import fairseq_dense`` changes none of the program's logging or warnings settings: it only
undoes what importing fairseq does to them (:func:`importing_fairseq`: the root logger as it was, the import's notices
kept in :data:`HELD`). A program of ours calls :func:`configure_logging` in its ``main``: it hides
:data:`NOISE_WARNINGS` and keeps :data:`QUIET_LOGGERS` at WARNING; ``-v`` / ``--verbose`` or ``FAIRSEQ_DENSE_VERBOSE=1``
shows everything. Another program that wants the same quiet calls :func:`hide_noise` itself.
"""

import argparse
import contextlib
import logging
import os
import warnings
from typing import Iterator, List, Optional

#: ``(category, message regex)`` of the warnings hidden by default
NOISE_WARNINGS = (
    (UserWarning, r"\s*hydra\.experimental\.\w+\(\) is no longer experimental"),
    (UserWarning, r"\s*The version_base parameter is not specified"),
    (UserWarning, r"\s*In '[^']*': Usage of deprecated keyword in package header"),
    (UserWarning, r"\s*'[^']*' is validated against ConfigStore schema with the same name"),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated"),
    (FutureWarning, r"\s*`?torch\.cuda\.amp\.\w+\(args\.\.\.\)`? is deprecated"),
    (UserWarning, r".*'pin_memory' argument is set as true but no accelerator is found"),
)
#: loggers whose notices an import of fairseq through this package holds back ("Please install tensorboardX")
NOISE_LOGGERS = ("fairseq.tasks.text_to_speech", "fairseq.tasks.frm_text_to_speech")
#: loggers the console scripts keep at WARNING unless verbose (fairseq's configuration dump and notices)
QUIET_LOGGERS = ("fairseq", "fairseq_cli", "hydra")
VERBOSE_ENV = "FAIRSEQ_DENSE_VERBOSE"
#: fairseq's own log line, the format of the console scripts that run fairseq's code
FAIRSEQ_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to anything but empty, 0, false or no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``-v/--verbose`` (show fairseq's and torch's warnings) to an entry point's parser."""
    text = f"also show fairseq's and torch's warnings and notices (or set {VERBOSE_ENV}=1)"
    parser.add_argument("-v", "--verbose", action="store_true", default=env_flag(VERBOSE_ENV), help=text)


#: the records of :data:`NOISE_LOGGERS` held back while this package imported fairseq (:func:`show_noise` prints them)
HELD: List[logging.LogRecord] = []


class _Held(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        HELD.append(record)


@contextlib.contextmanager
def importing_fairseq() -> Iterator[None]:
    """Leave the logging tree as it was before the block: importing fairseq runs ``logging.basicConfig(level=
    logging.DEBUG)`` (``fairseq/models/wav2vec/wav2vec2_classification.py``), and :data:`NOISE_LOGGERS`' records
    logged meanwhile go to :data:`HELD`, not to the program's handlers."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    loggers = [logging.getLogger(name) for name in NOISE_LOGGERS]
    propagates = [logger.propagate for logger in loggers]
    held = _Held()
    for logger in loggers:
        logger.addHandler(held)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, propagates):
            logger.removeHandler(held)
            logger.propagate = propagate
        root.setLevel(level)
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)


def hide_noise() -> None:
    """Hide :data:`NOISE_WARNINGS` in this process (not its children)."""
    for category, message in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


def show_noise() -> None:
    """Undo :func:`hide_noise` (``-v``) and print the records held back so far."""
    hidden = set(NOISE_WARNINGS)
    warnings.filters[:] = [
        f for f in warnings.filters if not (f[0] == "ignore" and f[1] is not None and (f[2], f[1].pattern) in hidden)
    ]
    while HELD:
        record = HELD.pop(0)
        logging.getLogger(record.name).handle(record)


def configure_logging(fmt: str = FAIRSEQ_FORMAT, datefmt: Optional[str] = None, verbose: Optional[bool] = None) -> None:
    """Log INFO and above to stderr in ``fmt``; hide the noise and :data:`QUIET_LOGGERS`' INFO lines
    unless ``verbose`` (``None``: as ``FAIRSEQ_DENSE_VERBOSE`` says). ``force=True``: fairseq's own
    root configuration would make ``basicConfig`` a no-op."""
    logging.basicConfig(level=logging.INFO, format=fmt, datefmt=datefmt, force=True)
    verbose = env_flag(VERBOSE_ENV) if verbose is None else verbose
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)
    if verbose:
        show_noise()
    else:
        hide_noise()
