"""Weighted Transformer (Ahmed et al., 2017): branched attention with learned kappa/alpha (its task,
``translation_exact_resume_simplex``, is registered by ``fairseq_dense.tasks``)."""

from fairseq_dense.models.weighted_transformer.config import WeightedTransformerConfig  # noqa: F401
from fairseq_dense.models.weighted_transformer.model import WeightedTransformerModel  # noqa: F401
