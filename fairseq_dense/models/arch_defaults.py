"""Named architectures as tables: one function registers a family's presets.

On fairseq's ``argparse.Namespace`` path (``options.parse_args_and_arch`` then
``task.build_model(args)``) only the flags given are set, so the architecture function must
set every other option the model reads. The dataclass defaults *are* the base architecture:
a preset sets what differs and fills the rest from there. A paper preset's docstring carries a
``Paper:`` claim (and ``Project choices:``) that tests/test_paper_presets.py checks against the
built model; the project's own sizes say ``Project:``.
"""

import copy
import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

from fairseq.models import register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_dense.models.option_checks import sides


class On:
    """A store_true switch a preset turns on for good (the command line cannot turn it off)."""


def set_defaults(cfg, values: Dict[str, Any]) -> None:
    """Set every option of ``values`` that ``cfg`` lacks or holds as None.

    Idempotent on an ``argparse.Namespace`` and a ``DictConfig`` (fairseq calls architecture
    functions on both); values already set are kept, except switches given as :class:`On`.
    """
    for k, v in values.items():
        if v is On or safe_getattr(cfg, k, None) is None:
            setattr(cfg, k, True if v is On else copy.copy(v))  # a copy: a preset's lists stay its own


def both_sides(**values) -> Dict[str, Any]:
    """Each value for both sides: ``both_sides(layers=4)`` sets ``encoder_layers`` and ``decoder_layers``."""
    return {name: v for k, v in values.items() for name in sides(k)}


def fill_defaults(cfg, config_class) -> None:
    """Set every field of ``config_class`` that ``cfg`` lacks (or holds as None) to its default.

    Fields named ``_...`` and interpolations of other config groups (``${...}``) are fairseq's to set.
    """
    defaults = config_class()
    values = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(config_class)}
    set_defaults(cfg, {k: v for k, v in values.items() if not (k.startswith("_") or str(v).startswith("${"))})


def register_presets(model: str, presets: Dict[str, Tuple[str, Dict[str, Any]]], finish: Optional[Callable] = None):
    """Register one architecture of ``model`` per ``{name: (docstring, values)}`` entry.

    Each applies its ``values`` with :func:`set_defaults`, then ``finish(cfg)`` (the family's
    base: e.g. every other field from the dataclass defaults).
    """
    for name, (doc, values) in presets.items():

        def arch(cfg, values=values):
            set_defaults(cfg, values)
            if finish is not None:
                finish(cfg)

        arch.__name__ = arch.__qualname__ = name
        arch.__doc__ = doc
        register_model_architecture(model, name)(arch)
