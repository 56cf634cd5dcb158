"""DenseNMT encoder-decoder: model registration and named architectures."""

from functools import partial
from typing import List, Optional

from fairseq.models import register_model
from fairseq.utils import safe_getattr

from fairseq_dense.models.arch_defaults import both_sides, fill_defaults, register_presets
from fairseq_dense.models.densenmt.config import DenseNMTConfig
from fairseq_dense.models.densenmt.decoder import DenseNMTDecoder
from fairseq_dense.models.densenmt.encoder import DenseNMTEncoder
from fairseq_dense.models.option_checks import embedding_sharing, flag, require_positive, require_probability
from fairseq_dense.modules.encoder_decoder import EncoderDecoderModel


def _layer_spec(cfg, side: str, what: str) -> List[int]:
    """Per-layer sizes from ``--{side}-{what}s`` or ``--{side}-layers`` x ``--{side}-{what}``."""
    n = int(safe_getattr(cfg, f"{side}_layers"))
    listed: Optional[List[int]] = safe_getattr(cfg, f"{side}_{what}s", None)
    if listed is not None and len(listed) > 0:
        if len(listed) != n:
            raise ValueError(f"{flag(f'{side}_{what}s')} has {len(listed)} entries but {flag(f'{side}_layers')} is {n}")
        spec = [int(v) for v in listed]
    else:
        spec = [int(safe_getattr(cfg, f"{side}_{what}"))] * n
    if any(v <= 0 for v in spec):
        raise ValueError(f"{flag(f'{side}_{what}')} values must be positive, got {spec}")
    return spec


@register_model("densenmt", dataclass=DenseNMTConfig)
class DenseNMTModel(EncoderDecoderModel):
    """DenseNMT: densely connected convolutional encoder-decoder with dense attention.

    Shen, Tan, He, Qin, Liu: Dense Information Flow for Neural Machine Translation,
    NAACL 2018, https://arxiv.org/abs/1806.00722. ConvS2S (Gehring et al. 2017)
    is the special case ``residual`` / ``residual`` / ``multistep``.
    """

    @classmethod
    def build_model(cls, cfg: DenseNMTConfig, task):
        """Build the model; a bad option combination raises ``ValueError`` naming the flags."""
        require_positive(cfg, ("encoder_layers", "decoder_layers"))
        enc_hidden = _layer_spec(cfg, "encoder", "hidden_size")
        dec_hidden = _layer_spec(cfg, "decoder", "hidden_size")
        enc_kernels = _layer_spec(cfg, "encoder", "kernel_size")
        dec_kernels = _layer_spec(cfg, "decoder", "kernel_size")
        require_positive(
            cfg,
            ("encoder_embed_dim", "decoder_embed_dim", "decoder_out_embed_dim", "attention_dim"),
            optional=("factorized_embed_dim",),
        )
        require_probability(cfg, ("dropout",))
        factor = safe_getattr(cfg, "factorized_embed_dim", None)
        enc_dense = str(cfg.encoder_connections) == "dense"
        dec_dense = str(cfg.decoder_connections) == "dense"
        attention = str(cfg.attention)
        sumlen = safe_getattr(cfg, "sumlen", None)
        if sumlen is not None:
            if int(sumlen) < 2:
                raise ValueError(f"--sumlen must be >= 2, got {sumlen}")
            if not (enc_dense or dec_dense):
                raise ValueError("--sumlen needs --encoder-connections dense or --decoder-connections dense")
        for side, dense, hidden in (("encoder", enc_dense, enc_hidden), ("decoder", dec_dense, dec_hidden)):
            if not dense and len(set(hidden)) > 1:
                raise ValueError(
                    f"{flag(side + '_hidden_sizes')} must be uniform with {flag(side + '_connections')} residual"
                )
        # with --factorized-embed-dim the softmax matrix is as wide as the embedding tables
        share_all, tie_output = embedding_sharing(cfg, task, None if factor else "decoder_out_embed_dim")
        use_wn = not cfg.no_weight_norm
        encoder = DenseNMTEncoder(
            task.source_dictionary,
            embed_dim=cfg.encoder_embed_dim,
            hidden_sizes=enc_hidden,
            kernel_sizes=enc_kernels,
            dense=enc_dense,
            sumlen=sumlen,
            attention=attention,
            factorized_dim=factor,
            dropout=cfg.dropout,
            use_weight_norm=use_wn,
            grad_scale=1.0 / (2.0 * len(dec_hidden)),
            max_positions=cfg.max_source_positions,
        )
        decoder = DenseNMTDecoder(
            task.target_dictionary,
            embed_dim=cfg.decoder_embed_dim,
            hidden_sizes=dec_hidden,
            kernel_sizes=dec_kernels,
            encoder_dims=encoder.output_dims,
            encoder_embed_dim=cfg.encoder_embed_dim,
            attention=attention,
            attention_dim=cfg.attention_dim,
            dense=dec_dense,
            sumlen=sumlen,
            out_embed_dim=cfg.decoder_out_embed_dim,
            factorized_dim=factor,
            dropout=cfg.dropout,
            use_weight_norm=use_wn,
            max_positions=cfg.max_target_positions,
            attention_length_scale=bool(safe_getattr(cfg, "attention_length_scale", False)),
            share_input_output_embed=tie_output,
            embed_tokens=encoder.embed_tokens if share_all else None,
        )
        return cls(encoder, decoder)


def _four_layer(enc: str, dec: str, attention: str, enc_hidden: int, dec_hidden: int, attention_dim: int):
    return dict(
        encoder_connections=enc,
        decoder_connections=dec,
        attention=attention,
        encoder_hidden_size=enc_hidden,
        decoder_hidden_size=dec_hidden,
        attention_dim=attention_dim,
        **both_sides(layers=4, embed_dim=256, kernel_size=3),
        decoder_out_embed_dim=256,
    )


def _eight_layer(connections: str, attention: str, hidden: int, sumlen: Optional[int]):
    return dict(
        **both_sides(connections=connections, hidden_size=hidden, layers=8, embed_dim=256),
        attention=attention,
        attention_dim=hidden if connections == "dense" else 256,
        sumlen=sumlen,
        decoder_out_embed_dim=256,
    )


_SUMLEN_8L = (
    'sumlen=5, kernel=3, attention_dim=96, dropout=0.2 (the paper sets sumlen "5 or 6" without saying which for 8L; '
    "5 puts one summary layer after the first 4 layers)"
)
_DENSE_SIDE_ONLY = (
    'dropout=0.2 (the paper gives "hidden size 128" for the dense side only; the residual {} keeps BASE-4L\'s 256)'
)


def _paper(doc: str, row: str, claim: str, choices: str, values: dict):
    """``(docstring, options)`` of a preset of the paper: ``doc``, then the ``Paper:`` claim of its ``row``
    (Sec. 4.2 and the table) and the project's choices."""
    return f"{doc}\n\nPaper: Shen et al. 2018, Sec. 4.2 and {row}: {claim}\n\nProject choices: {choices}", values


register_presets(
    "densenmt",
    {
        "densenmt_base_4l": _paper(
            "BASE-4L, the ConvS2S baseline of Tables 1-2 (IWSLT14 De-En, Tr-En).",
            "Table 1, BASE-4L",
            "layers=4+4, embed=256, hidden=256, encoder=residual, decoder=residual, attention=multistep",
            "kernel=3, attention_dim=256, sumlen=none, dropout=0.2",
            _four_layer("residual", "residual", "multistep", 256, 256, 256),
        ),
        "densenmt_enc_4l": _paper(
            "DenseENC-4L of Table 2 (ablation): BASE-4L with a dense encoder.",
            "Table 2, DenseENC-4L",
            "layers=4+4, embed=256, encoder_hidden=128, "
            "encoder=dense, decoder=residual, attention=multistep, sumlen=none",
            "decoder_hidden=256, kernel=3, attention_dim=256, " + _DENSE_SIDE_ONLY.format("decoder"),
            _four_layer("dense", "residual", "multistep", 128, 256, 256),
        ),
        "densenmt_dec_4l": _paper(
            "DenseDEC-4L of Table 2 (ablation): BASE-4L with a dense decoder.",
            "Table 2, DenseDEC-4L",
            "layers=4+4, embed=256, decoder_hidden=128, "
            "encoder=residual, decoder=dense, attention=multistep, sumlen=none",
            "encoder_hidden=256, kernel=3, attention_dim=128, " + _DENSE_SIDE_ONLY.format("encoder"),
            _four_layer("residual", "dense", "multistep", 256, 128, 128),
        ),
        "densenmt_att_4l": _paper(
            "DenseAtt-4L of Table 2 (ablation): BASE-4L with DenseAtt-2.",
            "Table 2, DenseAtt-4L",
            "layers=4+4, embed=256, hidden=256, encoder=residual, decoder=residual, attention=dense2, sumlen=none",
            "kernel=3, attention_dim=256, dropout=0.2",
            _four_layer("residual", "residual", "dense2", 256, 256, 256),
        ),
        **{
            f"densenmt_4l_{k}": _paper(
                f"DenseNMT-4L-{k} of Tables 1-2{' (the dataclass defaults)' if k == 2 else ''}.",
                f"Tables 1-2, DenseNMT-4L-{k}",
                f"layers=4+4, embed=256, hidden=128, encoder=dense, decoder=dense, attention=dense{k}, sumlen=none",
                "kernel=3, attention_dim=128, dropout=0.2",
                _four_layer("dense", "dense", f"dense{k}", 128, 128, 128),
            )
            for k in (1, 2)
        },
        "densenmt_base_8l": _paper(
            "BASE-8L of Table 1: the 8-layer ConvS2S baseline.",
            "Table 1, BASE-8L",
            "layers=8+8, embed=256, hidden=192, encoder=residual, decoder=residual, attention=multistep",
            "kernel=3, attention_dim=256, sumlen=none, dropout=0.2",
            _eight_layer("residual", "multistep", 192, None),
        ),
        **{
            f"densenmt_8l_{k}": _paper(
                f"DenseNMT-8L-{k} of Tables 1{', 3' if k == 2 else ''} and 4.",
                f"Table 1, DenseNMT-8L-{k}",
                f"layers=8+8, embed=256, hidden=96, encoder=dense, decoder=dense, attention=dense{k}",
                _SUMLEN_8L,
                _eight_layer("dense", f"dense{k}", 96, 5),
            )
            for k in (1, 2)
        },
        "densenmt_wmt_en_de_15": _paper(
            """DenseNMT-En-De-15 of Table 5: the WMT'14 En-De ConvS2S of Gehring et al. 2017 (15+15
            layers: 9 x 512 kernel 3, 4 x 1024 kernel 3, 2 x 2048 kernel 1; embed 768, output 512) with 1/4
            of its hidden sizes and the same kernels.""",
            "Table 5, DenseNMT-En-De-15",
            "layers=15+15, embed=768, out_embed=512, hidden=9x128+4x256+2x512, kernel=13x3+2x1, encoder=dense, "
            "decoder=dense, attention=dense2, sumlen=6",
            "attention_dim=128, dropout=0.1",
            dict(
                **both_sides(connections="dense"),
                attention="dense2",
                sumlen=6,
                **both_sides(
                    layers=15, hidden_sizes=[128] * 9 + [256] * 4 + [512] * 2, kernel_sizes=[3] * 13 + [1] * 2
                ),
                **both_sides(embed_dim=768),
                decoder_out_embed_dim=512,
                attention_dim=128,
                dropout=0.1,
            ),
        ),
        "densenmt_small": (
            """CPU-sized (the quick-start's DenseNMT): DenseNMT-4L-2 at half width, embed 128, growth
            64, DenseAtt-2 dim 64; 2.9M parameters with the quick-start's Tatoeba vocabularies (4000
            BPE merges).

            Project: CPU size, not a paper configuration.""",
            dict(**both_sides(embed_dim=128, hidden_size=64), decoder_out_embed_dim=128, attention_dim=64),
        ),
        "densenmt_tiny": (
            """Tiny sizes for tests: 2+2 dense layers, embed 32, growth 16, DenseAtt-2.

            Project: test size, not a paper configuration.""",
            dict(
                **both_sides(layers=2, embed_dim=32, hidden_size=16),
                decoder_out_embed_dim=32,
                attention_dim=16,
                dropout=0.1,
            ),
        ),
    },
    partial(fill_defaults, config_class=DenseNMTConfig),
)
