"""The one noise rule (``fairseq_dense.seeds``): Student's t quantiles, mean and spread, verdicts."""

import math
import random

import pytest

from fairseq_dense.seeds import mean_sd, t_quantile, verdict


def test_t_quantiles_match_the_tables():
    # two-sided 95%: the t table's 12.706, 4.303, 3.182, 2.776, 2.228 and 1.960 in the limit
    for df, value in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (10, 2.2281), (100000, 1.9600)):
        assert t_quantile(0.95, df) == pytest.approx(value, abs=1e-4), df
    assert t_quantile(0.99, 4) == pytest.approx(4.6041, abs=1e-4)


def test_mean_sd_and_the_verdict_by_hand():
    assert mean_sd([1.0, 2.0, 3.0]) == (2.0, 1.0) and math.isnan(mean_sd([4.0])[1])
    # pooled sd of [30, 31, 32] and [29, 29.5, 30.5]: sqrt((2 + 1.1667) / 4) = 0.8898; band t(0.975, 4) x sd x sqrt(2/3)
    diff, band, word = verdict([30.0, 31.0, 32.0], [29.0, 29.5, 30.5], higher_is_better=True)
    assert diff == pytest.approx(1.3333, abs=1e-4) and band == pytest.approx(2.7764 * 0.8898 * (2 / 3) ** 0.5, 1e-3)
    assert word == "within noise"  # 1.33 < 2.02
    assert verdict([31.0, 31.2, 31.1], [30.0, 30.1, 29.9], True)[2] == "ahead"
    assert verdict([31.0, 31.2, 31.1], [30.0, 30.1, 29.9], False)[2] == "behind"  # a loss: lower wins
    assert verdict([3.9, 3.95, 3.92], [4.1, 4.12, 4.08], False)[2] == "ahead"
    # one seed against three: the three give the spread (2 degrees of freedom)
    diff, band, word = verdict([37.19], [36.7, 36.9, 37.1], True)
    assert band == pytest.approx(4.303 * 0.2 * (4 / 3) ** 0.5, 1e-3) and word == "within noise"
    diff, band, word = verdict([31.0], [30.0], True)
    assert diff == 1.0 and math.isnan(band) and word == "one seed each: no spread measured"


@pytest.mark.parametrize("trial", range(20))
def test_the_verdict_is_a_two_sided_pooled_t_test_at_5_percent(trial):
    """ "within noise" exactly where Student's pooled two-sample t-test does not reject equal means at 5%."""
    ttest_ind = pytest.importorskip("scipy.stats").ttest_ind
    rng = random.Random(trial)
    a = [rng.gauss(37.0, 0.3) for _ in range(rng.choice([2, 3, 4]))]
    b = [rng.gauss(37.0 + rng.choice([-1.0, -0.3, 0.0, 0.3, 1.0]), 0.3) for _ in range(rng.choice([1, 2, 3]))]
    diff, _, word = verdict(a, b, True)
    p = ttest_ind(a, b, equal_var=True).pvalue
    assert (word == "within noise") == (p > 0.05), (a, b, p)
    if word != "within noise":
        assert word == ("ahead" if diff > 0 else "behind") and verdict(a, b, False)[2] != word
