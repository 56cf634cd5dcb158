"""Optimizers registered by fairseq-dense."""

from fairseq_dense.optim import fused_adam  # noqa: F401
