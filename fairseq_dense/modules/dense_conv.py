"""Dense (concatenative) convolution without per-layer concatenation copies.

DenseNMT (Shen et al. 2018, https://arxiv.org/abs/1806.00722, Eq. 6-7) feeds layer ``l+1``
the concatenation of all earlier outputs; a ``torch.cat`` per layer would copy and keep
every earlier feature again for every layer (quadratic in the depth). Here every feature
is written once into a channel-major buffer ``(channels, pad_left + time + pad_right,
batch)`` per dense block. Any row range of it, permuted to ``(time, batch, channels)``, is
a strided ``(T*B, C)`` matrix that ``torch.conv_tbc`` reads in place; an autograd function
routes its gradient back to the features written there. Under autocast the buffer is in
the autocast dtype, so a feature is cast once, when written, not by every later reader.
"""

import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
from fairseq.modules import ConvTBC
from torch import Tensor
from torch.nn.utils.parametrizations import weight_norm

from fairseq_dense.modules.inference_weights import CachedLinear, CachedLinearizedConvolution
from fairseq_dense.modules.low_precision import compute_dtype


class _BufferRows(torch.autograd.Function):
    """Rows ``[start, end)``, frames ``[first, last)`` of a :class:`FeatureBuffer` as a view (no copy);
    backward hands each feature in those rows its slice of the gradient."""

    @staticmethod
    def forward(ctx, buffer: "FeatureBuffer", start: int, end: int, first: int, last: int, *features: Tensor):
        ctx.slices = [(o - start, f.size(0)) for o, f in buffer.inside(start, end)]
        ctx.time = (buffer.pad_left - first, buffer.time)
        # ``.data`` gives a fresh version counter: later writes of new features
        # into other rows must not invalidate views saved by earlier layers.
        return buffer.data.data[start:end, first:last]

    @staticmethod
    def backward(ctx, grad: Tensor):
        p, t = ctx.time
        grads = [grad[o : o + c, p : p + t] for o, c in ctx.slices]
        return (None, None, None, None, None, *grads)


class FeatureBuffer:
    """Preallocated channel-major feature store for one dense block.

    ``data`` is ``(capacity, pad_left + time + pad_right, batch)``: ``capacity`` channels of
    all the block's features, zero frames around the sequence (convolution padding), on
    ``like``'s device in :func:`compute_dtype` of ``like``.
    """

    def __init__(self, capacity: int, time: int, batch: int, pad_left: int, pad_right: int, like: Tensor):
        self.data = like.new_zeros(capacity, pad_left + time + pad_right, batch, dtype=compute_dtype(like))
        self.pad_left = pad_left
        self.time = time
        self.width = 0
        self.features: List[Tensor] = []
        self.offsets: List[int] = []

    def append(self, feature: Tensor) -> None:
        """Write a ``(C, T, B)`` feature into the next free rows (cast to the buffer's dtype)."""
        c = feature.size(0)
        with torch.no_grad():
            self.data[self.width : self.width + c, self.pad_left : self.pad_left + self.time].copy_(feature)
        self.features.append(feature)
        self.offsets.append(self.width)
        self.width += c

    def inside(self, start: int, end: int) -> List[Tuple[int, Tensor]]:
        """``(offset, feature)`` of the features that lie in rows ``[start, end)``."""
        return [(o, f) for o, f in zip(self.offsets, self.features) if o >= start and o + f.size(0) <= end]

    def rows(self, start: int = 0, end: Optional[int] = None, first: int = 0, last: Optional[int] = None) -> Tensor:
        """Rows ``[start, end)`` (default: all written), frames ``[first, last)`` (default: all,
        padding included): ``(C, last - first, B)``. Rows fall on feature boundaries; the frames
        cover the sequence."""
        end = self.width if end is None else end
        last = self.data.size(1) if last is None else last
        inside = [f for _, f in self.inside(start, end)]
        if sum(f.size(0) for f in inside) != end - start:
            raise ValueError(f"rows [{start}, {end}) do not fall on feature boundaries {self.offsets}")
        if not 0 <= first <= self.pad_left or not self.pad_left + self.time <= last <= self.data.size(1):
            raise ValueError(f"frames [{first}, {last}) do not cover the sequence of the buffer")
        return _BufferRows.apply(self, start, end, first, last, *inside)

    def conv_input(self, kernel_size: int, left: int, start: int = 0, end: Optional[int] = None) -> Tensor:
        """The rows a convolution of ``kernel_size`` reads, from frame ``left`` on:
        ``(C, T + kernel_size - 1, B)``, for :func:`conv_rows`."""
        return self.rows(start, end, left, left + self.time + kernel_size - 1)

    def center(self, rows: Tensor) -> Tensor:
        """Drop the time padding of a :meth:`rows` result (all frames): ``(C, T, B)``."""
        return rows[:, self.pad_left : self.pad_left + self.time]


def conv_rows(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Unpadded 1-D convolution of a channel-major ``(C, T + k - 1, B)`` view (read in place by ``torch.conv_tbc``)
    with ``(k, C, O)`` ``weight`` (ConvTBC layout): ``(O, T, B)``, frame ``t`` ``bias + sum_j W_j^T x[:, t + j]``."""
    y = torch.conv_tbc(x.permute(1, 2, 0), weight, bias, 0)  # C x T' x B -> T' x B x C -> T x B x O
    return y.permute(2, 0, 1)  # T x B x O -> O x T x B


def linear_rows(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Position-wise linear map of a channel-major ``(C, T, B)`` tensor -> ``(O, T, B)``."""
    c, t, b = x.shape
    x = x.reshape(c, t * b)  # a view for rows of a FeatureBuffer
    return torch.addmm(bias.unsqueeze(1), weight, x).view(-1, t, b)


def glu_rows(x: Tensor) -> Tensor:
    """GLU over the channel dimension of a channel-major tensor (Dauphin et al. 2017)."""
    return nn.functional.glu(x, dim=0)


def Linear(in_features: int, out_features: int, dropout: float = 0.0, use_weight_norm: bool = True) -> nn.Linear:
    """Linear layer with ConvS2S initialisation, optionally weight-normalised (cached in inference)."""
    m = CachedLinear(in_features, out_features)
    nn.init.normal_(m.weight, mean=0, std=math.sqrt((1 - dropout) / in_features))
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
    """ConvS2S-initialised ConvTBC (encoder) or cached LinearizedConvolution (decoder).

    ``weight`` is ``(kernel, in, out)``, weight-normalised per output channel as in fconv.
    """
    cls = CachedLinearizedConvolution if incremental else ConvTBC
    m = cls(in_channels, out_channels, kernel_size, padding=kernel_size - 1 if incremental else 0)
    std = math.sqrt((4 * (1.0 - dropout)) / (kernel_size * in_channels))
    nn.init.normal_(m.weight, mean=0, std=std)
    nn.init.constant_(m.bias, 0)
    return weight_norm(m, dim=2) if use_weight_norm else m


def normal_embedding(weight: Tensor) -> None:
    """fconv's embedding initialisation, N(0, 0.1) (for :func:`~fairseq_dense.modules.encoder_decoder.embedding`)."""
    nn.init.normal_(weight, 0, 0.1)


def plan_blocks(num_layers: int, sumlen: Optional[int]) -> List[List[int]]:
    """Layer indices per dense block: ``sumlen - 1`` each (a summary layer, the ``sumlen``-th, follows
    every block but the last), or one block without ``sumlen``."""
    if not sumlen:
        return [list(range(num_layers))]
    n = sumlen - 1
    return [list(range(i, min(i + n, num_layers))) for i in range(0, num_layers, n)]
