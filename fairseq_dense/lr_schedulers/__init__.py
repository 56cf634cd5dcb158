"""LR schedulers registered by fairseq-dense."""
from fairseq_dense.lr_schedulers import grouped  # noqa: F401
from fairseq_dense.lr_schedulers import convs2s_anneal  # noqa: F401
