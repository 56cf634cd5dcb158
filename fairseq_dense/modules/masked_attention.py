"""Scaled dot-product attention with the masks that let SDPA choose its fused kernels: causal
as ``is_causal`` and padding as a boolean mask (True: attend), not float ``-inf`` masks."""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from torch import Tensor


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Optional[Tensor] = None,
    key_padding_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    is_causal: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Multi-head attention of ``(B, H, T, d)`` queries ``q`` over ``(B, H, S, d)`` keys and values.

    Args:
        attn_mask: ``(T, S)`` float additive or boolean (True: attend) mask; ignored when ``is_causal``.
        key_padding_mask: ``(B, S)``, True at padded keys.
        need_weights: also return the probabilities (computed explicitly, not by SDPA).
        is_causal: causal attention (``T == S``), e.g. in place of fairseq's future mask.

    Returns:
        ``(B, H, T, d)`` output and ``(H, B, T, S)`` probabilities if asked for (else None).
    """
    T, S = q.size(2), k.size(2)
    mask = None
    if is_causal and (key_padding_mask is not None or need_weights):
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril().view(1, 1, T, S)
        is_causal = False
    elif attn_mask is not None and not is_causal:
        mask = attn_mask.view(1, 1, T, S)
        if mask.dtype != torch.bool:
            mask = mask.to(q.dtype)
    if key_padding_mask is not None:
        keep = ~key_padding_mask.view(key_padding_mask.size(0), 1, 1, S).to(torch.bool)
        if mask is None:
            mask = keep
        elif mask.dtype == torch.bool:
            mask = mask & keep
        else:
            mask = mask.masked_fill(~keep, float("-inf"))
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal), None
    scores = torch.matmul(q * q.size(-1) ** -0.5, k.transpose(-1, -2))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = utils.softmax(scores, dim=-1).type_as(q)
    out = torch.matmul(F.dropout(probs, p=dropout_p, training=dropout_p > 0), v)
    return out, probs.transpose(0, 1)
