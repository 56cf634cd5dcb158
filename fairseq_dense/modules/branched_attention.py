"""Branched attention block of the Weighted Transformer (Ahmed et al., 2017, Eq. 5-7).

https://arxiv.org/abs/1711.02132. One block replaces a Transformer attention
sub-layer *and* the feed-forward sub-layer after it::

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)                       (5)
    hbar_i = kappa_i * (dropout(head_i) W_i^O + b^O)                    (6)
    u_i    = LN_a(x + hbar_i)
    y      = LN_f(sum_i alpha_i u_i + dropout(sum_i alpha_i FFN_i(u_i)))  (7)

with M branches of ``num_heads / M`` heads, ``FFN_i(u) = W2_i act(W1_i u + b1_i) + b^2``
of inner size ``d_ff / M``, and kappa, alpha each on the probability simplex (projected
after every optimizer step, :mod:`fairseq_dense.modules.simplex`). Post-norm as the
Transformer; ``normalize_before`` gives pre-norm (``u_i = x + hbar_i``, ``FFN_i(LN_f(u_i))``,
no final norm). The layer norms and ``b^O``, ``b^2`` are shared, so the block has the
parameters of a Transformer attention + FFN pair plus the 2M weights kappa, alpha. How it runs
and what it keeps for backward: docs/weighted_transformer.md ("Mixed precision and activation memory").
"""

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules import FairseqDropout, LayerNorm
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from fairseq_dense.modules.low_precision import compute_dtype
from fairseq_dense.modules.simplex import ON_SIMPLEX_ATTR, uniform_simplex

#: ``param_group`` tag of kappa/alpha, read by ``--lr-scheduler grouped``
BRANCH_PARAM_GROUP = "branch"
INFERENCE_WEIGHTS = ("learned", "uniform", "random")
BRANCH_INITS = ("xavier", "transformer")
RESIDUAL_DROPOUT_SITES = ("heads", "outputs")


def _branch_matrix(m: int, fan_in: int, fan_out: int) -> nn.Parameter:
    """``(m, fan_in, fan_out)`` weights, each slice Xavier-uniform for its own shape."""
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    return nn.Parameter(torch.empty(m, fan_in, fan_out).uniform_(-bound, bound))


@with_incremental_state
class BranchedAttention(nn.Module):
    """Multi-branch attention + FFN block (Eq. 5-7), self- or encoder-decoder attention.

    Args:
        embed_dim, num_heads, num_branches, ffn_embed_dim: ``C``, ``H``, ``M``, ``d_ff``
            (``H`` and ``d_ff`` multiples of ``M``).
        kdim: key/value width for encoder-decoder attention (default ``C``).
        self_attention: keys/values are the input (cached per step when decoding), else
            ``key`` (cached once).
        dropout, attention_dropout, activation_dropout, activation_fn, normalize_before:
            as in the Transformer.
        learn_kappa, learn_alpha: learn the weights (else fixed to 1, Table 3).
        simplex: mark kappa/alpha ``on_simplex`` (projected after each step).
        inference_weights: ``learned``, ``uniform`` (1/M) or ``random`` (a fixed draw from
            the simplex, seeded by ``random_seed``) in eval mode (Table 4).
        init: ``transformer``: the branch matrices drawn as fairseq's transformer draws the
            matrices they split; ``xavier``: each slice Xavier-uniform for its own shape,
            zero biases (measured worse, docs/weighted_transformer.md).
        residual_dropout: ``outputs``: on each branch output ``hbar_i``, an ``(M, T*B, C)``
            tensor (the Transformer's placement); ``heads``: on the heads before ``W_i^O``,
            ``(T*B, C)``, cheaper with the same expectation.
        recompute: recompute the branch outputs, ``u_i`` and their layer norm in backward
            (``torch.utils.checkpoint``) instead of keeping two ``(M, T*B, C)`` tensors.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_branches: int,
        ffn_embed_dim: int,
        kdim: Optional[int] = None,
        self_attention: bool = True,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation_fn: str = "relu",
        normalize_before: bool = False,
        learn_kappa: bool = True,
        learn_alpha: bool = True,
        simplex: bool = True,
        inference_weights: str = "learned",
        random_seed: int = 1,
        init: str = "transformer",
        residual_dropout: str = "outputs",
        recompute: bool = False,
    ):
        super().__init__()
        if num_branches < 1 or num_heads % num_branches or ffn_embed_dim % num_branches or embed_dim % num_heads:
            raise ValueError("num_heads and ffn_embed_dim must be multiples of num_branches, embed_dim of num_heads")
        for name, value, allowed in (
            ("inference_weights", inference_weights, INFERENCE_WEIGHTS),
            ("init", init, BRANCH_INITS),
            ("residual_dropout", residual_dropout, RESIDUAL_DROPOUT_SITES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}")
        C, M = embed_dim, num_branches
        kdim = kdim or embed_dim
        self.embed_dim, self.num_heads, self.num_branches = C, num_heads, M
        self.head_dim = C // num_heads
        self.self_attention = self_attention
        self.normalize_before = normalize_before
        self.inference_weights = inference_weights
        self.random_seed = random_seed
        self.drop_outputs = residual_dropout == "outputs"
        self.recompute = recompute

        self.q_proj = nn.Linear(C, C)
        self.k_proj = nn.Linear(kdim, C)
        self.v_proj = nn.Linear(kdim, C)
        for lin in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))
        # W_i^O for all branches: (M, C/M, C); b^O shared
        self.out_weight = _branch_matrix(M, C // M, C)
        self.out_bias = nn.Parameter(torch.zeros(C))
        self.attn_layer_norm = LayerNorm(C)
        ff = ffn_embed_dim // M
        self.fc1_weight = _branch_matrix(M, C, ff)
        self.fc1_bias = nn.Parameter(torch.zeros(M, 1, ff))
        self.fc2_weight = _branch_matrix(M, ff, C)
        self.fc2_bias = nn.Parameter(torch.zeros(C))
        self.final_layer_norm = LayerNorm(C)
        if init == "transformer":
            self._transformer_init(C, ffn_embed_dim)

        self.kappa = self._branch_weight(M, simplex) if learn_kappa else None
        self.alpha = self._branch_weight(M, simplex) if learn_alpha else None
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.attention_dropout = attention_dropout
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)
        self.activation_fn = utils.get_activation_fn(activation_fn)

    @torch.no_grad()
    def _transformer_init(self, embed_dim: int, ffn_embed_dim: int) -> None:
        """``W^O`` Xavier over ``C x C``; FFN weights and biases as ``nn.Linear`` (``1/sqrt(fan_in)``)."""
        xavier = math.sqrt(6.0 / (2 * embed_dim))
        nn.init.uniform_(self.out_weight, -xavier, xavier)
        for weight, bias, fan_in in (
            (self.fc1_weight, self.fc1_bias, embed_dim),
            (self.fc2_weight, self.fc2_bias, ffn_embed_dim),
        ):
            bound = 1.0 / math.sqrt(fan_in)
            nn.init.uniform_(weight, -bound, bound)
            nn.init.uniform_(bias, -bound, bound)

    @staticmethod
    def _branch_weight(m: int, simplex: bool) -> nn.Parameter:
        # "initialised randomly" (paper Sec. 4.1): a random point inside the simplex
        # (projecting torch.rand(m) instead would zero out about half the branches)
        r = torch.rand(m) + 0.5
        w = nn.Parameter(r / r.sum())
        w.param_group = BRANCH_PARAM_GROUP
        setattr(w, ON_SIMPLEX_ATTR, simplex)
        return w

    def branch_weights(self, name: str) -> Optional[Tensor]:
        """kappa or alpha as used now: ``None`` when fixed to 1, else ``(M,)``."""
        w = getattr(self, name)
        mode = self.inference_weights
        if w is None or self.training or mode == "learned":
            return w
        if mode == "uniform":
            return torch.full_like(w, 1.0 / self.num_branches)
        g = torch.Generator().manual_seed(self.random_seed + (name == "alpha"))
        return uniform_simplex(self.num_branches, g).to(w)

    def _kv(self, kv_in: Tensor) -> Tuple[Tensor, Tensor]:
        """``(S, B, kdim)`` -> keys and values ``(B, H, S, d_head)``."""
        S, B, _ = kv_in.shape
        kv_in = kv_in.to(compute_dtype(kv_in))  # one cast for both projections
        k = self.k_proj(kv_in).view(S, B, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(kv_in).view(S, B, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        return k, v

    def _cached_kv(self, q_in, key, key_padding_mask, incremental_state):
        """Keys, values and key padding mask, read from / written to the decoding cache."""
        if incremental_state is None:
            k, v = self._kv(q_in if self.self_attention else key)
            return k, v, key_padding_mask
        state = self.get_incremental_state(incremental_state, "attn_state") or {}
        if not self.self_attention:
            if "prev_key" not in state:
                k, v = self._kv(key)
                state = {"prev_key": k, "prev_value": v, "prev_key_padding_mask": key_padding_mask}
                self.set_incremental_state(incremental_state, "attn_state", state)
            return state["prev_key"], state["prev_value"], state["prev_key_padding_mask"]
        k, v = self._kv(q_in)
        mask = key_padding_mask
        if "prev_key" in state:
            masks = (state.get("prev_key_padding_mask"), mask)
            if any(m is not None for m in masks):  # an absent mask: no padding
                sizes = (state["prev_key"].size(2), k.size(2))
                parts = [k.new_zeros(k.size(0), s, dtype=torch.bool) if m is None else m for m, s in zip(masks, sizes)]
                mask = torch.cat(parts, dim=1)
            k = torch.cat([state["prev_key"], k], dim=2)
            v = torch.cat([state["prev_value"], v], dim=2)
        state = {"prev_key": k, "prev_value": v, "prev_key_padding_mask": mask}
        self.set_incremental_state(incremental_state, "attn_state", state)
        return k, v, mask

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        state = self.get_incremental_state(incremental_state, "attn_state")
        if state is not None:
            state = {k: None if v is None else v.index_select(0, new_order) for k, v in state.items()}
            self.set_incremental_state(incremental_state, "attn_state", state)
        return incremental_state

    def _attend(self, q, k, v, attn_mask, key_padding_mask, need_weights):
        """``(B, H, T, d)`` queries over ``(B, H, S, d)`` keys and values, both masks as one additive
        ``-inf`` mask; the ``(H, B, T, S)`` probabilities only if asked for (then computed explicitly)."""
        mask = None if attn_mask is None else attn_mask.to(q.dtype).view(1, 1, *attn_mask.shape)
        if key_padding_mask is not None:
            pad = key_padding_mask.view(key_padding_mask.size(0), 1, 1, -1).to(torch.bool)
            mask = torch.where(pad, float("-inf"), q.new_zeros(()) if mask is None else mask)
        p = self.attention_dropout if self.training else 0.0
        if not need_weights:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p), None
        scores = torch.matmul(q * self.head_dim**-0.5, k.transpose(-1, -2))
        if mask is not None:
            scores = scores + mask
        probs = utils.softmax(scores, dim=-1).type_as(q)
        return torch.matmul(F.dropout(probs, p=p, training=self.training), v), probs.transpose(0, 1)

    def forward(
        self,
        x: Tensor,
        key: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        attn_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """Run the block.

        Args:
            x: ``(T, B, C)`` input (queries; also keys/values for self-attention).
            key: ``(S, B, kdim)`` encoder states for encoder-decoder attention.
            key_padding_mask: ``(B, S)`` True at padded keys.
            attn_mask: ``(T, S)`` additive mask (fairseq's future mask for decoder self-attention).
            incremental_state: decoding cache (one step of ``x`` at a time).
            need_weights: also return ``(H, B, T, S)`` attention probabilities.
        """
        T, B, C = x.shape
        M = self.num_branches
        residual = x
        low = compute_dtype(x)
        # cast once here for q, k and v (autocast would cast h once per projection)
        h = (self.attn_layer_norm(x) if self.normalize_before else x).to(low)
        k, v, kpm = self._cached_kv(h, key, key_padding_mask, incremental_state)
        q = self.q_proj(h).view(T, B, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        o, probs = self._attend(q, k, v, attn_mask, kpm, need_weights)
        N = T * B
        # (B, H, T, d) -> (T, B, H, d) -> (N, M, C/M): heads grouped by branch
        o = o.permute(2, 0, 1, 3).reshape(N, M, C // M)
        if not self.drop_outputs:
            o = self.dropout_module(o)
        # None: fixed to 1 (Table 3), the parameters are then used unscaled
        kappa, alpha = (None if w is None else w.to(x.dtype) for w in map(self.branch_weights, ("kappa", "alpha")))
        res, f = self._branches(residual.reshape(N, C), o, kappa, alpha)
        # y = sum_i alpha_i u_i + dropout(sum_i alpha_i FFN_i(u_i))
        y = res + self.dropout_module(f)
        if not self.normalize_before:
            y = self.final_layer_norm(y)
        return y.view(T, B, C), probs

    def _scaled_weights(self, kappa: Optional[Tensor], alpha: Optional[Tensor]):
        """``kappa_i W_i^O``, ``kappa_i b^O``, ``alpha_i W2_i`` (flattened), ``sum(alpha) b^2``.

        A weight fixed to 1 (None) leaves the parameters as they are. Derived on every call,
        decoding steps included: caching them in inference gained under 10% of beam-5 decoding
        (docs/benchmarks.md).
        """
        M, _, C = self.fc2_weight.shape
        w_out, b_out = self.out_weight, self.out_bias.view(1, 1, C)
        if kappa is not None:
            w_out, b_out = w_out * kappa.view(M, 1, 1), b_out * kappa.view(M, 1, 1)
        w2, b2 = self.fc2_weight, self.fc2_bias * M
        if alpha is not None:
            w2, b2 = w2 * alpha.view(M, 1, 1), self.fc2_bias * alpha.sum()
        return w_out, b_out, w2.reshape(-1, C), b2

    @staticmethod
    def _mix(alpha: Optional[Tensor], u: Tensor) -> Tensor:
        """``sum_i alpha_i u_i`` of an ``(M, N, C)`` tensor (alpha None: all 1)."""
        M, N, C = u.shape
        return u.sum(0) if alpha is None else torch.mm(alpha.view(1, M), u.reshape(M, N * C)).view(N, C)

    def _branches(self, x: Tensor, o: Tensor, kappa: Optional[Tensor], alpha: Optional[Tensor]):
        """Eq. 6-7 for all branches: ``(sum_i alpha_i u_i, sum_i alpha_i FFN_i(u_i))``, both ``(N, C)``.

        ``x``: ``(N, C)`` residual input; ``o``: ``(N, M, C/M)`` heads; kappa, alpha: ``(M,)`` or
        None (fixed to 1). kappa scales the output-projection weights and alpha the second FFN
        matrices (not the activations), so the alpha-sum of the FFNs is one ``(N, d_ff) x (d_ff, C)``
        product. The activation runs after the ``(M, N, d_ff/M) -> (N, d_ff)`` transpose so backward
        keeps one tensor, not two.
        """
        N = x.size(0)
        w_out, b_out, w2, b2 = self._scaled_weights(kappa, alpha)
        args = (x, o, w_out, b_out, alpha)
        if self.recompute and self.training and torch.is_grad_enabled():
            res, f = checkpoint(self._residual_sums, *args, use_reentrant=False)
        else:
            res, f = self._residual_sums(*args)
        f = torch.baddbmm(self.fc1_bias, f, self.fc1_weight)  # (M, N, d_ff/M)
        f = self.activation_fn(f.transpose(0, 1).reshape(N, -1))  # (N, d_ff), branch-major columns
        f = self.activation_dropout_module(f)
        # sum_i alpha_i FFN_i(u_i) as one (N, d_ff) x (d_ff, C) product
        return res, torch.addmm(b2, f, w2)

    def _residual_sums(self, x: Tensor, o: Tensor, w_out: Tensor, b_out: Tensor, alpha: Optional[Tensor]):
        """``(sum_i alpha_i u_i, FFN input)``: the branch outputs, their residual sums ``u_i``
        (normalised when post-norm) and the FFN input (``u_i``, or ``LN_f(u_i)`` when pre-norm)."""
        N, C = x.shape
        M = self.num_branches
        # kappa_i (head_i W_i^O + b^O)                                    (M, N, C)
        hbar = torch.baddbmm(b_out, o.transpose(0, 1), w_out)
        d = self.dropout_module
        if self.drop_outputs and d.p > 0 and (self.training or d.apply_during_inference):
            # F.dropout's GPU kernel: a boolean mask kept for backward on every device, where F.dropout
            # on the CPU keeps one in the tensor's dtype
            hbar = torch.native_dropout(hbar, d.p, True)[0]
        u = x.view(1, N, C) + hbar  # u_i = x + hbar_i
        if self.normalize_before:
            # sum_i alpha_i u_i = sum(alpha) x + sum_i alpha_i hbar_i: the residual stream
            # stays in x's dtype
            res = x * (M if alpha is None else alpha.sum()) + self._mix(alpha, hbar)
            f = self.final_layer_norm(u)
        else:
            u = f = self.attn_layer_norm(u)
            res = self._mix(alpha, u)
        return res, f
