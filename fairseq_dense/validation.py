"""Errors fairseq-dense reports as one line, checks of input text and of checkpoints that do not fit a model.

How they reach the user as one line: :mod:`fairseq_dense.cli.fairseq_tools` (``docs/reliability.md``).
"""

from typing import Dict, Iterable, Iterator, Optional


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


def explain_state_dict_mismatch(model, state_dict: Dict, model_cfg=None) -> Optional[str]:
    """Why ``state_dict`` (a checkpoint's ``"model"``) does not load into ``model``, in one sentence; None
    when the keys and shapes fit. The cause named: the model's own reading of differing names
    (``model.state_dict_mismatch_hint(missing, unexpected)``), another ``--arch`` (names differ), other
    dictionaries (only vocabulary-sized rows differ) or other sizes (the first differing tensor)."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    arch = (
        getattr(model_cfg, "arch", None)
        or getattr(model_cfg, "_name", None)
        or getattr(getattr(model, "cfg", None), "_name", None)
        or type(model).__name__
    )
    if missing or unexpected:
        hint = getattr(model, "state_dict_mismatch_hint", None)
        if hint is not None and (reason := hint(missing, unexpected)):
            return reason
        named = {"missing": missing, "unexpected": unexpected}  # an example of each kind there is
        counts = "; ".join(f"{len(ks)} {kind}" + (f", e.g. {ks[0]!r}" if ks else "") for kind, ks in named.items())
        return (
            f"the checkpoint's parameters do not match {arch} ({counts}; {len(set(own) & set(state_dict))} shared): "
            "it was trained with another --arch or model options"
        )
    shape_diffs = [
        (k, tuple(state_dict[k].shape), tuple(v.shape))
        for k, v in own.items()
        if hasattr(state_dict[k], "shape") and tuple(state_dict[k].shape) != tuple(v.shape)
    ]
    if not shape_diffs:
        return None
    sides = ((side, getattr(getattr(model, side, None), "dictionary", None)) for side in ("encoder", "decoder"))
    vocab = {side: len(d) for side, d in sides if d is not None}
    key, ckpt, mine = shape_diffs[0]
    if all(len(c) == len(m) and c[1:] == m[1:] and m[0] in vocab.values() for _, c, m in shape_diffs):
        sizes = ", ".join(f"{side} {n}" for side, n in vocab.items())
        return (
            f"the dictionaries do not match the checkpoint: they hold {sizes} symbols, the checkpoint was trained "
            f"with {ckpt[0]} ({key}); use the dict.*.txt files of the data the model was trained on"
        )
    return (
        f"checkpoint parameter {key!r} has shape {list(ckpt)} but {arch} built from the current "
        f"options has {list(mine)} ({len(shape_diffs)} tensors differ): it was trained with other sizes"
    )


class ExplainsCheckpointMismatch:
    """First base of every fairseq-dense model class: a ``load_state_dict`` torch rejects with its list
    of differing tensors is re-raised as :class:`CheckpointMismatchError` naming the cause
    (:func:`explain_state_dict_mismatch`); nothing else changes."""

    def load_state_dict(self, state_dict, *args, **kwargs):
        try:
            return super().load_state_dict(state_dict, *args, **kwargs)
        except RuntimeError as e:
            if isinstance(e, CheckpointMismatchError) or "state_dict" not in str(e):
                raise
            model_cfg = kwargs.get("model_cfg", args[1] if len(args) > 1 else None)
            reason = explain_state_dict_mismatch(self, state_dict, model_cfg)
            if reason is None:
                raise
            raise CheckpointMismatchError(reason) from e
