"""Weighted Transformer model and its named architectures.

Ahmed, Keskar and Socher, 2017, "Weighted Transformer Network for Machine
Translation", https://arxiv.org/abs/1711.02132.
"""

import logging
from typing import Dict, Iterator, Optional, Tuple

import torch
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture as fairseq_transformer_base
from fairseq.utils import safe_getattr

from fairseq_dense.models.arch_defaults import both_sides, fill_defaults, register_presets, set_defaults
from fairseq_dense.models.option_checks import flag
from fairseq_dense.models.weighted_transformer.config import WeightedTransformerConfig
from fairseq_dense.models.weighted_transformer.decoder import WeightedTransformerDecoder
from fairseq_dense.models.weighted_transformer.encoder import WeightedTransformerEncoder, learns
from fairseq_dense.modules.branched_attention import BranchedAttention
from fairseq_dense.modules.simplex import (
    PROJECTION_HOOK_ATTR,
    install_step_hook,
    is_on_simplex,
    project_onto_simplex,
    simplex_parameters,
)
from fairseq_dense.validation import ExplainsCheckpointMismatch

SIMPLEX_TASK = "translation_exact_resume_simplex"  # the task that projects kappa/alpha after each step

logger = logging.getLogger(__name__)


class SimplexTaskError(ValueError, RuntimeError):
    """Half-precision training of simplex-constrained weights without ``--task translation_exact_resume_simplex``."""


def validate(args) -> None:
    """Check option combinations; raise ``ValueError`` naming the flags."""
    for side in ("encoder", "decoder"):
        m = getattr(args, f"{side}_branches")
        heads = getattr(args, f"{side}_attention_heads")
        if m < 0:
            raise ValueError(f"--{side}-branches must be >= 0 (0: one branch per head)")
        m = m or heads
        if heads % m:
            raise ValueError(f"--{side}-branches ({m}) must divide --{side}-attention-heads ({heads})")
        if getattr(args, f"{side}_embed_dim") % heads:
            raise ValueError(f"--{side}-embed-dim must be divisible by --{side}-attention-heads")
        if getattr(args, f"{side}_ffn_embed_dim") % m:
            raise ValueError(f"--{side}-ffn-embed-dim must be divisible by --{side}-branches ({m})")
    unsupported = ("cross_self_attention", "quant_noise_pq", "scale_attn", "scale_fc", "scale_heads", "scale_resids")
    for key in (*unsupported, "no_decoder_final_norm", "no_cross_attention"):
        if safe_getattr(args, key, None):
            raise ValueError(f"{flag(key)} is not supported by --arch weighted_transformer*")
    if args.decoder_plain_cross_attn and args.decoder_branched_self_attn:
        raise ValueError(
            "--decoder-plain-cross-attn already makes the decoder self-attention branched; "
            "drop --decoder-branched-self-attn"
        )
    if not (learns(args, "kappa") or learns(args, "alpha")):
        if str(args.branch_weights_at_inference) != "learned":
            raise ValueError("--branch-weights-at-inference needs learned kappa or alpha: this model fixes both to 1")
        if args.no_simplex:
            logger.warning("--no-simplex has no effect with fixed kappa and alpha (add --learned-branch-weights)")


@register_model("weighted_transformer")
class WeightedTransformerModel(ExplainsCheckpointMismatch, TransformerModel):
    """Transformer whose attention + FFN sub-layers are weighted branches (Ahmed et al., 2017).

    https://arxiv.org/abs/1711.02132. fairseq's transformer whose ``build_encoder_layer``/
    ``build_decoder_layer`` make branched layers
    (:class:`~fairseq_dense.modules.branched_attention.BranchedAttention`).
    Every encoder layer is one branched block; every decoder layer keeps masked
    multi-head self-attention and makes encoder-decoder attention + FFN one block
    (``--decoder-branched-self-attn`` makes the self-attention branched as well).
    All of fairseq's ``transformer`` options apply (e.g. ``--share-all-embeddings``).

    kappa and alpha are tagged ``param_group = "branch"`` (for ``--lr-scheduler
    grouped``) and ``on_simplex`` (projected after every optimizer step by the
    ``translation_exact_resume_simplex`` task). Under another task :meth:`set_num_updates`
    projects them as a logged fallback (fp32) or raises (half-precision weights), so
    the constraint is never dropped silently.
    """

    @classmethod
    def add_args(cls, parser):
        """fairseq's transformer options plus :class:`WeightedTransformerConfig`."""
        super().add_args(parser)
        gen_parser_from_dataclass(parser, WeightedTransformerConfig())

    @classmethod
    def build_model(cls, args, task):
        """Build the model from fairseq's flat transformer and branch options; a bad option combination
        raises ``ValueError`` naming the flags."""
        weighted_transformer_base(args)
        validate(args)
        install_step_hook()  # kappa/alpha projected right after each optimizer step, under any task
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return WeightedTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens, args)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return WeightedTransformerDecoder(TransformerConfig.from_namespace(args), tgt_dict, embed_tokens, args)

    def state_dict_mismatch_hint(self, missing, unexpected) -> Optional[str]:
        """Why a checkpoint does not load when only kappa/alpha names differ (a checkpoint that learned
        the branch weights this model fixes, or the other way round), else None; read by
        :func:`fairseq_dense.validation.explain_state_dict_mismatch`."""
        names = (".kappa", ".alpha")
        if not all(k.endswith(names) for k in [*missing, *unexpected]):
            return None
        if unexpected:
            what = (
                f"the checkpoint learned branch weights ({unexpected[0]}, ...) that this model fixes to 1: "
                "build it with --learned-branch-weights (weighted_transformer_small and _tiny fix kappa "
                "and alpha unless given)"
            )
        else:
            what = (
                f"this model learns branch weights ({missing[0]}, ...) that the checkpoint fixed to 1: "
                "drop --learned-branch-weights, or add --fixed-kappa --fixed-alpha (the paper's "
                "configurations learn them unless fixed)"
            )
        return f"its branch weights do not match: {what}"

    # ------------------------------------------------------------ branch weights
    def branch_blocks(self) -> Iterator[Tuple[str, BranchedAttention]]:
        """``(short name, block)`` for every branched block: ``enc<i>``, ``dec<i>``, ``dec<i>.self``."""
        for i, layer in enumerate(self.encoder.layers):
            yield f"enc{i}", layer.branched
        for i, layer in enumerate(self.decoder.layers):
            if layer.self_branched is not None:
                yield f"dec{i}.self", layer.self_branched
            if layer.cross_branched is not None:
                yield f"dec{i}", layer.cross_branched

    def branch_weights(self) -> Dict[str, torch.Tensor]:
        """Learned kappa/alpha by name, e.g. ``{"enc0.kappa": (M,) tensor, ...}``."""
        return {
            f"{name}.{w}": getattr(block, w).detach()
            for name, block in self.branch_blocks()
            for w in ("kappa", "alpha")
            if getattr(block, w) is not None
        }

    def set_num_updates(self, num_updates):
        """Called by fairseq before every training forward and when loading a checkpoint.

        kappa/alpha are projected after every optimizer step by ``translation_exact_resume_simplex`` (which
        reaches fp32 master weights) or else by :func:`~fairseq_dense.modules.simplex.install_step_hook`.
        Half-precision weights under another task (the hook cannot find their fp32 master copies) are
        refused here, before the first update; vectors found off the simplex (changed outside an
        optimizer) are projected here once per update number, with a warning.
        """
        super().set_num_updates(num_updates)
        self._logging_stats = None
        if getattr(self, PROJECTION_HOOK_ATTR, False) or num_updates == getattr(self, "_checked_update", None):
            return
        self._checked_update = num_updates
        learned = simplex_parameters(self)
        if any(w.dtype not in (torch.float32, torch.float64) for w in learned):
            raise SimplexTaskError(
                "weighted_transformer: with half-precision weights (--fp16, --bf16, --memory-efficient-fp16) "
                f"only --task {SIMPLEX_TASK} keeps the branch weights (kappa, alpha) on the "
                f"probability simplex (it projects the fp32 master copies): train with --task {SIMPLEX_TASK} "
                "(or its earlier name translation_weighted), or pass --no-simplex"
            )
        off = [w for w in learned if not is_on_simplex(w, atol=1e-6)]
        if not off:
            return
        if not getattr(self, "_warned_fallback", False):
            self._warned_fallback = True
            logger.warning(
                "weighted_transformer: kappa/alpha found off the simplex were projected in "
                f"set_num_updates; --task {SIMPLEX_TASK} projects them right after each "
                "optimizer step (and reaches fp32 master weights under --fp16/--bf16)"
            )
        with torch.no_grad():
            for w in off:
                w.copy_(project_onto_simplex(w))

    @torch.no_grad()
    def get_logging_stats(self) -> Dict[str, torch.Tensor]:
        """Per block and weight vector: entropy (nats) and largest weight (0-d tensors).

        Logged by ``label_smoothed_cross_entropy_with_stats`` as e.g.
        ``model/enc0.kappa_ent``; computed once per update, read only by fairseq's logging.
        """
        cached = getattr(self, "_logging_stats", None)
        if cached is not None:
            return cached
        stats = {}  # tensors, not read here: fairseq's logging reads them
        for name, w in self.branch_weights().items():
            p = w.float().clamp_min(0)
            stats[f"{name}_ent"] = torch.special.entr(p / p.sum().clamp_min(1e-12)).sum()
            stats[f"{name}_max"] = w.float().max()
        self._logging_stats = stats
        return stats


# ------------------------------------------------------------------ architectures
# Paper presets learn kappa and alpha on the simplex (the paper's defining feature; the recipes'
# grouped schedule freezes them for the last 10k updates, as the paper does). Tied embeddings
# (the paper's shared BPE vocabulary) are the recipes' --share-all-embeddings: they need a joined
# dictionary, so no preset forces them.


@register_model_architecture("weighted_transformer", "weighted_transformer")
def weighted_transformer_base(args):
    """Configuration (A) of the paper, the base of every other preset (same as ``weighted_transformer_a``).

    Paper: Ahmed et al. 2017, Table 2, Weighted Transformer (A): layers=6+6, d_model=512, ffn=2048,
    heads=8, branches=8, dropout=0.1, learned_branch_weights=True
    """
    set_defaults(args, {"learned_branch_weights": True, "dropout": 0.1})
    fill_defaults(args, WeightedTransformerConfig)  # fixed_kappa/alpha None: learned_branch_weights decides
    # the paper drops attention probabilities with the residual dropout rate
    set_defaults(args, {"attention_dropout": args.dropout})
    fairseq_transformer_base(args)


def _sizes(layers: int, dim: int, ffn: int, heads: int, dropout: float, learned: bool = True):
    """Both sides' sizes (M = heads: one head a branch) and the branch-weight default."""
    sizes = both_sides(layers=layers, embed_dim=dim, ffn_embed_dim=ffn, attention_heads=heads)
    return dict(sizes, dropout=dropout, learned_branch_weights=learned)


def _paper(doc: str, row: str, layers: int, dim=512, ffn=2048, heads=8, dropout=0.1):
    """``(docstring, options)`` of a row of the paper's Table 2: ``doc``, then its ``Paper:`` claim."""
    claim = f"layers={layers}+{layers}, d_model={dim}, ffn={ffn}, heads={heads}, branches={heads}, dropout={dropout}"
    doc += f"\n\nPaper: Ahmed et al. 2017, Table 2, Weighted Transformer {row}: {claim}, learned_branch_weights=True"
    return doc, _sizes(layers, dim, ffn, heads, dropout)


register_presets(
    "weighted_transformer",
    {
        "weighted_transformer_tiny": (
            """For tests: N=2, d_model 64, d_ff 256, 4 heads = 4 branches, kappa/alpha fixed to 1 unless
            ``--learned-branch-weights``.

            Project: test size, not a paper configuration.""",
            _sizes(2, 64, 256, 4, 0.1, learned=False),
        ),
        "weighted_transformer_small": (
            """CPU-sized (the quick-start's default): N=2, d_model 128, d_ff 512, 4 heads = 4 branches,
            kappa and alpha fixed to 1 (the paper's Table 3 "alpha, kappa both fixed to 1" form, measured
            better than learned weights at this size on Tatoeba: docs/weighted_transformer.md;
            ``--learned-branch-weights`` learns them); 2.5M parameters with the quick-start's Tatoeba
            vocabularies (4000 BPE merges), 4.0M with 8000.

            Project: the project's measured CPU-scale variant, not a paper configuration.""",
            _sizes(2, 128, 512, 4, 0.1, learned=False),
        ),
        "weighted_transformer_c": _paper("Configuration (C), the one of the paper's Tables 3-4 ablations.", "(C)", 2),
        "weighted_transformer_n4": _paper("The N=4 row of Table 2.", "N=4", 4),
        "weighted_transformer_a": _paper(
            'Configuration (A), the paper\'s "small" model of Table 1 (same as ``weighted_transformer``).', "(A)", 6
        ),
        "weighted_transformer_n8": _paper(
            "The N=8 row of Table 2 (P_drop 0.3 for the Weighted Transformer, 0.1 for its Transformer).",
            "N=8",
            8,
            dropout=0.3,
        ),
        "weighted_transformer_b": _paper(
            'Configuration (B), the paper\'s "large" model of Table 1.', "(B)", 6, 1024, 4096, 16, dropout=0.3
        ),
    },
    weighted_transformer_base,
)
