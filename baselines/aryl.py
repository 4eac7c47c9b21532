"""Aryl as DeepBoot re-implemented it (``aryl.py`` of the DeepBoot code; docs/policies.md §13).

This is the fidelity baseline ``aryl-deepboot``, not the Lyra/Aryl paper's scheduler (that is
:mod:`baselines.lyra`). At every boundary:

* each job's predicted remaining time on one GPU, T = remaining work / rate at 1 GPU, orders the
  jobs (shortest first, then arrival);
* one group knapsack over all jobs (base demand included): job j may take w = 1..W_j GPUs
  (W_j = its submitted replica count, capped by what its batch allows), worth
  ``T_j * w / (w + m_j + 1)`` with m_j = its minimum replicas, 0 here, so ``T_j * w / (w + 1)``;
  a job limited to one GPU gets the single option (1 GPU, value T_j);
* the DP maximises the sum of values with sum w <= capacity; the trace-back (from the last job)
  takes the smallest w that attains the optimum, else 0 (:func:`baselines.ats.knapsack`);
* placement is DeepBoot's (:func:`deepboot_env.placement.place_counts`).

The value grows with T, so the knapsack favours the *longest* jobs and short ones can starve for
hours: the original's mean JCT on small.csv is 41,413 s (the shared reference runs, ``anchors.csv``). We keep
that behaviour on purpose.

Decisions: T uses the simulator's oracle remaining work (the original read the remaining epochs'
iterations and the measured 1-GPU step time: also clairvoyant) and the fitted rate; the value
formula is the code's ``w / (w + min_replicas + 1)`` (the issue's form; with min_replicas = 0
it is ``w / (w + 1)``); capacity is every GPU not held by a RUNNING or
PROTECT pod (SLEEP pods are evicted as needed), as in the original.
"""

from __future__ import annotations

import numpy as np

from baselines.ats import knapsack
from deepboot_env.placement import place_counts
from deepboot_env.policy import Allocation, BasePolicy, ClusterState, JobView

MIN_REPLICAS = 0
"""The minimum replicas DeepBoot gives AFS/Aryl jobs (``min_replicas`` in the value formula)."""


def one_gpu_time(job: JobView) -> float:
    """Predicted remaining time (s) of ``job`` on one GPU (oracle remaining work, fitted rate)."""
    return job.remaining_work / max(job.rate(1, 1), 1e-12)


def aryl_values(t_one: float, limit: int) -> np.ndarray:
    """Values of w = 0..limit GPUs (index w): ``T w / (w + MIN_REPLICAS + 1)``, or T for the one
    option of a job limited to one GPU."""
    if limit <= 0:
        return np.zeros(1)
    if limit == 1:
        return np.array([0.0, t_one])
    w = np.arange(limit + 1, dtype=float)
    values = t_one * w / (w + MIN_REPLICAS + 1)
    values[0] = 0.0
    return values


class ArylDeepBootPolicy(BasePolicy):
    """DeepBoot's Aryl: a group knapsack whose values grow with predicted remaining time."""

    name = "aryl-deepboot"
    adaptive_batch = False

    def decide(self, state: ClusterState) -> Allocation:
        """Knapsack over job GPU counts (jobs by predicted 1-GPU time), then DeepBoot placement."""
        if not state.jobs:
            return Allocation({})
        cap = state.training_capacity(lend=True)
        capacity = int(cap.sum())
        times = {job.id: one_gpu_time(job) for job in state.jobs}
        jobs = sorted(state.jobs, key=lambda j: (times[j.id], j.arrival, j.id))
        values = [aryl_values(times[j.id], min(j.requested_replicas, j.max_replicas))[: capacity + 1] for j in jobs]
        counts = knapsack(values, capacity)
        return Allocation(place_counts(state, {j.id: w for j, w in zip(jobs, counts, strict=True)}, cap))
