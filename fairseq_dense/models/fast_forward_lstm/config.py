"""Configuration of Deep-Att / Deep-ED (Zhou et al. 2016); the defaults are its deepest Deep-Att (``deep_att``)."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from fairseq_dense.models.option_checks import max_positions_field, share_all_embeddings_field, tie_softmax_field

INTERFACE_CHOICES = ChoiceEnum(["deep_att", "deep_ed"])


@dataclass
class FastForwardLSTMConfig(FairseqDataclass):
    interface: INTERFACE_CHOICES = field(
        default="deep_att",
        metadata={"help": "deep_att (attention over the encoder's fc) or deep_ed (one fixed vector)"},
    )
    encoder_embed_dim: int = field(default=256, metadata={"help": "source embedding size"})
    encoder_hidden_size: int = field(default=512, metadata={"help": "encoder LSTM size (each layer, each column)"})
    encoder_layers: int = field(default=9, metadata={"help": "encoder depth n_e (per column)"})
    encoder_columns: int = field(
        default=2, metadata={"help": "encoder columns (2: first layers in opposite directions; 1)"}
    )
    no_interleave: bool = field(
        default=False,
        metadata={"help": "unidirectional encoder: every layer runs forward (default: alternate directions)"},
    )
    encoder_fc_dim: int = field(
        default=512, metadata={"help": "deep_att: size of the linear 'fc' projection of [f; h] (attention keys/values)"}
    )
    decoder_embed_dim: int = field(default=256, metadata={"help": "target embedding size"})
    decoder_hidden_size: int = field(default=512, metadata={"help": "decoder LSTM size"})
    decoder_layers: int = field(default=7, metadata={"help": "decoder depth n_d"})
    attention_dim: int = field(default=512, metadata={"help": "deep_att: hidden size of the Bahdanau attention MLP"})
    no_fast_forward: bool = field(
        default=False, metadata={"help": "drop the fast-forward connections: a plain stacked LSTM (Table 2 'No FF')"}
    )
    dropout: float = field(
        default=0.1, metadata={"help": "dropout on h where it enters the next layer and the softmax"}
    )
    init_std: float = field(
        default=0.07, metadata={"help": "std of the Gaussian init of the non-recurrent weights (recurrent: zero)"}
    )
    decoder_out_embed_dim: Optional[int] = field(
        default=None,
        metadata={"help": "softmax input size, a linear map of the top decoder h (default: --decoder-hidden-size)"},
    )
    share_decoder_input_output_embed: bool = tie_softmax_field(
        "the softmax input size, --decoder-out-embed-dim or else --decoder-hidden-size, == --decoder-embed-dim"
    )
    share_all_embeddings: bool = share_all_embeddings_field()
    max_source_positions: int = max_positions_field("source")
    max_target_positions: int = max_positions_field("target")
