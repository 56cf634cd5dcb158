"""LSTM recurrences without an input matrix (Zhou et al. 2016, Eq. 4).

Deep-Att (https://arxiv.org/abs/1606.04199) computes the four gate
pre-activations ``f_t`` of a layer in a feed-forward block, for the whole
sequence at once; what remains is

    ``[i; f; g; o] = f_t + W_hh h_{t-1}``,
    ``c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)``,
    ``h_t = sigmoid(o) * tanh(c_t)``

(PyTorch's gate order). Every function here maps gates ``(T, B, 4H)``, initial
``h0, c0`` ``(B, H)`` and ``w_hh`` ``(4H, H)`` to ``(out, (h_T, c_T))`` with ``out``
``(T, B, H)``, running forward in time. ``benchmarks/fast_forward_lstm_recurrence.py``
times them; :func:`lstm_recurrence` picks the fastest for the device.
"""
import warnings
from typing import List, Tuple

import torch
from torch import Tensor


def _cell(gates: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def lstm_recurrence_loop(f: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """Plain Python loop: one ``addmm`` and the elementwise cell per step."""
    h, c = h0, c0
    outs: List[Tensor] = []
    w_t = w_hh.t()
    for f_t in f.unbind(0):  # unbind: one gradient stack, not a zero-filled copy of f per step
        h, c = _cell(torch.addmm(f_t, h, w_t), c)
        outs.append(h)
    return torch.stack(outs), (h, c)


def lstm_recurrence_cell(f: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """aten's ``lstm_cell`` per step: an empty input whose "bias" is the step's gates.

    ``lstm_cell(x, (h, c), w_ih, w_hh, b_ih)`` computes ``x W_ih^T + b_ih + h W_hh^T``;
    with a ``(B, 0)`` input and a ``(4H, 0)`` input matrix the first product is
    empty and ``b_ih = f_t`` ``(B, 4H)`` is broadcast-added, so only the recurrent
    matmul is computed. CPU only: on CUDA ``lstm_cell`` dispatches to the fused
    cell, which wants 1-D biases (use :func:`lstm_recurrence_fused_cell` there).
    """
    h, c = h0, c0
    empty_x = f.new_zeros(f.size(1), 0)
    empty_w = f.new_zeros(f.size(2), 0)
    outs: List[Tensor] = []
    for f_t in f.unbind(0):
        h, c = torch.lstm_cell(empty_x, (h, c), empty_w, w_hh, f_t, None)
        outs.append(h)
    return torch.stack(outs), (h, c)


def lstm_recurrence_fused_cell(f: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """CUDA: ``_thnn_fused_lstm_cell`` takes the input gates as given (fused kernel and backward)."""
    h, c = h0, c0
    outs: List[Tensor] = []
    w_t = w_hh.t()
    for f_t in f.unbind(0):
        h, c, _ = torch.ops.aten._thnn_fused_lstm_cell(f_t, torch.mm(h, w_t), c)
        outs.append(h)
    return torch.stack(outs), (h, c)


def fused_lstm(x: Tensor, h0: Tensor, c0: Tensor, weights: List[Tensor]) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """One forward layer of torch's fused LSTM (cuDNN on CUDA) on ``x`` ``(T, B, C)``.

    Args:
        weights: ``[W_ih, W_hh]`` or ``[W_ih, W_hh, b_ih, b_hh]``.
    """
    # cuDNN wants contiguous states and one dtype for input, states and weights; under
    # autocast x is already float16/bfloat16 while parameters and states are float32
    dtype = x.dtype
    weights = [w.to(dtype) for w in weights]
    hx = (h0.to(dtype).unsqueeze(0).contiguous(), c0.to(dtype).unsqueeze(0).contiguous())
    with warnings.catch_warnings():  # the weights are not one flat buffer: cuDNN copies them
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
        out, h, c = torch._VF.lstm(
            x, hx, weights,
            len(weights) == 4, 1, 0.0, torch.is_grad_enabled(), False, False,  # 1 layer, no dropout, uni, T-first
        )
    return out, (h.squeeze(0), c.squeeze(0))


def lstm_recurrence_identity(f: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """The fused sequence op ``torch._VF.lstm`` (cuDNN on CUDA) with an identity input matrix.

    ``f I^T = f`` costs one extra ``(T*B, 4H) x (4H, 4H)`` product, done for all
    steps at once; the recurrence then runs inside one cuDNN call (forward and
    backward) instead of ``T`` Python-level steps.
    """
    eye = torch.eye(f.size(-1), device=f.device, dtype=f.dtype)
    return fused_lstm(f, h0, c0, [eye, w_hh])


def lstm_recurrence(f: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """Run the recurrence with the fastest form measured for ``f``'s device.

    Args:
        f: ``(T, B, 4H)`` gate pre-activations (the feed-forward block's output).
        h0, c0: ``(B, H)`` initial state.
        w_hh: ``(4H, H)`` recurrent matrix.

    Returns:
        ``(out, (h_T, c_T))``: ``(T, B, H)`` outputs and the final state.
    """
    if f.is_cuda:  # cuDNN's fused sequence kernel beats T fused cells (benchmark above)
        return lstm_recurrence_identity(f, h0, c0, w_hh)
    return lstm_recurrence_cell(f, h0, c0, w_hh)
