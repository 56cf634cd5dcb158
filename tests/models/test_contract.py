"""The contract every registered family keeps, one test per property over every variant of every family.

Decoding: ``forward`` gives ``(B, T, |V|)``; step-by-step decoding with ``incremental_state`` equals
the full pass; reordering the state equals decoding the permuted batch; left- and right-padded
sources agree. Training: every parameter gets a finite gradient. Attention: a distribution over
the real source positions. Recurrent step loops: no per-step indexing in the training graph.
The families come from the registry: one without an entry in ``tests/models/families.py`` fails.
"""

import pytest
import torch

from fairseq_dense.baselines import our_families
from tests import helpers
from tests.models.families import BAD_OPTIONS, DROPOUT, VARIANTS, build, variant

CASES = [(family, name) for family in sorted(VARIANTS) for name in VARIANTS[family]]
IDS = [f"{family}-{name}" for family, name in CASES]
#: the variants without attention (Deep-ED hands the decoder one vector)
NO_ATTENTION = {(f, n) for f, n in CASES if VARIANTS[f][n].get("interface") == "deep_ed"}
RECURRENT = ("dense_lstm", "fast_forward_lstm", "gru_attention")


def test_every_registered_family_is_tested():
    assert sorted(VARIANTS) == sorted(our_families())


@pytest.mark.parametrize("family, name", CASES, ids=IDS)
def test_decoding_contract(family, name):
    model, d = variant(family, name)
    sample = helpers.make_sample(d)
    helpers.check_output_shape(model, sample, len(d))
    helpers.check_incremental_equals_full(model, sample)
    helpers.check_reorder_incremental_state(model, sample)
    helpers.check_padding_invariance(model, sample)


@pytest.mark.parametrize("family, name", CASES, ids=IDS)
def test_every_parameter_gets_a_finite_gradient(family, name):
    model, d = variant(family, name, **DROPOUT[family])
    helpers.check_all_params_get_finite_grads(model, helpers.make_sample(d))


@pytest.mark.parametrize("family, name", CASES, ids=IDS)
def test_attention_is_a_distribution_over_the_real_source_positions(family, name):
    model, d = variant(family, name)
    model.eval()
    sample = helpers.make_sample(d)
    _, extra = model(**sample["net_input"])
    attn = (extra.get("attn") or [None])[0]
    if (family, name) in NO_ATTENTION:
        assert attn is None
        return
    b, t = sample["net_input"]["prev_output_tokens"].shape
    assert attn.shape == (b, t, sample["net_input"]["src_tokens"].size(1))
    torch.testing.assert_close(attn.sum(-1), torch.ones(b, t))
    pad = sample["net_input"]["src_tokens"].eq(d.pad()).unsqueeze(1).expand_as(attn)
    assert attn.masked_select(pad).abs().max() == 0


@pytest.mark.parametrize(
    "family, overrides, flag", [(family, *case) for family, cases in sorted(BAD_OPTIONS.items()) for case in cases]
)
def test_bad_options_name_the_flag(family, overrides, flag):
    with pytest.raises(ValueError, match=flag):
        build(family, **overrides)


@pytest.mark.parametrize("family", RECURRENT)
def test_no_per_step_indexing_in_the_training_graph(family):
    """``x[t]`` inside a step loop makes autograd build one select node per step whose backward
    allocates a zero tensor the size of ``x`` (O(T^2) memory moved; it cost Deep-Att 20% of its
    throughput); ``x.unbind(0)`` has one backward. No select/slice node may grow with the target."""
    model, d = build(family)
    model.train()
    counts = []
    for tgt_lengths in ((4, 6, 5), (9, 12, 10)):
        out, _ = model(**helpers.make_sample(d, tgt_lengths=tgt_lengths)["net_input"])
        counts.append(helpers.autograd_node_counts(out))
    for node in ("SelectBackward0", "SliceBackward0", "IndexBackward0", "AsStridedBackward0"):
        assert counts[0].get(node, 0) == counts[1].get(node, 0), f"{family}: {node} grows with the target length"
