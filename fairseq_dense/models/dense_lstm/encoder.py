"""Dense (or plain) stacked bidirectional LSTM encoder of DenseRNN."""

from functools import partial
from typing import Dict

import torch
import torch.nn as nn
from fairseq.modules import FairseqDropout
from torch import Tensor

from fairseq_dense.modules.dense_lstm_layer import DenseLSTMEncoderLayer
from fairseq_dense.modules.encoder_decoder import RecurrentEncoder


class DenseLSTMEncoder(RecurrentEncoder):
    """Stacked LSTM encoder with optional dense connections (DenseRNN, Eq. 6).

    Densely Connected Recurrent Neural Network for Sequence-to-Sequence Learning
    (``papers/densernn-densely-connected-rnn.txt``). With ``dense=True`` layer ``l``
    reads ``o_t^{l-1} = [h_t^0; ...; h_t^{l-1}]`` plus its time-shifted copy
    (see :class:`~fairseq_dense.modules.dense_lstm_layer.DenseLSTMEncoderLayer`);
    otherwise it reads ``h_t^{l-1}`` (the stacked baseline). ``h^0`` is the
    embedding.

    Args:
        hidden_size: size of every layer's output ``h^l`` (``hidden_size / 2`` per direction when bidirectional).
        num_layers: ``L_e``.
        dropout: dropout on the embedding and on every layer output.
    """

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool = True,
        dense: bool = False,
        dropout: float = 0.0,
        max_positions: int = 1024,
    ):
        super().__init__(dictionary, embed_dim, max_positions, partial(nn.init.uniform_, a=-0.1, b=0.1))
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.layers = nn.ModuleList(
            DenseLSTMEncoderLayer(
                embed_dim + layer * hidden_size if dense else (embed_dim if layer == 0 else hidden_size),
                hidden_size,
                bidirectional=bidirectional,
                dense=dense,
            )
            for layer in range(num_layers)
        )
        self.dense = dense

    def encode(self, src_tokens: Tensor, src_lengths: Tensor) -> Dict[str, Tensor]:
        """``encoder_out``: ``(src_len, batch, hidden)`` top layer ``h^{L_e}``; ``encoder_layers``:
        ``(src_len, batch, L_e * hidden)`` all layers ``[h^1; ...; h^{L_e}]`` (``o^{L_e}`` without the embedding)."""
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
        return {"encoder_out": all_layers[..., -self.hidden_size :], "encoder_layers": all_layers}
