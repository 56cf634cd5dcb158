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
            "help": "learn kappa and alpha on the simplex, as the paper does (default of the paper's "
            "configurations; weighted_transformer_small and _tiny fix both to 1 unless given)"
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
            "help": "branch matrices W_i^O, W1_i, W2_i drawn as fairseq's transformer draws the matrices "
            "they split ('transformer'), or each for its own shape with zero biases ('xavier')"
        },
    )
    branch_residual_dropout: RESIDUAL_DROPOUT_CHOICES = field(
        default="outputs",
        metadata={
            "help": "the residual dropout of Eq. 6 on each branch output before the residual sum "
            "('outputs', the Transformer's placement) or on the heads before W_i^O ('heads', cheaper)"
        },
    )
    branch_recompute: bool = field(
        default=False,
        metadata={"help": "recompute the branch outputs and residual sums in backward (less activation memory)"},
    )
