"""Configuration of DenseNMT; the defaults are DenseNMT-4L-2 (``densenmt_4l_2``)."""

from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from fairseq_dense.models.option_checks import max_positions_field, share_all_embeddings_field, tie_softmax_field

CONNECTION_CHOICES = ChoiceEnum(["dense", "residual"])
ATTENTION_CHOICES = ChoiceEnum(["multistep", "dense1", "dense2"])


@dataclass
class DenseNMTConfig(FairseqDataclass):
    encoder_connections: CONNECTION_CHOICES = field(
        default="dense",
        metadata={"help": "encoder layers: 'dense' (Eq. 6, concatenation, no residual) or 'residual' (ConvS2S)"},
    )
    decoder_connections: CONNECTION_CHOICES = field(
        default="dense", metadata={"help": "decoder layers: 'dense' (Eq. 7) or 'residual' (ConvS2S)"}
    )
    attention: ATTENTION_CHOICES = field(
        default="dense2",
        metadata={"help": "'multistep' (ConvS2S), 'dense1' (DenseAtt-1, Eq. 9) or 'dense2' (DenseAtt-2, Eq. 10)"},
    )
    encoder_embed_dim: int = field(default=256, metadata={"help": "source embedding size (h^0)"})
    decoder_embed_dim: int = field(default=256, metadata={"help": "target embedding size (z^0)"})
    decoder_out_embed_dim: int = field(
        default=256, metadata={"help": "width of the softmax matrix (unless --factorized-embed-dim)"}
    )
    factorized_embed_dim: Optional[int] = field(
        default=None,
        metadata={
            "help": "small size of the source/target embedding tables and the softmax matrix, "
            "projected linearly to the model's embedding sizes (Sec. 4.2); off when unset"
        },
    )
    encoder_layers: int = field(default=4, metadata={"help": "number of encoder convolution layers"})
    decoder_layers: int = field(default=4, metadata={"help": "number of decoder convolution layers"})
    encoder_hidden_size: int = field(
        default=128, metadata={"help": "growth per dense layer, or width of residual layers"}
    )
    decoder_hidden_size: int = field(
        default=128, metadata={"help": "growth per dense layer, or width of residual layers"}
    )
    encoder_hidden_sizes: Optional[List[int]] = field(
        default=None, metadata={"help": "per-layer sizes, overriding --encoder-hidden-size"}
    )
    decoder_hidden_sizes: Optional[List[int]] = field(
        default=None, metadata={"help": "per-layer sizes, overriding --decoder-hidden-size"}
    )
    encoder_kernel_size: int = field(default=3, metadata={"help": "encoder convolution width"})
    decoder_kernel_size: int = field(default=3, metadata={"help": "decoder (causal) convolution width"})
    encoder_kernel_sizes: Optional[List[int]] = field(
        default=None, metadata={"help": "per-layer widths, overriding --encoder-kernel-size"}
    )
    decoder_kernel_sizes: Optional[List[int]] = field(
        default=None, metadata={"help": "per-layer widths, overriding --decoder-kernel-size"}
    )
    attention_dim: int = field(
        default=128,
        metadata={
            "help": "width of attention queries/keys/values; in a dense decoder also the width "
            "of each attention output a^l appended to the features"
        },
    )
    sumlen: Optional[int] = field(
        default=None,
        metadata={
            "help": "summary layer period (Sec. 3.3): a summary layer mapping the concatenation "
            "back to the embedding size after every sumlen-1 dense layers; off when unset"
        },
    )
    attention_length_scale: bool = field(
        default=False,
        metadata={
            "help": "multiply each attention output by sqrt(unpadded source length), the "
            "ConvS2S normalisation (Gehring et al. 2017, Sec. 3.4) that fairseq's fconv applies"
        },
    )
    dropout: float = field(default=0.2, metadata={"help": "dropout probability"})
    no_weight_norm: bool = field(
        default=False, metadata={"help": "do not weight-normalise convolutions and linear maps"}
    )
    share_decoder_input_output_embed: bool = tie_softmax_field(
        "--decoder-out-embed-dim == --decoder-embed-dim, or --factorized-embed-dim; an unnormalised map as in fconv"
    )
    share_all_embeddings: bool = share_all_embeddings_field()
    max_source_positions: int = max_positions_field("source")
    max_target_positions: int = max_positions_field("target")
