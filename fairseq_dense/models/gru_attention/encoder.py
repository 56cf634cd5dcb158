"""Bidirectional GRU encoder of the attentional GRU baseline."""

from typing import Dict

import torch.nn as nn
from fairseq.modules import FairseqDropout
from torch import Tensor

from fairseq_dense.modules.encoder_decoder import RecurrentEncoder


class GRUAttentionEncoder(RecurrentEncoder):
    """Bidirectional GRU encoder, ``h_i = [fwd_i; bwd_i]`` (Bahdanau et al. 2014), ``hidden_size`` per direction."""

    def __init__(
        self, dictionary, embed_dim: int, hidden_size: int, embed_dropout: float = 0.0, max_positions: int = 1024
    ):
        super().__init__(dictionary, embed_dim, max_positions, lambda w: nn.init.normal_(w, 0, embed_dim**-0.5))
        self.output_dim = 2 * hidden_size
        self.embed_dropout = FairseqDropout(embed_dropout, module_name=self.__class__.__name__)
        self.gru = nn.GRU(embed_dim, hidden_size, batch_first=False, bidirectional=True)

    def encode(self, src_tokens: Tensor, src_lengths: Tensor) -> Dict[str, Tensor]:
        """``encoder_out``: ``(src_len, batch, 2 * hidden)`` annotations h_i; ``encoder_final``:
        ``(batch, hidden)`` the backward GRU's state at the first source word (Bahdanau's initial
        decoder state input)."""
        x = self.embed_dropout(self.embed_tokens(src_tokens)).transpose(0, 1)  # B x T x C -> T x B x C
        lengths = src_lengths.detach().cpu().long()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        packed_out, final = self.gru(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(packed_out, padding_value=0.0, total_length=src_tokens.size(1))
        return {"encoder_out": out, "encoder_final": final[1]}  # backward direction
