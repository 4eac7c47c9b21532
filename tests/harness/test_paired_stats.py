"""Paired ratios, bootstrap intervals, IQM and probability of improvement (deepboot_harness.paired_stats)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from deepboot_harness.paired_stats import bootstrap, improvement, iqm, mean, paired_ratios, summarize


def test_iqm_is_the_mean_of_the_middle_half() -> None:
    assert iqm(np.array([100.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, -50.0])) == pytest.approx(3.5)


def test_improvement_counts_wins_and_half_ties() -> None:
    assert improvement(np.array([0.9, 1.0, 1.1, 0.5])) == pytest.approx(0.625)


def test_bootstrap_is_reproducible_and_covers_the_mean() -> None:
    x = np.random.default_rng(3).normal(1.0, 0.1, size=40)
    first, again = bootstrap(x, mean), bootstrap(x, mean)
    assert first == again  # a fixed seed: byte-identical reruns
    assert first.lo < x.mean() < first.hi
    half = 1.96 * x.std(ddof=1) / math.sqrt(x.size)  # normal approximation
    assert first.hi - first.lo == pytest.approx(2 * half, rel=0.15)


def test_stratified_bootstrap_keeps_each_stratum() -> None:
    # two strata of constant values: resampling within strata cannot move the pooled mean;
    # pooled resampling can
    x = np.array([1.0] * 5 + [3.0] * 5)
    strata = ["a"] * 5 + ["b"] * 5
    stratified = bootstrap(x, mean, strata)
    assert stratified.lo == stratified.hi == 2.0
    pooled = bootstrap(x, mean)
    assert pooled.lo < 2.0 < pooled.hi


def test_one_value_has_no_interval_and_nan_is_dropped() -> None:
    est = bootstrap([0.8, math.nan], mean)
    assert est.value == 0.8 and math.isnan(est.lo) and est.cell(".2f") == "0.80"


def test_paired_ratios_and_summary() -> None:
    frame = pd.DataFrame(
        {
            "policy": ["ref", "ref", "x", "x", "y"],
            "workload": ["a", "b", "a", "b", "c"],
            "train_jct_mean": [100.0, 200.0, 90.0, 220.0, 5.0],
        }
    )
    ratios = paired_ratios(frame, "ref", ["workload"])
    assert ratios[:4].tolist() == [1.0, 1.0, 0.9, 1.1] and math.isnan(ratios[4])  # y has no pair
    s = summarize(ratios[2:4])
    assert (s.wins, s.n) == (1, 2) and s.mean.value == pytest.approx(1.0) and s.improvement.value == 0.5
    with pytest.raises(ValueError, match="reference policy 'z'"):
        paired_ratios(frame, "z", ["workload"])
