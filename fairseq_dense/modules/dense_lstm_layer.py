"""Building blocks of the densely connected stacked LSTM (DenseRNN, Eq. 6).

Densely Connected Recurrent Neural Network for Sequence-to-Sequence Learning
(``papers/densernn-densely-connected-rnn.txt``, Eq. 6):
``h_t^l = g(o_{t-1}^l, o_t^{l-1})`` with ``o_t^l = [h_t^0; ...; h_t^l]``.

The lower-layer part of ``o_{t-1}^l`` is ``o_{t-1}^{l-1}``, already known when layer
``l`` runs, so layer ``l`` is an ordinary LSTM over the input
``[o_t^{l-1}; o_{t-1}^{l-1}]`` whose recurrent state is ``h^l`` alone. This keeps
the fused (cuDNN / oneDNN) ``nn.LSTM`` kernels usable: the concatenation costs one
time shift per layer, not a Python loop over time steps.
"""

from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_dense.modules.encoder_decoder import reverse_padded


def shift_in_time(x: Tensor, first: Optional[Tensor] = None) -> Tensor:
    """``(time, batch, dim)`` ``x`` one step later: ``out[t] = x[t-1]``, ``out[0] = first`` ``(batch, dim)``
    (zeros when None)."""
    if first is None:
        first = x.new_zeros(x.shape[1:])
    return torch.cat([first.unsqueeze(0), x[:-1]], dim=0)


class DenseLSTMEncoderLayer(nn.Module):
    """One (bi)directional encoder layer of a dense or plain stacked LSTM.

    With ``dense=True`` the forward direction reads ``[o_t^{l-1}; o_{t-1}^{l-1}]`` and
    the backward direction ``[o_t^{l-1}; o_{t+1}^{l-1}]`` (its previous step is
    ``t+1``); each direction's own recurrent state is its own half of ``h^l``, the
    only part of ``o^l`` it can see causally. With ``dense=False`` both read ``x_t``.

    Args:
        input_size: size of ``o^{l-1}`` (dense) or ``h^{l-1}`` (plain).
        output_size: size of ``h^l`` (both directions together).
        bidirectional: two directions of ``output_size / 2`` each.
        dense: add the time-shifted input (Eq. 6).
    """

    def __init__(self, input_size: int, output_size: int, bidirectional: bool, dense: bool):
        super().__init__()
        self.dense = dense
        self.bidirectional = bidirectional
        lstm_in = 2 * input_size if dense else input_size
        per_dir = output_size // 2 if bidirectional else output_size
        self.forward_lstm = nn.LSTM(lstm_in, per_dir)
        self.backward_lstm = nn.LSTM(lstm_in, per_dir) if bidirectional else None

    def _run(self, lstm: nn.LSTM, x: Tensor) -> Tensor:
        if self.dense:
            x = torch.cat([x, shift_in_time(x)], dim=-1)  # T x B x 2D
        return lstm(x)[0]

    def forward(self, x: Tensor, lengths: Tensor, padding_mask: Tensor) -> Tensor:
        """Run the layer.

        Args:
            x: ``(src_len, batch, input_size)``, right-padded, zeros at padding.
            lengths: ``(batch,)``.
            padding_mask: ``(src_len, batch, 1)``, True at padding.

        Returns:
            ``(src_len, batch, output_size)``, zeros at padding.
        """
        # right padding: padded steps come after every real step, so they cannot
        # reach a real position in the forward pass (nor, after reversal, backward)
        out = self._run(self.forward_lstm, x)
        if self.backward_lstm is not None:
            bwd = reverse_padded(self._run(self.backward_lstm, reverse_padded(x, lengths)), lengths)
            out = torch.cat([out, bwd], dim=-1)
        return out.masked_fill(padding_mask, 0.0)
