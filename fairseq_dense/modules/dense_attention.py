"""Multi-step and dense attention of DenseNMT (Shen et al. 2018, Sec. 3.2).

``F(Q, K, V) = softmax(Q K^T) V`` with source padding masked (Eq. 8); every ``L`` is its own
linear map to the attention dimension ``d``:

* ``multistep`` (ConvS2S, Fig. 3a): ``a = F(L(z), L(h^L), L(h^L) + L(h^0))``;
* ``dense1`` (Eq. 9): ``a = F(L(z), L([h^1..h^L]), L([h^1..h^L]) + L(h^0))``;
* ``dense2`` (Eq. 10): ``a = sum_i F(L(z), L_i(h^i), L_i([h^i, h^0]))``.

The key/value maps are shared by all decoder layers (as ConvS2S's encoder output
projection), computed once per sentence and cached by the decoder; each decoder layer owns
its query map. DenseAtt-2's ``n`` memories lie side by side (``n * src_len`` keys), so its
attentions are one batched matmul with the softmax per memory.
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
        layer_dims: widths of the encoder layers attended to (``[h^L]`` for multistep; else
            ``h^1..h^L`` since the last summary layer).
        embed_dim: width of the source embedding ``h^0``.
        attention_dim: ``d``, width of queries, keys and values.
        dropout: used only for the ConvS2S initialisation scale.
        use_weight_norm: weight-normalise the projections (fconv).
        scale_by_source_length: multiply each attention's output by ``sqrt(s)``, ``s`` the
            unpadded source length (ConvS2S Sec. 3.4, as fairseq's ``fconv``: it restores the
            variance of a mean of ``s`` vectors). Folded into the values once per sentence.
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
            keys ``(batch, d, n * src_len)`` (transposed once here, not at every step), values
            ``(batch, n * src_len, d)`` and mask ``(batch, n * src_len)``; ``n`` memories.
        """
        layers = layers.transpose(0, 1)  # T x B x C -> B x T x C
        embedding = embedding.transpose(0, 1)
        if self.mode != "dense2":
            keys = self.key_proj(layers)
            values = self._scale(self.value_proj(layers) + self.embed_proj(embedding), padding_mask)
            return keys.transpose(1, 2).contiguous(), values, padding_mask
        keys, values = [], []
        for h, kp, vp in zip(layers.split(self.layer_dims, dim=-1), self.key_projs, self.value_projs):
            d, w = h.size(-1), vp.weight
            keys.append(kp(h))
            values.append(nn.functional.linear(h, w[:, :d], vp.bias) + nn.functional.linear(embedding, w[:, d:]))
        keys = torch.cat(keys, dim=1).transpose(1, 2).contiguous()
        return keys, self._scale(torch.cat(values, dim=1), padding_mask), padding_mask.repeat(1, self.num_memories)

    def _scale(self, values: Tensor, padding_mask: Tensor) -> Tensor:
        """``values * sqrt(s)`` per sentence when scaling by source length (the output, a
        probability-weighted sum of values per memory, scales with them)."""
        if not self.scale_by_source_length:
            return values
        lengths = padding_mask.size(1) - padding_mask.sum(dim=1, dtype=values.dtype)  # B
        return values * lengths.clamp(min=1).sqrt().view(-1, 1, 1)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
        """Attend with ``(batch, tgt_len, d)`` queries ``L(z^l)`` over :meth:`project_memory`'s output.

        Returns:
            ``(batch, tgt_len, d)`` output and ``(batch, tgt_len, src_len)`` weights averaged over memories.
        """
        b, tq, _ = query.shape
        n = self.num_memories
        scores = torch.bmm(query, keys)  # B x Tq x n*Tk
        scores = scores.masked_fill(mask.unsqueeze(1), float("-inf"))
        probs = utils.softmax(scores.view(b, tq, n, -1), dim=-1).type_as(scores)  # per memory
        out = torch.bmm(probs.view(b, tq, -1), values)  # sum_i P_i V_i
        return out, probs.mean(dim=2)
