"""Dense (or plain) stacked bidirectional LSTM encoder of DenseRNN."""
from typing import Dict, List

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.models import FairseqEncoder
from torch import Tensor

from fairseq_dense.modules import beam_rows
from fairseq_dense.modules.dense_lstm_layer import DenseLSTMEncoderLayer


def right_to_left_padding(x: Tensor, lengths: Tensor) -> Tensor:
    """Move right-padded ``(time, batch, dim)`` features to left padding."""
    t = x.size(0)
    shift = (t - lengths.to(x.device)).long()
    # left position p holds right position (p - shift) mod T
    idx = (torch.arange(t, device=x.device).unsqueeze(1) - shift.unsqueeze(0)) % t
    return x.gather(0, idx.unsqueeze(-1).expand_as(x))


class DenseLSTMEncoder(FairseqEncoder):
    """Stacked LSTM encoder with optional dense connections (DenseRNN, Eq. 6).

    Densely Connected Recurrent Neural Network for Sequence-to-Sequence Learning
    (``papers/densernn-densely-connected-rnn.txt``). With ``dense=True`` layer ``l``
    reads ``o_t^{l-1} = [h_t^0; ...; h_t^{l-1}]`` plus its time-shifted copy
    (see :class:`~fairseq_dense.modules.dense_lstm_layer.DenseLSTMEncoderLayer`);
    otherwise it reads ``h_t^{l-1}`` (the stacked baseline). ``h^0`` is the
    embedding.

    Args:
        dictionary: source dictionary.
        embed_dim: embedding size.
        hidden_size: size of every layer's output ``h^l``.
        num_layers: ``L_e``.
        bidirectional: ``hidden_size / 2`` per direction.
        dense: dense connections.
        dropout: dropout on the embedding and on every layer output.
        max_positions: longest source accepted.
    """

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, num_layers: int,
                 bidirectional: bool = True, dense: bool = False, dropout: float = 0.0,
                 max_positions: int = 1024):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.max_source_positions = max_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.uniform_(self.embed_tokens.weight, -0.1, 0.1)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            DenseLSTMEncoderLayer(
                embed_dim + l * hidden_size if dense else (embed_dim if l == 0 else hidden_size),
                hidden_size, bidirectional=bidirectional, dense=dense,
            )
            for l in range(num_layers)
        )
        self.dense = dense
        # sizes of the encoder layers h^1..h^{L_e}, as the decoder's attention sees them
        self.layer_dims = [hidden_size] * num_layers

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **unused) -> Dict[str, List[Tensor]]:
        """Encode a batch.

        Args:
            src_tokens: ``(batch, src_len)``, left- or right-padded.
            src_lengths: ``(batch,)``.

        Returns:
            dict with
              * ``encoder_out``: ``[(src_len, batch, hidden)]`` top layer ``h^{L_e}``;
              * ``encoder_layers``: ``[(src_len, batch, L_e * hidden)]`` all layers
                ``[h^1; ...; h^{L_e}]`` (= ``o^{L_e}`` without the embedding);
              * ``encoder_padding_mask``: ``[(batch, src_len)]``, True at padding;
              * ``src_lengths``: ``[(batch,)]``.
        """
        padding_mask = src_tokens.eq(self.padding_idx)
        left_padded = bool(padding_mask[:, 0].any())
        if left_padded:  # the layers want right padding; fairseq's default is left
            src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
        pad_tbc = src_tokens.eq(self.padding_idx).t().unsqueeze(-1)  # T x B x 1
        x = self.dropout(self.embed_tokens(src_tokens)).transpose(0, 1)  # B x T x C -> T x B x C
        x = x.masked_fill(pad_tbc, 0.0)
        lengths = src_lengths.to(x.device)
        dense_input = x  # o^{l-1}
        outputs = []
        for layer in self.layers:
            h = self.dropout(layer(dense_input if self.dense else x, lengths, pad_tbc))
            outputs.append(h)
            if self.dense:
                dense_input = torch.cat([dense_input, h], dim=-1)
            x = h
        all_layers = torch.cat(outputs, dim=-1)  # T x B x (L_e * hidden)
        if left_padded:  # back to the caller's layout, so attention columns match src_tokens
            all_layers = right_to_left_padding(all_layers, src_lengths)
        return {
            "encoder_out": [all_layers[..., -self.hidden_size:]],
            "encoder_layers": [all_layers],
            "encoder_padding_mask": [padding_mask],
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
            "encoder_layers": [encoder_out["encoder_layers"][0].index_select(1, new_order)],
            "encoder_padding_mask": [encoder_out["encoder_padding_mask"][0].index_select(0, new_order)],
            "src_lengths": [encoder_out["src_lengths"][0].index_select(0, new_order)],
        }

    def max_positions(self) -> int:
        return self.max_source_positions
