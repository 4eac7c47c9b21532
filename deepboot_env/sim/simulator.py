"""Event-driven simulator of a training cluster and an inference cluster: the clock, the events, training.

Time jumps from event to event: scheduling boundaries every ``interval`` seconds (only while
training jobs are active or about to arrive), inference arrivals and completions, pods falling
asleep, and training-job completions. Nothing is stepped second by second.

At a boundary the caller (the evaluation loop or the Gymnasium env) reads :meth:`Simulator.observe`,
asks a policy for an :class:`~deepboot_env.sim.state.Allocation` and hands it to
:meth:`Simulator.apply`; :meth:`Simulator.advance` then runs every event up to the next boundary.
Between boundaries training never grows; inference requests are placed as they arrive: warm pod
-> empty inference GPU -> SLEEP pod's GPU (evicted) -> a lent training GPU chosen by the policy's
reclaim hook (ATS-I by default) -> wait.

The :class:`Simulator` keeps the clock, the event loop, the scheduling boundaries and the
training jobs (admission, placement changes, reclaimed GPUs, completions, interference), and
drives the helpers it builds at each reset, which share its
:class:`~deepboot_env.sim.cluster.ClusterLedger` and :class:`~deepboot_env.sim.events.EventQueue`:

* :class:`~deepboot_env.sim.inference.InferencePool`: the inference side (pods, waiting
  requests, evictions, reclaims); it reaches back only through
  :class:`~deepboot_env.sim.inference.TrainingSide` (``observe``, ``take_training_gpu``);
* :class:`~deepboot_env.sim.completions.CompletionSchedule`: the lazily projected TRAIN_DONE events;
* :class:`~deepboot_env.sim.accounting.EpisodeAccount`: GPU-seconds, waiting and job-seconds,
  the timeline;
* :class:`~deepboot_env.sim.snapshot.StateBuilder`: the :class:`~deepboot_env.sim.state.ClusterState`
  behind :meth:`Simulator.observe`;

and :func:`~deepboot_env.sim.metrics.episode_metrics` assembles :meth:`Simulator.metrics`.
:class:`~deepboot_env.sim.config.SimConfig` is re-exported here.

Deliberate differences from the original DeepBoot simulator (docs/simulator.md §6):

* requests arriving exactly on a boundary are placed at once (the original skipped them);
* waiting requests are retried after every event that could free a GPU, not only at arrivals;
* the progress model is the calibrated goodput model (no per-job online refits, docs/goodput.md §8 item 4);
* the batch size is chosen with the gradient statistics of the current epoch observed at the
  smallest traced batch size (the original reads them at the batch the job actually ran).
"""

from __future__ import annotations

import math
import operator
import time as wallclock
from collections import deque
from collections.abc import Mapping
from heapq import heappop

import numpy as np

from deepboot_env.sim.accounting import EpisodeAccount
from deepboot_env.sim.apps import AppProfile, default_profiles
from deepboot_env.sim.cluster import NODE_TRAIN, ClusterLedger
from deepboot_env.sim.completions import CompletionSchedule
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.events import Event, EventKind, EventQueue
from deepboot_env.sim.goodput import RateTable, shared_rate_table
from deepboot_env.sim.inference import InferencePool, Pod, RequestRecord
from deepboot_env.sim.interference import InterferenceModel
from deepboot_env.sim.jobs import TrainingJob, frozen_alloc
from deepboot_env.sim.metrics import EpisodeMetrics, episode_metrics
from deepboot_env.sim.restart import PARKED, plan_change
from deepboot_env.sim.snapshot import StateBuilder
from deepboot_env.sim.state import (
    Allocation,
    AllocationError,
    ClusterState,
    GpuRef,
    validate_allocation,
)
from deepboot_env.sim.workload import Workload

_REQUEST_DONE, _POD_SLEEP, _TRAIN_DONE, _REQUEST_ARRIVAL = (
    int(EventKind.REQUEST_DONE),
    int(EventKind.POD_SLEEP),
    int(EventKind.TRAIN_DONE),
    int(EventKind.REQUEST_ARRIVAL),
)

RECENT_INTERVALS = 10
"""Intervals of inference-arrival history in :attr:`ClusterState.recent_arrivals`."""

__all__ = ["RECENT_INTERVALS", "SimConfig", "Simulator"]


class Simulator:
    """One episode of a workload on a cluster under a policy's reclaim hook.

    Args:
        workload: what arrives.
        config: simulation settings.
        policy: object with optional ``adaptive_batch`` (bool, default True) and
            ``choose_reclaim(state, request) -> GpuRef | None`` (default: ATS-I).
        profiles: application profiles (default: the shipped ones).
    """

    _pool_type: type[InferencePool] = InferencePool
    """The inference side built at each reset (a subclass may record what it does)."""

    def __init__(
        self,
        workload: Workload,
        config: SimConfig | None = None,
        policy: object | None = None,
        profiles: dict[str, AppProfile] | None = None,
    ) -> None:
        self.workload = workload
        self.config = config or SimConfig()
        self.policy = policy
        self.profiles = profiles or default_profiles()
        self.adaptive = bool(getattr(policy, "adaptive_batch", True))
        self._tables: dict[tuple[str, int | None], RateTable] = {}
        self.reset()

    # ------------------------------------------------------------------ setup
    def _table(self, app: AppProfile, fixed_batch: int | None) -> RateTable:
        key = (app.name, fixed_batch)
        table = self._tables.get(key)
        if table is None:
            usable = self.config.cluster.total_gpus
            if fixed_batch is None:
                cap = app.max_useful_replicas()
            else:
                cap = max(1, fixed_batch // app.min_local_bsz)
            table = shared_rate_table(app, min(cap, usable), fixed_batch)
            self._tables[key] = table
        return table

    def reset(self) -> None:
        """Start the episode again from time 0 and run to the first decision."""
        cfg = self.config
        self.ledger = ClusterLedger(cfg.cluster)
        self.events = EventQueue()
        self.now = 0.0
        self.jobs: list[TrainingJob] = []
        for i, spec in enumerate(self.workload.jobs):
            app = self.profiles[spec.app]
            fixed = None if self.adaptive else spec.batch_size
            self.jobs.append(TrainingJob(i, spec, app, self._table(app, fixed), cfg.cluster.num_nodes))
        self._next_arrival = 0
        self._active: list[int] = []
        self._snapshot = StateBuilder(self.jobs, self.ledger, cfg.cluster, cfg.interval, cfg.restart, self.adaptive)
        self._pool = self._pool_type(
            self.workload.requests, self.ledger, self.events, cfg.protect_scale, self, self.policy
        )
        self._books = EpisodeAccount(self.ledger, self._pool, [spec.arrival for spec in self.workload.jobs])
        # Request arrivals are known in advance: a sorted stream merged with the event heap (which
        # holds only what the simulation schedules) instead of thousands of heap entries. They are
        # ordered as if pushed first, in order: by arrival, then index.
        times = [req.arrival for req in self.workload.requests]
        self._arrival_order = sorted(range(len(times)), key=times.__getitem__)
        self._arrival_times = [times[i] for i in self._arrival_order]
        self._next_request = 0
        """Position in the arrival stream of the next request to arrive."""
        self._arrived_before = 0
        """:attr:`_next_request` when the last interval closed."""
        self._recent: deque[int] = deque([0] * RECENT_INTERVALS, maxlen=RECENT_INTERVALS)
        self.restarts = 0
        self.num_events = 0
        self.truncated = False
        self.done = False
        self._wall_start = wallclock.perf_counter()
        self._boundary = 0.0
        self._completion_events = CompletionSchedule(self.jobs, self.events)
        if self.workload.requests and not self._pool.inference_nodes:
            raise ValueError(
                f"workload {self.workload.name!r} has {len(self.workload.requests)} inference requests but the "
                f"cluster {cfg.cluster.describe()} has no inference nodes; use e.g. --cluster 8x4+8x4 or --shared-pool"
            )
        self._go_to_next_decision(first=True)

    # -------------------------------------------------------------- accounting
    def _close_interval(self, t: float) -> None:
        """Account up to ``t``, move the clock there and record one timeline sample (its inference
        arrivals: those since the last sample, also the newest of the recent arrivals)."""
        arrivals = self._next_request - self._arrived_before
        self._arrived_before = self._next_request
        self._recent.append(arrivals)
        self._books.close_interval(t, arrivals)
        self.now = t

    # ------------------------------------------------------------ boundaries
    def _admit_arrivals(self) -> None:
        jobs = self.jobs
        while self._next_arrival < len(jobs) and jobs[self._next_arrival].spec.arrival <= self.now:
            self._active.append(self._next_arrival)
            self._next_arrival += 1

    def _next_boundary(self) -> float | None:
        interval = self.config.interval
        nxt = (math.floor(self._boundary / interval) + 1) * interval
        if self._active:
            return nxt
        if self._next_arrival < len(self.jobs):
            arrival = self.jobs[self._next_arrival].spec.arrival
            return max(nxt, math.ceil(arrival / interval) * interval)
        return None

    def _go_to_next_decision(self, first: bool = False) -> None:
        while True:
            if first and self._next_arrival < len(self.jobs) and self.jobs[0].spec.arrival <= 0:
                boundary: float | None = 0.0
            else:
                boundary = self._next_boundary()
            first = False
            if boundary is None or boundary > self.config.max_time:
                self._completion_events.extend_horizon(math.inf, self.now)
                self._drain(self.config.max_time)
                self.truncated = (
                    bool(self._active)
                    or self._next_arrival < len(self.jobs)
                    or self._next_live_time() < math.inf
                    or bool(self._pool.waiting)
                )
                self._finish()
                return
            self._completion_events.extend_horizon(boundary, self.now)
            self._run_events(boundary)
            self._close_interval(boundary)
            self._boundary = boundary
            self._admit_arrivals()
            if self._active:
                return

    def _drain(self, limit: float) -> None:
        """No training decision is left: run the remaining events (inference) up to ``limit``,
        still sampling the timeline once per interval."""
        interval = self.config.interval
        t = self._boundary
        while self._next_live_time() <= limit:
            t = (math.floor(t / interval) + 1) * interval
            self._run_events(min(t, limit))
            if self._next_live_time() <= limit and t <= limit:
                self._close_interval(t)

    def _next_live_time(self) -> float:
        """Time of the earliest event that is not stale (stale ones are dropped), inf if none."""
        arrival = self._arrival_times[self._next_request] if self._next_request < len(self._arrival_times) else math.inf
        events = self.events
        while events:
            if not self._is_stale(events.peek()):
                return min(events.peek().time, arrival)
            events.pop()
        return arrival

    def _finish(self) -> None:
        end = self.now
        for job in self.jobs:
            if job.completion is not None:
                end = max(end, job.completion)
        for rec in self._pool.requests:
            if rec.finish is not None:
                end = max(end, rec.finish)
        self._books.account(end)
        self.now = end
        self.done = True

    # -------------------------------------------------------------- events
    def _run_events(self, until: float) -> None:
        """Process every event up to ``until``: the heap's and the request arrivals, merged in
        (time, kind, sequence) order (an arrival sorts after every heap event of its second:
        REQUEST_ARRIVAL is the last kind and only arrivals have it)."""
        heap = self.events.heap
        pool = self._pool
        jobs, pods = self.jobs, pool.pods
        arrive, request_done, pod_sleep = pool.arrive, pool.request_done, pool.pod_sleep
        account = self._books.account
        arrival_times, arrival_order = self._arrival_times, self._arrival_order
        n_requests = len(arrival_times)
        nxt = self._next_request
        arrival = arrival_times[nxt] if nxt < n_requests else math.inf
        processed = 0
        try:
            while True:
                if heap and heap[0][0] <= until and heap[0][0] <= arrival:
                    t, kind, _, target, version = heappop(heap)
                    # stale events (see _is_stale) are dropped
                    if kind == _TRAIN_DONE:
                        job = jobs[target]
                        if job.version != version or job.completion is not None:
                            continue
                    elif kind != _REQUEST_ARRIVAL:
                        pod = pods.get(target)
                        if pod is None or pod.version != version:
                            continue
                elif arrival <= until:
                    t, kind, target = arrival, _REQUEST_ARRIVAL, arrival_order[nxt]
                    nxt += 1
                    arrival = arrival_times[nxt] if nxt < n_requests else math.inf
                else:
                    break
                processed += 1
                account(t)
                self.now = t
                if kind == _REQUEST_ARRIVAL:
                    arrive(target, t)
                elif kind == _REQUEST_DONE:
                    assert pod is not None  # looked up and checked when the event was popped
                    request_done(pod, t)
                elif kind == _POD_SLEEP:
                    assert pod is not None
                    pod_sleep(pod, t)
                else:
                    self._train_done(job)
        finally:  # the position in the arrival stream and the event count, kept in locals above
            self._next_request = nxt
            self.num_events += processed

    def _is_stale(self, ev: Event) -> bool:
        """Whether ``ev`` was superseded (a job re-planned, a pod re-used or evicted)."""
        if ev.kind == EventKind.TRAIN_DONE:
            job = self.jobs[ev.target]
            return job.version != ev.version or job.done
        if ev.kind in (EventKind.REQUEST_DONE, EventKind.POD_SLEEP):
            pod = self._pool.pods.get(ev.target)
            return pod is None or pod.version != ev.version
        return False

    def _train_done(self, job: TrainingJob) -> None:
        """``job`` completes now (its TRAIN_DONE event is not stale)."""
        index = job.index
        job.advance(self.now)
        if job.completion is None:  # pragma: no cover - projection and advance share one rule
            raise RuntimeError(f"job {job.spec.name!r} was projected to complete at t={self.now}")
        self.ledger.change_training(-job.alloc, f"job {job.spec.name!r}")
        job.apply_change(np.zeros_like(job.alloc), PARKED, self.now)
        self._active.remove(index)
        self._books.job_done(index, job.spec.arrival, job.completion)
        if self.config.interference is not None:
            self._refresh_interference()
        if self._pool.waiting:
            self._pool.serve_waiting(self.now)

    # ------------------------------------------------------------ training
    def _change_job(self, job: TrainingJob, counts: list[int], update_ledger: bool = True) -> None:
        """Move ``job`` to ``counts`` GPUs per node (a list of ints the job takes over)."""
        now = self.now
        job.advance(now)
        new = frozen_alloc(counts)
        replicas = sum(counts)
        plan = plan_change(
            self.config.restart,
            job.app,
            job.alloc,
            new,
            job.first_start is not None,
            replicas=(job.replicas, replicas),
        )
        if update_ledger:
            self.ledger.change_training(new - job.alloc, f"job {job.spec.name!r}")
        job.adopt_change(new, counts, plan, now, replicas)
        if plan.counts_as_restart:
            self.restarts += 1
        self._completion_events.schedule(job, now)

    def take_training_gpu(self, ref: GpuRef) -> None:
        """Take one GPU from a training job now, for an inference pod (the
        :class:`~deepboot_env.sim.inference.InferencePool`'s reclaim): the job is re-planned on
        the rest of its GPUs.

        Raises:
            AllocationError: if ``ref`` is not a GPU of an active job on a node inference may use.
        """
        if not (0 <= ref.job_id < len(self.jobs)) or ref.job_id not in self._active:
            raise AllocationError(f"reclaim: job id {ref.job_id} is not an active training job")
        job = self.jobs[ref.job_id]
        if not (0 <= ref.node < len(job.alloc)) or job.alloc[ref.node] <= 0:
            raise AllocationError(f"reclaim: job {job.spec.name!r} holds no GPU on node {ref.node}")
        if self.ledger.kinds[ref.node] == NODE_TRAIN:
            raise AllocationError(f"reclaim: node {ref.node} is a training node; inference may not take it")
        counts = job.counts.copy()
        counts[ref.node] -= 1
        self._change_job(job, counts)
        if self.config.interference is not None:
            self._refresh_interference()

    def _refresh_interference(self) -> None:
        """Recompute every placed job's interference speed factor from the current placements;
        jobs whose factor changes are advanced to now, re-anchored and re-projected."""
        model = self.config.interference
        # called only with interference on; SimConfig stores it normalised (a model, never a number)
        assert isinstance(model, InterferenceModel)
        placed = [self.jobs[i] for i in self._active if self.jobs[i].replicas > 0]
        if not placed:
            return
        factors = model.speed_factors(np.stack([j.alloc for j in placed]), [j.app.name for j in placed])
        for job, factor in zip(placed, factors, strict=True):
            if factor != job.speed:
                due = job.time_of_completion()
                if due is not None and due <= self.now:
                    continue  # completes at this instant: its pending TRAIN_DONE event finishes it
                job.advance(self.now)
                job.set_speed(float(factor))
                self._completion_events.schedule(job, self.now)

    # ------------------------------------------------------------ public API
    @property
    def pods(self) -> dict[int, Pod]:
        """Live inference pods by pod id (the :class:`~deepboot_env.sim.inference.InferencePool`'s;
        read them, never change them)."""
        return self._pool.pods

    @property
    def requests(self) -> list[RequestRecord]:
        """What happened to each inference request of the workload, in workload order."""
        return self._pool.requests

    @property
    def reclaims(self) -> int:
        """Lent training GPUs taken back by inference requests so far."""
        return self._pool.reclaims

    @property
    def active_jobs(self) -> list[TrainingJob]:
        """Training jobs admitted at a boundary and not finished, in arrival order."""
        return [self.jobs[i] for i in self._active]

    def job_seconds(self, t0: float, t1: float) -> float:
        """Training job-seconds spent in the system (arrived, not finished) during [t0, t1]."""
        jobs = self.jobs
        unfinished = [jobs[i].spec.arrival for i in self._active]
        for i in range(self._next_arrival, len(jobs)):
            arrival = jobs[i].spec.arrival
            if arrival >= t1:
                break
            unfinished.append(arrival)
        return self._books.job_seconds(t0, t1, unfinished)

    @property
    def waiting_seconds(self) -> float:
        """Request-seconds spent waiting for a GPU so far."""
        return self._books.waiting_seconds

    @property
    def timeline(self) -> list[tuple[float, ...]]:
        """One row per interval: (time, mean GPUs over the interval ending then in each of
        :data:`~deepboot_env.sim.metrics.GPU_STATES`, waiting requests, inference arrivals during
        the interval); read it, never change it."""
        return self._books.timeline

    def observe(self) -> ClusterState:
        """The read-only state at the current time (jobs advanced to now)."""
        return self._snapshot.build(self.now, self._active, len(self._pool.waiting), self._recent)

    def apply(self, allocation: Allocation, state: ClusterState | None = None) -> None:
        """Apply a policy's allocation at the current boundary, after checking it
        (:func:`~deepboot_env.sim.state.validate_allocation`).

        Args:
            allocation: GPUs per node per job (absent jobs get none).
            state: the state the policy saw (re-observed if None).

        Raises:
            AllocationError: if the allocation is invalid (the message names the job and node).
        """
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        wanted = validate_allocation(state or self.observe(), allocation)
        self._apply_counts({job_id: arr.tolist() for job_id, arr in wanted.items()})

    def apply_valid_counts(self, counts: Mapping[int, list[int]]) -> None:
        """Apply an allocation that is valid by construction, without checking it again: GPUs per
        node of each active job as a list of ints, which the simulator takes over (the caller
        must not change them afterwards); absent jobs get none.

        The Gymnasium env's fast path: its action codec (:mod:`deepboot_env.env.codec`) builds
        these lists from the state just observed so that they meet every constraint of
        :func:`~deepboot_env.sim.state.validate_allocation`; the result is exactly that of
        :meth:`apply` on the same allocation. Anything else must go through :meth:`apply` (the
        ledger still refuses to over-commit a node, but nothing else is checked here).
        """
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        self._apply_counts(counts)

    def _apply_counts(self, wanted: Mapping[int, list[int]]) -> None:
        """Apply a checked allocation (GPUs per node as lists of ints): evict the SLEEP pods in
        the way, update the ledger, then re-plan every job whose placement changes (in arrival
        order)."""
        self._books.account(self.now)
        n = self.config.cluster.num_nodes
        changes: list[tuple[TrainingJob, list[int]]] = []
        rows = [[0] * n]  # plain ints: a few nodes
        jobs = self.jobs
        for index in self._active:
            job = jobs[index]
            counts = wanted.get(index)
            if counts is None:
                if job.replicas:
                    changes.append((job, [0] * n))
                continue
            rows.append(counts)
            if counts != job.counts:
                changes.append((job, counts))
        total = list(map(sum, zip(*rows, strict=True)))
        led = self.ledger
        pods = led.pod_counts()
        cap = led.capacity
        used = list(map(operator.add, total, pods))
        if max(used) > cap:  # SLEEP pods in the way are evicted (validation left room for them)
            evict = self._pool.evict_one_sleeper
            for node, held in enumerate(used):
                for _ in range(held - cap):
                    evict(node)
            pods = led.pod_counts()
        led.set_training(total, "allocation", pods)
        for job, counts in changes:
            self._change_job(job, counts, update_ledger=False)
        if changes and self.config.interference is not None:
            self._refresh_interference()
        if self._pool.waiting:  # the allocation may have given lent inference GPUs back
            self._pool.serve_waiting(self.now)

    def advance(self) -> None:
        """Run every event up to the next decision (or to the end of the episode)."""
        if self.done:
            return
        self._go_to_next_decision()

    def metrics(self) -> EpisodeMetrics:
        """Metrics of the episode so far (complete once :attr:`done`)."""
        return episode_metrics(
            self.jobs,
            self._pool.requests,
            lambda app: self._table(app, None),
            gpus_per_node=self.config.cluster.gpus_per_node,
            gpu_seconds=self._books.gpu_seconds,
            restarts=self.restarts,
            reclaims=self._pool.reclaims,
            sim_events=self.num_events,
            sim_end=self.now,
            wall_start=self._wall_start,
            truncated=self.truncated,
            timeline=self._books.timeline,
        )
