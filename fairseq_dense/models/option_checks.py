"""Checks of model options shared by the families' ``build_model`` (one-line ``ValueError`` naming the flag)."""
from typing import Iterable

from fairseq.utils import safe_getattr


def flag(name: str) -> str:
    """The command-line flag of a config field: ``encoder_embed_dim`` -> ``--encoder-embed-dim``."""
    return "--" + name.replace("_", "-")


def require_positive(cfg, names: Iterable[str], optional: Iterable[str] = (), when: str = "") -> None:
    """Every field in ``names`` is a positive integer; every field in ``optional`` is one or unset.

    Args:
        cfg: the model config (dataclass, ``DictConfig`` or ``Namespace``).
        names: required positive integer fields.
        optional: fields that may also be None.
        when: appended to the message, e.g. ``" with --interface deep_att"``.

    Raises:
        ValueError: naming the first offending flag.
    """
    for name in names:
        value = safe_getattr(cfg, name)
        if value is None or int(value) <= 0:
            raise ValueError(f"{flag(name)} must be a positive integer{when}, got {value}")
    for name in optional:
        value = safe_getattr(cfg, name, None)
        if value is not None and int(value) <= 0:
            raise ValueError(f"{flag(name)} must be a positive integer (or unset), got {value}")


def require_probability(cfg, names: Iterable[str]) -> None:
    """Every field in ``names`` (dropout rates) is in ``[0, 1)``.

    Raises:
        ValueError: naming the first offending flag.
    """
    for name in names:
        value = float(safe_getattr(cfg, name, 0.0))
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{flag(name)} must be in [0, 1), got {value}")


def require_tied_embedding_size(cfg, out_dim: str) -> None:
    """With ``--share-decoder-input-output-embed`` the softmax input size ``out_dim`` must equal
    ``--decoder-embed-dim``.

    Raises:
        ValueError: naming both flags and their values.
    """
    size = safe_getattr(cfg, out_dim)
    if safe_getattr(cfg, "share_decoder_input_output_embed", False) and size != cfg.decoder_embed_dim:
        raise ValueError(f"--share-decoder-input-output-embed requires {flag(out_dim)} ({size}) == "
                         f"--decoder-embed-dim ({cfg.decoder_embed_dim})")
