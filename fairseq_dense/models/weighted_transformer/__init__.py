"""Weighted Transformer (Ahmed et al., 2017): branched attention with learned kappa/alpha.

Importing this package registers the model and its architectures; the
``translation_exact_resume_simplex`` task it trains with is registered by ``fairseq_dense.tasks``.
"""

from fairseq_dense.models.weighted_transformer.config import WeightedTransformerConfig  # noqa: F401
from fairseq_dense.models.weighted_transformer.model import WeightedTransformerModel  # noqa: F401
