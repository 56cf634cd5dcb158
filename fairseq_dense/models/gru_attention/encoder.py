"""Bidirectional GRU encoder of the attentional GRU baseline."""

from typing import Dict, List

import torch.nn as nn
from fairseq.modules import FairseqDropout
from torch import Tensor

from fairseq_dense.modules.encoder_decoder import Encoder, right_to_left_padding, to_right_padding


class GRUAttentionEncoder(Encoder):
    """Bidirectional GRU encoder, ``h_i = [fwd_i; bwd_i]`` (Bahdanau et al. 2014).

    Args:
        dictionary: source dictionary.
        embed_dim: embedding size.
        hidden_size: GRU size per direction.
        embed_dropout: dropout on the embeddings.
        max_positions: longest source accepted.
    """

    def __init__(
        self, dictionary, embed_dim: int, hidden_size: int, embed_dropout: float = 0.0, max_positions: int = 1024
    ):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.hidden_size = hidden_size
        self.output_dim = 2 * hidden_size
        self.max_source_positions = max_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed_tokens.weight, 0, embed_dim**-0.5)
        nn.init.zeros_(self.embed_tokens.weight[self.padding_idx])
        self.embed_dropout = FairseqDropout(embed_dropout, module_name=self.__class__.__name__)
        self.gru = nn.GRU(embed_dim, hidden_size, batch_first=False, bidirectional=True)

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **unused) -> Dict[str, List[Tensor]]:
        """Encode a batch.

        Args:
            src_tokens: ``(batch, src_len)``, left- or right-padded.
            src_lengths: ``(batch,)``.

        Returns:
            dict with
              * ``encoder_out``: ``[(src_len, batch, 2 * hidden)]`` annotations h_i;
              * ``encoder_padding_mask``: ``[(batch, src_len)]``, True at padding;
              * ``encoder_final``: ``[(batch, hidden)]`` the backward GRU's state at
                the first source word (Bahdanau's initial decoder state input);
              * ``src_lengths``: ``[(batch,)]``.
        """
        padding_mask = src_tokens.eq(self.padding_idx)
        src_tokens, left_padded = to_right_padding(src_tokens, self.padding_idx)  # the packed GRU wants it
        x = self.embed_dropout(self.embed_tokens(src_tokens))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        lengths = src_lengths.detach().cpu().long()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        packed_out, final = self.gru(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(packed_out, padding_value=0.0, total_length=src_tokens.size(1))
        if left_padded:  # back to the caller's layout, so attention columns match src_tokens
            out = right_to_left_padding(out, src_lengths)
        return {
            "encoder_out": [out],  # T x B x 2H
            "encoder_padding_mask": [padding_mask],  # B x T
            "encoder_final": [final[1]],  # B x H, backward direction
            "src_lengths": [src_lengths],
        }
