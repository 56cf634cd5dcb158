"""Weighted Transformer (Ahmed et al., 2017): branched attention with learned kappa/alpha.

Importing this package registers the model, its architectures and (for training)
the ``translation_weighted`` task.
"""
from fairseq_dense.models.weighted_transformer.config import WeightedTransformerConfig  # noqa: F401
from fairseq_dense.models.weighted_transformer.model import WeightedTransformerModel  # noqa: F401
from fairseq_dense.tasks import translation_weighted  # noqa: F401
