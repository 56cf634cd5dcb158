"""Scaffolding shared by the recurrent and convolutional encoders and decoders.

fairseq's ``LSTMEncoder``/``LSTMDecoder`` and ``FConvEncoder``/``FConvDecoder`` each
spell these methods out; here the four families of this package share them:

* :class:`Encoder`: ``reorder_encoder_out`` (``index_select`` of every key along its
  batch dimension) and ``max_positions``;
* :class:`IncrementalDecoder`: ``forward`` = ``output_layer(extract_features(...))``,
  ``reorder_incremental_state`` (``index_select`` of every cached tensor under the
  decoder's one state key), ``max_positions``;
* the padding helpers of the recurrent encoders, which run on right-padded batches
  while fairseq pads sources on the left by default.
"""

from typing import Dict, List, Optional, Tuple

import torch
from fairseq import utils
from fairseq.models import FairseqEncoder, FairseqIncrementalDecoder
from torch import Tensor


class Encoder(FairseqEncoder):
    """A fairseq encoder whose output follows one layout rule.

    Every value of the output dict is a list of tensors; 3-D tensors are time-major
    ``(src_len, batch, dim)``, all others batch-first (``(batch, ...)``). Subclasses
    set ``self.max_source_positions``.
    """

    max_source_positions: int

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Reorder every tensor of ``encoder_out`` along its batch dimension (beam search).

        Args:
            encoder_out: output of ``forward``.
            new_order: ``(new_batch,)`` row indices.
        """
        return {
            key: [t.index_select(1 if t.dim() == 3 else 0, new_order) for t in values]
            for key, values in encoder_out.items()
        }

    def max_positions(self) -> int:
        return self.max_source_positions


class IncrementalDecoder(FairseqIncrementalDecoder):
    """A fairseq incremental decoder that keeps all its state under one key.

    Subclasses set ``STATE_KEY``, ``self.max_target_positions`` and implement
    ``extract_features``; ``output_layer`` applies ``self.output_projection``. The
    cache (``get_cache``/``set_cache``) is a ``Dict[str, Optional[Tensor]]`` whose
    tensors all have the batch as their first dimension.
    """

    STATE_KEY = "state"
    max_target_positions: int

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        **unused,
    ) -> Tuple[Tensor, Dict[str, List[Optional[Tensor]]]]:
        """Decode.

        Args:
            prev_output_tokens: ``(batch, tgt_len)`` shifted targets.
            encoder_out: the encoder's output.
            incremental_state: beam-search cache; when given only the last token of
                ``prev_output_tokens`` is fed.
            features_only: return the features before ``output_layer``.

        Returns:
            ``(logits, extra)``: ``(batch, tgt_len, vocab)`` and
            ``{"attn": [(batch, tgt_len, src_len) or None]}``.
        """
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return (x if features_only else self.output_layer(x)), extra

    def output_layer(self, features: Tensor) -> Tensor:
        return self.output_projection(features)

    def get_cache(self, incremental_state) -> Optional[Dict[str, Optional[Tensor]]]:
        """The decoder's cache, or None before the first step (or without ``incremental_state``)."""
        if incremental_state is None:
            return None
        return self.get_incremental_state(incremental_state, self.STATE_KEY)

    def set_cache(self, incremental_state, cache: Dict[str, Optional[Tensor]]) -> None:
        self.set_incremental_state(incremental_state, self.STATE_KEY, cache)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor) -> None:
        """``index_select`` every cached tensor along its batch dimension (beam search).

        Stateful submodules (``LinearizedConvolution``) reorder their own buffers:
        fairseq calls this method on every incremental submodule.
        """
        cached = self.get_cache(incremental_state)
        if cached is None:
            return
        self.set_cache(
            incremental_state,
            {key: None if value is None else value.index_select(0, new_order) for key, value in cached.items()},
        )

    def max_positions(self) -> int:
        return self.max_target_positions


def to_right_padding(src_tokens: Tensor, padding_idx: int) -> Tuple[Tensor, bool]:
    """``(tokens, was_left_padded)``: the batch right-padded (recurrences and packed
    sequences want padding after the last word; fairseq pads sources on the left)."""
    left_padded = bool(src_tokens[:, 0].eq(padding_idx).any())
    if left_padded:
        src_tokens = utils.convert_padding_direction(src_tokens, padding_idx, left_to_right=True)
    return src_tokens, left_padded


def right_to_left_padding(x: Tensor, lengths: Tensor) -> Tensor:
    """Move right-padded ``(time, batch, dim)`` features to left padding."""
    t = x.size(0)
    shift = (t - lengths.to(x.device)).long()
    # left position p holds right position (p - shift) mod T
    idx = (torch.arange(t, device=x.device).unsqueeze(1) - shift.unsqueeze(0)) % t
    return x.gather(0, idx.unsqueeze(-1).expand_as(x))


def reverse_index(lengths: Tensor, total: int) -> Tensor:
    """``(T, B)`` time index reversing each right-padded sequence inside its length.

    Position ``t < len_b`` maps to ``len_b - 1 - t``; padding positions map to
    themselves. The index is its own inverse.
    """
    t = torch.arange(total, device=lengths.device).unsqueeze(1)  # T x 1
    lengths = lengths.unsqueeze(0)  # 1 x B
    return torch.where(t < lengths, lengths - 1 - t, t)


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each right-padded ``(time, batch, dim)`` sequence within its length.

    Padding stays at the end, so applying the function twice is the identity.
    """
    index = reverse_index(lengths.to(x.device).long(), x.size(0))
    return x.gather(0, index.unsqueeze(-1).expand_as(x))
