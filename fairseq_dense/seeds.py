"""Figures over seeds, and the one noise rule every results table of the project uses.

A model's figure over its seeds is the mean and the sample standard deviation. Two models
differ beyond noise when the difference of their means exceeds the half-width of its 95%
confidence interval, ``t(0.975, n1 + n2 - 2) x s_p x sqrt(1/n1 + 1/n2)`` (``s_p`` the pooled
standard deviation): Student's pooled two-sample t-test at 5%, two-sided. With one seed on each
side there is no spread to judge by. The quick-start's verdicts and the Multi30k report's use
:func:`verdict`.
"""

import math
import statistics
from typing import List, Tuple

#: the confidence level of the noise band
LEVEL = 0.95


def mean_sd(values: List[float]) -> Tuple[float, float]:
    """The mean and the sample standard deviation (``nan`` for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")


def mean_sd_text(values: List[float], spec: str = ".2f") -> str:
    """``mean ± sd`` of ``values`` in ``spec`` as a table cell shows it (the value alone for one; "-" for none)."""
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    return format(mean, spec) + ("" if math.isnan(sd) else f" ± {sd:{spec}}")


def _within(x: float, df: int) -> float:
    """``P(|T| <= x)`` for Student's t with ``df`` degrees of freedom (Abramowitz and Stegun 26.7.3-4)."""
    theta = math.atan(x / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    for k in range(1, (df - 1) // 2 if df % 2 else df // 2):
        term *= c2 * ((2 * k) / (2 * k + 1) if df % 2 else (2 * k - 1) / (2 * k))
        total += term
    if df % 2 == 0:
        return math.sin(theta) * total
    return 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))


def t_quantile(level: float, df: int) -> float:
    """The ``x`` with ``P(|T| <= x) = level``: the two-sided ``level`` quantile of Student's t (bisection)."""
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _within(mid, df) < level else (lo, mid)
    return (lo + hi) / 2


def verdict(ours: List[float], theirs: List[float], higher_is_better: bool) -> Tuple[float, float, str]:
    """``(difference of the means, its noise band, word)`` of two models' seeds: "ahead" or "behind"
    when the difference in our favour or against us exceeds the band, else "within noise"; one seed
    on each side measures no spread (band ``nan``)."""
    n1, n2 = len(ours), len(theirs)
    diff = statistics.fmean(ours) - statistics.fmean(theirs)
    if n1 + n2 < 3:
        return diff, float("nan"), "one seed each: no spread measured"
    squares = sum((len(v) - 1) * statistics.variance(v) for v in (ours, theirs) if len(v) > 1)
    band = t_quantile(LEVEL, n1 + n2 - 2) * math.sqrt(squares / (n1 + n2 - 2)) * math.sqrt(1 / n1 + 1 / n2)
    gain = diff if higher_is_better else -diff
    return diff, band, "ahead" if gain > band else "behind" if gain < -band else "within noise"
