"""Weighted Transformer encoder: fairseq's transformer encoder with branched layers."""

from typing import Optional

from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerEncoderBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from torch import Tensor, nn

from fairseq_dense.modules.branched_attention import BranchedAttention


def learns(args, weight: str) -> bool:
    """Whether ``weight`` ('kappa' or 'alpha') is learned: ``--fixed-<weight>`` when given (older saved
    configurations hold False), else ``learned_branch_weights`` (the architecture's default unless given)."""
    fixed = getattr(args, f"fixed_{weight}", None)
    if fixed is None:
        return bool(getattr(args, "learned_branch_weights", False))
    return not fixed


def block_kwargs(cfg, args, side: str) -> dict:
    """Keyword arguments of a branched block on ``side`` (``"encoder"``/``"decoder"``), all but its seed:
    ``cfg`` is fairseq's ``TransformerConfig``, ``args`` the flat options with the branch options."""
    side_cfg = getattr(cfg, side)
    return dict(
        embed_dim=side_cfg.embed_dim,
        num_heads=side_cfg.attention_heads,
        num_branches=getattr(args, f"{side}_branches") or getattr(args, f"{side}_attention_heads"),
        ffn_embed_dim=side_cfg.ffn_embed_dim,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout or getattr(cfg, "relu_dropout", 0) or 0,
        activation_fn=cfg.activation_fn,
        normalize_before=side_cfg.normalize_before,
        simplex=not args.no_simplex,
        learn_kappa=learns(args, "kappa"),
        learn_alpha=learns(args, "alpha"),
        inference_weights=str(args.branch_weights_at_inference),
        init=str(args.branch_init),
        residual_dropout=str(args.branch_residual_dropout),
        recompute=bool(args.branch_recompute),
    )


def wrap_layer(layer: nn.Module, cfg) -> nn.Module:
    """Activation checkpointing and FSDP wrapping as fairseq's transformer does it."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
    return fsdp_wrap(layer, min_num_params=min_params)


class WeightedEncoderLayer(nn.Module):
    """One encoder layer: self-attention + FFN as one branched block (Eq. 5-7; arguments of
    :class:`~fairseq_dense.modules.branched_attention.BranchedAttention`)."""

    def __init__(self, **block_kwargs):
        super().__init__()
        self.branched = BranchedAttention(self_attention=True, **block_kwargs)

    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor] = None) -> Tensor:
        """``(T, B, C)`` -> ``(T, B, C)``; ``encoder_padding_mask`` is ``(B, T)``, True at pads."""
        x, _ = self.branched(x, key_padding_mask=encoder_padding_mask, attn_mask=attn_mask)
        return x

    def upgrade_state_dict_named(self, state_dict, name):
        """Nothing to upgrade (called by fairseq's encoder for each layer)."""


class WeightedTransformerEncoder(TransformerEncoderBase):
    """fairseq's :class:`TransformerEncoderBase` with branched layers (only :meth:`build_encoder_layer`
    differs); ``cfg`` is fairseq's ``TransformerConfig``, ``args`` the flat options with the branch options."""

    def __init__(self, cfg, dictionary, embed_tokens, args):
        self.args = args  # read by build_encoder_layer during super().__init__
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens)

    def build_encoder_layer(self, cfg):
        self._layers_built += 1
        layer = WeightedEncoderLayer(
            **block_kwargs(cfg, self.args, "encoder"),
            random_seed=int(self.args.branch_random_seed) + 1000 * self._layers_built,
        )
        return wrap_layer(layer, cfg)
