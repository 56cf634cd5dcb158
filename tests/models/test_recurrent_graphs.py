"""Step loops must not index a sequence tensor once per step in training.

``x[t]`` inside a Python loop makes autograd build one select node per step whose
backward allocates a zero tensor the size of ``x`` and writes one step into it: the
backward pass then moves O(T^2) memory (it cost Deep-Att 20% of its training
throughput). ``x.unbind(0)`` has a single backward that stacks the step gradients.
The check: no autograd node type may occur more often for longer targets except the
per-step computation itself, and in particular select/slice nodes must not.
"""

import pytest

from tests import helpers
from tests.models import test_dense_lstm, test_fast_forward_lstm, test_gru_attention

FAMILIES = {
    "gru_attention": test_gru_attention.build,
    "dense_lstm": test_dense_lstm.build,
    "fast_forward_lstm": test_fast_forward_lstm.build,
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_per_step_indexing_in_training_graph(family):
    model, d = FAMILIES[family]()
    model.train()
    counts = []
    for tgt_lengths in ((4, 6, 5), (9, 12, 10)):
        sample = helpers.make_sample(d, tgt_lengths=tgt_lengths)
        out, _ = model(**sample["net_input"])
        counts.append(helpers.autograd_node_counts(out))
    for name in ("SelectBackward0", "SliceBackward0", "IndexBackward0", "AsStridedBackward0"):
        assert counts[0].get(name, 0) == counts[1].get(name, 0), (
            f"{family}: {name} grows with the target length ({counts[0].get(name, 0)} -> "
            f"{counts[1].get(name, 0)}): a sequence tensor is indexed once per step"
        )
