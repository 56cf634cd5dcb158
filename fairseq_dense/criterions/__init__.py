"""Criteria registered by fairseq-dense."""

from fairseq_dense.criterions import label_smoothed_cross_entropy_with_stats  # noqa: F401
