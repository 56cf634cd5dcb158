"""Model options the families declare alike, and the checks their ``build_model`` share (one-line
``ValueError`` naming the flag)."""

from dataclasses import field
from typing import Iterable, Optional, Tuple

from fairseq.utils import safe_getattr


def sides(*keys: str) -> Tuple[str, ...]:
    """``encoder_<key>`` for every key, then ``decoder_<key>`` (``sides("layers")``: both layer counts)."""
    return tuple(f"{side}_{k}" for side in ("encoder", "decoder") for k in keys)


def flag(name: str) -> str:
    """The command-line flag of a config field: ``encoder_embed_dim`` -> ``--encoder-embed-dim``."""
    return "--" + name.replace("_", "-")


def require_positive(cfg, names: Iterable[str], optional: Iterable[str] = (), when: str = "") -> None:
    """Every field in ``names`` is a positive integer, every one in ``optional`` one or unset; else a
    ``ValueError`` naming the first offending flag (``when`` appended, e.g. ``" with --interface deep_att"``)."""
    for name in names:
        value = safe_getattr(cfg, name)
        if value is None or int(value) <= 0:
            raise ValueError(f"{flag(name)} must be a positive integer{when}, got {value}")
    for name in optional:
        value = safe_getattr(cfg, name, None)
        if value is not None and int(value) <= 0:
            raise ValueError(f"{flag(name)} must be a positive integer (or unset), got {value}")


def require_probability(cfg, names: Iterable[str]) -> None:
    """Every field in ``names`` (dropout rates) is in ``[0, 1)``, else a ``ValueError`` naming the flag."""
    for name in names:
        value = float(safe_getattr(cfg, name, 0.0))
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{flag(name)} must be in [0, 1), got {value}")


def share_all_embeddings_field():
    """``--share-all-embeddings``: one table for source, target and softmax."""
    return field(
        default=False,
        metadata={
            "help": "one embedding table for source, target and softmax: a joined dictionary, "
            "--encoder-embed-dim == --decoder-embed-dim, and as for "
            "--share-decoder-input-output-embed"
        },
    )


def tie_softmax_field(needs: str):
    """``--share-decoder-input-output-embed``: the softmax weight is the target embedding table."""
    return field(default=False, metadata={"help": f"tie the target embedding and the softmax (needs {needs})"})


def max_positions_field(side: str):
    """``--max-{side}-positions``: the longest sequence accepted, 1024 tokens by default."""
    return field(default=1024, metadata={"help": f"longest {side} accepted"})


def embedding_sharing(cfg, task, out_dim: Optional[str]) -> Tuple[bool, bool]:
    """Check ``--share-all-embeddings`` and ``--share-decoder-input-output-embed`` as fairseq's
    ``transformer`` and ``lstm`` do, and say which tables to tie.

    ``--share-all-embeddings`` needs a joined dictionary (``fairseq-preprocess
    --joined-dictionary``) and equal embedding sizes, and ties the softmax too. Tying the
    softmax needs its input size (the field ``out_dim``) to equal ``--decoder-embed-dim``.

    Args:
        cfg: the model config; fields it lacks count as False.
        task: gives ``source_dictionary`` and ``target_dictionary``.
        out_dim: the field holding the softmax input size, or None where it always equals the embedding size.

    Returns:
        ``(share_all, tie_output)``: the decoder takes the encoder's embedding table; the softmax weight
        is the decoder's embedding table. A bad combination raises a one-line ``ValueError``.
    """
    share_all = bool(safe_getattr(cfg, "share_all_embeddings", False))
    tie_output = share_all or bool(safe_getattr(cfg, "share_decoder_input_output_embed", False))
    option = "--share-all-embeddings" if share_all else "--share-decoder-input-output-embed"
    if share_all:
        if task.source_dictionary != task.target_dictionary:
            raise ValueError(
                "--share-all-embeddings requires a joined dictionary (fairseq-preprocess --joined-dictionary)"
            )
        if cfg.encoder_embed_dim != cfg.decoder_embed_dim:
            raise ValueError(
                f"--share-all-embeddings requires --encoder-embed-dim ({cfg.encoder_embed_dim}) == "
                f"--decoder-embed-dim ({cfg.decoder_embed_dim})"
            )
    size = None if out_dim is None else safe_getattr(cfg, out_dim)
    if tie_output and size is not None and size != cfg.decoder_embed_dim:
        raise ValueError(f"{option} requires {flag(out_dim)} ({size}) == --decoder-embed-dim ({cfg.decoder_embed_dim})")
    return share_all, tie_output
