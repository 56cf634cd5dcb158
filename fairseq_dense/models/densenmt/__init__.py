"""DenseNMT: dense convolutional encoder-decoder with dense attention (Shen et al. 2018)."""

from fairseq_dense.models.densenmt.config import DenseNMTConfig  # noqa: F401
from fairseq_dense.models.densenmt.model import DenseNMTModel  # noqa: F401
