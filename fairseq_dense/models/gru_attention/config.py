"""Configuration of the attentional GRU baseline; the defaults are the report's IWSLT14 De-En sizes."""

from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass

from fairseq_dense.models.option_checks import max_positions_field, share_all_embeddings_field, tie_softmax_field


@dataclass
class GRUAttentionConfig(FairseqDataclass):
    encoder_embed_dim: int = field(default=512, metadata={"help": "source embedding size"})
    encoder_hidden_size: int = field(default=512, metadata={"help": "encoder GRU size per direction (bidirectional)"})
    decoder_embed_dim: int = field(default=512, metadata={"help": "target embedding size"})
    decoder_hidden_size: int = field(default=512, metadata={"help": "decoder GRU state size"})
    attention_dim: int = field(default=256, metadata={"help": "hidden size of the attention MLP"})
    readout_dim: int = field(default=512, metadata={"help": "size of m = tanh(W1 [c_t; s_t]) before the softmax"})
    dropout: float = field(default=0.5, metadata={"help": "dropout on m, before the softmax (the report's 0.5)"})
    embed_dropout: float = field(default=0.0, metadata={"help": "dropout on source and target embeddings"})
    share_decoder_input_output_embed: bool = tie_softmax_field("--readout-dim == --decoder-embed-dim")
    share_all_embeddings: bool = share_all_embeddings_field()
    max_source_positions: int = max_positions_field("source")
    max_target_positions: int = max_positions_field("target")
