"""Label-smoothed cross entropy that also reports token error rate and model statistics."""

from dataclasses import dataclass
from typing import Dict, Union

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
    label_smoothed_nll_loss,
)

#: Prefix of logging-output keys that carry statistics exposed by the model.
MODEL_STAT_PREFIX = "model/"
_MODEL_STAT_COUNT = "_model_stat_count"


@dataclass
class LabelSmoothedCrossEntropyWithStatsCriterionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    pass


def token_errors(scores: torch.Tensor, target: torch.Tensor, padding_idx: int):
    """``(n_errors, n_tokens)`` (0-d tensors, not read back to the host) of ``(N,)`` gold ids ``target``
    under ``(N, V)`` ``scores`` (logits or log-probabilities), padding excluded. A token is wrong when
    another word scores strictly higher (a tie counts as right): ``argmax != target`` but on exact ties,
    and several times cheaper on CPU (``amax`` is vectorised, ``argmax`` is not)."""
    mask = target.ne(padding_idx)
    gold = scores.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    wrong = gold.lt(scores.amax(dim=-1)) & mask
    return wrong.sum(), mask.sum()


@register_criterion(
    "label_smoothed_cross_entropy_with_stats",
    dataclass=LabelSmoothedCrossEntropyWithStatsCriterionConfig,
)
class LabelSmoothedCrossEntropyWithStatsCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's label-smoothed cross entropy plus two kinds of extra statistics.

    * ``ter``: token error rate in percent, the share of non-padding target tokens
      whose argmax prediction under teacher forcing is wrong (Deep-Att, Zhou et al.
      2016, Sec. 4.5.3).
    * any scalars the model exposes through an optional method
      ``get_logging_stats() -> Dict[str, Tensor or float]`` (e.g. Weighted Transformer branch
      weights); they are logged as ``model/<name>``, averaged over workers.

    Statistics stay tensors until fairseq's logging reads its meters: the criterion reads no
    device value (tests/test_host_syncs.py).
    """

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        # fairseq's compute_loss, with its log-probabilities kept for the token errors (no second softmax)
        lprobs, target = self.get_lprobs_and_target(model, net_output, sample)
        loss, nll_loss = label_smoothed_nll_loss(lprobs, target, self.eps, ignore_index=self.padding_idx, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        n_err, n_tok = token_errors(lprobs.detach(), target, self.padding_idx)
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
            "n_token_errors": n_err,
            "n_scored_tokens": n_tok,
        }
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = n_correct.data
            logging_output["total"] = total.data
        logging_output.update(self.model_stats(model))
        return loss, sample_size, logging_output

    @staticmethod
    def model_stats(model) -> Dict[str, Union[torch.Tensor, float]]:
        """Collect the model's optional scalar statistics for logging (tensors detached, not read)."""
        getter = getattr(model, "get_logging_stats", None)
        if getter is None:
            return {}
        stats = {MODEL_STAT_PREFIX + k: v.detach() if torch.is_tensor(v) else float(v) for k, v in getter().items()}
        if stats:
            stats[_MODEL_STAT_COUNT] = 1
        return stats

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        # tensors (or numbers) summed, not read: fairseq's logging reads the meters
        if any("n_scored_tokens" in log for log in logging_outputs):
            # "_"-prefixed meters are aggregated but not printed
            metrics.log_scalar_sum("_ter_errors", sum(log.get("n_token_errors", 0) for log in logging_outputs))
            metrics.log_scalar_sum("_ter_tokens", sum(log.get("n_scored_tokens", 0) for log in logging_outputs))
            metrics.log_derived(
                "ter",
                lambda meters: (
                    round(100.0 * float(meters["_ter_errors"].sum) / float(meters["_ter_tokens"].sum), 3)
                    if float(meters["_ter_tokens"].sum) > 0
                    else float("nan")
                ),
            )
        n_stat = sum(log.get(_MODEL_STAT_COUNT, 0) for log in logging_outputs)
        if n_stat > 0:
            keys = {k for log in logging_outputs for k in log if k.startswith(MODEL_STAT_PREFIX)}
            for key in sorted(keys):
                total = sum(log.get(key, 0.0) for log in logging_outputs)
                metrics.log_scalar(key, total / n_stat, n_stat, round=4)
