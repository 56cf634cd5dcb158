"""Encoder/decoder scaffolding of the recurrent and convolutional families: the recurrent encoders
run right-padded (fairseq pads sources on the left), :class:`RecurrentEncoder` and the padding helpers."""

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from fairseq.models import FairseqEncoder, FairseqEncoderDecoderModel, FairseqIncrementalDecoder
from torch import Tensor

from fairseq_dense.validation import ExplainsCheckpointMismatch


def embedding(dictionary, dim: int, init: Callable[[Tensor], Any], shared: Optional[nn.Embedding] = None):
    """``dictionary``'s ``nn.Embedding`` whose weight ``init`` initialises in place, the padding row then
    zeroed; or ``shared``, the encoder's table (``--share-all-embeddings``), when given."""
    if shared is not None:
        return shared
    m = nn.Embedding(len(dictionary), dim, padding_idx=dictionary.pad())
    init(m.weight)
    nn.init.zeros_(m.weight[dictionary.pad()])
    return m


def within_beams(new_order: Tensor, rows: int, beam: int) -> bool:
    """Whether ``(rows,)`` ``new_order`` moves each row only inside its own sentence's beam (rows
    ``k * beam ... k * beam + beam - 1``, the layout of fairseq's beam search): rows computed from
    the encoder output alone then keep their values unreordered. False for ``beam <= 1`` (unknown)."""
    if beam <= 1 or new_order.numel() != rows:
        return False
    return torch.equal(new_order // beam, torch.arange(rows, device=new_order.device) // beam)


class Encoder(FairseqEncoder):
    """A fairseq encoder whose output dict holds lists of tensors: 3-D ones ``(src_len, batch, dim)``,
    all others batch-first."""

    beam_size = 1  # set by :class:`EncoderDecoderModel`: 1 while unknown

    def __init__(self, dictionary, max_positions: int):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = max_positions

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Reorder every tensor of ``encoder_out`` along its batch dimension by ``(new_batch,)`` ``new_order``
        (nothing to do :func:`within_beams`)."""
        first = next((t for values in encoder_out.values() for t in values), None)
        if first is not None and within_beams(new_order, first.size(1 if first.dim() == 3 else 0), self.beam_size):
            return encoder_out
        return {
            key: [t.index_select(1 if t.dim() == 3 else 0, new_order) for t in values]
            for key, values in encoder_out.items()
        }

    def max_positions(self) -> int:
        return self.max_source_positions


class RecurrentEncoder(Encoder):
    """A source embedding (``init_embedding`` initialises its weight in place) and recurrences on
    right-padded batches (fairseq pads sources on the left by default): :meth:`encode` gets the batch
    right-padded, and its time-major outputs are moved back to the caller's layout."""

    def __init__(self, dictionary, embed_dim: int, max_positions: int, init_embedding: Callable[[Tensor], None]):
        super().__init__(dictionary, max_positions)
        self.embed_tokens = embedding(dictionary, embed_dim, init_embedding)

    def encode(self, src_tokens: Tensor, src_lengths: Tensor) -> Dict[str, Tensor]:
        """The encoder's outputs for a right-padded ``(batch, src_len)`` batch; ``(src_len, batch, dim)``
        tensors are right-padded too."""
        raise NotImplementedError

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **unused) -> Dict[str, List[Tensor]]:
        """What :meth:`encode` returns for left- or right-padded ``(batch, src_len)`` ``src_tokens``, each in a
        list and aligned with them, plus ``encoder_padding_mask`` ``[(batch, src_len)]`` (True at padding)
        and ``src_lengths`` ``[(batch,)]``."""
        padding_mask = src_tokens.eq(self.padding_idx)
        src_tokens, shift = to_right_padding(src_tokens, self.padding_idx)
        out = self.encode(src_tokens, src_lengths)
        out = {k: right_to_left_padding(v, shift) if v.dim() == 3 else v for k, v in out.items()}
        return {
            **{k: [v] for k, v in out.items()},
            "encoder_padding_mask": [padding_mask],
            "src_lengths": [src_lengths],
        }


class EncoderDecoderModel(ExplainsCheckpointMismatch, FairseqEncoderDecoderModel):
    """A fairseq encoder-decoder model that passes the beam size on to its encoder and decoder
    (fairseq's ``SequenceGenerator`` calls ``model.set_beam_size`` for beams wider than 1)."""

    def set_beam_size(self, beam_size: int) -> None:
        self.encoder.beam_size = beam_size
        self.decoder.set_beam_size(beam_size)


class IncrementalDecoder(FairseqIncrementalDecoder):
    """A fairseq incremental decoder whose cache is one batch-first ``Dict[str, Optional[Tensor]]``
    under ``STATE_KEY``. Subclasses set ``STATE_KEY``, ``self.output_projection`` and implement
    ``extract_features``; ``MEMORY`` names the cached entries computed from the encoder output alone
    (the same rows for every hypothesis of one sentence)."""

    STATE_KEY = "state"
    MEMORY: Tuple[str, ...] = ()
    beam_size = 1  # set by :meth:`set_beam_size`: 1 while unknown

    def __init__(self, dictionary, max_positions: int):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_target_positions = max_positions

    def set_beam_size(self, beam_size: int) -> None:
        super().set_beam_size(beam_size)  # fairseq's: passes it on to submodules that take it
        self.beam_size = beam_size

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        **unused,
    ) -> Tuple[Tensor, Dict[str, List[Optional[Tensor]]]]:
        """Decode ``(batch, tgt_len)`` shifted targets (only the last one with ``incremental_state``).

        Returns:
            ``(logits, extra)``: ``(batch, tgt_len, vocab)`` (the features before ``output_layer`` if
            ``features_only``) and ``{"attn": [(batch, tgt_len, src_len) or None]}``.
        """
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return (x if features_only else self.output_layer(x)), extra

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def get_cache(self, incremental_state) -> Optional[Dict[str, Optional[Tensor]]]:
        """The decoder's cache, or None before the first step (or without ``incremental_state``)."""
        return None if incremental_state is None else self.get_incremental_state(incremental_state, self.STATE_KEY)

    def set_cache(self, incremental_state, cache: Dict[str, Optional[Tensor]]) -> None:
        self.set_incremental_state(incremental_state, self.STATE_KEY, cache)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor) -> None:
        """``index_select`` every cached tensor along its batch dimension, but the ``MEMORY``
        entries when :func:`within_beams` (what fairseq's beam search does at each step until
        finished sentences leave the batch). Submodules such as ``LinearizedConvolution`` reorder
        their own: fairseq calls each."""
        cached = self.get_cache(incremental_state)
        if cached is None:
            return
        rows = next((value.size(0) for value in cached.values() if value is not None), 0)
        memory = self.MEMORY if within_beams(new_order, rows, self.beam_size) else ()
        self.set_cache(
            incremental_state,
            {
                key: value if value is None or key in memory else value.index_select(0, new_order)
                for key, value in cached.items()
            },
        )

    def max_positions(self) -> int:
        return self.max_target_positions


def to_right_padding(src_tokens: Tensor, padding_idx: int) -> Tuple[Tensor, Tensor]:
    """``(tokens, shift)``: the ``(batch, src_len)`` batch right-padded (recurrences and packed sequences
    want padding after the last word; fairseq pads sources on the left) and ``(batch,)`` each row's
    leading padding (0 for rows padded on the right), with no read of a device value."""
    t = src_tokens.size(1)
    shift = src_tokens.eq(padding_idx).long().cumprod(dim=1).sum(dim=1)
    # right position p holds left position (p + shift) mod T
    idx = (torch.arange(t, device=src_tokens.device).unsqueeze(0) + shift.unsqueeze(1)) % t
    return src_tokens.gather(1, idx), shift


def right_to_left_padding(x: Tensor, shift: Tensor) -> Tensor:
    """Move right-padded ``(time, batch, dim)`` features back by :func:`to_right_padding`'s ``shift``."""
    t = x.size(0)
    # left position p holds right position (p - shift) mod T
    idx = (torch.arange(t, device=x.device).unsqueeze(1) - shift.to(x.device).unsqueeze(0)) % t
    return x.gather(0, idx.unsqueeze(-1).expand_as(x))


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each right-padded ``(time, batch, dim)`` sequence within its length (``t < len_b`` ->
    ``len_b - 1 - t``; padding stays in place): its own inverse."""
    t = torch.arange(x.size(0), device=x.device).unsqueeze(1)  # T x 1
    lengths = lengths.to(x.device).long().unsqueeze(0)  # 1 x B
    index = torch.where(t < lengths, lengths - 1 - t, t)
    return x.gather(0, index.unsqueeze(-1).expand_as(x))
