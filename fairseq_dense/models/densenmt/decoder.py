"""Causal convolutional decoder of DenseNMT with per-layer (dense) attention."""

import math
from typing import List, Optional, Tuple

import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import FairseqDropout, PositionalEmbedding
from torch import Tensor

from fairseq_dense.modules.dense_attention import DenseAttention
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
from fairseq_dense.modules.encoder_decoder import IncrementalDecoder, embedding


class DenseNMTDecoder(IncrementalDecoder):
    """DenseNMT decoder (Shen et al. 2018, https://arxiv.org/abs/1806.00722).

    Every layer is a causal GLU convolution followed by attention ``a^l`` queried
    by ``L(z^l)`` (see :class:`DenseAttention`). Dense (Eq. 7): layer ``l+1``
    reads ``[z^l, a^l, ..., z^1, a^1, z^0]``; a summary layer (position-wise linear
    map to ``embed_dim``) after every ``sumlen - 1`` layers starts a new block. The
    output is ``fc2`` of the last block's concatenation (summary output included),
    then the softmax matrix ``fc3``. Residual: ConvS2S,
    ``x = ((z + W a) sqrt(1/2) + x) sqrt(1/2)``, output ``fc3(fc2(x))``.

    Incremental state (key ``densenmt_state``): ``keys``
    ``(batch, attention_dim, n * src_len)``, ``values``
    ``(batch, n * src_len, attention_dim)`` and ``mask`` ``(batch, n * src_len)``,
    the encoder projections, computed once per sentence. Each
    ``LinearizedConvolution`` keeps (and reorders) its own input buffer.

    Arguments not listed are as for :class:`~fairseq_dense.models.densenmt.encoder.DenseNMTEncoder`.

    Args:
        kernel_sizes: per-layer causal convolution widths.
        encoder_dims: widths of the encoder layers in ``encoder_out``.
        encoder_embed_dim: width of the source embedding.
        attention_dim: attention width (also the width of ``a^l`` when dense).
        out_embed_dim: width of the softmax matrix.
        attention_length_scale: scale attention outputs by ``sqrt(source length)``
            (see :class:`DenseAttention`).
        share_input_output_embed: the softmax matrix ``fc3`` is the embedding table, an
            unnormalised linear map as in fconv.
        embed_tokens: the encoder's embedding table (``--share-all-embeddings``); None: a new one.
    """

    STATE_KEY = "densenmt_state"
    MEMORY = ("keys", "values", "mask")

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_sizes: List[int],
        kernel_sizes: List[int],
        encoder_dims: List[int],
        encoder_embed_dim: int,
        attention: str = "dense2",
        attention_dim: int = 128,
        dense: bool = True,
        sumlen: Optional[int] = None,
        out_embed_dim: int = 256,
        factorized_dim: Optional[int] = None,
        dropout: float = 0.1,
        use_weight_norm: bool = True,
        max_positions: int = 1024,
        attention_length_scale: bool = False,
        share_input_output_embed: bool = False,
        embed_tokens: Optional[nn.Embedding] = None,
    ):
        super().__init__(dictionary, max_positions)
        self.embed_dim = embed_dim
        self.dense = dense
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.hidden_sizes = list(hidden_sizes)
        self.kernel_sizes = list(kernel_sizes)
        wn = use_weight_norm
        self.embed_tokens = embedding(dictionary, factorized_dim or embed_dim, normal_embedding, embed_tokens)
        self.embed_factor = Linear(factorized_dim, embed_dim, 0.0, wn) if factorized_dim else None
        self.embed_positions = PositionalEmbedding(max_positions, embed_dim, self.padding_idx, learned=True)
        self.attention = DenseAttention(
            attention,
            encoder_dims,
            encoder_embed_dim,
            attention_dim,
            dropout,
            wn,
            scale_by_source_length=attention_length_scale,
        )
        self.pad_left = max(k - 1 for k in kernel_sizes)
        self.blocks = plan_blocks(len(hidden_sizes), sumlen if dense else None)
        self.convs = nn.ModuleList()
        self.query_projs = nn.ModuleList()
        self.summaries = nn.ModuleList()
        if dense:
            self.fc1 = None
            self.attn_out_projs = None
            self.block_widths = []
            for bi, block in enumerate(self.blocks):
                width = embed_dim
                for i in block:
                    h = hidden_sizes[i]
                    self.convs.append(ConvLayer(width, 2 * h, kernel_sizes[i], dropout, True, wn))
                    self.query_projs.append(Linear(h, attention_dim, 0.0, wn))
                    width += h + attention_dim
                self.block_widths.append(width)
                if bi < len(self.blocks) - 1:
                    self.summaries.append(Linear(width, embed_dim, dropout, wn))
            top = self.block_widths[-1]
        else:
            hidden = hidden_sizes[0]
            self.fc1 = Linear(embed_dim, hidden, dropout, wn)
            self.attn_out_projs = nn.ModuleList()
            for i, h in enumerate(hidden_sizes):
                self.convs.append(ConvLayer(h, 2 * h, kernel_sizes[i], dropout, True, wn))
                self.query_projs.append(Linear(h, attention_dim, 0.0, wn))
                self.attn_out_projs.append(Linear(attention_dim, h, 0.0, wn))
            top = hidden
        self.out_embed_dim = factorized_dim or out_embed_dim
        self.fc2 = Linear(top, self.out_embed_dim, dropout, wn)
        if share_input_output_embed:
            self.fc3 = nn.Linear(self.out_embed_dim, len(dictionary))
            self.fc3.weight = self.embed_tokens.weight
        else:
            self.fc3 = Linear(self.out_embed_dim, len(dictionary), dropout, wn)

    def _embed(self, prev_output_tokens: Tensor, incremental_state) -> Tensor:
        # positions from the whole prefix: with a cache, only the last one is returned
        positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        x = self.embed_tokens(prev_output_tokens)
        if self.embed_factor is not None:
            x = self.embed_factor(x)
        return self.dropout_module(x + positions)  # B x T x C

    def _memory(self, encoder_out, incremental_state) -> Tuple[Tensor, Tensor, Tensor]:
        cached = self.get_cache(incremental_state)
        if cached is not None:
            return cached["keys"], cached["values"], cached["mask"]
        keys, values, mask = self.attention.project_memory(
            encoder_out["encoder_out"][0],
            encoder_out["encoder_embedding"][0],
            encoder_out["encoder_padding_mask"][0],
        )
        if incremental_state is not None:
            self.set_cache(incremental_state, {"keys": keys, "values": values, "mask": mask})
        return keys, values, mask

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None, **unused):
        memory = self._memory(encoder_out, incremental_state)  # keys, values, mask
        x0 = self._embed(prev_output_tokens, incremental_state)
        if incremental_state is not None:
            feats, attn = self._step(x0, memory, incremental_state)
        else:
            feats, attn = self._full(x0, memory)
        feats = self.dropout_module(feats)
        return feats, {"attn": [attn / len(self.convs)]}

    def _attend(self, i: int, z: Tensor, memory, attn_sum: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        """Attention of layer ``i`` queried by ``(B, T, C)`` ``z``: its output and the attention summed over layers."""
        a, attn = self.attention(self.query_projs[i](z), *memory)
        return a, attn if attn_sum is None else attn_sum + attn

    def _full(self, x0: Tensor, memory) -> Tuple[Tensor, Tensor]:
        """All positions at once from a ``(B, T, C)`` embedding; returns ``fc2`` features."""
        bsz, t, _ = x0.shape
        x0 = x0.permute(2, 1, 0)  # B x T x C -> C x T x B
        attn_sum = None
        p = self.pad_left
        if self.dense:
            first = x0
            for bi, block in enumerate(self.blocks):
                buf = FeatureBuffer(self.block_widths[bi], t, bsz, p, 0, x0)
                buf.append(first)
                for i in block:  # the layers' indices, in order
                    conv, k = self.convs[i], self.kernel_sizes[i]
                    z = glu_rows(conv_rows(buf.conv_input(k, p - (k - 1)), conv.weight, conv.bias))
                    a, attn_sum = self._attend(i, z.permute(2, 1, 0), memory, attn_sum)
                    buf.append(self.dropout_module(z))
                    buf.append(a.permute(2, 1, 0))
                if bi < len(self.blocks) - 1:
                    s = self.summaries[bi]
                    first = linear_rows(buf.center(buf.rows()), s.weight, s.bias)
            top = buf.center(buf.rows())
        else:
            buf = FeatureBuffer(self.embed_dim + self.hidden_sizes[0] * (1 + len(self.convs)), t, bsz, p, 0, x0)
            buf.append(x0)
            x = linear_rows(x0, self.fc1.weight, self.fc1.bias)
            start = buf.width
            buf.append(x)
            for i, conv in enumerate(self.convs):
                k = self.kernel_sizes[i]
                inp = self.dropout_module(buf.conv_input(k, p - (k - 1), start, buf.width))
                z = glu_rows(conv_rows(inp, conv.weight, conv.bias))
                a, attn_sum = self._attend(i, z.permute(2, 1, 0), memory, attn_sum)
                y = (z + self.attn_out_projs[i](a).permute(2, 1, 0)) * math.sqrt(0.5)
                x = (y + x) * math.sqrt(0.5)
                start = buf.width
                buf.append(x)
            top = x
        out = linear_rows(top, self.fc2.weight, self.fc2.bias)
        return out.permute(2, 1, 0), attn_sum  # C x T x B -> B x T x C

    def _step(self, x0: Tensor, memory, incremental_state) -> Tuple[Tensor, Tensor]:
        """One position from a ``(B, 1, C)`` embedding, using the convolutions' input buffers."""
        attn_sum = None
        if self.dense:
            first = x0
            for bi, block in enumerate(self.blocks):
                buf = x0.new_zeros(x0.size(0), 1, self.block_widths[bi])  # preallocated step features
                w = first.size(-1)
                buf[..., :w] = first
                for i in block:
                    z = F.glu(self.convs[i](buf[..., :w], incremental_state), dim=-1)
                    a, attn_sum = self._attend(i, z, memory, attn_sum)
                    buf[..., w : w + z.size(-1)] = z
                    w += z.size(-1)
                    buf[..., w : w + a.size(-1)] = a
                    w += a.size(-1)
                if bi < len(self.blocks) - 1:
                    first = self.summaries[bi](buf)
            top = buf
        else:
            x = self.fc1(x0)
            for i, conv in enumerate(self.convs):
                z = F.glu(conv(x, incremental_state), dim=-1)
                a, attn_sum = self._attend(i, z, memory, attn_sum)
                x = ((z + self.attn_out_projs[i](a)) * math.sqrt(0.5) + x) * math.sqrt(0.5)
            top = x
        return self.fc2(top), attn_sum

    def output_layer(self, features: Tensor) -> Tensor:
        return self.fc3(features)
