"""Dense (concatenative) convolution without per-layer concatenation copies.

DenseNMT (Shen et al. 2018, https://arxiv.org/abs/1806.00722, Eq. 6-7) feeds layer
``l+1`` the concatenation of all earlier outputs. A naive ``torch.cat`` per layer
copies every earlier feature again for every layer and keeps each copy alive for
the backward pass: quadratic traffic and memory in the depth.

Here every feature is written once into a buffer preallocated once per dense block,
*channel-major*, of shape ``(channels, pad_left + time + pad_right, batch)``. A
prefix (or any row range) of such a buffer, permuted to ``(time, batch, channels)``,
is a strided matrix ``(T*B, C)`` that ``torch.conv_tbc`` (fairseq's ``ConvTBC``)
reads in place: no copy of earlier features, and nothing but a view saved for
backward. A small autograd function routes the gradient of a row range back to the
features that were written into it.

Mixed precision: ``conv_tbc`` and ``mm`` have autocast rules, so the convolutions
and linear maps run in the low precision under ``torch.autocast``; the buffer is
then allocated in the autocast dtype, so that features are cast once, when written,
rather than once per later layer that reads them.
"""

import math
from typing import List, Optional

import torch
import torch.nn as nn
from fairseq.modules import ConvTBC
from torch import Tensor
from torch.nn.utils.parametrizations import weight_norm

from fairseq_dense.modules.inference_weights import CachedLinear, CachedLinearizedConvolution
from fairseq_dense.modules.low_precision import compute_dtype


class _BufferRows(torch.autograd.Function):
    """Autograd view of rows ``[start, end)``, frames ``[first, last)`` of a :class:`FeatureBuffer`.

    Forward returns the rows as a view of the buffer's storage (no copy);
    backward hands each feature that lives in those rows its slice of the
    incoming gradient.
    """

    @staticmethod
    def forward(ctx, buffer: "FeatureBuffer", start: int, end: int, first: int, last: int, *features: Tensor):
        ctx.slices = [(o - start, f.size(0)) for o, f in zip(buffer.offsets_in(start, end), features)]
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

    Args:
        capacity: total channels of all features the block will hold.
        time: sequence length ``T``.
        batch: batch size ``B``.
        pad_left: zero frames before the sequence (convolution padding).
        pad_right: zero frames after the sequence.
        like: tensor giving device and dtype (the autocast dtype when autocast is on,
            see :func:`compute_dtype`).

    ``data`` has shape ``(capacity, pad_left + T + pad_right, batch)``.
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
        if self.width + c > self.data.size(0):
            raise RuntimeError(f"feature buffer overflow: {self.width} + {c} > {self.data.size(0)}")
        with torch.no_grad():
            self.data[self.width : self.width + c, self.pad_left : self.pad_left + self.time].copy_(feature)
        self.features.append(feature)
        self.offsets.append(self.width)
        self.width += c

    def offsets_in(self, start: int, end: int) -> List[int]:
        """Offsets of the features that lie in rows ``[start, end)``."""
        return [o for o, f in zip(self.offsets, self.features) if o >= start and o + f.size(0) <= end]

    def rows(self, start: int = 0, end: Optional[int] = None, first: int = 0, last: Optional[int] = None) -> Tensor:
        """Rows ``[start, end)`` (default: all written rows), frames ``[first, last)`` (default:
        all, time padding included): ``(C, last - first, B)``.

        ``start``/``end`` must fall on feature boundaries; the frames must cover the
        sequence (``first <= pad_left``, ``last >= pad_left + time``).
        """
        end = self.width if end is None else end
        last = self.data.size(1) if last is None else last
        inside = [f for o, f in zip(self.offsets, self.features) if o >= start and o + f.size(0) <= end]
        if sum(f.size(0) for f in inside) != end - start:
            raise ValueError(f"rows [{start}, {end}) do not fall on feature boundaries {self.offsets}")
        if not 0 <= first <= self.pad_left or not self.pad_left + self.time <= last <= self.data.size(1):
            raise ValueError(f"frames [{first}, {last}) do not cover the sequence of the buffer")
        return _BufferRows.apply(self, start, end, first, last, *inside)

    def conv_input(self, kernel_size: int, left: int, start: int = 0, end: Optional[int] = None) -> Tensor:
        """The rows a convolution of ``kernel_size`` reads, from frame ``left`` on:
        ``(C, T + kernel_size - 1, B)``, for :func:`conv_rows` with ``left=0``."""
        return self.rows(start, end, left, left + self.time + kernel_size - 1)

    def center(self, rows: Tensor) -> Tensor:
        """Drop the time padding of a :meth:`rows` result (all frames): ``(C, T, B)``."""
        return rows[:, self.pad_left : self.pad_left + self.time]


def conv_rows(x: Tensor, weight: Tensor, bias: Tensor, time: int, left: int) -> Tensor:
    """1-D convolution over a channel-major, time-padded view, by ``torch.conv_tbc``.

    ``conv_tbc`` reads the view in place (a strided ``(T*B, C)`` matrix per tap) and
    has an autocast rule: it runs in the low precision under ``torch.autocast``.

    Args:
        x: ``(C, T_pad, B)`` input (e.g. :meth:`FeatureBuffer.rows`).
        weight: ``(k, C, O)`` (ConvTBC layout).
        bias: ``(O,)``.
        time: number of output frames ``T``.
        left: first input frame read by output frame 0 (buffer padding minus the
            layer's own left padding; 0 with :meth:`FeatureBuffer.conv_input`).

    Returns:
        ``(O, T, B)``; output frame ``t`` is ``bias + sum_j W_j^T x[:, left + t + j]``.
    """
    k = weight.size(0)
    if left or x.size(1) != time + k - 1:
        x = x[:, left : left + time + k - 1]
    y = torch.conv_tbc(x.permute(1, 2, 0), weight, bias, 0)  # C x T' x B -> T' x B x C -> T x B x O
    return y.permute(2, 0, 1)  # T x B x O -> O x T x B


def linear_rows(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    """Position-wise linear map of a channel-major ``(C, T, B)`` tensor -> ``(O, T, B)``."""
    c, t, b = x.shape
    x = x.reshape(c, t * b)  # a view for rows of a FeatureBuffer
    y = torch.mm(weight, x) if bias is None else torch.addmm(bias.unsqueeze(1), weight, x)
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
