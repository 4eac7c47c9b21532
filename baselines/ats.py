"""ATS: DeepBoot's adaptive task scaling (docs/policies.md §8), with lending and ATS-I reclaim.

At every boundary ATS solves a group knapsack over the active training jobs:

* capacity C = every GPU training may hold (not held by a RUNNING/PROTECT pod); with lending this
  includes idle and SLEEP inference GPUs, without (``ats-nolend``) only the training cluster;
* fair-share normalisation: with J training jobs, ``fair = ceil(C / J)`` replicas; a job's speedup at
  (n nodes, w GPUs) is its progress rate there divided by its rate at ``fair`` GPUs on one node;
* job j may take w = 0 or 1..max_replicas_j GPUs, worth ``S_j(ceil(w / G), w)``, multiplied by the
  restart factor ``phi_j = max(age - 10 restarts, 0) / (age + 10)`` unless w is what it holds now;
* maximise the plain sum of values subject to sum w <= C (dynamic programming over jobs in
  least-attained-service order); the trace-back from c = C takes, for each job in reverse order,
  the *smallest* w that attains the optimum (so on ties a job takes GPUs rather than none).

Cost (docs/policies.md §8.5): the programme spans min(capacity, sum of the jobs' widths) GPUs (the
same choice, bit for bit); beyond :data:`MAX_KNAPSACK_CELLS` cells, with more widths than GPUs, it
runs in bounded passes over the jobs holding GPUs first (never at the default sizes).

Placement: a job whose count is unchanged keeps its GPUs; the others, in ascending order of their
new count, are placed on the remaining free GPUs by DeepBoot's best-fit rule
(:func:`deepboot_env.placement.best_fit`).

Decisions where the original is arbitrary or silent (documented here, docs/policies.md §8.3):

* the goodput model is the calibrated one from the start, so there is no linear-speedup phase for
  jobs without a profile (the exploration cap of 1, 2, 4, ... GPUs still applies);
* in the two-cluster layout a job is placed on training-cluster GPUs when it fits there, and only
  otherwise on lent inference GPUs (the original had one pool); this keeps lent GPUs for the jobs
  that need them and lowers reclaims;
* ties in the trace-back are detected with a relative tolerance of 1e-12.

Two options reproduce rules of the original DeepBoot simulator that the defaults leave out
(docs/policies.md §8.4; both off by default, both on in ``ats-deepboot``):

* ``linear_untrained``: a job that has not trained yet (:attr:`JobView.trained` False: no
  throughput observed, the original's ``perf_params is None``) is worth ``w / fair`` at w GPUs,
  the original's placeholder speedup, instead of its rate-table speedup. It makes a new job
  compete for a GPU with the value of 1/fair of a fair share (the default gives it
  ``rate(1) / rate(min(fair, its cap))``, which is 1 for ncf, capped at one GPU), so in a busy
  cluster new jobs wait for GPUs to free up, as they did in the original;
* ``relist_restarts``: the original keeps a job's GPUs as a list of node ids in the order its
  placement took them, and ATS-I, which runs at every inference event, rewrites every list in
  node order; a rewritten list is a new placement, so a job whose best-fit takes were not in
  node order restarts once more, with the full start-up delay even under AFE. The policy lists
  those jobs in :attr:`Allocation.relist <deepboot_env.sim.state.Allocation.relist>` and the
  simulator charges the restart at the next inference arrival or completion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from baselines.job_order import job_priority_key
from deepboot_env.placement import place_counts
from deepboot_env.policy import Allocation, BasePolicy, ClusterState, JobView

RESTART_PENALTY_S = 10.0
"""Seconds per restart in ATS's restart factor (the original's constant)."""
MAX_KNAPSACK_CELLS = 1 << 24
"""The knapsack's bound (docs/policies.md §8.5): a pass of the dynamic programme fills at most
this many cells (sum over jobs of (width + 1) x (capacity + 1)) unless more jobs are needed for
their useful widths to cover the capacity."""


def restart_factor(job: JobView) -> float:
    """phi = max(age - 10 restarts, 0) / (age + 10)."""
    return max(job.age - RESTART_PENALTY_S * job.num_restarts, 0.0) / (job.age + RESTART_PENALTY_S)


def option_values(
    job: JobView, fair: int, gpus_per_node: int, max_w: int, linear_untrained: bool = False
) -> np.ndarray:
    """Values of giving ``job`` w = 0..max_w GPUs (index w); with ``linear_untrained``, a job
    that has not trained yet is worth ``w / fair`` (the original's speedup without a profile)."""
    return option_matrix([job], fair, gpus_per_node, [max_w], linear_untrained)[0]


def option_matrix(
    jobs: Sequence[JobView], fair: int, gpus_per_node: int, caps: Sequence[int], linear_untrained: bool = False
) -> np.ndarray:
    """:func:`option_values` of every job at once: row i holds job i's values of w = 0..caps[i]
    GPUs, then zeros up to ``max(caps)`` (one multiplication by the restart factors for all
    jobs: the same products as job by job)."""
    n = len(jobs)
    base = np.zeros((n, max(caps, default=0) + 1))
    phi = np.empty((n, 1))
    kept_rows: list[int] = []
    kept_counts: list[int] = []
    for i, (job, cap) in enumerate(zip(jobs, caps, strict=True)):
        if linear_untrained and not job.trained:
            base[i, : cap + 1] = np.arange(cap + 1) / max(fair, 1)
        else:
            base[i, : cap + 1] = speedup_values(job.rate_table(), fair, gpus_per_node, cap)
        phi[i, 0] = restart_factor(job)
        if job.replicas <= cap:
            kept_rows.append(i)
            kept_counts.append(job.replicas)
    out = base * phi  # every option but keeping the held count pays phi
    out[kept_rows, kept_counts] = base[kept_rows, kept_counts]
    return out


_SPEEDUPS: dict[tuple[int, int, int, int], tuple[np.ndarray, np.ndarray]] = {}
_SPEEDUPS_LIMIT = 1 << 16


def speedup_values(table: np.ndarray, fair: int, gpus_per_node: int, max_w: int) -> np.ndarray:
    """Speedup of w = 0..max_w GPUs over ``fair`` GPUs on one node, from a rate table (by
    [multi-node flag, replicas]); a read-only array.

    Rate tables are cached arrays that live as long as their application's rates, so the result
    is memoised by the table's identity (the entry holds the table, so the identity cannot be
    reused while it is cached); the memo is emptied when it reaches 65,536 entries.
    """
    key = (id(table), fair, gpus_per_node, max_w)
    hit = _SPEEDUPS.get(key)
    if hit is not None and hit[0] is table:
        return hit[1]
    k_max = table.shape[1] - 1
    base_k = max(1, min(fair, k_max))
    base = table[0, base_k]
    base = base if base > 0 else 1.0
    w = np.arange(max_w + 1)
    kk = np.minimum(w, k_max)
    multi = (np.ceil(w / gpus_per_node) > 1).astype(int)
    values = table[multi, kk] / base
    values[0] = 0.0
    values.flags.writeable = False
    if len(_SPEEDUPS) >= _SPEEDUPS_LIMIT:
        _SPEEDUPS.clear()
    _SPEEDUPS[key] = (table, values)
    return values


def knapsack(values: Sequence[np.ndarray], capacity: int) -> list[int]:
    """Group knapsack: choose w_i (index into values[i]) maximising the sum with sum w <= capacity.

    The trace-back takes, for each item in reverse order, the smallest w > 0 that attains the
    optimum, else 0. (Taking no GPUs adds nothing, whatever values[i][0] says.)
    """
    widths = [max(min(len(v) - 1, capacity), 0) for v in values]
    matrix = np.zeros((len(values), max(widths, default=0) + 1))
    for row, v, width in zip(matrix, values, widths, strict=True):
        row[1 : width + 1] = v[1 : width + 1]
    return knapsack_matrix(matrix, widths, capacity)


def knapsack_matrix(values: np.ndarray, widths: Sequence[int], capacity: int) -> list[int]:
    """:func:`knapsack` of the items ``values[i, 0..widths[i]]`` (``values[i, 0]`` is ignored;
    every width at most ``capacity``).

    Each item's dynamic-programming row is one max-plus convolution of the previous row with the
    item's values in reverse, 0 for w = 0 appended, over a strided window view (:func:`_windows`):
    a row is the maximum of sums of the same two floats as an element-by-element loop would add
    (and the previous row plus 0.0 is the previous row), so the result is bit-identical to it, at
    a few numpy calls per item.
    """
    n = len(widths)
    top = values.shape[1] - 1
    # reversed[i, top - w] = values[i, w] for w >= 1, and reversed[i, top] = 0 (taking nothing)
    reversed_values = values[:, ::-1].copy()
    reversed_values[:, top] = 0.0
    # dp[i, capacity + c] = best value of items < i within c GPUs; the first `capacity` columns
    # are -inf, so that a window reaching below 0 GPUs never wins
    dp = np.empty((n + 1, 2 * capacity + 1))
    dp[:, :capacity] = -np.inf
    dp[0, capacity:] = 0.0
    for i, width in enumerate(widths):
        if width <= 0:
            dp[i + 1, capacity:] = dp[i, capacity:]
            continue
        sums = _windows(dp[i], capacity, width) + reversed_values[i, top - width :, None]
        sums.max(axis=0, out=dp[i + 1, capacity:])
    # the trace-back visits a few entries per job: Python floats (the same doubles) beat numpy calls
    choice = [0] * n
    c = capacity
    for i in range(n - 1, -1, -1):
        width = min(widths[i], c)
        if width <= 0:
            continue
        target = float(dp[i + 1, capacity + c])
        tol = 1e-12 * max(1.0, abs(target))
        # dp[i][c - w] for w = 1..width
        before = dp[i, capacity + c - width : capacity + c].tolist()[::-1]
        for w, (best, value) in enumerate(zip(before, values[i, 1 : width + 1].tolist(), strict=True), start=1):
            if abs(best + value - target) <= tol:
                choice[i] = w
                c -= w
                break
    return choice


def knapsack_prefix(
    widths: Sequence[int], useful: Sequence[int], capacity: int, max_cells: int = MAX_KNAPSACK_CELLS
) -> int:
    """How many jobs, the first in priority order, one pass of the knapsack considers
    (docs/policies.md §8.5).

    All of them when their ``widths`` (the GPUs each may take) add up to at most the capacity
    (nothing is scarce) or when their dynamic programme fills at most ``max_cells`` cells (the
    sum over jobs of ``(width + 1) x (capacity + 1)``). Beyond, the longest prefix within
    ``max_cells`` by their ``useful`` widths (the GPUs each can use: its rate table's width), or
    the shortest whose useful widths add up to the capacity if that is longer, so that the
    considered jobs can use every GPU.
    """
    if not widths:
        return 0
    if sum(widths) <= capacity or (sum(widths) + len(widths)) * (capacity + 1) <= max_cells:
        return len(widths)
    reach = np.cumsum(np.asarray(useful, dtype=np.int64))
    within = int(np.searchsorted((reach + np.arange(1, len(widths) + 1)) * (capacity + 1), max_cells, side="right"))
    covering = int(np.searchsorted(reach, capacity, side="left")) + 1
    return max(within, min(covering, len(widths)))


def _windows(row: np.ndarray, capacity: int, width: int) -> np.ndarray:
    """A read-only strided view of a padded dp ``row``: entry [j, c] is ``row[capacity + c - width + j]``
    for j = 0..width, the best value within c - w GPUs for w = width - j (no copy, no index array;
    the maximum over j is then an element-wise maximum of contiguous rows, numpy's fast case)."""
    step = row.itemsize
    return np.ndarray(
        (width + 1, capacity + 1), dtype=row.dtype, buffer=row, offset=(capacity - width) * step, strides=(step, step)
    )


class AtsPolicy(BasePolicy):
    """DeepBoot ATS allocator.

    Args:
        lend: whether idle inference GPUs are used; a fraction in [0, 1] lends that share of
            them (:meth:`ClusterState.training_capacity
            <deepboot_env.sim.state.ClusterState.training_capacity>`).
        linear_untrained: value jobs that have not trained yet at the linear ``w / fair``
            (see the module docstring).
        relist_restarts: report the moved jobs whose GPU list the original's ATS-I would
            rewrite (:attr:`Allocation.relist <deepboot_env.sim.state.Allocation.relist>`).
        label: the policy's name in results (default ``ats`` or ``ats-nolend``).
    """

    name = "ats"
    adaptive_batch = True

    def __init__(
        self,
        lend: bool | float = True,
        linear_untrained: bool = False,
        relist_restarts: bool = False,
        label: str | None = None,
    ) -> None:
        self.lend = lend
        self.linear_untrained = linear_untrained
        self.relist_restarts = relist_restarts
        self.name = label or ("ats" if lend else "ats-nolend")

    def decide(self, state: ClusterState) -> Allocation:
        """Knapsack over job GPU counts, then best-fit placement."""
        return self.place_proposal(state, self.propose_counts(state))

    def propose_counts(self, state: ClusterState) -> dict[int, int]:
        """The knapsack's GPUs per active job, in least-attained-service order."""
        jobs = sorted(state.jobs, key=job_priority_key)
        if not jobs:
            return {}
        capacity = int(state.training_capacity(lend=self.lend).sum())
        fair = math.ceil(capacity / len(jobs)) if capacity > 0 else 1
        caps = [self.job_cap(j, capacity, fair) for j in jobs]
        useful = [min(cap, j.rates.max_replicas) for cap, j in zip(caps, jobs, strict=True)]
        if knapsack_prefix(caps, useful, capacity) < len(jobs):
            return self._bounded_counts(jobs, caps, capacity, fair, state.gpus_per_node)
        values = option_matrix(jobs, fair, state.gpus_per_node, caps, self.linear_untrained)
        chosen = knapsack_matrix(values, caps, min(capacity, sum(caps)))
        return {j.id: w for j, w in zip(jobs, chosen, strict=True)}

    def _bounded_counts(
        self, jobs: list[JobView], caps: list[int], capacity: int, fair: int, gpus_per_node: int
    ) -> dict[int, int]:
        """:meth:`propose_counts` when one programme over every job would pass
        :data:`MAX_KNAPSACK_CELLS`: passes over the jobs holding GPUs first, each within the bound,
        until the GPUs or the jobs run out (docs/policies.md §8.5); counts in ``jobs``' order."""
        counts = dict.fromkeys((j.id for j in jobs), 0)
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].replicas == 0)
        jobs, caps = [jobs[i] for i in order], [caps[i] for i in order]
        start, left = 0, capacity
        while start < len(jobs) and left > 0:
            widths = [min(cap, left) for cap in caps[start:]]
            useful = [min(w, j.rates.max_replicas) for w, j in zip(widths, jobs[start:], strict=True)]
            considered = knapsack_prefix(widths, useful, left)
            part = jobs[start : start + considered]
            if considered < len(widths):  # bounded: values beyond a job's useful width add nothing
                widths = useful
            widths = widths[:considered]
            values = option_matrix(part, fair, gpus_per_node, widths, self.linear_untrained)
            chosen = knapsack_matrix(values, widths, min(left, sum(widths)))
            counts.update(zip((j.id for j in part), chosen, strict=True))
            start += considered
            left -= sum(chosen)
        return counts

    def place_proposal(self, state: ClusterState, counts: Mapping[int, int]) -> Allocation:
        """Best-fit placement of ``counts`` (jobs whose count is unchanged keep their GPUs)."""
        if not counts:
            return Allocation({})
        order: dict[int, list[int]] | None = {} if self.relist_restarts else None
        placed = place_counts(state, counts, state.training_capacity(lend=self.lend), order=order)
        relist = frozenset(i for i, nodes in (order or {}).items() if nodes != sorted(nodes))
        return Allocation(placed, relist=relist)

    def job_cap(self, job: JobView, capacity: int, fair: int) -> int:
        """The most GPUs the knapsack may give ``job``: its cap, at most the whole ``capacity``
        (``fair`` is the fair share ``ceil(capacity / jobs)``; a variant may cap at it)."""
        return min(job.max_replicas, capacity)
