"""Convolutional encoder of DenseNMT: dense (Eq. 6) or residual (ConvS2S)."""

import math
from typing import Dict, List, Optional

import torch.nn as nn
from fairseq.modules import FairseqDropout, GradMultiply, PositionalEmbedding
from torch import Tensor

from fairseq_dense.modules.dense_conv import (
    ConvLayer,
    FeatureBuffer,
    Linear,
    conv_rows,
    glu_rows,
    linear_rows,
    normal_embedding,
    plan_blocks,
)
from fairseq_dense.modules.encoder_decoder import Encoder, embedding


class DenseNMTEncoder(Encoder):
    """DenseNMT encoder (Shen et al. 2018, https://arxiv.org/abs/1806.00722).

    Dense: ``h^{l+1} = GLU(conv([h^l, ..., h^0]))`` (Eq. 5-6), no residual; a summary
    layer (position-wise linear map back to ``embed_dim``) after every
    ``sumlen - 1`` layers starts a new block whose layers look back only to it.
    Residual: ConvS2S (``fc1``, ``(GLU(conv(x)) + x) * sqrt(1/2)``). Dropout is
    applied once to every new dense feature (a per-layer dropout of the whole
    concatenation would copy it), and to the input of every residual layer
    (fconv).

    Args:
        embed_dim: ``d_0``, width of ``h^0``.
        hidden_sizes: per-layer growth (dense) or width (residual).
        sumlen: summary period (dense only), or None.
        attention: decoder attention mode; ``multistep`` makes the encoder output a
            single ``embed_dim`` projection of its top features (fconv's ``fc2``),
            the dense modes output every layer since the last summary.
        factorized_dim: small embedding table size, projected to ``embed_dim``.
        grad_scale: encoder-output gradient scale (ConvS2S: ``1 / (2 * #attention layers)``).
    """

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_sizes: List[int],
        kernel_sizes: List[int],
        dense: bool = True,
        sumlen: Optional[int] = None,
        attention: str = "dense2",
        factorized_dim: Optional[int] = None,
        dropout: float = 0.1,
        use_weight_norm: bool = True,
        grad_scale: float = 1.0,
        max_positions: int = 1024,
    ):
        super().__init__(dictionary, max_positions)
        self.embed_dim = embed_dim
        self.dense = dense
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.grad_scale = grad_scale
        self.kernel_sizes = list(kernel_sizes)
        self.hidden_sizes = list(hidden_sizes)
        self.embed_tokens = embedding(dictionary, factorized_dim or embed_dim, normal_embedding)
        self.embed_factor = Linear(factorized_dim, embed_dim, 0.0, use_weight_norm) if factorized_dim else None
        self.embed_positions = PositionalEmbedding(max_positions, embed_dim, self.padding_idx, learned=True)
        self.pad_left = max((k - 1) // 2 for k in kernel_sizes)
        self.pad_right = max(k // 2 for k in kernel_sizes)
        self.blocks = plan_blocks(len(hidden_sizes), sumlen if dense else None)

        self.convs = nn.ModuleList()
        self.summaries = nn.ModuleList()
        if dense:
            self.fc1 = None
            for bi, block in enumerate(self.blocks):
                width = embed_dim
                for i in block:
                    self.convs.append(
                        ConvLayer(width, 2 * hidden_sizes[i], kernel_sizes[i], dropout, use_weight_norm=use_weight_norm)
                    )
                    width += hidden_sizes[i]
                if bi < len(self.blocks) - 1:
                    self.summaries.append(Linear(width, embed_dim, dropout, use_weight_norm))
            self.block_widths = [embed_dim + sum(hidden_sizes[i] for i in b) for b in self.blocks]
            top = self.block_widths[-1]
            # h^1..h^L since the last summary (the summary output counts as one)
            since = ([embed_dim] if len(self.blocks) > 1 else []) + [hidden_sizes[i] for i in self.blocks[-1]]
        else:
            hidden = hidden_sizes[0]
            self.fc1 = Linear(embed_dim, hidden, dropout, use_weight_norm)
            for i, h in enumerate(hidden_sizes):
                self.convs.append(ConvLayer(h, 2 * h, kernel_sizes[i], dropout, use_weight_norm=use_weight_norm))
            top = hidden
            since = list(hidden_sizes)
        if attention == "multistep":
            self.fc2 = Linear(top, embed_dim, dropout, use_weight_norm)
            self.output_dims = [embed_dim]
        else:
            self.fc2 = None
            self.output_dims = since

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **unused) -> Dict[str, List[Tensor]]:
        """Encode left- or right-padded ``(batch, src_len)`` ``src_tokens``.

        Returns:
            dict with
              * ``encoder_out``: ``[(src_len, batch, sum(output_dims))]`` the layers the
                decoder attends to, side by side (``output_dims``), zero at padding;
              * ``encoder_embedding``: ``[(src_len, batch, embed_dim)]`` ``h^0``;
              * ``encoder_padding_mask``: ``[(batch, src_len)]``, True at padding;
              * ``src_lengths``: ``[(batch,)]``.
        """
        padding_mask = src_tokens.eq(self.padding_idx)  # B x T
        bsz, t = src_tokens.shape
        keep = (~padding_mask).t().unsqueeze(0).type_as(self.embed_positions.weight)  # 1 x T x B
        x0 = self.embed_tokens(src_tokens)
        if self.embed_factor is not None:
            x0 = self.embed_factor(x0)
        x0 = self.dropout_module(x0 + self.embed_positions(src_tokens))  # B x T x C
        x0 = x0.permute(2, 1, 0) * keep  # B x T x C -> C x T x B
        plen = self.pad_left
        if self.dense:
            buf = self._dense(x0, keep, t, bsz)
            first = 0 if len(self.blocks) > 1 else self.embed_dim
            top = buf.center(buf.rows())
            visible = top[first:]
        else:
            buf = FeatureBuffer(
                self.embed_dim + sum(self.hidden_sizes) + self.hidden_sizes[0], t, bsz, plen, self.pad_right, x0
            )
            buf.append(x0)
            x = linear_rows(x0, self.fc1.weight, self.fc1.bias) * keep
            buf.append(x)
            start = self.embed_dim
            for conv, k in zip(self.convs, self.kernel_sizes):
                inp = self.dropout_module(buf.conv_input(k, plen - (k - 1) // 2, start, buf.width))
                y = glu_rows(conv_rows(inp, conv.weight, conv.bias))
                x = (y + x) * math.sqrt(0.5) * keep
                start = buf.width
                buf.append(x)
            visible = buf.center(buf.rows(self.embed_dim + self.hidden_sizes[0]))
            top = x
        if self.fc2 is not None:
            visible = linear_rows(top, self.fc2.weight, self.fc2.bias) * keep
        out = visible.permute(1, 2, 0)  # C x T x B -> T x B x C
        if self.grad_scale != 1.0:
            out = GradMultiply.apply(out, self.grad_scale)
        return {
            "encoder_out": [out],
            "encoder_embedding": [x0.permute(1, 2, 0)],
            "encoder_padding_mask": [padding_mask],
            "src_lengths": [src_lengths],
        }

    def _dense(self, x0: Tensor, keep: Tensor, t: int, bsz: int) -> FeatureBuffer:
        """Run the dense blocks (at least one); return the last block's feature buffer."""
        first = x0
        for bi, block in enumerate(self.blocks):
            buf = FeatureBuffer(self.block_widths[bi], t, bsz, self.pad_left, self.pad_right, x0)
            buf.append(first)
            keep_buf = keep.to(buf.data.dtype)  # features stay in the buffer's (autocast) dtype
            for i in block:
                conv, k = self.convs[i], self.kernel_sizes[i]
                y = glu_rows(conv_rows(buf.conv_input(k, self.pad_left - (k - 1) // 2), conv.weight, conv.bias))
                buf.append(self.dropout_module(y * keep_buf))
            if bi < len(self.blocks) - 1:
                s = self.summaries[bi]
                first = linear_rows(buf.center(buf.rows()), s.weight, s.bias) * keep_buf
        return buf
