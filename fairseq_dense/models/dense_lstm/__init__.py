"""DenseRNN: densely connected stacked LSTM encoder-decoder with dense attention."""

from fairseq_dense.models.dense_lstm.config import DenseLSTMConfig  # noqa: F401
from fairseq_dense.models.dense_lstm.model import DenseLSTMModel  # noqa: F401
