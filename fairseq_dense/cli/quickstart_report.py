"""The quick-start's figures: one markdown table, and whether each model is ahead of its baseline.

With several seeds (``--seeds N``) a model's row gives the mean ± the sample standard
deviation over its seeds, and :func:`pair_lines` says for each model trained with its
baseline whether it is "ahead", "behind" or "within noise": the difference of the means
against twice its standard error (the pooled standard deviation times sqrt(1/n1 + 1/n2)).
"""

import math
import statistics
from typing import Dict, List, Tuple

from fairseq_dense.cli.quickstart_steps import Result


def mean_sd(values: List[float]) -> Tuple[float, float]:
    """The mean and the sample standard deviation (``nan`` for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")


def _cell(values: List[float]) -> str:
    """``"31.65"`` (one seed) or ``"31.52 ± 0.12"`` (mean ± standard deviation over the seeds)."""
    mean, sd = mean_sd(values)
    return f"{mean:.2f}" if math.isnan(sd) else f"{mean:.2f} ± {sd:.2f}"


def by_model(results: List[Result]) -> Dict[Tuple[str, str, str], List[Result]]:
    """The runs of each model (family, label, arch), its seeds in order, models in order of appearance."""
    groups: Dict[Tuple[str, str, str], List[Result]] = {}
    for r in results:
        groups.setdefault((r.family, r.label, r.arch), []).append(r)
    return groups


def table(results: List[Result]) -> str:
    """The figures as one markdown table, a row per model (speed beside, in target tokens/s).

    With several seeds a model's valid loss and test BLEU are the mean ± the standard deviation
    over its seeds (runs that failed left out, the ``seeds`` column counts the others)."""
    groups = by_model(results)
    several = any(len(runs) > 1 for runs in groups.values())
    counts = {len([r for r in runs if not r.error]) for runs in groups.values()}
    if several:
        n = f"{counts.pop()} seeds" if len(counts) == 1 else "over the seeds"
        head = f"| seeds | valid loss, mean ± sd {n} | test BLEU, mean ± sd {n} |"
    else:
        head = "| valid loss | test BLEU |"
    lines = [f"| family | model | arch | params | updates {head} target tokens/s |", "|---" * (8 + several) + "|"]
    for (family, label, arch), runs in groups.items():
        model = "fairseq baseline" if label == "baseline" else "fairseq-dense"
        done = [r for r in runs if not r.error]
        if not done:
            lines.append(f"| {family} | {model} | `{arch}` | {runs[0].error} |" + " |" * (4 + several))
            continue
        updates = "/".join(str(u) for u in sorted({r.updates for r in done}))
        seeds = f" {len(done)} |" if several else ""
        lines.append(
            f"| {family} | {model} | `{arch}` | {done[0].params / 1e6:.2f}M | {updates} |{seeds} "
            f"{_cell([r.valid_loss for r in done])} | {_cell([r.bleu for r in done])} "
            f"| {statistics.fmean(r.wps for r in done):,.0f} |"
        )
    return "\n".join(lines)


def verdict(ours: List[float], theirs: List[float], higher_is_better: bool) -> Tuple[float, float, str]:
    """``(difference of the means, twice its standard error, word)`` of two models' seeds.

    The standard error of the difference is the pooled standard deviation times
    sqrt(1/n1 + 1/n2); the model is "ahead" or "behind" when the difference in its favour
    or against it exceeds twice that, else "within noise". One seed on each side measures
    no spread (``nan``, "one seed each: no spread measured").
    """
    n1, n2 = len(ours), len(theirs)
    diff = statistics.fmean(ours) - statistics.fmean(theirs)
    if n1 + n2 < 3:
        return diff, float("nan"), "one seed each: no spread measured"
    squares = sum((len(v) - 1) * statistics.variance(v) for v in (ours, theirs) if len(v) > 1)
    bound = 2 * math.sqrt(squares / (n1 + n2 - 2)) * math.sqrt(1 / n1 + 1 / n2)
    gain = diff if higher_is_better else -diff
    return diff, bound, "ahead" if gain > bound else "behind" if gain < -bound else "within noise"


def pair_lines(results: List[Result]) -> List[str]:
    """A line per family trained with its baseline: is the plugin model ahead, behind or within noise?"""
    groups = by_model(results)
    lines = []
    for (_, label, arch), runs in groups.items():
        # a baseline's folder is its model's with "-baseline" added
        base = next((g for g in groups.values() if g[0].save_dir == runs[0].save_dir + "-baseline"), None)
        if label != "plugin" or base is None:
            continue
        ours, theirs = [r for r in runs if not r.error], [r for r in base if not r.error]
        if not ours or not theirs:
            continue
        said = []
        for name, key, higher, digits in (("test BLEU", "bleu", True, 2), ("valid loss", "valid_loss", False, 3)):
            diff, bound, word = verdict([getattr(r, key) for r in ours], [getattr(r, key) for r in theirs], higher)
            spread = "" if math.isnan(bound) else f" (2 standard errors: {bound:.{digits}f})"
            said.append(f"{name} {diff:+.{digits}f}{spread}: {word}")
        seeds = [f"{len(runs)} seed" + "s" * (len(runs) > 1) for runs in (ours, theirs)]
        lines.append(f"{arch}, {seeds[0]}, against {base[0].arch}, {seeds[1]}: " + "; ".join(said))
    return lines
