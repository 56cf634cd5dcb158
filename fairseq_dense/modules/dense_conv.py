"""Dense (concatenative) convolution without per-layer concatenation copies.

DenseNMT (Shen et al. 2018, https://arxiv.org/abs/1806.00722, Eq. 6-7) feeds layer
``l+1`` the concatenation of all earlier outputs. A naive ``torch.cat`` per layer
copies every earlier feature again for every layer and keeps each copy alive for
the backward pass: quadratic traffic and memory in the depth.

Here every feature is written once into a preallocated *channel-major* buffer of
shape ``(channels, pad_left + time + pad_right, batch)``. A prefix (or any row
range) of such a buffer is itself a strided matrix ``(C, T*B)``, so a 1-D
convolution of kernel ``k`` over it is ``k`` GEMMs ``W_j^T @ X[:, j:j+T]`` that read
the buffer in place (BLAS takes the row stride): no copy of earlier features and
nothing but views saved for backward. A small autograd function routes the
gradient of a row range back to the features that were written into it.
"""

import math
from typing import List, Optional

import torch
import torch.nn as nn
from fairseq.modules import ConvTBC
from torch import Tensor
from torch.nn.utils.parametrizations import weight_norm

from fairseq_dense.modules.inference_weights import CachedLinear, CachedLinearizedConvolution


class _BufferRows(torch.autograd.Function):
    """Autograd view of rows ``[start, end)`` of a :class:`FeatureBuffer`.

    Forward returns the rows as a view of the buffer's storage (no copy);
    backward hands each feature that lives in those rows its slice of the
    incoming gradient.
    """

    @staticmethod
    def forward(ctx, buffer: "FeatureBuffer", start: int, end: int, *features: Tensor) -> Tensor:
        ctx.slices = [(o - start, f.size(0)) for o, f in zip(buffer.offsets_in(start, end), features)]
        ctx.time = (buffer.pad_left, buffer.time)
        # ``.data`` gives a fresh version counter: later writes of new features
        # into other rows must not invalidate views saved by earlier layers.
        return buffer.data.data[start:end]

    @staticmethod
    def backward(ctx, grad: Tensor):
        p, t = ctx.time
        grads = [grad[o : o + c, p : p + t] for o, c in ctx.slices]
        return (None, None, None, *grads)


class FeatureBuffer:
    """Preallocated channel-major feature store for one dense block.

    Args:
        capacity: total channels of all features the block will hold.
        time: sequence length ``T``.
        batch: batch size ``B``.
        pad_left: zero frames before the sequence (convolution padding).
        pad_right: zero frames after the sequence.
        like: tensor giving dtype and device.

    ``data`` has shape ``(capacity, pad_left + T + pad_right, batch)``.
    """

    def __init__(self, capacity: int, time: int, batch: int, pad_left: int, pad_right: int, like: Tensor):
        self.data = like.new_zeros(capacity, pad_left + time + pad_right, batch)
        self.pad_left = pad_left
        self.time = time
        self.width = 0
        self.features: List[Tensor] = []
        self.offsets: List[int] = []

    def append(self, feature: Tensor) -> None:
        """Write a ``(C, T, B)`` feature into the next free rows."""
        c = feature.size(0)
        if self.width + c > self.data.size(0):
            raise RuntimeError(f"feature buffer overflow: {self.width} + {c} > {self.data.size(0)}")
        with torch.no_grad():
            self.data[self.width : self.width + c, self.pad_left : self.pad_left + self.time].copy_(feature)
        self.features.append(feature)
        self.offsets.append(self.width)
        self.width += c

    def offsets_in(self, start: int, end: int) -> List[int]:
        return [o for o, f in zip(self.offsets, self.features) if o >= start and o + f.size(0) <= end]

    def rows(self, start: int = 0, end: Optional[int] = None) -> Tensor:
        """Rows ``[start, end)`` (default: all written rows) with time padding, ``(C, T_pad, B)``.

        ``start``/``end`` must fall on feature boundaries.
        """
        end = self.width if end is None else end
        inside = [f for o, f in zip(self.offsets, self.features) if o >= start and o + f.size(0) <= end]
        if sum(f.size(0) for f in inside) != end - start:
            raise ValueError(f"rows [{start}, {end}) do not fall on feature boundaries {self.offsets}")
        return _BufferRows.apply(self, start, end, *inside)

    def center(self, rows: Tensor) -> Tensor:
        """Drop the time padding of a :meth:`rows` result: ``(C, T, B)``."""
        return rows[:, self.pad_left : self.pad_left + self.time]


class _ConvRows(torch.autograd.Function):
    """``k`` GEMMs over shifted views; backward fills one input-gradient tensor.

    Letting autograd differentiate the ``k`` slices would allocate a zero tensor of
    the whole (growing) input for every tap; here each tap adds into a single one.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, time: int, left: int) -> Tensor:
        k, c, o = weight.shape
        b = x.size(2)
        out = bias.unsqueeze(1).expand(o, time * b).contiguous()
        for j in range(k):
            xj = x[:, left + j : left + j + time].reshape(c, time * b)  # a strided view, no copy
            out.addmm_(weight[j].t(), xj)
        ctx.save_for_backward(x, weight)
        ctx.geometry = (time, left)
        return out.view(o, time, b)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        time, left = ctx.geometry
        k, c, o = weight.shape
        b = x.size(2)
        g = grad.reshape(o, time * b)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = x.new_zeros(x.shape)
            for j in range(k):
                grad_x[:, left + j : left + j + time].view(c, time * b).addmm_(weight[j], g)
        if ctx.needs_input_grad[1]:
            grad_w = torch.stack(
                [torch.mm(x[:, left + j : left + j + time].reshape(c, time * b), g.t()) for j in range(k)]
            )
        if ctx.needs_input_grad[2]:
            grad_b = g.sum(dim=1)
        return grad_x, grad_w, grad_b, None, None


def conv_rows(x: Tensor, weight: Tensor, bias: Tensor, time: int, left: int) -> Tensor:
    """1-D convolution over a channel-major, time-padded view, as ``k`` GEMMs.

    Args:
        x: ``(C, T_pad, B)`` input (e.g. :meth:`FeatureBuffer.rows`).
        weight: ``(k, C, O)`` (ConvTBC layout).
        bias: ``(O,)``.
        time: number of output frames ``T``.
        left: first input frame read by output frame 0 (buffer padding minus the
            layer's own left padding).

    Returns:
        ``(O, T, B)``; output frame ``t`` is ``bias + sum_j W_j^T x[:, left + t + j]``.
    """
    return _ConvRows.apply(x, weight, bias, time, left)


def linear_rows(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    """Position-wise linear map of a channel-major ``(C, T, B)`` tensor -> ``(O, T, B)``."""
    c, t, b = x.shape
    y = torch.mm(weight, x.reshape(c, t * b))
    if bias is not None:
        y = y + bias.unsqueeze(1)
    return y.view(-1, t, b)


def glu_rows(x: Tensor) -> Tensor:
    """GLU over the channel dimension of a channel-major tensor (Dauphin et al. 2017)."""
    return nn.functional.glu(x, dim=0)


# ---------------------------------------------------------------- init factories (fconv)


def Linear(
    in_features: int, out_features: int, dropout: float = 0.0, use_weight_norm: bool = True, bias: bool = True
) -> nn.Linear:
    """Linear layer with ConvS2S initialisation, optionally weight-normalised.

    The normalised weight is reused across incremental decoding steps (:class:`CachedLinear`).
    """
    m = CachedLinear(in_features, out_features, bias=bias)
    nn.init.normal_(m.weight, mean=0, std=math.sqrt((1 - dropout) / in_features))
    if bias:
        nn.init.constant_(m.bias, 0)
    return weight_norm(m) if use_weight_norm else m


def ConvLayer(
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    dropout: float = 0.0,
    incremental: bool = False,
    use_weight_norm: bool = True,
) -> nn.Module:
    """ConvS2S-initialised ConvTBC (encoder) or LinearizedConvolution (decoder).

    The decoder's convolution keeps its step matrix across incremental decoding steps
    (:class:`CachedLinearizedConvolution`).

    ``weight`` is ``(kernel, in, out)``; weight normalisation is over dims 0-1 per
    output channel, as in fconv.
    """
    cls = CachedLinearizedConvolution if incremental else ConvTBC
    m = cls(in_channels, out_channels, kernel_size, padding=kernel_size - 1 if incremental else 0)
    std = math.sqrt((4 * (1.0 - dropout)) / (kernel_size * in_channels))
    nn.init.normal_(m.weight, mean=0, std=std)
    nn.init.constant_(m.bias, 0)
    return weight_norm(m, dim=2) if use_weight_norm else m


def Embedding(num_embeddings: int, embedding_dim: int, padding_idx: int) -> nn.Embedding:
    m = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
    nn.init.normal_(m.weight, 0, 0.1)
    nn.init.constant_(m.weight[padding_idx], 0)
    return m


def plan_blocks(num_layers: int, sumlen: Optional[int]) -> List[List[int]]:
    """Split layer indices into dense blocks; a summary layer follows every block but the last.

    With ``sumlen`` each block has ``sumlen - 1`` convolution layers (the summary is
    the block's ``sumlen``-th layer); without it there is a single block.
    """
    if not sumlen:
        return [list(range(num_layers))]
    n = sumlen - 1
    return [list(range(i, min(i + n, num_layers))) for i in range(0, num_layers, n)]
