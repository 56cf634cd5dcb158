"""LR schedulers registered by fairseq-dense."""
from fairseq_dense.lr_schedulers import grouped  # noqa: F401
