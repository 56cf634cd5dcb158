"""Host syncs in one training step of every ``*_tiny`` architecture (``op_counts.SyncCounter``).

The project's code in the forward, the stats criterion, the backward and the criterion's
``reduce_metrics`` (statistics stay tensors until fairseq's logging reads its meters) reads no device
value and copies nothing to the host, but for the syncs :data:`ALLOWED`; fairseq's own modules (its
transformer layers' padding checks, as in the counterpart) are not counted. On the CPU nothing waits:
the counter counts the calls that would wait for a GPU.
"""

import collections
from types import SimpleNamespace

import pytest
from fairseq import metrics
from fairseq.models import ARCH_MODEL_NAME_REGISTRY

from benchmarks import op_counts
from fairseq_dense.criterions.label_smoothed_cross_entropy_with_stats import LabelSmoothedCrossEntropyWithStatsCriterion
from tests import helpers
from tests import reliability_helpers as rh

#: family -> {"<kind> <file>": count}. Packing a batch for cuDNN needs its lengths on the host (fairseq's
#: ``lstm`` encoder copies them too): one copy; the other reads are of the packed batch sizes, which stay
#: on the host (nn.GRU's and pad_packed_sequence's, no wait on a GPU)
ALLOWED = {
    "gru_attention": {
        "cpu fairseq_dense/models/gru_attention/encoder.py": 2,
        "item fairseq_dense/models/gru_attention/encoder.py": 2,
    }
}


@pytest.mark.parametrize("arch", rh.tiny_archs())
def test_training_step_syncs_only_where_allowed(arch):
    d = helpers.dummy_dictionary(12)
    model = rh.build_tiny_model(arch, d).train()
    task = SimpleNamespace(target_dictionary=d)
    criterion = LabelSmoothedCrossEntropyWithStatsCriterion(task, False, 0.1, ignore_prefix_size=0)
    sample = helpers.make_sample(d)
    with op_counts.SyncCounter() as counter:
        loss, _, log = criterion(model, sample)
        loss.backward()
        with metrics.aggregate():
            criterion.reduce_metrics([log, log])
    ours = collections.Counter()
    for site, n in counter.syncs.items():
        if " fairseq_dense/" in site:  # not fairseq's own (its transformer's, made by the counterpart too)
            ours[site.rsplit(":", 1)[0]] += n
    assert ours == ALLOWED.get(ARCH_MODEL_NAME_REGISTRY[arch], {}), dict(counter.syncs)


def test_the_counter_sees_scalar_reads_and_host_copies():
    import torch

    t = torch.ones(3)
    with op_counts.SyncCounter() as counter:
        t.sum().item(), float(t[0]), bool(t.gt(0).all()), t.tolist(), t.cpu(), t.to("cpu"), t.to(torch.float64)
    kinds = collections.Counter(site.split()[0] for site in counter.syncs.elements())
    assert kinds == {"item": 3, "tolist": 1, "cpu": 1, "to": 1}
    assert torch.Tensor.cpu is torch._C.TensorBase.cpu  # restored
