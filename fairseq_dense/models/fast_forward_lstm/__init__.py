"""Deep-Att / Deep-ED: fast-forward deep LSTMs (Zhou et al. 2016)."""

from fairseq_dense.models.fast_forward_lstm.config import FastForwardLSTMConfig  # noqa: F401
from fairseq_dense.models.fast_forward_lstm.model import FastForwardLSTMModel  # noqa: F401
