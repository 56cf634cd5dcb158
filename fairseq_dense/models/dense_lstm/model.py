"""DenseRNN encoder-decoder: model registration and named architectures."""

import dataclasses

from fairseq.models import FairseqEncoderDecoderModel, register_model, register_model_architecture
from fairseq.utils import safe_getattr

from fairseq_dense.models.dense_lstm.config import DenseLSTMConfig
from fairseq_dense.models.dense_lstm.decoder import DenseLSTMDecoder
from fairseq_dense.models.dense_lstm.encoder import DenseLSTMEncoder
from fairseq_dense.models.option_checks import embedding_sharing, require_positive, require_probability


@register_model("dense_lstm", dataclass=DenseLSTMConfig)
class DenseLSTMModel(FairseqEncoderDecoderModel):
    """Densely connected stacked LSTM encoder-decoder (DenseRNN).

    Densely Connected Recurrent Neural Network for Sequence-to-Sequence Learning
    (ICLR 2018 submission, ``papers/densernn-densely-connected-rnn.txt``):
    dense connections between stacked LSTM layers (Eq. 6, ``--dense-connections``),
    Bahdanau attention queried by decoder layer ``l'`` (Eq. 4,
    ``--attention-layer``) and dense attention, one attention per encoder layer
    with the contexts concatenated (Eq. 7-8, ``--dense-attention``). With both
    switches off it is the paper's stacked-LSTM baseline.
    """

    @classmethod
    def build_model(cls, cfg: DenseLSTMConfig, task):
        """Build the model, validating option combinations.

        Raises:
            ValueError: naming the offending flags.
        """
        # an argparse Namespace (legacy callers) lacks the fields no arch function set
        defaults = DenseLSTMConfig()
        for f in dataclasses.fields(DenseLSTMConfig):
            if safe_getattr(cfg, f.name) is None and getattr(defaults, f.name) is not None:
                setattr(cfg, f.name, getattr(defaults, f.name))
        require_positive(
            cfg,
            (
                "encoder_embed_dim",
                "encoder_hidden_size",
                "encoder_layers",
                "decoder_embed_dim",
                "decoder_hidden_size",
                "decoder_layers",
                "decoder_out_embed_dim",
            ),
            optional=("attention_dim",),
        )
        require_probability(cfg, ("dropout", "softmax_dropout"))
        attention_dim = safe_getattr(cfg, "attention_dim", None)
        bidirectional = not safe_getattr(cfg, "no_encoder_bidirectional", False)
        if bidirectional and cfg.encoder_hidden_size % 2:
            raise ValueError(
                f"--encoder-hidden-size ({cfg.encoder_hidden_size}) must be even for a bidirectional encoder "
                "(half per direction); pass an even size or --no-encoder-bidirectional"
            )
        if not 1 <= cfg.attention_layer <= cfg.decoder_layers:
            raise ValueError(
                f"--attention-layer must be between 1 and --decoder-layers ({cfg.decoder_layers}), "
                f"got {cfg.attention_layer}"
            )
        share_all, tie_output = embedding_sharing(cfg, task, "decoder_out_embed_dim")
        dense = bool(safe_getattr(cfg, "dense_connections", False))
        encoder = DenseLSTMEncoder(
            task.source_dictionary,
            embed_dim=cfg.encoder_embed_dim,
            hidden_size=cfg.encoder_hidden_size,
            num_layers=cfg.encoder_layers,
            bidirectional=bidirectional,
            dense=dense,
            dropout=cfg.dropout,
            max_positions=cfg.max_source_positions,
        )
        decoder = DenseLSTMDecoder(
            task.target_dictionary,
            embed_dim=cfg.decoder_embed_dim,
            hidden_size=cfg.decoder_hidden_size,
            num_layers=cfg.decoder_layers,
            encoder_layer_dims=encoder.layer_dims,
            dense=dense,
            dense_attention=bool(safe_getattr(cfg, "dense_attention", False)),
            attention_layer=cfg.attention_layer,
            attention_dim=attention_dim,
            out_embed_dim=cfg.decoder_out_embed_dim,
            dropout=cfg.dropout,
            softmax_dropout=cfg.softmax_dropout,
            share_input_output_embed=tie_output,
            max_positions=cfg.max_target_positions,
            embed_tokens=encoder.embed_tokens if share_all else None,
        )
        return cls(encoder, decoder)


def _sizes(cfg, layers: int, hidden: int, embed: int = 512, dense: bool = False, dense_attention: bool = False):
    """Set layers/sizes/switches on both sides unless given on the command line."""
    cfg.encoder_layers = safe_getattr(cfg, "encoder_layers", layers)
    cfg.decoder_layers = safe_getattr(cfg, "decoder_layers", layers)
    cfg.encoder_hidden_size = safe_getattr(cfg, "encoder_hidden_size", hidden)
    cfg.decoder_hidden_size = safe_getattr(cfg, "decoder_hidden_size", hidden)
    cfg.encoder_embed_dim = safe_getattr(cfg, "encoder_embed_dim", embed)
    cfg.decoder_embed_dim = safe_getattr(cfg, "decoder_embed_dim", embed)
    cfg.decoder_out_embed_dim = safe_getattr(cfg, "decoder_out_embed_dim", embed)
    # store_true flags: an arch may turn a switch on, the command line cannot turn it off again
    cfg.dense_connections = safe_getattr(cfg, "dense_connections", False) or dense
    cfg.dense_attention = safe_getattr(cfg, "dense_attention", False) or dense_attention
    cfg.attention_layer = safe_getattr(cfg, "attention_layer", 1)
    cfg.dropout = safe_getattr(cfg, "dropout", 0.2)
    cfg.softmax_dropout = safe_getattr(cfg, "softmax_dropout", 0.2)


# A paper preset's docstring ends in a "Paper:" claim, checked against the built model by
# tests/test_paper_presets.py. The paper ("Densely Connected Recurrent Neural Network for
# Sequence-to-Sequence Learning", an anonymous ICLR 2018 submission) gives hidden sizes and layers
# per table; the encoder's directions and the dropout rates (set "via validation set
# performance") are the project's choices. Its Table 3 summarisation rows give no embedding size:
# the project keeps the translation models' 512 ("the same stacked LSTM model").


@register_model_architecture("dense_lstm", "dense_lstm_baseline_4l")
def dense_lstm_baseline_4l(cfg):
    """The stacked-LSTM baseline of the translation Tables 1-2 (the dataclass defaults).

    Paper: DenseRNN 2018, Sec. 4.1.2 and Tables 1-2, baseline: layers=4+4, hidden=1024, embed=512,
    dense_connections=False, dense_attention=False

    Project choices: bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=4, hidden=1024)


@register_model_architecture("dense_lstm", "dense_lstm_baseline_6l")
def dense_lstm_baseline_6l(cfg):
    """Stacked-LSTM baseline with 6+6 layers at the translation width (hidden 1024, embeddings 512).

    Project: SPEC.md's 6-layer baseline at the translation sizes, not a row of the paper: the paper's
    only 6-layer baseline is Table 3's summarisation ``baseline-6L`` at hidden 512
    (``dense_lstm_sum_baseline_6l``).
    """
    _sizes(cfg, layers=6, hidden=1024)


@register_model_architecture("dense_lstm", "dense_lstm_6l")
def dense_lstm_6l(cfg):
    """DenseRNN-6L of the translation Tables 1-2 (DC + DA).

    Paper: DenseRNN 2018, Sec. 4.1.2 and Tables 1-2, DenseRNN-6L: layers=6+6, hidden=256, embed=512,
    dense_connections=True, dense_attention=True

    Project choices: bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=6, hidden=256, dense=True, dense_attention=True)


@register_model_architecture("dense_lstm", "dense_lstm_10l")
def dense_lstm_10l(cfg):
    """DenseRNN-10L of the translation Tables 1-2 (DC + DA).

    Paper: DenseRNN 2018, Sec. 4.1.2 and Tables 1-2, DenseRNN-10L: layers=10+10, hidden=256, embed=512,
    dense_connections=True, dense_attention=True

    Project choices: bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=10, hidden=256, dense=True, dense_attention=True)


@register_model_architecture("dense_lstm", "dense_lstm_sum_baseline_4l")
def dense_lstm_sum_baseline_4l(cfg):
    """The 4-layer summarisation baseline of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, baseline-4L: layers=4+4, hidden=512, dense_connections=False,
    dense_attention=False

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=4, hidden=512)


@register_model_architecture("dense_lstm", "dense_lstm_sum_baseline_6l")
def dense_lstm_sum_baseline_6l(cfg):
    """The 6-layer summarisation baseline of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, baseline-6L: layers=6+6, hidden=512, dense_connections=False,
    dense_attention=False

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=6, hidden=512)


@register_model_architecture("dense_lstm", "dense_lstm_dc_4l")
def dense_lstm_dc_4l(cfg):
    """DenseRNN(DC)-4L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC)-4L: layers=4+4, hidden=128, dense_connections=True,
    dense_attention=False

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=4, hidden=128, dense=True)


@register_model_architecture("dense_lstm", "dense_lstm_dcda_4l")
def dense_lstm_dcda_4l(cfg):
    """DenseRNN(DC+DA)-4L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC+DA)-4L: layers=4+4, hidden=150, dense_connections=True,
    dense_attention=True

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=4, hidden=150, dense=True, dense_attention=True)


@register_model_architecture("dense_lstm", "dense_lstm_dc_6l")
def dense_lstm_dc_6l(cfg):
    """DenseRNN(DC)-6L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC)-6L: layers=6+6, hidden=128, dense_connections=True,
    dense_attention=False

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=6, hidden=128, dense=True)


@register_model_architecture("dense_lstm", "dense_lstm_dcda_6l")
def dense_lstm_dcda_6l(cfg):
    """DenseRNN(DC+DA)-6L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC+DA)-6L: layers=6+6, hidden=144, dense_connections=True,
    dense_attention=True

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=6, hidden=144, dense=True, dense_attention=True)


@register_model_architecture("dense_lstm", "dense_lstm_dc_8l")
def dense_lstm_dc_8l(cfg):
    """DenseRNN(DC)-8L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC)-8L: layers=8+8, hidden=128, dense_connections=True,
    dense_attention=False

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=8, hidden=128, dense=True)


@register_model_architecture("dense_lstm", "dense_lstm_dcda_8l")
def dense_lstm_dcda_8l(cfg):
    """DenseRNN(DC+DA)-8L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC+DA)-8L: layers=8+8, hidden=142, dense_connections=True,
    dense_attention=True

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=8, hidden=142, dense=True, dense_attention=True)


@register_model_architecture("dense_lstm", "dense_lstm_dc_10l")
def dense_lstm_dc_10l(cfg):
    """DenseRNN(DC)-10L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC)-10L: layers=10+10, hidden=128, dense_connections=True,
    dense_attention=False

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=10, hidden=128, dense=True)


@register_model_architecture("dense_lstm", "dense_lstm_dcda_10l")
def dense_lstm_dcda_10l(cfg):
    """DenseRNN(DC+DA)-10L of Table 3 (Gigaword summarisation).

    Paper: DenseRNN 2018, Table 3, DenseRNN(DC+DA)-10L: layers=10+10, hidden=138, dense_connections=True,
    dense_attention=True

    Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2
    """
    _sizes(cfg, layers=10, hidden=138, dense=True, dense_attention=True)


@register_model_architecture("dense_lstm", "dense_lstm_tiny")
def dense_lstm_tiny(cfg):
    """Tiny DC+DA model for tests: 2+2 layers, hidden 32, embeddings 32.

    Project: test size, not a paper configuration.
    """
    cfg.dropout = safe_getattr(cfg, "dropout", 0.0)
    cfg.softmax_dropout = safe_getattr(cfg, "softmax_dropout", 0.1)
    _sizes(cfg, layers=2, hidden=32, embed=32, dense=True, dense_attention=True)


def _small(cfg):
    cfg.encoder_embed_dim = safe_getattr(cfg, "encoder_embed_dim", 128)
    cfg.decoder_embed_dim = safe_getattr(cfg, "decoder_embed_dim", 128)
    cfg.decoder_out_embed_dim = safe_getattr(cfg, "decoder_out_embed_dim", 128)
    cfg.share_decoder_input_output_embed = True  # a store_true flag: the arch turns it on for good


@register_model_architecture("dense_lstm", "dense_lstm_small")
def dense_lstm_small(cfg):
    """CPU-sized DenseRNN (DC+DA, 6+6 layers, hidden 96, embeddings 128, tied softmax): 7.4M
    parameters on an 8k joint vocabulary, 0.6x ``dense_lstm_baseline_small`` (as DenseRNN-6L vs
    the 4L baseline in the paper: hidden 1/4, more layers).

    Project: CPU size, not a paper configuration.
    """
    _small(cfg)
    _sizes(cfg, layers=6, hidden=96, embed=128, dense=True, dense_attention=True)


@register_model_architecture("dense_lstm", "dense_lstm_baseline_small")
def dense_lstm_baseline_small(cfg):
    """CPU-sized stacked baseline (4+4 layers, hidden 384, embeddings 128, tied softmax): 12.4M
    parameters on an 8k joint vocabulary.

    Project: CPU size, not a paper configuration.
    """
    _small(cfg)
    _sizes(cfg, layers=4, hidden=384, embed=128)
