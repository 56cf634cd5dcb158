"""Stacked LSTM with fast-forward connections (Zhou et al. 2016, Eq. 5-6).

Deep Recurrent Models with Fast-Forward Connections for Neural Machine
Translation, https://arxiv.org/abs/1606.04199. Layer ``k`` is split into a
feed-forward block and an input-matrix-free recurrence:

    ``f^k_t = W_f^k [half(f^{k-1}_t); dropout(h^{k-1}_t)] + b^k``  (fast-forward on)
    ``f^k_t = W_f^k dropout(h^{k-1}_t) + b^k``                     (off: a plain stacked LSTM)
    ``h^k_t, c^k_t = LSTM(f^k_t, h^k_{t-(-1)^k}, c^k_{t-(-1)^k})``

``f^1_t = W_f^1 x_t + b^1``. ``half`` keeps the first half of ``f`` (``2H`` of ``4H``).
A layer is one fused LSTM call (``torch.lstm``: cuDNN / oneDNN) whose input matrix is
``W_f``: its gates ``W_f x_t + b + W_hh h_{t-1}`` are the paper's ``f_t + W_hh h_{t-1}``.
The part of ``f`` the next layer reads (``half(f)``, or all of ``f`` for the encoder's
interface) is one more matrix multiply over the whole sequence.

Variable lengths: every layer works on right-padded sequences; a layer that runs
backward in time reverses each sequence inside its length, runs forward and
reverses back, so padding always trails and never reaches a real position.

Precision: ``f^k`` is linear in ``f^{k-1}``; under the paper's initialisation it grows about 2.2x
a layer, past float16's range at the 9+7-layer model's top layer (docs/benchmarks.md). With
fast-forward connections :mod:`fairseq_dense.models.fast_forward_lstm` therefore runs the stack and
all that reads it in float32 under autocast (cuDNN runs LSTMs in float16 under bfloat16 autocast
too) and keeps its parameters float32 under ``--fp16``.
"""

from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import FairseqDropout
from torch import Tensor

from fairseq_dense.modules.encoder_decoder import reverse_padded
from fairseq_dense.modules.lstm_cell import cast_once

RECURRENT = "recurrent"


class FastForwardLSTMLayer(nn.Module):
    """One layer: feed-forward block ``f`` (``input_dim -> 4H``) and recurrence ``W_hh``.

    Args:
        input_dim: size of the layer input.
        hidden_size: LSTM size ``H``.
        reverse: run backward in time.
        init_std: std of the Gaussian initialisation of ``W_f`` (``W_hh`` starts at zero).
    """

    def __init__(self, input_dim: int, hidden_size: int, reverse: bool = False, init_std: float = 0.07):
        super().__init__()
        self.hidden_size = hidden_size
        self.reverse = reverse
        self.init_std = init_std
        self.ff = nn.Linear(input_dim, 4 * hidden_size)
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.weight_hh.param_group = RECURRENT  # its optimizer group (``--lr-scheduler grouped``)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Paper Sec. 4.3: recurrent matrices zero, everything else ``N(0, init_std)``, biases zero."""
        nn.init.normal_(self.ff.weight, 0.0, self.init_std)
        nn.init.zeros_(self.ff.bias)
        nn.init.zeros_(self.weight_hh)

    def initial_state(self, x: Tensor, state: Optional[Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
        """``state``, or zeros ``(B, H)`` for ``x`` ``(T, B, ...)`` when it is None."""
        if state is None:
            zeros = x.new_zeros(x.size(1), self.hidden_size)
            state = (zeros, zeros)
        return state

    def forward(
        self,
        x: Tensor,
        lengths: Optional[Tensor] = None,
        state: Optional[Tuple[Tensor, Tensor]] = None,
        f_size: Optional[int] = None,
        extra_weight: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor, Tuple[Tensor, Tensor]]:
        """Run the layer on ``x`` ``(T, B, input_dim)`` (``input_dim + extra`` with ``extra_weight``).

        Args:
            x: right-padded inputs.
            lengths: ``(B,)``; needed only when ``reverse``.
            state: initial ``(h, c)``; zeros when None.
            f_size: how many leading columns of ``f`` the caller needs (``4H`` when
                None, ``2H`` for the next layer's ``half(f)``, 0 for none).
            extra_weight: ``(4H, extra)`` weights of input columns beyond ``ff``'s (Deep-ED's
                decoder: ``(W_c e)^T`` of its one-hot sentence columns), so that
                ``W_f = [ff.weight, extra_weight]``.

        Returns:
            ``(f, h, final_state)``: ``f`` ``(T, B, f_size)``, ``h`` ``(T, B, H)``.
        """
        state = self.initial_state(x, state)
        w_f = self.ff.weight if extra_weight is None else torch.cat([self.ff.weight, extra_weight], 1)
        # one low-precision copy of W_f under autocast, shared by the LSTM call and the f matmul. Autocast
        # runs cuDNN RNNs in float16 whatever its dtype: under bfloat16 on CUDA the LSTM call gets the
        # float32 weights and casts them itself (bfloat16 copies would be rounded twice)
        w, b = cast_once(w_f), cast_once(self.ff.bias)
        if w.device.type == "cuda" and w.dtype == torch.bfloat16:
            weights = [w_f, self.weight_hh, self.ff.bias]
        else:
            weights = [w, cast_once(self.weight_hh), b]
        weights.append(torch.zeros_like(weights[2]))  # b_hh
        assert lengths is not None or not self.reverse, "a backward layer needs the sequence lengths"
        inp = reverse_padded(x, lengths) if self.reverse else x
        hx = (state[0].unsqueeze(0).contiguous(), state[1].unsqueeze(0).contiguous())  # 1 x B x H
        # nn.LSTM's single layer with W_f, b as its input weights; train=True whenever autograd records: the
        # CPU kernel keeps its workspace for backward only then
        h, h_n, c_n = torch.lstm(inp, hx, weights, True, 1, 0.0, torch.is_grad_enabled(), False, False)
        if self.reverse:
            h = reverse_padded(h, lengths)
        n = 4 * self.hidden_size if f_size is None else f_size
        return F.linear(x, w[:n], b[:n]), h, (h_n[0], c_n[0])  # f: all time steps in one matmul


class FastForwardLSTM(nn.Module):
    """A stack of :class:`FastForwardLSTMLayer` (one encoder column, or the decoder).

    Args:
        input_dim: size of the input of the first layer.
        hidden_size: LSTM size ``H`` of every layer.
        num_layers: depth.
        fast_forward: use the fast-forward connections (False: plain stacked LSTM).
        first_reverse: the first layer runs backward in time.
        interleave: alternate the direction from layer to layer (False: all layers
            run in the first layer's direction).
        dropout: dropout on ``h^{k-1}`` where it enters layer ``k``.
        init_std: Gaussian std of the non-recurrent weights.
    """

    def __init__(
        self,
        input_dim: int,
        hidden_size: int,
        num_layers: int,
        fast_forward: bool = True,
        first_reverse: bool = False,
        interleave: bool = True,
        dropout: float = 0.0,
        init_std: float = 0.07,
    ):
        super().__init__()
        self.hidden_size = hidden_size
        self.fast_forward = fast_forward
        self.dropout = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.layers = nn.ModuleList()
        for k in range(num_layers):
            reverse = first_reverse != (interleave and k % 2 == 1)
            in_dim = input_dim if k == 0 else self.connection_dim(hidden_size, fast_forward)
            self.layers.append(FastForwardLSTMLayer(in_dim, hidden_size, reverse=reverse, init_std=init_std))

    @staticmethod
    def connection_dim(hidden_size: int, fast_forward: bool) -> int:
        """Size of ``[half(f); h]`` (``3H``) or ``h`` (``H``)."""
        return 3 * hidden_size if fast_forward else hidden_size

    def connect(self, f: Tensor, h: Tensor) -> Tensor:
        """Input of the next layer: ``[half(f); dropout(h)]`` or ``dropout(h)``."""
        if self.fast_forward:
            return torch.cat([f[..., : 2 * self.hidden_size], self.dropout(h)], dim=-1)
        return self.dropout(h)

    def forward(
        self,
        x: Tensor,
        lengths: Optional[Tensor] = None,
        states: Optional[List[Tuple[Tensor, Tensor]]] = None,
        last_f: bool = True,
    ) -> Tuple[Tensor, Tensor, List[Tuple[Tensor, Tensor]]]:
        """Run the stack.

        Args:
            x: ``(T, B, input_dim)`` right-padded inputs.
            lengths: ``(B,)``; needed when a layer runs backward.
            states: per layer initial ``(h, c)`` (incremental decoding); zeros when None.
            last_f: whether the caller needs the last layer's ``f``.

        Returns:
            ``(f, h, finals)``: the last layer's ``f`` ``(T, B, 4H)`` (``(T, B, 0)``
            when not ``last_f``) and ``h`` ``(T, B, H)``, and every layer's final ``(h, c)``.
        """
        finals = []
        f = h = x
        n = len(self.layers)
        inner_f = 2 * self.hidden_size if self.fast_forward else 0  # the next layer reads half(f)
        for k, layer in enumerate(self.layers):
            inp = x if k == 0 else self.connect(f, h)
            f_size = (4 * self.hidden_size if last_f else 0) if k == n - 1 else inner_f
            f, h, final = layer(inp, lengths, None if states is None else states[k], f_size=f_size)
            finals.append(final)
        return f, h, finals
