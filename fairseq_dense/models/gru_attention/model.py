"""Attentional GRU encoder-decoder: model registration and named architectures."""

from functools import partial

from fairseq.models import register_model

from fairseq_dense.models.arch_defaults import both_sides, fill_defaults, register_presets
from fairseq_dense.models.gru_attention.config import GRUAttentionConfig
from fairseq_dense.models.gru_attention.decoder import GRUAttentionDecoder
from fairseq_dense.models.gru_attention.encoder import GRUAttentionEncoder
from fairseq_dense.models.option_checks import embedding_sharing, require_positive, require_probability, sides
from fairseq_dense.modules.encoder_decoder import EncoderDecoderModel


@register_model("gru_attention", dataclass=GRUAttentionConfig)
class GRUAttentionModel(EncoderDecoderModel):
    """Attentional GRU baseline.

    Bahdanau et al., Neural Machine Translation by Jointly Learning to Align and
    Translate, https://arxiv.org/abs/1409.0473, as described in Yin & Hu's
    report (``papers/attentional-gru-nmt-report.txt``): bidirectional GRU encoder,
    GRU decoder fed ``[c_{t-1}; y_{t-1}]``, MLP attention, tanh readout with dropout
    before the softmax.
    """

    @classmethod
    def build_model(cls, cfg: GRUAttentionConfig, task):
        """Build the model; a bad option combination raises ``ValueError`` naming the flags."""
        require_positive(cfg, sides("embed_dim", "hidden_size") + ("attention_dim", "readout_dim"))
        require_probability(cfg, ("dropout", "embed_dropout"))
        share_all, tie_output = embedding_sharing(cfg, task, "readout_dim")
        encoder = GRUAttentionEncoder(
            task.source_dictionary,
            embed_dim=cfg.encoder_embed_dim,
            hidden_size=cfg.encoder_hidden_size,
            embed_dropout=cfg.embed_dropout,
            max_positions=cfg.max_source_positions,
        )
        decoder = GRUAttentionDecoder(
            task.target_dictionary,
            embed_dim=cfg.decoder_embed_dim,
            hidden_size=cfg.decoder_hidden_size,
            encoder_dim=encoder.output_dim,
            encoder_hidden_size=cfg.encoder_hidden_size,
            attention_dim=cfg.attention_dim,
            readout_dim=cfg.readout_dim,
            dropout=cfg.dropout,
            embed_dropout=cfg.embed_dropout,
            share_input_output_embed=tie_output,
            max_positions=cfg.max_target_positions,
            embed_tokens=encoder.embed_tokens if share_all else None,
        )
        return cls(encoder, decoder)


def _sizes(embed: int, hidden: int, decoder_hidden: int, attention: int, readout: int, dropout: float):
    return dict(
        **both_sides(embed_dim=embed),
        encoder_hidden_size=hidden,
        decoder_hidden_size=decoder_hidden,
        attention_dim=attention,
        readout_dim=readout,
        dropout=dropout,
    )


register_presets(
    "gru_attention",
    {
        "gru_attention_iwslt_de_en": (
            """The report's IWSLT14 De-En configuration (the dataclass defaults, stated explicitly).

            Paper: Yin and Hu, attentional NMT report, Sec. 3.1 (Configuration): embed=512, hidden=512,
            bidirectional=True, attention_dim=256, readout=512, dropout=0.5""",
            _sizes(512, 512, 512, 256, 512, 0.5),
        ),
        "gru_attention_small": (
            """A CPU-sized model (about 3.9M parameters with an 8k joint vocabulary) for the quick-start.

            Project: CPU size, not a paper configuration.""",
            _sizes(128, 128, 256, 128, 128, 0.3),
        ),
        "gru_attention_tiny": (
            "Tiny sizes for tests.\n\nProject: test size, not a paper configuration.",
            _sizes(32, 32, 32, 32, 32, 0.1),
        ),
    },
    partial(fill_defaults, config_class=GRUAttentionConfig),
)
