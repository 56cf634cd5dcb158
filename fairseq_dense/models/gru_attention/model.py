"""Attentional GRU encoder-decoder: model registration and named architectures."""

from fairseq.models import FairseqEncoderDecoderModel, register_model, register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_dense.models.arch_defaults import fill_defaults
from fairseq_dense.models.gru_attention.config import GRUAttentionConfig
from fairseq_dense.models.gru_attention.decoder import GRUAttentionDecoder
from fairseq_dense.models.gru_attention.encoder import GRUAttentionEncoder
from fairseq_dense.models.option_checks import embedding_sharing, require_positive, require_probability


@register_model("gru_attention", dataclass=GRUAttentionConfig)
class GRUAttentionModel(FairseqEncoderDecoderModel):
    """Attentional GRU baseline.

    Bahdanau et al., Neural Machine Translation by Jointly Learning to Align and
    Translate, https://arxiv.org/abs/1409.0473, as described in Yin & Hu's
    report (``papers/attentional-gru-nmt-report.txt``): bidirectional GRU encoder,
    GRU decoder fed ``[c_{t-1}; y_{t-1}]``, MLP attention, tanh readout with dropout
    before the softmax.
    """

    @classmethod
    def build_model(cls, cfg: GRUAttentionConfig, task):
        """Build the model, validating option combinations.

        Raises:
            ValueError: naming the offending flags.
        """
        require_positive(
            cfg,
            (
                "encoder_embed_dim",
                "encoder_hidden_size",
                "decoder_embed_dim",
                "decoder_hidden_size",
                "attention_dim",
                "readout_dim",
            ),
        )
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


@register_model_architecture("gru_attention", "gru_attention_iwslt_de_en")
def gru_attention_iwslt_de_en(cfg):
    """The report's IWSLT14 De-En configuration (the dataclass defaults, stated explicitly).

    Paper: Yin and Hu, attentional NMT report, Sec. 3.1 (Configuration): embed=512, hidden=512,
    bidirectional=True, attention_dim=256, readout=512, dropout=0.5
    """
    cfg.encoder_embed_dim = safe_getattr(cfg, "encoder_embed_dim", 512)
    cfg.encoder_hidden_size = safe_getattr(cfg, "encoder_hidden_size", 512)
    cfg.decoder_embed_dim = safe_getattr(cfg, "decoder_embed_dim", 512)
    cfg.decoder_hidden_size = safe_getattr(cfg, "decoder_hidden_size", 512)
    cfg.attention_dim = safe_getattr(cfg, "attention_dim", 256)
    cfg.readout_dim = safe_getattr(cfg, "readout_dim", 512)
    cfg.dropout = safe_getattr(cfg, "dropout", 0.5)
    fill_defaults(cfg, GRUAttentionConfig)


@register_model_architecture("gru_attention", "gru_attention_small")
def gru_attention_small(cfg):
    """A CPU-sized model (about 3.9M parameters with an 8k joint vocabulary) for the quick-start.

    Project: CPU size, not a paper configuration.
    """
    cfg.encoder_embed_dim = safe_getattr(cfg, "encoder_embed_dim", 128)
    cfg.encoder_hidden_size = safe_getattr(cfg, "encoder_hidden_size", 128)
    cfg.decoder_embed_dim = safe_getattr(cfg, "decoder_embed_dim", 128)
    cfg.decoder_hidden_size = safe_getattr(cfg, "decoder_hidden_size", 256)
    cfg.attention_dim = safe_getattr(cfg, "attention_dim", 128)
    cfg.readout_dim = safe_getattr(cfg, "readout_dim", 128)
    cfg.dropout = safe_getattr(cfg, "dropout", 0.3)
    gru_attention_iwslt_de_en(cfg)


@register_model_architecture("gru_attention", "gru_attention_tiny")
def gru_attention_tiny(cfg):
    """Tiny sizes for tests.

    Project: test size, not a paper configuration.
    """
    cfg.encoder_embed_dim = safe_getattr(cfg, "encoder_embed_dim", 32)
    cfg.encoder_hidden_size = safe_getattr(cfg, "encoder_hidden_size", 32)
    cfg.decoder_embed_dim = safe_getattr(cfg, "decoder_embed_dim", 32)
    cfg.decoder_hidden_size = safe_getattr(cfg, "decoder_hidden_size", 32)
    cfg.attention_dim = safe_getattr(cfg, "attention_dim", 32)
    cfg.readout_dim = safe_getattr(cfg, "readout_dim", 32)
    cfg.dropout = safe_getattr(cfg, "dropout", 0.1)
    gru_attention_iwslt_de_en(cfg)
