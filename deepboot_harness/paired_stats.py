"""Is policy X better than a reference? Paired JCT ratios, bootstrap intervals, IQM, P(improvement).

Runs are paired by scenario (family and seed in the benchmark, workload and seed in a
comparison): a run's *ratio* is its mean training JCT over the reference policy's on the same
scenario, so the scenario's difficulty cancels out. Over a set of ratios:

- :func:`mean` and :func:`iqm` (interquartile mean: the mean of the middle 50 %, robust to a
  few outlying scenarios and tighter than the median),
- :func:`improvement`: the probability of improvement, the share of scenarios where the policy's
  mean JCT is below the reference's (a tie counts one half),
- :func:`bootstrap`: the statistic with its 95 % percentile interval from a stratified bootstrap:
  ratios are resampled with replacement within each stratum (a family), keeping each stratum's
  size, so an aggregate over families reflects only the seed-to-seed spread.

These are the estimators of rliable (Agarwal et al., 2021, "Deep Reinforcement Learning at the
Edge of the Statistical Precipice", NeurIPS), written on numpy/scipy because the ``rliable``
package pulls ``arch``, ``statsmodels`` and ``seaborn``. One difference: rliable's probability of
improvement compares every run of X with every run of Y in a task (Mann-Whitney U); here runs
are paired by scenario, so it is the share of scenarios X wins. The bootstrap draws from a fixed
seed (:data:`BOOTSTRAP_SEED`), so the same ratios always give the same intervals (the
benchmark's outputs stay byte-identical on a rerun).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

BOOTSTRAP_REPS = 10_000
"""Bootstrap resamples per interval."""

BOOTSTRAP_SEED = 0
"""Seed of every bootstrap (the same ratios always give the same interval)."""

CONFIDENCE = 0.95
"""Coverage of every interval."""

Statistic = Callable[[np.ndarray], np.ndarray]
"""A statistic over the last axis of an array (one value per row)."""


def mean(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis."""
    return np.mean(values, axis=-1)


def iqm(values: np.ndarray) -> np.ndarray:
    """Interquartile mean over the last axis: 25 % trimmed from each end (as rliable)."""
    return np.asarray(stats.trim_mean(values, 0.25, axis=-1))


def improvement(values: np.ndarray) -> np.ndarray:
    """Share of ratios below 1 over the last axis (the policy wins), ties counting one half."""
    return np.mean((values < 1.0) + 0.5 * (values == 1.0), axis=-1)


@dataclass(frozen=True)
class Estimate:
    """A statistic and its bootstrap interval (``lo`` / ``hi`` are NaN with fewer than 2 values)."""

    value: float
    lo: float
    hi: float

    def cell(self, fmt: str) -> str:
        """``value [lo, hi]`` formatted with ``fmt``; ``-`` for NaN."""
        if not math.isfinite(self.value):
            return "-"
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            return format(self.value, fmt)
        return f"{self.value:{fmt}} [{self.lo:{fmt}}, {self.hi:{fmt}}]"


def bootstrap(
    values: Sequence[float] | np.ndarray,
    statistic: Statistic,
    strata: Sequence[object] | np.ndarray | None = None,
    reps: int = BOOTSTRAP_REPS,
    seed: int = BOOTSTRAP_SEED,
) -> Estimate:
    """``statistic`` of ``values`` with its percentile interval from a stratified bootstrap.

    Args:
        values: the ratios (NaN dropped, with their strata).
        statistic: :func:`mean`, :func:`iqm`, :func:`improvement` or any function over the last axis.
        strata: a label per value (e.g. the family); values are resampled within their stratum.
            None: one stratum.
        reps: resamples.
        seed: seed of the resampling.
    """
    x = np.asarray(values, dtype=float)
    labels = np.zeros(x.size, dtype=int) if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
    keep = np.isfinite(x)
    x, labels = x[keep], labels[keep]
    if x.size == 0:
        return Estimate(math.nan, math.nan, math.nan)
    point = float(statistic(x))
    if x.size < 2:
        return Estimate(point, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    parts = []
    for stratum in np.unique(labels):
        group = x[labels == stratum]
        parts.append(group[rng.integers(0, group.size, size=(reps, group.size))])
    samples = statistic(np.concatenate(parts, axis=1))
    tail = 100.0 * (1.0 - CONFIDENCE) / 2.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return Estimate(point, float(lo), float(hi))


def paired_ratios(frame: pd.DataFrame, reference: str, pair_on: Sequence[str]) -> np.ndarray:
    """Each run's ``train_jct_mean`` over ``reference``'s on the same ``pair_on`` keys (e.g.
    family and seed); NaN where the reference did not run that scenario.

    Raises:
        ValueError: if ``reference`` is not a policy of ``frame``.
    """
    if reference not in set(frame["policy"]):
        raise ValueError(
            f"reference policy {reference!r} is not among the policies: {', '.join(frame['policy'].unique())}"
        )
    keys = list(pair_on)
    ref = frame[frame["policy"] == reference].set_index(keys)["train_jct_mean"]
    index = pd.MultiIndex.from_frame(frame[keys]) if len(keys) > 1 else pd.Index(frame[keys[0]])
    return frame["train_jct_mean"].to_numpy(dtype=float) / ref.reindex(index).to_numpy(dtype=float)


@dataclass(frozen=True)
class RatioSummary:
    """What a set of paired ratios says: mean, IQM and probability of improvement with their
    intervals, and the scenarios won (ratio < 1) out of ``n``."""

    mean: Estimate
    iqm: Estimate
    improvement: Estimate
    wins: int
    n: int


def summarize(
    ratios: Sequence[float] | np.ndarray, strata: Sequence[object] | np.ndarray | None = None
) -> RatioSummary:
    """:class:`RatioSummary` of ``ratios`` (NaN dropped), bootstrapped within ``strata``."""
    x = np.asarray(ratios, dtype=float)
    finite = x[np.isfinite(x)]
    return RatioSummary(
        mean=bootstrap(x, mean, strata),
        iqm=bootstrap(x, iqm, strata),
        improvement=bootstrap(x, improvement, strata),
        wins=int(np.sum(finite < 1.0)),
        n=int(finite.size),
    )
