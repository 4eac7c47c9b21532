"""What policies see and return: ClusterState, JobView, Allocation, GpuRef.

Policies get one read-only :class:`ClusterState` per decision and return an :class:`Allocation`
(GPUs per node for each training job). The simulator checks every allocation in one place,
:func:`validate_allocation`, which raises :class:`AllocationError` naming the job and node. The RL
environment's actions are repaired before they become allocations, by its action codec
(:mod:`deepboot_env.env.action`, the one repair rule).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType

import numpy as np

from deepboot_env.sim.cluster import NODE_INFER, ClusterConfig, node_layout
from deepboot_env.sim.rates import ProgressRates, RateTable


class AllocationError(ValueError):
    """An allocation breaks a hard constraint; the message names the job and/or node."""


@dataclass(frozen=True)
class JobView:
    """Read-only view of one active training job.

    Attributes:
        id: stable job id (its index in the workload).
        name: job name.
        app: application name.
        arrival: submission time (s).
        age: now - arrival (s).
        attained_service: GPU-seconds held so far.
        num_restarts: restarts so far.
        alloc: GPUs per node now held (read-only: copy it to build an allocation from it).
        epoch: epochs completed (observable by the job itself).
        progress_fraction: fraction of the work done (clairvoyant-free: it is the epoch counter
            divided by the number of epochs plus the fraction of the current epoch).
        max_replicas: the most GPUs the job may get at this decision.
        requested_replicas: GPUs the submission asked for (gang schedulers).
        requested_batch: total batch the submission asked for (fixed-batch schedulers).
        stalled_seconds: restart stall still ahead of the job.
        remaining_work: ORACLE progress (M0-equivalent iterations) still to do. Only policies
            that the literature defines with an oracle (Optimus+Oracle) may read it; learned
            agents and the other baselines are non-clairvoyant.
        rates: progress-rate table (speedups = ratios of its rates).
        throughput_ratio: measured throughput over the throughput its placement gives alone
            (1 = no co-location interference; < 1 = slowed by jobs sharing its nodes, see
            :mod:`deepboot_env.sim.interference`). What a real scheduler measures (during a
            restart stall: the factor it will train at); 1 while it holds no GPU.
        truth: ORACLE: the rates the job really progresses at (the fitted ``rates`` themselves,
            or the measured step times of ``SimConfig(truth="measured")``); None means ``rates``.
            Read it through :meth:`oracle_rate`, and only in oracle policies, like
            ``remaining_work``.
        trained: whether the job has trained at all, i.e. a real scheduler has observed its
            throughput once (False from arrival to the end of its first start-up stall). The
            original DeepBoot scheduler values a job without an observed profile at a linear
            speedup (``ats`` option ``linear_untrained``, docs/policies.md §8.3).
    """

    id: int
    name: str
    app: str
    arrival: float
    age: float
    attained_service: float
    num_restarts: int
    alloc: np.ndarray
    epoch: int
    progress_fraction: float
    max_replicas: int
    requested_replicas: int
    requested_batch: int
    stalled_seconds: float
    remaining_work: float
    rates: RateTable = field(repr=False)
    throughput_ratio: float = 1.0
    truth: ProgressRates | None = field(default=None, repr=False)
    trained: bool = True

    @cached_property
    def replicas(self) -> int:
        """GPUs held now (computed once: the view and its ``alloc`` are read-only)."""
        return int(self.alloc.sum())

    @cached_property
    def nodes(self) -> int:
        """Nodes on which the job holds GPUs (computed once)."""
        return int(np.count_nonzero(self.alloc))

    def rate(self, nodes: int, replicas: int) -> float:
        """Progress rate (M0-iterations/s) at ``replicas`` GPUs over ``nodes`` nodes."""
        return self.rates.rate(self.epoch, nodes > 1, replicas)

    def rate_table(self) -> np.ndarray:
        """Rates by [multi-node flag, replicas] at the current epoch (column 0 is 0)."""
        return self.rates.rates(self.epoch)

    def oracle_rate(self, replicas: int, gpus_per_node: int) -> float:
        """ORACLE: the true progress rate at the current epoch with ``replicas`` GPUs packed on
        nodes of ``gpus_per_node`` (:func:`packed_counts`), as the originals' oracles read it:
        the measured step time of that shape under the measured truth, the fitted model's
        :meth:`rate` otherwise (0 for 0 GPUs). Like :meth:`rate`, GPUs beyond the most the
        job can use (its rate table's ``max_replicas``) add nothing."""
        if replicas <= 0:
            return 0.0
        replicas = min(int(replicas), self.rates.max_replicas)
        truth = self.rates if self.truth is None else self.truth
        counts = packed_counts(replicas, gpus_per_node)
        cls = truth.placement_class(counts, len(counts) > 1)
        return truth.rate_column(cls, replicas)[self.epoch]


def packed_counts(replicas: int, gpus_per_node: int) -> list[int]:
    """GPUs per node of ``replicas`` GPUs packed on nodes of ``gpus_per_node``: full nodes, then
    the rest on one more node (``packed_counts(10, 4) == [4, 4, 2]``)."""
    full, rest = divmod(int(replicas), int(gpus_per_node))
    return [int(gpus_per_node)] * full + ([rest] if rest else [])


@dataclass(frozen=True)
class RequestView:
    """An inference request that needs a GPU.

    Attributes:
        index: position in the workload.
        instance: app instance key.
        app: served model.
        arrival: arrival time (s).
        duration: service time (s).
    """

    index: int
    instance: str
    app: str
    arrival: float
    duration: float


@dataclass(frozen=True)
class GpuRef:
    """One GPU of a training job on a node (the victim of a reclaim)."""

    job_id: int
    node: int


@dataclass(frozen=True)
class ClusterState:
    """Everything a policy may look at, at one decision point.

    Attributes:
        time: simulated time (s).
        interval: scheduling interval (s).
        config: cluster shape.
        node_kinds: per node, NODE_TRAIN / NODE_INFER / NODE_SHARED.
        train_used: training GPUs per node.
        running: RUNNING pods per node.
        protect: PROTECT pods per node.
        sleeping: SLEEP pods per node.
        jobs: active training jobs (arrived, not finished) in arrival order.
        waiting_requests: inference requests waiting for a GPU.
        recent_arrivals: inference arrivals per interval over the last few intervals (oldest first).
        restart_model: ``full``, ``afe`` or ``stopfree``.
    """

    time: float
    interval: float
    config: ClusterConfig
    node_kinds: np.ndarray
    train_used: np.ndarray
    running: np.ndarray
    protect: np.ndarray
    sleeping: np.ndarray
    jobs: tuple[JobView, ...]
    waiting_requests: int
    recent_arrivals: tuple[int, ...]
    restart_model: str

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node."""
        return self.config.gpus_per_node

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self.config.num_nodes

    @cached_property
    def node_counts(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """(train_used, running, protect, sleeping) as lists of Python ints, for the per-node
        arithmetic of hot paths (computed once per state; the simulator fills it in directly)."""
        return (self.train_used.tolist(), self.running.tolist(), self.protect.tolist(), self.sleeping.tolist())

    @cached_property
    def job_by_id(self) -> Mapping[int, JobView]:
        """The active jobs by id (a read-only mapping, built once per state)."""
        return MappingProxyType({job.id: job for job in self.jobs})

    def pinned(self) -> np.ndarray:
        """GPUs per node held by RUNNING/PROTECT pods: never available to training."""
        return self.running + self.protect

    def training_capacity(self, lend: float = 1.0) -> np.ndarray:
        """GPUs per node that training may hold in total, as an int64 array (see
        :meth:`training_capacity_list`)."""
        return np.array(self.training_capacity_list(lend), dtype=np.int64)

    def training_capacity_list(self, lend: float = 1.0) -> list[int]:
        """GPUs per node that training may hold in total when it may use the fraction ``lend``
        of the lendable inference GPUs (``True``/1: all of them, ``False``/0: none).

        Every node offers its GPUs not pinned by RUNNING/PROTECT pods. Lendable = the idle and SLEEP
        GPUs of the inference nodes plus those training already holds there. The budget
        floor(lend x lendable) is spread over the inference nodes, the nodes training already uses
        first, then those with most lendable GPUs (fewer nodes to reclaim from), then by index.

        Computed once per state and ``lend`` (a policy, the placement and the validation all ask
        for it at one decision); every call returns a new list.
        """
        return self._capacity_of(lend)[0].copy()

    def training_capacity_total(self, lend: float = 1.0) -> int:
        """The GPUs training may hold in all at lending share ``lend``: the sum of
        :meth:`training_capacity_list`, without a list (memoised with it)."""
        return self._capacity_of(lend)[1]

    def _capacity_of(self, lend: float) -> tuple[list[int], int]:
        """The memo of :meth:`training_capacity_list`: its list (never handed out: callers get
        copies) and the list's sum, by ``lend``."""
        memo: dict[float, tuple[list[int], int]] = self.__dict__.setdefault("_capacity_memo", {})
        key = float(lend)
        hit = memo.get(key)
        if hit is None:
            cap = self._training_capacity(key)
            hit = memo[key] = (cap, sum(cap))
        return hit

    @cached_property
    def _unpinned(self) -> tuple[list[int], int]:
        """GPUs per node not pinned by RUNNING/PROTECT pods, and how many of them are on the
        inference nodes (the lendable GPUs): the same at every lending share, so a state asked at
        two shares (the score action mode's prior, then its action's) computes them once."""
        g = self.config.gpus_per_node
        _, running, protect, _ = self.node_counts
        cap = [g - pinned for pinned in map(operator.add, running, protect)]
        return cap, sum([cap[node] for node in node_layout(self.node_kinds).inference])

    def _training_capacity(self, lend: float) -> list[int]:
        """:meth:`training_capacity_list`, computed (the list may be :attr:`_unpinned`'s own:
        it is only read)."""
        cap, lendable = self._unpinned
        infer = node_layout(self.node_kinds).inference
        if not infer:
            return cap
        budget = int(math.floor(lend * lendable + 1e-9))
        if budget >= lendable:  # every inference node lends all it can: the order does not matter
            return cap
        out = cap.copy()
        for node in infer:
            out[node] = 0
        if budget == 0:
            return out
        used = self.node_counts[0]
        for _, _, node in sorted([(-used[n], -cap[n], n) for n in infer]):
            take = min(budget, cap[node])
            out[node] = take
            budget -= take
            if budget == 0:  # the nodes left lend nothing (out is 0 there already)
                break
        return out

    def inference_nodes(self) -> np.ndarray:
        """Boolean mask of inference-cluster nodes."""
        return self.node_kinds == NODE_INFER

    def inference_load(self) -> float:
        """The share of the inference GPUs (inference nodes, or every node of a shared pool) held
        by RUNNING and PROTECT pods, from 0.0 to 1.0 (every one busy); 0.0 without such nodes."""
        nodes = node_layout(self.node_kinds).lendable
        if not nodes:
            return 0.0
        _, running, protect, _ = self.node_counts
        return sum([running[n] + protect[n] for n in nodes]) / (len(nodes) * self.gpus_per_node)

    def keeping_warm_pods(self) -> ClusterState:
        """This state with every SLEEP pod counted as PROTECT: what training may take without
        evicting a warm pod (:meth:`training_capacity_list` then offers the empty GPUs and those
        training holds, not the sleeping pods'). The same state if no pod sleeps."""
        if not self.sleeping.any():
            return self
        return replace(self, protect=self.protect + self.sleeping, sleeping=np.zeros_like(self.sleeping))

    def lent_gpus(self) -> int:
        """Training GPUs on inference nodes."""
        return int(self.train_used[self.inference_nodes()].sum())

    def job(self, job_id: int) -> JobView:
        """The active job with id ``job_id``."""
        for job in self.jobs:
            if job.id == job_id:
                return job
        raise KeyError(f"no active training job with id {job_id}")


@dataclass(frozen=True)
class Allocation:
    """GPUs per node for training jobs; jobs not listed get no GPU.

    Attributes:
        gpus: job id -> integer array of GPUs per node (length = number of nodes).
        relist: ids of jobs whose new GPU list, in the order the policy took the GPUs, is not in
            node order. The original DeepBoot simulator keeps each job's GPUs as such a list, and
            its inference scheduler (ATS-I) rewrites every list in node order at its next pass; a
            rewritten list counts as a new placement, so the job restarts (a same-count move,
            the full start-up delay even under AFE). The simulator charges that restart at the
            first inference arrival or completion after the decision, to each listed job whose
            placement this allocation changed and that nothing changed again before then
            (docs/restarts.md §7). Empty (the default) for every policy but ``ats`` with
            ``relist_restarts=True``.
    """

    gpus: Mapping[int, np.ndarray]
    relist: frozenset[int] = frozenset()

    @classmethod
    def keep(cls, state: ClusterState) -> Allocation:
        """The current allocation of every active job, unchanged."""
        return cls({job.id: job.alloc.copy() for job in state.jobs})

    def replicas(self, job_id: int) -> int:
        """GPUs given to ``job_id``."""
        arr = self.gpus.get(job_id)
        return 0 if arr is None else int(np.sum(arr))


def _as_counts(job_label: str, value: object, num_nodes: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.shape != (num_nodes,):
        raise AllocationError(f"{job_label}: expected GPUs for each of {num_nodes} nodes, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise AllocationError(f"{job_label}: GPU counts must be whole numbers, got {arr.tolist()}")
    return arr.astype(np.int64)


def validate_allocation(state: ClusterState, alloc: Allocation) -> dict[int, np.ndarray]:
    """Check ``alloc`` against every hard constraint and return it normalised.

    Constraints: only active jobs; non-negative whole GPU counts per node; a job gets at most its
    ``max_replicas``; on every node, training GPUs plus RUNNING/PROTECT pods fit in the node
    (SLEEP pods are evicted as needed; lending idle inference GPUs is allowed).

    Raises:
        AllocationError: naming the job and node at fault.
    """
    ids, counts = checked_counts(state, alloc)
    return dict(zip(ids, counts, strict=True))


def checked_counts(state: ClusterState, alloc: Allocation) -> tuple[list[int], np.ndarray]:
    """:func:`validate_allocation` as the job ids and their GPUs per node, one row each of one
    int64 matrix (for the simulator, which reads the rows as lists)."""
    # Fast path: every job active and the counts one int64 matrix of the right shape, checked all
    # at once; anything else (or any violation) goes through the job-by-job checks below, which
    # name the culprit.
    gpus = alloc.gpus
    n = state.num_nodes
    if not gpus:
        return [], np.zeros((0, n), dtype=np.int64)
    active = state.job_by_id
    try:
        jobs = [active[job_id] for job_id in gpus]
        counts = np.array(list(gpus.values()))
    except (KeyError, TypeError, ValueError):
        return _checked_each(state, alloc)
    if (
        counts.dtype != np.int64
        or counts.shape != (len(jobs), n)
        or counts.min() < 0
        or (counts.sum(axis=1) > [job.max_replicas for job in jobs]).any()
        or (counts.sum(axis=0) > state.training_capacity(lend=True)).any()
    ):
        return _checked_each(state, alloc)
    return [job.id for job in jobs], counts


def _checked_each(state: ClusterState, alloc: Allocation) -> tuple[list[int], np.ndarray]:
    """:func:`checked_counts` job by job (raises on the first violation)."""
    out = _validate_each(state, alloc)
    return list(out), np.array(list(out.values()), dtype=np.int64).reshape(len(out), state.num_nodes)


def _validate_each(state: ClusterState, alloc: Allocation) -> dict[int, np.ndarray]:
    """:func:`validate_allocation` job by job (raises on the first violation)."""
    n = state.num_nodes
    active = state.job_by_id
    out: dict[int, np.ndarray] = {}
    for job_id, value in alloc.gpus.items():
        job = active.get(int(job_id))
        if job is None:
            raise AllocationError(f"job id {job_id}: not an active training job at t={state.time:.0f}s")
        label = f"job {job.name!r} (id {job.id})"
        arr = _as_counts(label, value, n)
        if np.any(arr < 0):
            node = int(np.argmax(arr < 0))
            raise AllocationError(f"{label}: negative GPU count {int(arr[node])} on node {node}")
        if arr.sum() > job.max_replicas:
            raise AllocationError(f"{label}: {int(arr.sum())} GPUs exceed its limit of {job.max_replicas}")
        out[job.id] = arr
    total = np.zeros(n, dtype=np.int64)
    for arr in out.values():
        total += arr
    cap = state.training_capacity(lend=True)
    if np.any(total > cap):
        node = int(np.argmax(total > cap))
        holders = [f"{active[j].name!r}:{int(a[node])}" for j, a in out.items() if a[node] > 0]
        raise AllocationError(
            f"node {node}: training wants {int(total[node])} GPUs but only {int(cap[node])} are free of "
            f"RUNNING/PROTECT inference pods (jobs {', '.join(holders)})"
        )
    return out
