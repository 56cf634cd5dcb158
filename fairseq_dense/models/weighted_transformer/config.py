"""Options of the Weighted Transformer that fairseq's transformer does not have."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from fairseq_dense.modules.branched_attention import BRANCH_INITS, INFERENCE_WEIGHTS, RESIDUAL_DROPOUT_SITES

# the block's own lists of accepted values (one place: the module checks them too)
INFERENCE_WEIGHT_CHOICES = ChoiceEnum(list(INFERENCE_WEIGHTS))
BRANCH_INIT_CHOICES = ChoiceEnum(list(BRANCH_INITS))
RESIDUAL_DROPOUT_CHOICES = ChoiceEnum(list(RESIDUAL_DROPOUT_SITES))


@dataclass
class WeightedTransformerConfig(FairseqDataclass):
    """Branch options; every fairseq ``transformer`` option applies as well (the model is registered
    as fairseq registers ``transformer``: argparse options from ``TransformerConfig`` plus these)."""

    encoder_branches: int = field(
        default=0,
        metadata={"help": "branches M per encoder block (0: --encoder-attention-heads)"},
    )
    decoder_branches: int = field(
        default=0,
        metadata={"help": "branches M per decoder block (0: --decoder-attention-heads)"},
    )
    decoder_branched_self_attn: bool = field(
        default=False,
        metadata={
            "help": "also make decoder self-attention a branched block (with its own "
            "branch FFNs, so each decoder layer gets a second FFN's parameters)"
        },
    )
    decoder_plain_cross_attn: bool = field(
        default=False,
        metadata={
            "help": "encoder-decoder attention as the Transformer's (no branches, no FFN after it) "
            "and the decoder self-attention a branched block with the FFNs instead: branches in the "
            "encoder and the decoder self-attention only (same parameters as the default)"
        },
    )
    no_simplex: bool = field(
        default=False,
        metadata={"help": "do not project kappa/alpha onto the simplex (Table 3 ablation)"},
    )
    # None: not given, the architecture decides; older saved configurations hold an explicit value
    learned_branch_weights: Optional[bool] = field(
        default=None,
        metadata={
            "help": "learn kappa and alpha on the simplex, as the paper does: the default of the paper's "
            "configurations (weighted_transformer, _a, _b, _c, _n4, _n8); weighted_transformer_small and "
            "_tiny fix both to 1 unless given (measured better at CPU size: docs/weighted_transformer.md). "
            "--fixed-kappa / --fixed-alpha fix one or both to 1 (Table 3)"
        },
    )
    # None: not given, learned_branch_weights decides
    fixed_kappa: Optional[bool] = field(
        default=None, metadata={"help": "kappa fixed to 1, not learned (Table 3 ablation)"}
    )
    fixed_alpha: Optional[bool] = field(
        default=None, metadata={"help": "alpha fixed to 1, not learned (Table 3 ablation)"}
    )
    branch_weights_at_inference: INFERENCE_WEIGHT_CHOICES = field(
        default="learned",
        metadata={
            "help": "in eval mode replace learned kappa/alpha by 'uniform' (1/M) or "
            "'random' (a fixed draw from the simplex) weights (Table 4); set it at "
            "generation time with --model-overrides"
        },
    )
    branch_random_seed: int = field(default=1, metadata={"help": "seed of --branch-weights-at-inference random"})
    branch_init: BRANCH_INIT_CHOICES = field(
        default="transformer",
        metadata={
            "help": "initialisation of the branch matrices W_i^O, W1_i, W2_i: 'transformer' (the "
            "default), drawn as fairseq's transformer draws the whole matrices they split (W^O Xavier "
            "over C x C, the FFN nn.Linear's default with the whole fan-in, uniform FFN biases), or "
            "'xavier', each for its own shape with zero biases (the first form built, measured worse)"
        },
    )
    branch_residual_dropout: RESIDUAL_DROPOUT_CHOICES = field(
        default="outputs",
        metadata={
            "help": "where the residual dropout of Eq. 6 acts: 'outputs' (the default), on each "
            "branch's output kappa_i (head_i W_i^O + b^O) before the residual sum (the Transformer's "
            "placement; M times the tensor), or 'heads', on the attention heads before W_i^O (one "
            "(T*B, C) tensor: cheaper, same expectation)"
        },
    )
    branch_recompute: bool = field(
        default=False,
        metadata={
            "help": "recompute each block's branch outputs, residual sums and their layer norm in "
            "the backward pass instead of keeping the (M, T*B, C) residual sums and dropout masks "
            "(less activation memory, one more W^O product per block)"
        },
    )
