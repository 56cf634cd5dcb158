"""LSTM updates from given gate pre-activations (PyTorch's gate order i, f, g, o).

DenseRNN's decoder steps its LSTM layers by hand (the attention context enters
every step), and Deep-Att's layers have no input matrix inside the LSTM (Zhou et
al. 2016, https://arxiv.org/abs/1606.04199, Eq. 4: the feed-forward block computes
the gates ``f_t``), so both need the cell without ``nn.LSTM``'s input projection:

    ``[i; f; g; o] = gates``,
    ``c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)``,
    ``h_t = sigmoid(o) * tanh(c_t)``.
"""

from typing import List, Tuple

import torch
from torch import Tensor


def lstm_cell(gates: Tensor, cell: Tensor) -> Tuple[Tensor, Tensor]:
    """One LSTM update from the summed pre-activations.

    Args:
        gates: ``(batch, 4 * hidden)``, ``W_ih x + b_ih + W_hh h + b_hh``.
        cell: ``(batch, hidden)`` previous cell state.

    Returns:
        ``(hidden, cell)`` of the new step.
    """
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


def lstm_recurrence(f: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """Run an LSTM forward in time over given input gates (no input matrix).

    Args:
        f: ``(T, B, 4H)`` input gate pre-activations.
        h0, c0: ``(B, H)`` initial state.
        w_hh: ``(4H, H)`` recurrent matrix.

    Returns:
        ``(out, (h_T, c_T))``: ``(T, B, H)`` outputs and the final state.
    """
    h, c = h0, c0
    outs: List[Tensor] = []
    for f_t in f.unbind(0):  # unbind: one gradient stack, not a zero-filled copy of f per step
        h, c = lstm_cell(torch.addmm(f_t, h, w_hh.t()), c)
        outs.append(h)
    return torch.stack(outs), (h, c)
