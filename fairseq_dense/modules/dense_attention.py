"""Multi-step and dense attention of DenseNMT (Shen et al. 2018, Sec. 3.2).

``F(Q, K, V) = softmax(Q K^T) V`` with source padding masked (Eq. 8). Every
``L`` is its own linear map to the attention dimension ``d``.

* ``multistep`` (ConvS2S, Fig. 3a): ``a = F(L(z), L(h^L), L(h^L) + L(h^0))``;
* ``dense1`` (Eq. 9): ``a = F(L(z), L([h^1..h^L]), L([h^1..h^L]) + L(h^0))``;
* ``dense2`` (Eq. 10): ``a = sum_i F(L(z), L_i(h^i), L_i([h^i, h^0]))``.

The encoder-side maps (keys and values) are shared by all decoder layers, as the
encoder output projection is in ConvS2S; each decoder layer owns its query map.
They are computed once per sentence (:meth:`DenseAttention.project_memory`) and
cached by the decoder. DenseAtt-2's per-layer attentions run as one batched
matmul: the ``n`` memories are laid side by side (``n * src_len`` keys), the
softmax is taken per memory and ``sum_i P_i V_i`` is a single product.
"""

from typing import List, Tuple

import torch
import torch.nn as nn
from fairseq import utils
from torch import Tensor

from fairseq_dense.modules.dense_conv import Linear

ATTENTION_MODES = ("multistep", "dense1", "dense2")


class DenseAttention(nn.Module):
    """Encoder-side projections and the attention function of DenseNMT.

    Args:
        mode: ``multistep``, ``dense1`` or ``dense2``.
        layer_dims: widths of the encoder layers the decoder attends to, in
            order (``[h^L]`` for multistep; ``h^1..h^L`` since the last summary
            layer otherwise).
        embed_dim: width of the source embedding ``h^0``.
        attention_dim: ``d``, width of queries, keys and values.
        dropout: used only for the ConvS2S initialisation scale.
        use_weight_norm: weight-normalise the projections (fconv).
        scale_by_source_length: multiply each attention's output by ``sqrt(s)``,
            ``s`` the sentence's unpadded source length (ConvS2S Sec. 3.4: the
            output is a weighted mean of ``s`` vectors, and ``s * sqrt(1/s)``
            restores its variance; fairseq's ``fconv`` does the same). Folded
            into the values once per sentence.
    """

    def __init__(
        self,
        mode: str,
        layer_dims: List[int],
        embed_dim: int,
        attention_dim: int,
        dropout: float = 0.0,
        use_weight_norm: bool = True,
        scale_by_source_length: bool = False,
    ):
        super().__init__()
        if mode not in ATTENTION_MODES:
            raise ValueError(f"unknown attention mode {mode!r}, expected one of {ATTENTION_MODES}")
        self.mode = mode
        self.scale_by_source_length = scale_by_source_length
        self.layer_dims = list(layer_dims)
        self.attention_dim = attention_dim
        if mode == "dense2":
            self.num_memories = len(layer_dims)
            self.key_projs = nn.ModuleList([Linear(d, attention_dim, dropout, use_weight_norm) for d in layer_dims])
            # L_i([h^i, h^0]); applied as two GEMMs so [h^i, h^0] is never built
            self.value_projs = nn.ModuleList(
                [Linear(d + embed_dim, attention_dim, dropout, use_weight_norm) for d in layer_dims]
            )
        else:
            self.num_memories = 1
            width = sum(layer_dims)
            self.key_proj = Linear(width, attention_dim, dropout, use_weight_norm)
            self.value_proj = Linear(width, attention_dim, dropout, use_weight_norm)
            self.embed_proj = Linear(embed_dim, attention_dim, dropout, use_weight_norm)

    def project_memory(self, layers: Tensor, embedding: Tensor, padding_mask: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Keys and values from the encoder, once per sentence.

        Args:
            layers: ``(src_len, batch, sum(layer_dims))`` encoder layers side by side.
            embedding: ``(src_len, batch, embed_dim)`` source embedding ``h^0``.
            padding_mask: ``(batch, src_len)``, True at padding.

        Returns:
            ``keys`` ``(batch, d, n * src_len)`` (transposed once here, not at every
            decoding step), ``values`` ``(batch, n * src_len, d)``, with ``n`` the
            number of memories (1, or the number of encoder layers for dense2), and
            the mask ``(batch, n * src_len)``.
        """
        layers = layers.transpose(0, 1)  # T x B x C -> B x T x C
        embedding = embedding.transpose(0, 1)
        if self.mode != "dense2":
            keys = self.key_proj(layers)
            values = self._scale(self.value_proj(layers) + self.embed_proj(embedding), padding_mask)
            return keys.transpose(1, 2).contiguous(), values, padding_mask
        keys, values = [], []
        for h, kp, vp in zip(layers.split(self.layer_dims, dim=-1), self.key_projs, self.value_projs):
            d = h.size(-1)
            w = vp.weight
            keys.append(kp(h))
            values.append(nn.functional.linear(h, w[:, :d], vp.bias) + nn.functional.linear(embedding, w[:, d:]))
        n = self.num_memories
        keys = torch.cat(keys, dim=1).transpose(1, 2).contiguous()
        return keys, self._scale(torch.cat(values, dim=1), padding_mask), padding_mask.repeat(1, n)

    def _scale(self, values: Tensor, padding_mask: Tensor) -> Tensor:
        """``values * sqrt(s)`` per sentence when scaling by source length.

        Every output row is ``sum_j p_j v_j`` with ``sum_j p_j = 1`` per memory, so
        scaling the values scales the output.
        """
        if not self.scale_by_source_length:
            return values
        lengths = padding_mask.size(1) - padding_mask.sum(dim=1, dtype=values.dtype)  # B
        return values * lengths.clamp(min=1).sqrt().view(-1, 1, 1)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
        """Attend.

        Args:
            query: ``(batch, tgt_len, d)`` projected decoder states ``L(z^l)``.
            keys, values, mask: from :meth:`project_memory`.

        Returns:
            ``(out, attn)``: ``(batch, tgt_len, d)`` and the attention weights
            averaged over memories, ``(batch, tgt_len, src_len)``.
        """
        b, tq, _ = query.shape
        n = self.num_memories
        scores = torch.bmm(query, keys)  # B x Tq x n*Tk
        scores = scores.masked_fill(mask.unsqueeze(1), float("-inf"))
        probs = utils.softmax(scores.view(b, tq, n, -1), dim=-1).type_as(scores)  # per memory
        out = torch.bmm(probs.view(b, tq, -1), values)  # sum_i P_i V_i
        return out, probs.mean(dim=2)
