"""``hesrpt-oracle``: a CLAIRVOYANT upper reference: ATS's knapsack ordered by the true remaining time.

heSRPT (Berg, Vesilo, Harchol-Balter) finishes jobs in order of their remaining size while giving
every job some servers. This reference does the same within ATS's knapsack and placement
(:class:`~baselines.ats.AtsPolicy`): each job's option values are weighted by ``T ** -power``,
T the seconds its **true** remaining work needs at its **true** rates with its fair share of
GPUs on one node (``JobView.remaining_work`` and ``JobView.truth``: oracles, which no deployable
policy may read), and, with ``shares``, each job may get at most its heSRPT share of the GPUs:
with the m jobs ranked by T (1 = the longest), job i's share of the capacity is
``(i / m) ** c - ((i - 1) / m) ** c``, c = 1 / (1 - p_speedup) (docs/policies.md §17).

It is labelled clairvoyant wherever it appears: it shows how much of the distance between the
deployable policies and the JCT lower bounds (docs/bounds.md) knowing the future buys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from baselines.ats import AtsPolicy
from deepboot_env.sim.state import JobView


def true_remaining_seconds(job: JobView, replicas: int) -> float:
    """ORACLE: the seconds ``job``'s true remaining work needs at its true rates with
    ``replicas`` GPUs on one node, epoch by epoch (inf if some rate is 0)."""
    truth = job.rates if job.truth is None else job.truth
    k = max(1, min(int(replicas), job.rates.max_replicas))
    column = np.asarray(truth.rate_column(truth.placement_class([k], False), k), dtype=float)
    thresholds = job.rates.app.epoch_progress
    progress = float(thresholds[-1]) - job.remaining_work
    epoch = job.epoch
    starts = np.concatenate([[0.0], thresholds[:-1]])[epoch:]
    left = thresholds[epoch:] - np.maximum(starts, progress)
    rates = column[epoch:]
    if np.any((left > 0) & (rates <= 0)):
        return math.inf
    return float(np.sum(np.where(left > 0, left / np.where(rates > 0, rates, 1.0), 0.0)))


def hesrpt_shares(remaining: Sequence[float], speedup_power: float) -> np.ndarray:
    """heSRPT's share of the servers per job, by remaining size (ties: the earlier job counts as
    the shorter): with the m jobs ranked from the longest (1) to the shortest (m), job i gets
    ``(i / m) ** c - ((i - 1) / m) ** c``, c = 1 / (1 - ``speedup_power``); the shares sum to 1."""
    m = len(remaining)
    if m == 0:
        return np.zeros(0)
    c = 1.0 / (1.0 - speedup_power)
    order = np.lexsort((-np.arange(m), -np.asarray(remaining, dtype=float)))  # longest first, later first on ties
    ranks = np.empty(m)
    ranks[order] = np.arange(1, m + 1)
    return (ranks / m) ** c - ((ranks - 1) / m) ** c


class HesrptOraclePolicy(AtsPolicy):
    """ATS with the knapsack weighted by the true remaining time (module docstring).

    Args:
        lend: whether idle inference GPUs are used (as :class:`AtsPolicy`).
        power: the weight ``T ** -power`` (> 0).
        shares: cap each job at its heSRPT share (rounded up, at least 1 GPU).
        speedup_power: p of heSRPT's speedup k ** p, in (0, 1).
        label: the policy's name in results.
    """

    name = "hesrpt-oracle"

    def __init__(
        self,
        lend: bool | float = True,
        power: float = 0.25,
        shares: bool = False,
        speedup_power: float = 0.5,
        label: str = "hesrpt-oracle",
    ) -> None:
        if not 0.0 < speedup_power < 1.0:
            raise ValueError(f"speedup_power must be in (0, 1), got {speedup_power!r}")
        super().__init__(lend=lend, srpt_power=power, label=label)
        if self.srpt_power <= 0:
            raise ValueError(f"power must be > 0, got {power!r}")
        self.shares = bool(shares)
        self.speedup_power = float(speedup_power)

    def job_weights(self, jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray | None:
        """ORACLE: ``max(T, 1) ** -power``, T the true remaining seconds at the fair share."""
        remaining = np.array([true_remaining_seconds(job, fair) for job in jobs])
        return np.maximum(remaining, 1.0) ** -self.srpt_power

    def job_caps(self, jobs: Sequence[JobView], capacity: int, fair: int) -> list[int]:
        """ATS's caps, and with ``shares`` at most each job's heSRPT share of ``capacity``."""
        caps = super().job_caps(jobs, capacity, fair)
        if not self.shares:
            return caps
        remaining = [true_remaining_seconds(job, fair) for job in jobs]
        share = hesrpt_shares(remaining, self.speedup_power)
        return [min(cap, max(1, math.ceil(s * capacity))) for cap, s in zip(caps, share, strict=True)]
