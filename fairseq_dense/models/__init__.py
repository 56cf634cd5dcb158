"""Model families registered by fairseq-dense: one sub-package each."""

from fairseq_dense.models import (
    dense_lstm,  # noqa: F401
    densenmt,  # noqa: F401
    fast_forward_lstm,  # noqa: F401
    gru_attention,  # noqa: F401
    weighted_transformer,  # noqa: F401
)
