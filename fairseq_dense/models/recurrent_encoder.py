"""What the recurrent encoders (DenseRNN, Deep-Att/Deep-ED, attentional GRU) share."""

from typing import Callable, Dict, List

from torch import Tensor

from fairseq_dense.modules.encoder_decoder import Encoder, embedding, right_to_left_padding, to_right_padding


class RecurrentEncoder(Encoder):
    """A source embedding (``init_embedding`` initialises its weight in place) and recurrences on
    right-padded batches (fairseq pads sources on the left by default): :meth:`encode` gets the batch
    right-padded, and its time-major outputs are moved back to the caller's layout."""

    def __init__(self, dictionary, embed_dim: int, max_positions: int, init_embedding: Callable[[Tensor], None]):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = max_positions
        self.embed_tokens = embedding(len(dictionary), embed_dim, self.padding_idx, init_embedding)

    def encode(self, src_tokens: Tensor, src_lengths: Tensor) -> Dict[str, Tensor]:
        """The encoder's outputs for a right-padded ``(batch, src_len)`` batch; ``(src_len, batch, dim)``
        tensors are right-padded too."""
        raise NotImplementedError

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, **unused) -> Dict[str, List[Tensor]]:
        """What :meth:`encode` returns for left- or right-padded ``(batch, src_len)`` ``src_tokens``, each in a
        list and aligned with them, plus ``encoder_padding_mask`` ``[(batch, src_len)]`` (True at padding)
        and ``src_lengths`` ``[(batch,)]``."""
        padding_mask = src_tokens.eq(self.padding_idx)
        src_tokens, shift = to_right_padding(src_tokens, self.padding_idx)
        out = self.encode(src_tokens, src_lengths)
        out = {k: right_to_left_padding(v, shift) if v.dim() == 3 else v for k, v in out.items()}
        return {
            **{k: [v] for k, v in out.items()},
            "encoder_padding_mask": [padding_mask],
            "src_lengths": [src_lengths],
        }
