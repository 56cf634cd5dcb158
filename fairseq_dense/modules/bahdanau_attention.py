"""Additive (MLP) attention of Bahdanau et al. (2014), batched over source positions."""

from typing import Tuple

import torch
import torch.nn as nn
from torch import Tensor


class BahdanauAttention(nn.Module):
    """``e_ti = v^T tanh(W_k h_i + W_q s_t + b)``, ``a_t = softmax(e_t)``, ``c_t = sum_i a_ti h_i``.

    Neural Machine Translation by Jointly Learning to Align and Translate,
    https://arxiv.org/abs/1409.0473. The keys' projection ``W_k h_i + b`` depends only
    on the encoder, so callers compute it once per sentence with :meth:`project_keys`
    and pass it to every step; the scores of all source positions are one batched
    tensor expression (no loop over positions).

    Args:
        query_dim: size of the decoder state ``s_t``.
        key_dim: size of the annotations ``h_i``.
        attention_dim: hidden size of the scoring MLP.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, attention_dim, bias=True)
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)
        self.v = nn.Linear(attention_dim, 1, bias=False)

    def project_keys(self, keys: Tensor) -> Tensor:
        """``W_k h_i + b``: ``(src_len, batch, key_dim)`` -> ``(batch, src_len, attention_dim)``."""
        return self.key_proj(keys.transpose(0, 1))

    def forward(self, query: Tensor, proj_keys: Tensor, values: Tensor, padding_mask: Tensor) -> Tuple[Tensor, Tensor]:
        """Attend for one step.

        Args:
            query: ``(batch, query_dim)``.
            proj_keys: ``(batch, src_len, attention_dim)`` from :meth:`project_keys`.
            values: ``(batch, src_len, value_dim)``.
            padding_mask: ``(batch, src_len)``, True at padding.

        Returns:
            ``(context, attn)``: ``(batch, value_dim)`` and ``(batch, src_len)``.
        """
        query = query.unsqueeze(1)
        # B x 1 x 1 x A + B x 1 x T x A -> B x 1 x T
        scores = self.v(torch.tanh_(self.query_proj(query).unsqueeze(2) + proj_keys.unsqueeze(1))).squeeze(-1)
        scores = scores.masked_fill(padding_mask.unsqueeze(1), float("-inf"))
        attn = torch.softmax(scores.float(), dim=-1).type_as(scores)
        context = torch.bmm(attn, values)  # B x 1 x V
        return context.squeeze(1), attn.squeeze(1)
