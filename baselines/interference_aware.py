"""Interference-aware placement (Xu et al., "Interference-aware parallelization for deep learning
workloads in GPU clusters", Cluster Computing 2020) on top of any allocator.

The paper predicts the slowdown of co-located jobs and places each job in two stages: a
cluster-level step chooses the worker nodes from the predicted interference with what already runs
there (CLWP), a node-level step chooses the GPUs from the predicted performance and the
communication cost between the job's tasks (NLWP). Here:

* **Allocator**: another policy decides how many GPUs each job gets (``interference-aware`` uses
  DeepBoot's ATS knapsack, :mod:`baselines.ats`; ``ia:<policy>`` wraps any registered policy).
  Only its GPU counts are used: a job whose count is unchanged keeps its GPUs (no restart), the
  others are placed again below, largest first (distributed jobs take whole nodes before
  single-node jobs fill the holes), on the capacity the allocator may use (training-cluster nodes
  first, lent inference GPUs only when needed).
* **Predictor**: :class:`~baselines.interference_predictor.InterferencePredictor`, learned
  online from the throughput each job reports (``JobView.throughput_ratio``) at every decision;
  it starts from a prior that two co-located distributed jobs lose 10 %. It is reset with the
  policy (per episode) unless ``persistent=True``.
* **CLWP** (node choice): candidates are the job's current GPUs (when it holds no more than its
  count and they are still free), every single node with room for the whole job (best fit
  first) or, when the job must span nodes, best fit, most-free and two fills that take whole
  nodes in order of predicted interference (CLWP's per-node cost: what a distributed copy of the
  job would lose there plus what the residents would lose); with ``trim`` also the most GPUs
  that fit on one node or on interference-free nodes (fewer than asked: the rest stay free for
  the jobs placed after it). Each candidate is scored by predicted throughput in
  GPU-equivalents (rate / the job's 1-GPU rate): the job's own predicted throughput there,
  minus the predicted losses of the jobs already on those nodes, minus a small restart penalty
  (3 % of the job's value) when it moves a job that holds GPUs.
* **NLWP** (GPU choice): GPUs within a node are interchangeable in the simulator (no intra-node
  topology), so the node-level step reduces to how many GPUs per node: the communication cost is
  the calibrated single- vs multi-node rate, and ties go to the candidate on fewer nodes, then
  to the candidate order above (best fit first).

Trimming is what makes avoidance possible on a full cluster: without it (``trim=False``) every
GPU the allocator hands out must be placed somewhere, and distributed jobs end up sharing the
partial nodes; the measured gain over oblivious placement came almost entirely from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from baselines.interference_predictor import InterferencePredictor
from deepboot_env.placement import best_fit, most_free_fill
from deepboot_env.policy import (
    Allocation,
    BasePolicy,
    ClusterState,
    GpuRef,
    JobView,
    Policy,
    RequestView,
    make_policy,
)
from deepboot_env.sim.cluster import NODE_INFER

TIE_TOL = 1e-9
"""Candidates whose scores differ by less than this (GPU-equivalents) tie."""
CLEAN_TOL = 1e-3
"""A node whose predicted interference cost is below this (GPU-equivalents) counts as clean."""


class _Residents:
    """The jobs placed so far in a round, as arrays for fast predictions."""

    def __init__(self, predictor: InterferencePredictor, num_nodes: int) -> None:
        self.predictor = predictor
        self.jobs: list[JobView] = []
        self.present = np.zeros((0, num_nodes), dtype=bool)
        self.apps = np.zeros(0, dtype=np.int64)
        self.value = np.zeros(0)
        self._ratio: list[float | None] = []

    def add(self, job: JobView, alloc: np.ndarray) -> None:
        if not alloc.any():
            return
        self.jobs.append(job)
        self.present = np.vstack([self.present, alloc > 0])
        self.apps = np.append(self.apps, self.predictor.app_index(job.app))
        self.value = np.append(self.value, _gpu_equivalents(job, int(np.count_nonzero(alloc)), int(alloc.sum())))
        self._ratio = [None] * len(self.jobs)  # every resident's neighbourhood may have changed

    def ratio_of(self, i: int) -> float:
        """Predicted throughput ratio of resident ``i`` among the others."""
        cached = self._ratio[i]
        if cached is None:
            others = np.arange(len(self.jobs)) != i
            x = self.predictor.features_arrays(
                int(self.apps[i]), self.present[i], self.apps[others], self.present[others]
            )
            cached = float(self.predictor.predict_features(x))
            self._ratio[i] = cached
        return cached

    def job_ratio(self, app: int, present: np.ndarray) -> float:
        """Predicted throughput ratio of a job of application slot ``app`` on ``present`` nodes."""
        x = self.predictor.features_arrays(app, present, self.apps, self.present)
        return float(self.predictor.predict_features(x))

    def loss(self, app: int, present: np.ndarray) -> float:
        """Predicted throughput lost by the residents (GPU-equivalents) if a job of slot ``app``
        joins ``present`` nodes."""
        hit = np.flatnonzero(self.present[:, present].any(axis=1))
        total = 0.0
        for i in hit:
            others = np.arange(len(self.jobs)) != i
            apps = np.append(self.apps[others], app)
            nodes = np.vstack([self.present[others], present])
            x = self.predictor.features_arrays(int(self.apps[i]), self.present[i], apps, nodes)
            total += (self.ratio_of(int(i)) - float(self.predictor.predict_features(x))) * self.value[i]
        return total


class InterferenceAwarePlacer:
    """Two-stage (CLWP node choice, NLWP GPU choice) placement by predicted interference.

    Args:
        predictor: the interference predictor used to score candidates.
        restart_penalty: fraction of a candidate's predicted throughput charged when it moves a
            job that already holds GPUs (the restart it causes), so a job keeps its GPUs unless
            moving is clearly better.
        trim: also consider placing fewer GPUs than asked on interference-free nodes (the
            leftover GPUs stay free for the jobs placed after it).
    """

    def __init__(self, predictor: InterferencePredictor, restart_penalty: float = 0.03, trim: bool = True) -> None:
        self.predictor = predictor
        self.restart_penalty = float(restart_penalty)
        self.trim = trim

    def place(
        self, state: ClusterState, counts: Mapping[int, int], capacity: np.ndarray, ascending: bool = False
    ) -> dict[int, np.ndarray]:
        """Turn GPU counts per job into GPUs per node (the contract of
        :func:`deepboot_env.placement.place_counts`, except that a job may get fewer GPUs than
        its count when ``trim`` predicts more throughput that way).

        A job whose count equals what it holds keeps its GPUs; the others are placed in
        descending order of count (ascending if ``ascending``), ties in the order of ``counts``.

        Raises:
            ValueError: if the counts do not fit in ``capacity``.
        """
        by_id = state.job_by_id
        out: dict[int, np.ndarray] = {}
        free = capacity.astype(np.int64).copy()
        residents = _Residents(self.predictor, state.num_nodes)
        moved: list[tuple[int, int]] = []
        for job_id, k in counts.items():
            job = by_id[job_id]
            if k > 0 and k == job.replicas:
                out[job_id] = job.alloc.copy()
                free -= job.alloc
                residents.add(job, job.alloc)
            elif k > 0:
                moved.append((int(k), job_id))
        moved.sort(key=lambda m: m[0] if ascending else -m[0])
        own = state.node_kinds != NODE_INFER
        for k, job_id in moved:
            job = by_id[job_id]
            placement = self.place_one(job, k, free, residents, own)
            if placement is None:
                placement = self.place_one(job, k, free, residents, None)
            if placement is None:
                raise ValueError(f"cannot place {k} GPUs for job id {job_id}: only {int(free.sum())} free")
            out[job_id] = placement
            free -= placement
            residents.add(job, placement)
        return out

    # ------------------------------------------------------------ one job
    def place_one(
        self, job: JobView, k: int, free: np.ndarray, residents: _Residents, allowed: np.ndarray | None
    ) -> np.ndarray | None:
        """Best-scoring candidate placement of (up to) ``k`` GPUs for ``job``, or None if ``k``
        GPUs are not free on the ``allowed`` nodes."""
        avail = np.maximum(np.where(allowed, free, 0) if allowed is not None else free, 0).astype(np.int64)
        if avail.sum() < k:
            return None
        best, best_key = None, None
        for order, cand in enumerate(self.candidates(job, k, avail, residents)):
            key = (-round(self.score(job, cand, residents) / TIE_TOL), int(np.count_nonzero(cand)), order)
            if best_key is None or key < best_key:
                best, best_key = cand, key
        return best

    def candidates(self, job: JobView, k: int, avail: np.ndarray, residents: _Residents) -> list[np.ndarray]:
        """Candidate placements, in tie-break order: its current GPUs (if it holds at most ``k``
        and they are free), every single node with room (best fit first) or, when the job must
        span nodes, best fit and whole-node fills by predicted interference (CLWP); with ``trim``,
        the most GPUs (< ``k``) that fit on one node or on interference-free nodes."""
        n = len(avail)
        out: list[np.ndarray] = []
        if 0 < job.replicas <= k and np.all(job.alloc <= avail):
            out.append(job.alloc.copy())
        single = np.flatnonzero(avail >= k)
        if len(single):
            for node in single[np.lexsort((single, avail[single]))]:
                cand = np.zeros(n, dtype=np.int64)
                cand[node] = k
                out.append(cand)
            return out
        first = best_fit(k, avail)
        assert first is not None
        out.append(first)
        cost = self.node_costs(job, avail, residents)
        for ordering in (
            np.lexsort((np.arange(n), -avail, cost)),  # least interference, then biggest holes
            np.lexsort((np.arange(n), avail, cost)),  # least interference, then best fit
        ):
            out.append(_fill(k, avail, ordering))
        spread = most_free_fill(k, avail)
        assert spread is not None
        out.append(spread)
        if self.trim:
            node = int(np.argmax(avail))
            cand = np.zeros(n, dtype=np.int64)
            cand[node] = avail[node]
            out.append(cand)
            clean = np.flatnonzero(cost < CLEAN_TOL)
            if avail[clean].sum() > 0:
                out.append(_fill(k, avail, clean[np.lexsort((clean, -avail[clean]))]))
        return out

    def node_costs(self, job: JobView, avail: np.ndarray, residents: _Residents) -> np.ndarray:
        """CLWP: predicted throughput lost (GPU-equivalents, own and residents') when a
        distributed copy of ``job`` takes a GPU of each node (inf where none is free)."""
        n = len(avail)
        app = self.predictor.app_index(job.app)
        weight = _gpu_equivalents(job, 2, max(int(avail.sum()), 2))
        # A phantom extra node that no resident uses makes the probe distributed.
        padded = _Residents(self.predictor, n + 1)
        padded.jobs, padded.apps, padded.value = residents.jobs, residents.apps, residents.value
        padded.present = np.hstack([residents.present, np.zeros((len(residents.jobs), 1), dtype=bool)])
        padded._ratio = list(residents._ratio)
        cost = np.full(n, np.inf)
        for node in np.flatnonzero(avail > 0):
            probe = np.zeros(n + 1, dtype=bool)
            probe[node] = probe[n] = True
            cost[node] = (1.0 - padded.job_ratio(app, probe)) * weight + padded.loss(app, probe)
        return cost

    def score(self, job: JobView, cand: np.ndarray, residents: _Residents) -> float:
        """Predicted throughput (GPU-equivalents) of ``job`` at ``cand`` minus the predicted
        losses of the jobs already on its nodes and, if it moves a job holding GPUs, the restart
        penalty. Communication cost enters through the job's single- vs multi-node rate."""
        present = cand > 0
        app = self.predictor.app_index(job.app)
        own = residents.job_ratio(app, present) * _gpu_equivalents(job, int(np.count_nonzero(cand)), int(cand.sum()))
        if job.replicas > 0 and not np.array_equal(cand, job.alloc):
            own *= 1.0 - self.restart_penalty
        return own - residents.loss(app, present)


def _fill(k: int, avail: np.ndarray, ordering: np.ndarray) -> np.ndarray:
    """Take as many GPUs as possible from each node in ``ordering`` until ``k`` are taken."""
    cand = np.zeros(len(avail), dtype=np.int64)
    need = k
    for node in ordering:
        take = min(need, int(avail[node]))
        cand[node] += take
        need -= take
        if need == 0:
            break
    return cand


def _gpu_equivalents(job: JobView, nodes: int, replicas: int) -> float:
    """Isolated rate at ``replicas`` GPUs on ``nodes`` nodes over the job's 1-GPU rate."""
    base = job.rate(1, 1)
    rate = job.rate(nodes, replicas)
    return rate / base if base > 0 else float(replicas > 0)


class InterferenceAwarePolicy(BasePolicy):
    """Any allocator's GPU counts, placed by predicted interference (module docstring).

    Args:
        base: the allocator: a registered policy name (default ``ats``) or a policy object.
        ridge: the predictor's L2 strength.
        prior_slowdown: the predictor's prior slowdown of two co-located distributed jobs.
        learn: record the observed slowdowns at every decision (False: keep the prior).
        persistent: keep the predictor's samples across :meth:`reset` (episodes).
        ascending: place moved jobs smallest first (as ATS; default: largest first, so
            distributed jobs take whole nodes before single-node jobs fill the holes).
        restart_penalty: see :class:`InterferenceAwarePlacer`.
        trim: see :class:`InterferenceAwarePlacer`.
        name: policy name (default ``interference-aware`` for ATS, else ``ia:<base>``).
        **base_kwargs: passed to the base policy when built by name.
    """

    def __init__(
        self,
        base: str | Policy = "ats",
        ridge: float = 1.0,
        prior_slowdown: float = 0.1,
        learn: bool = True,
        persistent: bool = False,
        ascending: bool = False,
        restart_penalty: float = 0.03,
        trim: bool = True,
        name: str | None = None,
        **base_kwargs: object,
    ) -> None:
        self.base = make_policy(base, **base_kwargs) if isinstance(base, str) else base
        base_name = base if isinstance(base, str) else base.name
        self.name = name or ("interference-aware" if base_name == "ats" else f"ia:{base_name}")
        self.adaptive_batch = bool(self.base.adaptive_batch)
        self.lend = bool(getattr(self.base, "lend", True))
        self.learn = learn
        self.persistent = persistent
        self.ascending = ascending
        self.predictor = InterferencePredictor(ridge=ridge, prior_slowdown=prior_slowdown)
        self.placer = InterferenceAwarePlacer(self.predictor, restart_penalty=restart_penalty, trim=trim)

    def reset(self, seed: int | None = None) -> None:
        """Reset the allocator and (unless ``persistent``) the predictor."""
        self.base.reset(seed)
        if not self.persistent:
            self.predictor.reset()

    def decide(self, state: ClusterState) -> Allocation:
        """Learn from the observed slowdowns, take the allocator's counts, place them."""
        if self.learn:
            self.predictor.observe(state)
        counts = {int(jid): int(np.sum(a)) for jid, a in self.base.decide(state).gpus.items()}
        cap = state.training_capacity(lend=self.lend)
        return Allocation(self.placer.place(state, counts, cap, ascending=self.ascending))

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """The allocator's reclaim rule."""
        return self.base.choose_reclaim(state, request)


def wrap(base: str, **kwargs: Any) -> InterferenceAwarePolicy:
    """``ia:<base>``: the registered policy ``base`` with interference-aware placement
    (``kwargs``: keyword arguments of :class:`InterferenceAwarePolicy`)."""
    return InterferenceAwarePolicy(base=base, **kwargs)
