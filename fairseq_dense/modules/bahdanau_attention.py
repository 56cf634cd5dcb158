"""Additive (MLP) attention of Bahdanau et al. (2014), batched over source positions."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def additive_scores(doubled_sum: Tensor, v: Tensor) -> Tensor:
    """Bahdanau's scores ``v^T tanh(z)`` up to a constant per ``v``, from ``2 z``.

    ``tanh(z) = 2 sigmoid(2 z) - 1``, so ``v^T tanh(z) = 2 v^T sigmoid(2 z) - sum(v)``;
    the constant ``sum(v)`` is the same for every source position and cancels in the
    softmax over them, so ``softmax(2 v^T sigmoid(2 z))`` is the paper's attention. On CPUs
    ``torch.tanh`` costs 5-7x ``torch.sigmoid`` per element (PyTorch 2.13, AVX-512), and
    this ``(..., src_len, attention_dim)`` tensor is the largest of an attention step. The
    callers fold the factor 2 of ``2 z`` into their (once per sentence) projected keys and
    their query projection, so no pass over the large tensor is added.

    Args:
        doubled_sum: ``(..., attention_dim)``, ``2 z``, a fresh tensor (overwritten).
        v: ``(attention_dim,)`` the score vector, or ``(branches, attention_dim)`` one per
            branch, broadcast against ``doubled_sum``'s last two dimensions.

    Returns:
        ``(...)`` the scores, each ``v``'s off by its own constant ``-sum(v)``.
    """
    gate = doubled_sum.sigmoid_()
    if v.dim() == 1:
        return torch.matmul(gate, 2 * v)
    return (gate * (2 * v)).sum(-1)


class BahdanauAttention(nn.Module):
    """``e_ti = v^T tanh(W_k h_i + W_q s_t)``, ``a_t = softmax(e_t)``, ``c_t = sum_i a_ti h_i``.

    Neural Machine Translation by Jointly Learning to Align and Translate,
    https://arxiv.org/abs/1409.0473. The keys' projection ``W_k h_i`` depends only on
    the encoder, so callers compute it once per sentence with :meth:`project_keys`
    and pass it to every step; the scores of all source positions are one batched
    tensor expression (no loop over positions). The projected keys are kept doubled,
    ``2 (W_k h_i + b)``, and the scores are computed with a sigmoid instead of the
    tanh (:func:`additive_scores`; same attention weights, a fifth of the cost).

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
        """``(src_len, batch, key_dim)`` -> ``(batch, src_len, attention_dim)``: the doubled
        projection ``2 (W_k h_i + b)`` that :meth:`weights` expects."""
        return self.project_keys_batch_first(keys.transpose(0, 1))

    def project_keys_batch_first(self, keys: Tensor) -> Tensor:
        """:meth:`project_keys` of ``(batch, src_len, key_dim)`` annotations."""
        return F.linear(keys, 2 * self.key_proj.weight, 2 * self.key_proj.bias)

    def forward(
        self,
        query: Tensor,
        proj_keys: Tensor,
        values: Tensor,
        padding_mask: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor]:
        """Attend for one or more query steps at once.

        Args:
            query: ``(batch, query_dim)`` or ``(batch, steps, query_dim)``.
            proj_keys: ``(batch, src_len, attention_dim)`` from :meth:`project_keys` (doubled).
            values: ``(batch, src_len, value_dim)``.
            padding_mask: ``(batch, src_len)``, True at padding.

        Returns:
            ``(context, attn)``: ``(batch[, steps], value_dim)`` and
            ``(batch[, steps], src_len)``.
        """
        single = query.dim() == 2
        attn = self.weights(query.unsqueeze(1) if single else query, proj_keys, padding_mask)
        context = torch.bmm(attn, values)  # B x S x V
        if single:
            return context.squeeze(1), attn.squeeze(1)
        return context, attn

    def weights(self, query: Tensor, proj_keys: Tensor, padding_mask: Optional[Tensor] = None) -> Tensor:
        """The attention weights alone, for callers that apply them to values of their own
        (e.g. values already multiplied by the matrices that consume the context).

        Args:
            query: ``(batch, query_dim)`` or ``(batch, steps, query_dim)``.
            proj_keys: ``(batch, src_len, attention_dim)`` from :meth:`project_keys` (doubled).
            padding_mask: ``(batch, src_len)``, True at padding.

        Returns:
            ``(batch[, steps], src_len)``, each row summing to 1.
        """
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)
        # 2 W_q s: B x S x 1 x A + B x 1 x T x A -> B x S x T; the sum is a fresh (B, S, T, A)
        # tensor, the largest of the step, overwritten by additive_scores
        query2 = F.linear(query, 2 * self.query_proj.weight)
        scores = additive_scores(query2.unsqueeze(2) + proj_keys.unsqueeze(1), self.v.weight.view(-1))
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask.unsqueeze(1), float("-inf"))
        attn = torch.softmax(scores.float(), dim=-1).type_as(scores)
        return attn.squeeze(1) if single else attn
