"""The stats criterion against hand-computed values."""

import math
from types import SimpleNamespace

import torch
from fairseq import metrics

import fairseq_dense  # noqa: F401
from fairseq_dense.criterions.label_smoothed_cross_entropy_with_stats import (
    LabelSmoothedCrossEntropyWithStatsCriterion,
    token_errors,
)
from tests import helpers


class TableModel(torch.nn.Module):
    """Returns a fixed table of logits; exposes one statistic."""

    def __init__(self, logits, stats=None):
        super().__init__()
        self.logits = logits
        self.stats = stats

    def forward(self, src_tokens, src_lengths, prev_output_tokens):
        return self.logits, None

    calls = 0

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        self.calls += 1
        return torch.log_softmax(net_output[0], dim=-1)

    def get_targets(self, sample, net_output):
        return sample["target"]

    def get_logging_stats(self):
        return self.stats or {}


def build_criterion(d, eps):
    task = SimpleNamespace(target_dictionary=d)
    return LabelSmoothedCrossEntropyWithStatsCriterion(task, False, eps, ignore_prefix_size=0, report_accuracy=False)


def _setup():
    d = helpers.dummy_dictionary(2)  # 6 symbols: bos pad eos unk w0 w1
    pad = d.pad()
    # batch 1 x 3 target positions, the last one padding
    target = torch.tensor([[4, 5, pad]])
    logits = torch.log(
        torch.tensor(
            [
                [
                    [0.1, 0.1, 0.1, 0.1, 0.5, 0.1],  # predicts 4: correct
                    [0.1, 0.1, 0.1, 0.1, 0.4, 0.2],  # predicts 4, gold 5: wrong
                    [0.1, 0.1, 0.1, 0.1, 0.1, 0.5],  # padding: ignored
                ]
            ]
        )
    )
    sample = {
        "net_input": {"src_tokens": None, "src_lengths": None, "prev_output_tokens": None},
        "target": target,
        "ntokens": 2,
    }
    return d, logits, sample


def test_token_errors_exclude_padding():
    d, logits, sample = _setup()
    n_err, n_tok = token_errors(logits.view(-1, 6), sample["target"].view(-1), d.pad())
    assert (n_err, n_tok) == (1, 2)


def test_token_errors_count_only_strictly_better_words():
    scores = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.5, 0.2], [3.0, 3.0, -1.0]])
    # gold 2 ties the best (right), gold 1 is beaten (wrong), gold 1 ties word 0 (right)
    assert token_errors(scores, torch.tensor([2, 1, 1]), padding_idx=-5) == (1, 3)


def test_ter_needs_no_second_softmax():
    d, logits, sample = _setup()
    model = TableModel(logits)
    _, _, log = build_criterion(d, 0.1)(model, sample)
    assert model.calls == 1  # the loss's only
    assert (log["n_token_errors"], log["n_scored_tokens"]) == (1, 2)


def test_loss_and_ter_hand_computed():
    d, logits, sample = _setup()
    eps = 0.1
    crit = build_criterion(d, eps)
    loss, sample_size, log = crit(TableModel(logits), sample)
    lp = torch.log_softmax(logits, -1)[0]
    nll = -(lp[0, 4] + lp[1, 5])
    smooth = -(lp[0].sum() + lp[1].sum())
    # fairseq's formula: (1 - eps - eps_i) * nll + eps_i * smooth, eps_i = eps / (V - 1)
    eps_i = eps / (6 - 1)
    expected = (1 - eps - eps_i) * nll + eps_i * smooth
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(log["nll_loss"], nll)
    assert sample_size == 2
    assert (log["n_token_errors"], log["n_scored_tokens"]) == (1, 2)


def test_zero_smoothing_is_cross_entropy():
    d, logits, sample = _setup()
    loss, _, log = build_criterion(d, 0.0)(TableModel(logits), sample)
    torch.testing.assert_close(loss, log["nll_loss"])


def test_reduce_metrics_logs_ter_and_model_stats():
    d, logits, sample = _setup()
    crit = build_criterion(d, 0.0)
    logs = [
        crit(TableModel(logits, {"kappa_max": 0.5}), sample)[2],
        crit(TableModel(logits, {"kappa_max": 1.0}), sample)[2],
    ]
    with metrics.aggregate() as agg:
        LabelSmoothedCrossEntropyWithStatsCriterion.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    assert math.isclose(values["ter"], 50.0)
    assert math.isclose(values["model/kappa_max"], 0.75)
