"""The Weighted Transformer ablation's commands parse and build (examples/weighted_transformer/ablation.py).

Every variant's full ``fairseq-train`` command goes through fairseq's own parser; the
model is built on a small dictionary and, for every pair of variants meant to have the
same shape (Transformer against Weighted Transformer), the parameter counts differ by
the branch weights only.
"""

import importlib.util
import os

import pytest
from fairseq import options

import fairseq_dense  # noqa: F401
from fairseq_dense.models.weighted_transformer import WeightedTransformerModel
from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location(
    "wt_ablation", os.path.join(ROOT, "examples", "weighted_transformer", "ablation.py")
)
ablation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ablation)


def build(variant):
    cmd = ablation.command(variant, 3e-3, 1, 1500, "/nonexistent/save")
    assert cmd[0] == "fairseq-train"
    args = options.parse_args_and_arch(options.get_training_parser(), cmd[1:])
    assert args.lr == [3e-3] and args.max_update == 1500
    if variant in ablation.GROUPED:
        assert args.lr_scheduler == "grouped" and args.group_freeze_last == "branch=150"
    model = args.arch.startswith("weighted") and WeightedTransformerModel or None
    from fairseq.models.transformer import TransformerModel

    cls = model or TransformerModel
    return cls.build_model(args, helpers.DummyTask(helpers.dummy_dictionary(64)))


@pytest.mark.parametrize("pair", [("transformer", "wt"), ("transformer_4l", "wt_4l"), ("transformer_d256", "wt_d256")])
def test_variants_parse_build_and_match_their_transformer(pair):
    base, weighted = (build(v) for v in pair)
    n_base = sum(p.numel() for p in base.parameters())
    n_weighted = sum(p.numel() for p in weighted.parameters())
    blocks = len(list(weighted.branch_blocks()))
    assert n_weighted == n_base + blocks * 2 * 4  # kappa and alpha, M = 4, per block


def test_every_variant_parses_and_builds():
    for variant in ablation.VARIANTS:
        assert sum(p.numel() for p in build(variant).parameters()) > 0, variant
