"""Weighted Transformer decoder: fairseq's transformer decoder with branched layers."""

from typing import Dict, Optional

from fairseq.models.transformer import TransformerDecoderBase
from fairseq.modules import FairseqDropout, LayerNorm, MultiheadAttention
from torch import Tensor, nn

from fairseq_dense.models.weighted_transformer.encoder import block_kwargs, wrap_layer
from fairseq_dense.modules.branched_attention import BranchedAttention


class WeightedDecoderLayer(nn.Module):
    """Masked self-attention, then encoder-decoder attention + FFN as one branched block.

    Args:
        embed_dim, num_heads, dropout, attention_dropout, normalize_before: as in the Transformer.
        self_attn_block: keyword arguments of a branched self-attention block (with its own
            FFNs), or ``None`` for the Transformer's self-attention sub-layer.
        cross_block: the same for encoder-decoder attention (``None``: the Transformer's
            sub-layer, no FFN; with a branched self-attention that is
            ``--decoder-plain-cross-attn``).
        encoder_embed_dim: width of the encoder states (keys and values).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        self_attn_block: Optional[dict],
        cross_block: Optional[dict],
        encoder_embed_dim: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        normalize_before: bool = False,
    ):
        super().__init__()
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        if self_attn_block is not None:
            self.self_branched = BranchedAttention(self_attention=True, **self_attn_block)
        else:
            self.self_branched = None
            self.self_attn = MultiheadAttention(embed_dim, num_heads, dropout=attention_dropout, self_attention=True)
            self.self_attn_layer_norm = LayerNorm(embed_dim)
        self.normalize_before = normalize_before
        if cross_block is not None:
            self.cross_branched = BranchedAttention(self_attention=False, **cross_block)
        else:
            self.cross_branched = None
            self.encoder_attn = MultiheadAttention(
                embed_dim,
                num_heads,
                kdim=encoder_embed_dim,
                vdim=encoder_embed_dim,
                dropout=attention_dropout,
                encoder_decoder_attention=True,
            )
            self.encoder_attn_layer_norm = LayerNorm(embed_dim)

    def forward(
        self,
        x: Tensor,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
    ):
        """Same call as fairseq's ``TransformerDecoderLayerBase``.

        Args:
            x: ``(T, B, C)`` decoder states (one step when ``incremental_state``).
            encoder_out: ``(S, B, C_enc)`` encoder states; ``encoder_padding_mask``: ``(B, S)``.
            self_attn_mask: ``(T, T)`` causal mask (full forward only).
            self_attn_padding_mask: ``(B, T)`` True at padded target positions.

        Returns:
            ``(x, attn, None)``: ``(T, B, C)`` and, if asked for, ``(H, B, T, S)`` encoder-decoder
            attention (the decoder averages it over heads).
        """
        if encoder_out is None:
            raise ValueError("the Weighted Transformer decoder needs encoder output")
        if self.self_branched is not None:
            x, _ = self.self_branched(
                x,
                key_padding_mask=self_attn_padding_mask,
                attn_mask=self_attn_mask,
                incremental_state=incremental_state,
            )
        else:
            x, _ = self._sublayer(
                self.self_attn,
                self.self_attn_layer_norm,
                x,
                key_padding_mask=self_attn_padding_mask,
                incremental_state=incremental_state,
                need_weights=False,
                attn_mask=self_attn_mask,
            )
        need = need_attn or need_head_weights
        if self.cross_branched is not None:
            x, attn = self.cross_branched(
                x,
                key=encoder_out,
                key_padding_mask=encoder_padding_mask,
                incremental_state=incremental_state,
                need_weights=need,
            )
            return x, attn, None
        x, attn = self._sublayer(
            self.encoder_attn,
            self.encoder_attn_layer_norm,
            x,
            kv=encoder_out,
            key_padding_mask=encoder_padding_mask,
            incremental_state=incremental_state,
            static_kv=True,
            need_weights=need,
            need_head_weights=need,  # (H, B, T, S), as the branched block
        )
        return x, attn, None

    def _sublayer(self, attn: MultiheadAttention, layer_norm: nn.Module, x: Tensor, kv=None, **kwargs):
        """The Transformer's attention sub-layer ``x + dropout(attn(x, kv))`` (``kv`` None: self-attention),
        pre- or post-norm."""
        residual = x
        if self.normalize_before:
            x = layer_norm(x)
        kv = x if kv is None else kv
        x, probs = attn(query=x, key=kv, value=kv, **kwargs)
        x = residual + self.dropout_module(x)
        if not self.normalize_before:
            x = layer_norm(x)
        return x, probs


class WeightedTransformerDecoder(TransformerDecoderBase):
    """fairseq's :class:`TransformerDecoderBase` with branched layers (only :meth:`build_decoder_layer`
    differs); ``cfg`` is fairseq's ``TransformerConfig``, ``args`` the flat options with the branch options."""

    def __init__(self, cfg, dictionary, embed_tokens, args):
        self.args = args  # read by build_decoder_layer during super().__init__
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=False)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        self._layers_built += 1
        seed = int(self.args.branch_random_seed) + 1000 * (100 + self._layers_built)
        block = block_kwargs(cfg, self.args, "decoder")
        plain_cross = self.args.decoder_plain_cross_attn  # its self-attention is branched
        branched_self = self.args.decoder_branched_self_attn or plain_cross
        self_block = dict(block, random_seed=seed + 500) if branched_self else None
        cross_block = None if plain_cross else dict(block, kdim=cfg.encoder.embed_dim, random_seed=seed)
        layer = WeightedDecoderLayer(
            embed_dim=cfg.decoder.embed_dim,
            num_heads=cfg.decoder.attention_heads,
            self_attn_block=self_block,
            cross_block=cross_block,
            dropout=cfg.dropout,
            attention_dropout=cfg.attention_dropout,
            normalize_before=cfg.decoder.normalize_before,
            encoder_embed_dim=cfg.encoder.embed_dim,
        )
        return wrap_layer(layer, cfg)
