"""LR schedulers registered by fairseq-dense."""

from fairseq_dense.lr_schedulers import (
    convs2s_anneal,  # noqa: F401
    grouped,  # noqa: F401
)
