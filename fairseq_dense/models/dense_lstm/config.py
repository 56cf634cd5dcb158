"""Configuration of DenseRNN; the defaults are the paper's stacked-LSTM baseline (``dense_lstm_baseline_4l``)."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import FairseqDataclass

from fairseq_dense.models.option_checks import max_positions_field, share_all_embeddings_field, tie_softmax_field


@dataclass
class DenseLSTMConfig(FairseqDataclass):
    encoder_embed_dim: int = field(default=512, metadata={"help": "source embedding size (h^0 of the encoder)"})
    encoder_hidden_size: int = field(
        default=1024,
        metadata={"help": "size of each encoder layer's output h^l (split in two halves when bidirectional)"},
    )
    encoder_layers: int = field(default=4, metadata={"help": "number of encoder LSTM layers L_e"})
    no_encoder_bidirectional: bool = field(
        default=False,
        metadata={"help": "use forward-only encoder layers (default: bidirectional, hidden/2 per direction)"},
    )
    decoder_embed_dim: int = field(default=512, metadata={"help": "target embedding size (h^0 of the decoder)"})
    decoder_hidden_size: int = field(default=1024, metadata={"help": "size of each decoder layer's state r^l"})
    decoder_layers: int = field(default=4, metadata={"help": "number of decoder LSTM layers L_d"})
    decoder_out_embed_dim: int = field(
        default=512, metadata={"help": "size of the tanh readout over [y_{t-1}; c_t; r_t] before the softmax (Eq. 3)"}
    )
    attention_dim: Optional[int] = field(
        default=None,
        metadata={"help": "hidden size of each Bahdanau scoring MLP (default: the size of the attended keys)"},
    )
    attention_layer: int = field(
        default=1,
        metadata={"help": "decoder layer l' whose previous state queries the attention (1-based, paper: 1)"},
    )
    dense_connections: bool = field(
        default=False,
        metadata={
            "help": "DC: densely connected encoder and decoder stacks (Eq. 6); "
            "without --dense-attention the attention reads o^{L_e} = [h^1; ...; h^{L_e}]"
        },
    )
    dense_attention: bool = field(
        default=False,
        metadata={"help": "DA: one attention per encoder layer, contexts concatenated (Eq. 7-8)"},
    )
    dropout: float = field(default=0.2, metadata={"help": "dropout on the embeddings and every LSTM layer's output"})
    softmax_dropout: float = field(default=0.2, metadata={"help": "dropout on the readout right before the softmax"})
    share_decoder_input_output_embed: bool = tie_softmax_field("--decoder-out-embed-dim == --decoder-embed-dim")
    share_all_embeddings: bool = share_all_embeddings_field()
    max_source_positions: int = max_positions_field("source")
    max_target_positions: int = max_positions_field("target")
