"""Attentional GRU baseline (Bahdanau et al. 2014; Yin & Hu report)."""

from fairseq_dense.models.gru_attention.config import GRUAttentionConfig  # noqa: F401
from fairseq_dense.models.gru_attention.model import GRUAttentionModel  # noqa: F401
