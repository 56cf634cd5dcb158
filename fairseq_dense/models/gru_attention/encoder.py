"""Bidirectional GRU encoder of the attentional GRU baseline."""
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.models import FairseqEncoder
from torch import Tensor

from fairseq_dense.modules import beam_rows


def right_to_left_padding(x: Tensor, lengths: Tensor) -> Tensor:
    """Move right-padded ``(time, batch, dim)`` features to left padding."""
    t = x.size(0)
    shift = (t - lengths.to(x.device)).long()
    # left position p holds right position (p - shift) mod T
    idx = (torch.arange(t, device=x.device).unsqueeze(1) - shift.unsqueeze(0)) % t
    return x.gather(0, idx.unsqueeze(-1).expand_as(x))


class GRUAttentionEncoder(FairseqEncoder):
    """Bidirectional GRU encoder, ``h_i = [fwd_i; bwd_i]`` (Bahdanau et al. 2014).

    Args:
        dictionary: source dictionary.
        embed_dim: embedding size.
        hidden_size: GRU size per direction.
        embed_dropout: dropout on the embeddings.
        max_positions: longest source accepted.
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int,
                 embed_dropout: float = 0.0, max_positions: int = 1024):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.hidden_size = hidden_size
        self.output_dim = 2 * hidden_size
        self.max_source_positions = max_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, 0, embed_dim ** -0.5)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        self.embed_dropout = nn.Dropout(embed_dropout)
        self.gru = nn.GRU(embed_dim, hidden_size, batch_first=False, bidirectional=True)

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **unused) -> Dict[str, List[Tensor]]:
        """Encode a batch.

        Args:
            src_tokens: ``(batch, src_len)``, left- or right-padded.
            src_lengths: ``(batch,)``.

        Returns:
            dict with
              * ``encoder_out``: ``[(src_len, batch, 2 * hidden)]`` annotations h_i;
              * ``encoder_padding_mask``: ``[(batch, src_len)]``, True at padding;
              * ``encoder_final``: ``[(batch, hidden)]`` the backward GRU's state at
                the first source word (Bahdanau's initial decoder state input);
              * ``src_lengths``: ``[(batch,)]``.
        """
        padding_mask = src_tokens.eq(self.padding_idx)
        left_padded = bool(padding_mask[:, 0].any())
        if left_padded:  # the packed GRU wants right padding; fairseq defaults to left
            src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
        x = self.embed_dropout(self.embed_tokens(src_tokens))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        lengths = src_lengths.detach().cpu().long()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        packed_out, final = self.gru(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(
            packed_out, padding_value=0.0, total_length=src_tokens.size(1)
        )
        if left_padded:  # back to the caller's layout, so attention columns match src_tokens
            out = right_to_left_padding(out, src_lengths)
        return {
            "encoder_out": [out],  # T x B x 2H
            "encoder_padding_mask": [padding_mask],  # B x T
            "encoder_final": [final[1]],  # B x H, backward direction
            "src_lengths": [src_lengths],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Reorder every key along its batch dimension (beam search); a reorder between
        identical beam copies of a sentence is skipped (:mod:`fairseq_dense.modules.beam_rows`)."""
        return beam_rows.reorder_encoder_out(encoder_out, new_order, self._select_rows)

    @staticmethod
    def _select_rows(encoder_out: Dict[str, List[Tensor]], new_order: Tensor) -> Dict[str, List[Tensor]]:
        return {
            "encoder_out": [encoder_out["encoder_out"][0].index_select(1, new_order)],
            "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)],
            "encoder_final": [encoder_out["encoder_final"][0].index_select(0, new_order)],
            "src_lengths": [encoder_out["src_lengths"][0].index_select(0, new_order)],
        }

    def max_positions(self) -> int:
        return self.max_source_positions
