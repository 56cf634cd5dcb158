"""LSTM updates from given gate pre-activations (PyTorch's gate order i, f, g, o).

DenseRNN's decoder and Deep-Att's first decoder layer step their LSTMs by hand (the
attention context of step ``t`` depends on the state of step ``t - 1``), so both need the
cell without ``nn.LSTM``'s input projection:

    ``[i; f; g; o] = gates``,
    ``c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)``,
    ``h_t = sigmoid(o) * tanh(c_t)``.

Step loops and autocast: autocast keeps one low-precision copy of a leaf weight per
forward, but re-casts a view or any other non-leaf weight (``w.t()``, ``w[:, k:]``,
``torch.cat`` of weights) at every call, and autograd keeps every copy. Step loops
therefore take their weights through :func:`cast_once` before the loop.
"""

from typing import Tuple

import torch
from torch import Tensor

from fairseq_dense.modules.low_precision import compute_dtype


def lstm_cell(gates: Tensor, cell: Tensor) -> Tuple[Tensor, Tensor]:
    """``(h_t, c_t)`` from ``gates`` ``(B, 4H)`` = ``W_ih x + b_ih + W_hh h + b_hh`` and ``cell`` ``(B, H)``."""
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


def cast_once(weight: Tensor) -> Tensor:
    """``weight`` in the autocast dtype when autocast is on for its device (else unchanged): called
    once before a step loop, the ops inside cast nothing, with the values autocast's cast gives."""
    return weight.to(compute_dtype(weight))
