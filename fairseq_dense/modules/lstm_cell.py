"""LSTM updates from given gate pre-activations (PyTorch's gate order i, f, g, o).

DenseRNN's decoder and Deep-Att's first decoder layer step their LSTMs by hand (the
attention context of step ``t`` depends on the state of step ``t - 1``), so both need the
cell without ``nn.LSTM``'s input projection:

    ``[i; f; g; o] = gates``,
    ``c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)``,
    ``h_t = sigmoid(o) * tanh(c_t)``.

Where the whole sequence is known in advance, :func:`fused_lstm` runs the same
recurrence on the fused kernels (cuDNN, oneDNN) instead of stepping in Python.

Step loops and autocast: autocast keeps one low-precision copy of a leaf weight per
forward, but re-casts a view or any other non-leaf weight (``w.t()``, ``w[:, k:]``,
``torch.cat`` of weights) at every call, and autograd keeps every copy. Step loops
therefore take their weights through :func:`cast_once` before the loop.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor


def lstm_cell(gates: Tensor, cell: Tensor) -> Tuple[Tensor, Tensor]:
    """``(h_t, c_t)`` from ``gates`` ``(B, 4H)`` = ``W_ih x + b_ih + W_hh h + b_hh`` and ``cell`` ``(B, H)``."""
    i, f, g, o = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


def cast_once(weight: Tensor) -> Tensor:
    """``weight`` in the autocast dtype when autocast is on for its device (else unchanged): called
    once before a step loop, the ops inside cast nothing, with the values autocast's cast gives."""
    device = weight.device.type
    if weight.dtype == torch.float32 and torch.is_autocast_enabled(device):
        return weight.to(torch.get_autocast_dtype(device))
    return weight


def rnn_takes_cast(cast_weight: Tensor) -> bool:
    """Whether a fused LSTM call may take weights :func:`cast_once` cast (else: the originals).

    Autocast runs cuDNN RNNs in float16 whatever its dtype: under bfloat16 autocast on
    CUDA it would convert bfloat16 copies to float16 (double rounding), so there the
    call gets the float32 weights and casts them itself. Elsewhere (the CPU, float16
    autocast, no autocast) the copy is what autocast would make.
    """
    return cast_weight.device.type != "cuda" or cast_weight.dtype != torch.bfloat16


def fused_lstm(
    x: Tensor,
    state: Tuple[Tensor, Tensor],
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Optional[Tensor] = None,
) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """``nn.LSTM``'s single forward layer with weights the caller owns (``torch.lstm``: cuDNN / oneDNN).

    ``x`` ``(T, B, input)``, ``state`` ``(h0, c0)`` each ``(B, H)``, ``w_ih`` ``(4H, input)``, ``w_hh``
    ``(4H, H)``, biases ``(4H,)`` (``b_hh`` zeros when None). Returns ``(out (T, B, H), (h_T, c_T))``.
    """
    if b_hh is None:
        b_hh = torch.zeros_like(b_ih)
    hx = (state[0].unsqueeze(0).contiguous(), state[1].unsqueeze(0).contiguous())  # 1 x B x H
    # train=True whenever autograd records: the CPU kernel keeps its workspace for backward only then
    train = torch.is_grad_enabled()
    out, h_n, c_n = torch.lstm(x, hx, [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, train, False, False)
    return out, (h_n[0], c_n[0])
