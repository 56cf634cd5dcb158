"""DenseRNN encoder-decoder: model registration and named architectures."""

from fairseq.models import register_model
from fairseq.utils import safe_getattr

from fairseq_dense.models.arch_defaults import On, both_sides, fill_defaults, register_presets
from fairseq_dense.models.dense_lstm.config import DenseLSTMConfig
from fairseq_dense.models.dense_lstm.decoder import DenseLSTMDecoder
from fairseq_dense.models.dense_lstm.encoder import DenseLSTMEncoder
from fairseq_dense.models.option_checks import embedding_sharing, require_positive, require_probability, sides
from fairseq_dense.modules.encoder_decoder import EncoderDecoderModel


@register_model("dense_lstm", dataclass=DenseLSTMConfig)
class DenseLSTMModel(EncoderDecoderModel):
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
        """Build the model; a bad option combination raises ``ValueError`` naming the flags."""
        fill_defaults(cfg, DenseLSTMConfig)  # a Namespace (legacy callers) lacks what no preset set
        require_positive(
            cfg, sides("embed_dim", "hidden_size", "layers") + ("decoder_out_embed_dim",), optional=("attention_dim",)
        )
        require_probability(cfg, ("dropout", "softmax_dropout"))
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
            encoder_hidden_size=cfg.encoder_hidden_size,
            encoder_layers=cfg.encoder_layers,
            dense=dense,
            dense_attention=bool(safe_getattr(cfg, "dense_attention", False)),
            attention_layer=cfg.attention_layer,
            attention_dim=safe_getattr(cfg, "attention_dim", None),
            out_embed_dim=cfg.decoder_out_embed_dim,
            dropout=cfg.dropout,
            softmax_dropout=cfg.softmax_dropout,
            share_input_output_embed=tie_output,
            max_positions=cfg.max_target_positions,
            embed_tokens=encoder.embed_tokens if share_all else None,
        )
        return cls(encoder, decoder)


def _sizes(layers: int, hidden: int, embed: int = 512, dense: bool = False, dense_attention: bool = False, **more):
    """Layers, sizes and switches of both sides (``On``: a switch the command line cannot turn off)."""
    return dict(
        **both_sides(layers=layers, hidden_size=hidden, embed_dim=embed),
        decoder_out_embed_dim=embed,
        dense_connections=On if dense else False,
        dense_attention=On if dense_attention else False,
        attention_layer=1,
        **{"dropout": 0.2, "softmax_dropout": 0.2, **more},
    )


# The paper (an anonymous ICLR 2018 submission) gives hidden sizes and layers per table; the
# encoder's directions and the dropout rates (set "via validation set performance") are the
# project's choices. Its Table 3 summarisation rows give no embedding size: the project keeps the
# translation models' 512 ("the same stacked LSTM model").
_CHOICES = "Project choices: bidirectional=True, dropout=0.2, softmax_dropout=0.2"
_SUM_CHOICES = "Project choices: embed=512, bidirectional=True, dropout=0.2, softmax_dropout=0.2"


def _table3(name: str, layers: int, hidden: int, dense_attention: bool):
    """A DenseRNN row of Table 3 (Gigaword summarisation)."""
    row = f"DenseRNN({'DC+DA' if dense_attention else 'DC'})-{layers}L"
    doc = (
        f"{row} of Table 3 (Gigaword summarisation).\n\nPaper: DenseRNN 2018, Table 3, {row}: "
        f"layers={layers}+{layers}, hidden={hidden}, dense_connections=True, dense_attention={dense_attention}"
        f"\n\n{_SUM_CHOICES}"
    )
    return name, (doc, _sizes(layers, hidden, dense=True, dense_attention=dense_attention))


_SMALL = dict(share_decoder_input_output_embed=On)

register_presets(
    "dense_lstm",
    {
        "dense_lstm_baseline_4l": (
            f"""The stacked-LSTM baseline of the translation Tables 1-2 (the dataclass defaults).

            Paper: DenseRNN 2018, Sec. 4.1.2 and Tables 1-2, baseline: layers=4+4, hidden=1024, embed=512,
            dense_connections=False, dense_attention=False

            {_CHOICES}""",
            _sizes(4, 1024),
        ),
        "dense_lstm_baseline_6l": (
            """Stacked-LSTM baseline with 6+6 layers at the translation width (hidden 1024, embeddings 512).

            Project: SPEC.md's 6-layer baseline at the translation sizes, not a row of the paper: the paper's
            only 6-layer baseline is Table 3's summarisation ``baseline-6L`` at hidden 512
            (``dense_lstm_sum_baseline_6l``).""",
            _sizes(6, 1024),
        ),
        **{
            f"dense_lstm_{n}l": (
                f"""DenseRNN-{n}L of the translation Tables 1-2 (DC + DA).

                Paper: DenseRNN 2018, Sec. 4.1.2 and Tables 1-2, DenseRNN-{n}L: layers={n}+{n}, hidden=256,
                embed=512, dense_connections=True, dense_attention=True

                {_CHOICES}""",
                _sizes(n, 256, dense=True, dense_attention=True),
            )
            for n in (6, 10)
        },
        **{
            f"dense_lstm_sum_baseline_{n}l": (
                f"""The {n}-layer summarisation baseline of Table 3 (Gigaword summarisation).

                Paper: DenseRNN 2018, Table 3, baseline-{n}L: layers={n}+{n}, hidden=512, dense_connections=False,
                dense_attention=False

                {_SUM_CHOICES}""",
                _sizes(n, 512),
            )
            for n in (4, 6)
        },
        **dict(
            _table3(f"dense_lstm_{kind}_{n}l", n, hidden, kind == "dcda")
            for n, dc, dcda in ((4, 128, 150), (6, 128, 144), (8, 128, 142), (10, 128, 138))
            for kind, hidden in (("dc", dc), ("dcda", dcda))
        ),
        "dense_lstm_tiny": (
            "Tiny DC+DA model for tests: 2+2 layers, hidden 32, embeddings 32.\n\n"
            "Project: test size, not a paper configuration.",
            _sizes(2, 32, 32, dense=True, dense_attention=True, dropout=0.0, softmax_dropout=0.1),
        ),
        "dense_lstm_small": (
            """CPU-sized DenseRNN (DC+DA, 6+6 layers, hidden 96, embeddings 128, tied softmax): 7.4M
            parameters on an 8k joint vocabulary, 0.6x ``dense_lstm_baseline_small`` (as DenseRNN-6L vs
            the 4L baseline in the paper: hidden 1/4, more layers).

            Project: CPU size, not a paper configuration.""",
            _sizes(6, 96, 128, dense=True, dense_attention=True, **_SMALL),
        ),
        "dense_lstm_baseline_small": (
            """CPU-sized stacked baseline (4+4 layers, hidden 384, embeddings 128, tied softmax): 12.4M
            parameters on an 8k joint vocabulary.

            Project: CPU size, not a paper configuration.""",
            _sizes(4, 384, 128, **_SMALL),
        ),
    },
)
