"""LR schedulers registered by fairseq-dense."""

from fairseq_dense.lr_schedulers import convs2s_anneal, grouped  # noqa: F401
