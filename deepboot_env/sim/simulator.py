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

The :class:`Simulator` keeps the clock, the event loop and the scheduling boundaries, and
drives the helpers it builds at each reset, which share its
:class:`~deepboot_env.sim.cluster.ClusterLedger` and :class:`~deepboot_env.sim.events.EventQueue`:

* :class:`~deepboot_env.sim.training.TrainingJobs`: the training side (the jobs, admission,
  placement changes, reclaimed GPUs, completions through its
  :class:`~deepboot_env.sim.completions.CompletionSchedule`, interference, restarts);
* :class:`~deepboot_env.sim.inference.InferencePool`: the inference side (pods, waiting
  requests, evictions, reclaims); it reaches back only through
  :class:`~deepboot_env.sim.inference.TrainingSide` (``observe``, ``take_training_gpu``);
* :class:`~deepboot_env.sim.accounting.EpisodeAccount`: GPU-seconds, waiting and job-seconds,
  the timeline;
* :class:`~deepboot_env.sim.state_builder.StateBuilder`: the :class:`~deepboot_env.sim.state.ClusterState`
  behind :meth:`Simulator.observe`;

and :func:`~deepboot_env.sim.metrics.episode_metrics` assembles :meth:`Simulator.metrics`;
:mod:`~deepboot_env.sim.fork` copies them all for :meth:`Simulator.snapshot`,
:meth:`Simulator.restore` and :meth:`Simulator.fork`.
:class:`~deepboot_env.sim.config.SimConfig` is re-exported here.

Deliberate differences from the original DeepBoot simulator (docs/simulator.md §6):

* requests arriving exactly on a boundary are placed at once (the original skipped them);
* waiting requests are retried after every event that could free a GPU, not only at arrivals;
* the progress model is the calibrated goodput model (no per-job online refits, docs/goodput.md §8 item 4),
  and by default also its step times (``SimConfig.truth="measured"`` uses the measured ones,
  docs/goodput.md §9);
* the batch size is chosen with the gradient statistics of the current epoch observed at the
  smallest traced batch size (the original reads them at the batch the job actually ran).
"""

from __future__ import annotations

import math
import time as wallclock
from collections import deque
from collections.abc import Mapping, Sequence
from heapq import heappop

import numpy as np

from deepboot_env.sim.accounting import EpisodeAccount
from deepboot_env.sim.apps import AppProfile, default_profiles
from deepboot_env.sim.aryl_mode import ArylInferencePool, strip_training
from deepboot_env.sim.cluster import ClusterLedger, node_layout
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.drain import RequestColumns, compiled_drain, drain_applies, kernel_worth_it
from deepboot_env.sim.events import Event, EventKind, EventQueue
from deepboot_env.sim.fork import SimSnapshot, clone_into
from deepboot_env.sim.hooks import DefaultHooks, SimulatorHooks, checked_hooks
from deepboot_env.sim.inference import InferencePool, Pod, RequestRecord
from deepboot_env.sim.jobs import TrainingJob
from deepboot_env.sim.metrics import EpisodeMetrics, episode_metrics
from deepboot_env.sim.reclaim import Holder, fair_replicas, least_loss_among
from deepboot_env.sim.state import Allocation, ClusterState, GpuRef, checked_counts
from deepboot_env.sim.state_builder import StateBuilder
from deepboot_env.sim.training import TrainingJobs
from deepboot_env.sim.workload import InferenceRequestSpec, Workload

_REQUEST_DONE, _POD_SLEEP, _TRAIN_DONE, _REQUEST_ARRIVAL = (
    int(EventKind.REQUEST_DONE),
    int(EventKind.POD_SLEEP),
    int(EventKind.TRAIN_DONE),
    int(EventKind.REQUEST_ARRIVAL),
)

RECENT_INTERVALS = 10
"""Intervals of inference-arrival history in :attr:`ClusterState.recent_arrivals`."""

__all__ = ["RECENT_INTERVALS", "SimConfig", "SimSnapshot", "Simulator"]


def next_boundary(boundary: float, interval: float, active: bool, arrival: float | None) -> float | None:
    """The decision boundary after ``boundary``: the next interval's end while jobs are
    ``active``, else the first interval end at or after the next job's ``arrival`` (None: no job
    is left to arrive, so no decision either)."""
    nxt = (math.floor(boundary / interval) + 1) * interval
    if active:
        return nxt
    if arrival is not None:
        return max(nxt, math.ceil(arrival / interval) * interval)
    return None


class Simulator:
    """One episode of a workload on a cluster under a policy's reclaim hook.

    Args:
        workload: what arrives.
        config: simulation settings.
        policy: what the simulator calls back (:class:`~deepboot_env.sim.hooks.SimulatorHooks`:
            ``adaptive_batch``, ``choose_reclaim``, ``choose_inference_server`` and
            ``bind_simulator``, called with this simulator at the end of every :meth:`reset`);
            a :class:`~deepboot_env.policy.BasePolicy` has them all. None:
            :class:`~deepboot_env.sim.hooks.DefaultHooks` (ATS-I reclaims, adaptive batches).
        profiles: application profiles (default: the shipped ones).

    A mid-episode simulator can be saved and put back (:meth:`snapshot`, :meth:`restore`) or
    copied (:meth:`fork`), cheaply and exactly (docs/simulator.md §8; :mod:`deepboot_env.sim.fork`).
    """

    _pool_type: type[InferencePool] = InferencePool
    """The inference side built at each reset (a subclass may record what it does)."""

    drain_compiled: bool = True
    """Whether the inference drain at the end of an episode runs compiled where it can, from a
    process's second drain on (:mod:`deepboot_env.sim.drain`); False runs the Python reference
    loop (the tests compare them)."""

    def __init__(
        self,
        workload: Workload,
        config: SimConfig | None = None,
        policy: SimulatorHooks | None = None,
        profiles: dict[str, AppProfile] | None = None,
    ) -> None:
        self.workload = workload
        self.config = config or SimConfig()
        self.policy: SimulatorHooks = DefaultHooks() if policy is None else checked_hooks(policy)
        self.profiles = profiles or default_profiles()
        self.adaptive = bool(self.policy.adaptive_batch)
        self.reset()

    # ------------------------------------------------------------------ setup
    def reset(self) -> None:
        """Start the episode again from time 0 and run to the first decision.

        Raises:
            WorkloadError: if a job or request arrives after ``config.max_time``
                (:meth:`Workload.check_horizon <deepboot_env.sim.workload.Workload.check_horizon>`),
                or, for a policy that keeps the submitted sizes (``adaptive_batch = False``), a job
                requests more GPUs than the whole cluster holds, training and inference nodes
                together (:meth:`Workload.check_fits <deepboot_env.sim.workload.Workload.check_fits>`).
            ValueError: if the workload has inference requests and the cluster no inference nodes.
        """
        cfg = self.config
        self.workload.check_horizon(cfg.max_time)
        if not self.adaptive:
            self.workload.check_fits(cfg.cluster.total_gpus, cfg.cluster.describe())
        self.ledger = ClusterLedger(cfg.cluster)
        self.events = EventQueue()
        self.now = 0.0
        pool_type = ArylInferencePool if cfg.inference_placement == "aryl" else self._pool_type
        self._pool = pool_type(self.workload.requests, self.ledger, self.events, cfg.protect_scale, self, self.policy)
        self._books = EpisodeAccount(self.ledger, self._pool, [spec.arrival for spec in self.workload.jobs])
        self._training = TrainingJobs(
            self.workload.jobs, self.profiles, self.adaptive, cfg, self.ledger, self.events, self._pool, self._books
        )
        self.jobs: list[TrainingJob] = self._training.jobs
        """Every training job of the episode (the training side's list; read it, never change it)."""
        self._active = self._training.active
        """The training side's active job indices (the same list, changed in place there)."""
        self._state_builder = StateBuilder(
            self.jobs, self.ledger, cfg.cluster, cfg.interval, cfg.restart, self.adaptive
        )
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
        self.num_events = 0
        self.truncated = False
        self.done = False
        self._wall_start = wallclock.perf_counter()
        self._boundary = 0.0
        if self.workload.requests and not self._pool.inference_nodes:
            raise ValueError(
                f"workload {self.workload.name!r} has {len(self.workload.requests)} inference requests but the "
                f"cluster {cfg.cluster.describe()} has no inference nodes; use e.g. --cluster 8x4+8x4 or --shared-pool"
            )
        self._go_to_next_decision(first=True)
        self.policy.bind_simulator(self)

    # ------------------------------------------------------- snapshots, forks
    def snapshot(self) -> SimSnapshot:
        """The episode state now, to :meth:`restore` later (any number of times): everything the
        episode changes is copied, the workload, settings, rate tables and the ``policy``
        reference are shared (the policy's own state is not part of a snapshot;
        :mod:`deepboot_env.sim.fork`). Immutable by contract: do not look inside.

        Raises:
            ForkError: if a component has an attribute not classified for snapshots (a
                subclass's; :class:`~deepboot_env.sim.fork.ForkError`).
        """
        state = object.__new__(type(self))
        clone_into(self, state)
        return SimSnapshot(state)

    def restore(self, snapshot: SimSnapshot) -> None:
        """Put this simulator back in the state of ``snapshot``, exactly: the episode then
        continues, event for event, as it did (or would have) from the moment of the snapshot,
        under the same decisions. Everything is replaced, the workload, settings and ``policy``
        reference included (those of the snapshot's simulator); ``snapshot`` is left as it is."""
        clone_into(snapshot._state, self)

    def fork(self) -> Simulator:
        """An independent copy that continues exactly like this simulator would (the same
        results under the same decisions): a :meth:`restore` of this simulator's state into a
        new object, without the intermediate snapshot. It shares the ``policy`` reference (a
        caller that drives the fork with a policy of its own, or needs the policy's state
        copied, copies the policy itself); neither simulator sees what the other does later."""
        twin = object.__new__(type(self))
        clone_into(self, twin)
        return twin

    def forget_future(self, requests: Sequence[InferenceRequestSpec] = ()) -> None:
        """Forget everything that has not arrived yet, and make ``requests`` the inference requests
        still to come: for a fork that a planner plays a *forecast* future on (``mpc``,
        docs/policies.md §16), so that the fork holds no more than a scheduler knows now.

        * Training jobs not admitted yet (those arriving after now) are dropped: none arrives
          later. The admitted ones are kept as they are (with their true remaining work).
        * Inference requests that have arrived (served, running or waiting) are kept as they are,
          with their true durations; those that have not are replaced by ``requests``.
        * :attr:`workload` becomes the workload of what is left (the admitted jobs, the arrived
          requests, then ``requests``): a later :meth:`reset` replays that one.

        Everything else (the clock, the jobs' progress, the pods, the books so far, the timeline)
        is unchanged; the episode then continues as it would on that workload. Cost: linear in
        the requests of the workload (the fork it is meant for costs as much).

        Args:
            requests: the future inference requests, sorted by arrival, each arriving at or after
                :attr:`now` and at most ``config.max_time``.

        Raises:
            RuntimeError: if the episode is over.
            ValueError: if ``requests`` are not sorted by arrival or arrive before now or after
                ``config.max_time``, or there are requests and no inference node to serve them.
            WorkloadError: if a request is malformed (an unknown model, a duration <= 0), or no
                job is admitted and no request is left.
        """
        if self.done:
            raise RuntimeError("the episode is over; a finished simulator has no future to forget")
        future = tuple(requests)
        times = np.fromiter((req.arrival for req in future), dtype=float, count=len(future))
        if len(times) and not (times[0] >= self.now and times[-1] <= self.config.max_time):
            raise ValueError(
                f"future requests must arrive between now ({self.now:g} s) and max_time ({self.config.max_time:g} s), "
                f"got arrivals from {times.min():g} to {times.max():g} s"
            )
        if not (np.diff(times) >= 0).all():
            raise ValueError("future requests must be sorted by arrival")
        if future and not self._pool.inference_nodes:
            raise ValueError(f"the cluster {self.config.cluster.describe()} has no inference nodes for future requests")
        arrived, admitted = self._next_request, self._training.next_arrival
        old = self.workload
        # the workload's requests are sorted by arrival (Workload.validate), so the arrival stream
        # is in workload order and the first `arrived` requests are those that have arrived
        self.workload = Workload(
            old.name,
            old.jobs[:admitted],
            old.requests[:arrived] + future,
            source=f"{old.source or old.name}, up to {self.now:g} s, then {len(future)} requests given",
        )
        self._training.drop_unadmitted()
        self._books.keep_jobs(admitted)
        self._pool.replace_future(self.workload.requests, arrived)
        self._arrival_order = list(range(arrived + len(future)))
        self._arrival_times = self._arrival_times[:arrived] + times.tolist()

    @property
    def requests_arrived(self) -> int:
        """Inference requests arrived so far: the first ones of :attr:`workload`'s requests (which
        are sorted by arrival), the past a non-clairvoyant planner may read; O(1)."""
        return self._next_request

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
    def _next_boundary(self) -> float | None:
        return next_boundary(
            self._boundary, self.config.interval, bool(self._active), self._training.next_arrival_time()
        )

    def _go_to_next_decision(self, first: bool = False) -> None:
        training = self._training
        completions = training.completions
        while True:
            arrival = training.next_arrival_time() if first else None
            if arrival is not None and arrival <= 0:  # the first job arrives at time 0
                boundary: float | None = 0.0
            else:
                boundary = self._next_boundary()
            first = False
            if boundary is None or boundary > self.config.max_time:
                completions.extend_horizon(math.inf, self.now)
                self._drain(self.config.max_time)
                self.truncated = (
                    bool(self._active)
                    or training.next_arrival_time() is not None
                    or self._next_live_time() < math.inf
                    or bool(self._pool.waiting)
                )
                self._finish()
                return
            completions.extend_horizon(boundary, self.now)
            self._run_events(boundary)
            self._close_interval(boundary)
            self._boundary = boundary
            training.admit(boundary)
            if self._active:
                return

    def _drain(self, limit: float) -> None:
        """No training decision is left: run the remaining events (inference) up to ``limit``,
        still sampling the timeline once per interval; by the compiled loop where it is the same
        episode (:mod:`deepboot_env.sim.drain`), else by the Python one below (the reference)."""
        if self.drain_compiled and drain_applies(self) and kernel_worth_it():
            compiled_drain(self, limit, RequestColumns.of(self._pool._specs))
            return
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
        train_done = self._training.train_done
        relist, relist_now = self._training.relist_pending, self._training.relist
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
                    if relist:  # the original's ATS-I pass at an inference event (Allocation.relist)
                        relist_now(t)
                elif kind == _REQUEST_DONE:
                    assert pod is not None  # looked up and checked when the event was popped
                    request_done(pod, t)
                    if relist:
                        relist_now(t)
                elif kind == _POD_SLEEP:
                    assert pod is not None
                    pod_sleep(pod, t)
                else:
                    train_done(job, t)
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

    def take_training_gpu(self, ref: GpuRef) -> None:
        """Take one GPU from a training job now, for an inference pod (the
        :class:`~deepboot_env.sim.inference.InferencePool`'s reclaim; see
        :meth:`TrainingJobs.take_gpu <deepboot_env.sim.training.TrainingJobs.take_gpu>`).

        Raises:
            AllocationError: if ``ref`` is not a GPU of an active job on a node inference may use.
        """
        self._training.take_gpu(ref, self.now)

    def take_training_node(self, node: int) -> int:
        """Evict every training replica on ``node`` now, for an inference pod (Aryl mode's
        server-granular reclaim, :class:`~deepboot_env.sim.aryl_mode.ArylInferencePool`); the GPUs
        taken."""
        return self._training.take_node(node, self.now)

    def _apply_counts(self, counts: Mapping[int, list[int]]) -> None:
        """Hand a checked allocation to the training side (in Aryl mode after
        :func:`~deepboot_env.sim.aryl_mode.strip_training`)."""
        if self.config.inference_placement == "aryl":
            counts = strip_training(counts, self.ledger, self._pool.evict_one_sleeper)
        self._training.apply_counts(counts, self.now)

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
    def restarts(self) -> int:
        """Placement changes so far that counted as restarts."""
        return self._training.restarts

    @property
    def active_jobs(self) -> list[TrainingJob]:
        """Training jobs admitted at a boundary and not finished, in arrival order."""
        return [self.jobs[i] for i in self._active]

    @property
    def jobs_finished(self) -> int:
        """Training jobs completed so far (admitted and no longer active); O(1)."""
        return self._training.next_arrival - len(self._active)

    def job_seconds(self, t0: float, t1: float) -> float:
        """Training job-seconds spent in the system (arrived, not finished) during [t0, t1]."""
        return self._books.job_seconds(t0, t1, self._training.unfinished_arrivals(t1))

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

    def job_progress(self, ids: list[int]) -> float:
        """The summed progress of jobs ``ids`` (the evaluation loop's watchdog measure)."""
        jobs = self.jobs
        return sum([jobs[i].progress for i in ids])

    def observe(self) -> ClusterState:
        """The read-only state at the current time (jobs holding GPUs advanced to now)."""
        return self._state_builder.build(self.now, self._active, len(self._pool.waiting), self._recent)

    def least_loss_victim(self, horizon: float = 0.0) -> GpuRef | None:
        """:func:`~deepboot_env.sim.reclaim.ats_i_victim` (``horizon`` 0) or
        :func:`~deepboot_env.sim.reclaim.restart_aware_victim` at ``horizon`` of :meth:`observe`,
        from the jobs that hold a reclaimable GPU only, advanced to now (the pool's reclaim with
        those hooks): the same choice as from their views, without building them (a reclaim
        happens at about one inference arrival in ten, and views were most of its cost)."""
        jobs = self.jobs
        active = self._active
        ledger = self.ledger
        lent = node_layout(ledger.kinds).lendable
        now = self.now
        holders = []
        for index in active:
            job = jobs[index]
            if not job.replicas:
                continue
            counts = job.counts
            nodes = [node for node in lent if counts[node] > 0]
            if not nodes:
                continue
            job.advance(now)  # as its view would be: the epoch now, and the cap once trained
            if job.pending_profile is not None:
                job.profiled(now)
            holders.append(
                Holder(
                    job.attained_service,
                    job.spec.arrival,
                    index,
                    job.rates,
                    job.epoch,
                    counts,
                    nodes,
                    job.stalled_seconds_left,
                )
            )
        counts_of = ledger.counts
        node_counts = (counts_of["train"], counts_of["running"], counts_of["protect"], counts_of["sleep"])
        fair = fair_replicas(len(active), node_counts, self.config.cluster.total_gpus)
        return least_loss_among(holders, fair, horizon, self.config.restart)

    def apply(self, allocation: Allocation, state: ClusterState | None = None) -> None:
        """Apply a policy's allocation at the current boundary, after checking it
        (:func:`~deepboot_env.sim.state.validate_allocation`).

        Args:
            allocation: GPUs per node per job (absent jobs get none).
            state: the state the policy saw (re-observed if None).

        The jobs of ``allocation.relist`` whose placement it changes restart once more at the
        next inference arrival or completion (see :attr:`Allocation.relist
        <deepboot_env.sim.state.Allocation.relist>`).

        Raises:
            AllocationError: if the allocation is invalid (the message names the job and node).
        """
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        ids, counts = checked_counts(state or self.observe(), allocation)
        self._books.account(self.now)
        jobs = self.jobs
        relist = getattr(allocation, "relist", None)
        before = {i: jobs[i].version for i in relist if 0 <= i < len(jobs)} if relist else None
        self._apply_counts(dict(zip(ids, counts.tolist(), strict=True)))
        if before:  # only the listed jobs whose placement this allocation changed
            self._training.mark_relist([i for i, version in before.items() if jobs[i].version != version])

    def apply_valid_counts(self, counts: Mapping[int, list[int]]) -> None:
        """Apply an allocation that is valid by construction, without checking it again: GPUs per
        node of each active job as a list of ints, which the simulator takes over (the caller
        must not change them afterwards); absent jobs get none.

        The Gymnasium env's fast path: its action codec (:mod:`deepboot_env.env.action`) builds
        these lists from the state just observed so that they meet every constraint of
        :func:`~deepboot_env.sim.state.validate_allocation`; the result is exactly that of
        :meth:`apply` on the same allocation. Anything else must go through :meth:`apply` (the
        ledger still refuses to over-commit a node, but nothing else is checked here).
        """
        if self.done:
            raise RuntimeError("the episode is over; call reset()")
        self._books.account(self.now)
        self._apply_counts(counts)

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
            self._training.truth_of,
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
