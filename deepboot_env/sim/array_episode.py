"""A whole episode with the simulator's state in the compiled loop's arrays (docs/simulator.md §10).

:class:`ArrayEpisode` takes a :class:`~deepboot_env.sim.simulator.Simulator` at its first
decision, copies its state into the arrays of :mod:`deepboot_env.sim.drain_loops` once (the jobs
as the rows of :mod:`deepboot_env.sim.progress_loops`), and plays the rest of the episode on them:
the events between decisions and each decision's allocation run compiled, the policy's state is
built from the rows, and at the end everything is written back into the simulator, which then
holds what its own loop would have left (``tests/sim/test_array_episode.py`` compares whole
episodes). :func:`array_episode_applies` says where it is the same episode: the plain inference
pool, restarts planned by GPU counts (``full``, ``afe``, ``pollux``), no
interference, a reclaim hook the simulator computes itself (ATS-I or
the restart-aware rule) and a policy that neither looks into the simulator nor relists.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from deepboot_env.sim.compiled import cached_on_disk
from deepboot_env.sim.drain import RequestColumns, _DrainArrays
from deepboot_env.sim.hooks import DefaultHooks
from deepboot_env.sim.inference import InferencePool
from deepboot_env.sim.jobs import TrainingJob, frozen_alloc
from deepboot_env.sim.measured import MeasuredRates
from deepboot_env.sim.progress import (
    ANCHOR_P,
    ANCHOR_T,
    APP,
    COMPLETION,
    EPOCH,
    FIRST_START,
    MAX_PROFILED,
    N_PHASES,
    P_CLASS,
    P_END,
    P_REPLICAS,
    P_SECONDS,
    PENDING_K,
    PENDING_T,
    PROGRESS,
    REPLICAS,
    RESTART_CODES,
    RESTARTS,
    SERVICE,
    SETTLED,
    SPEED,
    VERSION,
    JobArrays,
    T,
    none_if_nan,
)
from deepboot_env.sim.rates import RateTable
from deepboot_env.sim.reclaim import least_loss_horizon
from deepboot_env.sim.restart import Phase
from deepboot_env.sim.simulator import next_boundary
from deepboot_env.sim.state import Allocation, ClusterState, JobView, checked_counts
from deepboot_env.sim.state_builder import filled_state, replica_cap, static_view_fields

if TYPE_CHECKING:
    from deepboot_env.sim.simulator import Simulator


def array_episode_applies(sim: Simulator, decider: object | None = None) -> bool:
    """Whether playing ``sim``'s episode on the arrays is the same episode (the module docstring),
    with ``decider`` deciding (None: ``sim``'s policy; on a fork, a player whose hooks ``sim``'s
    policy serves)."""
    config, policy = sim.config, sim.policy
    decider = policy if decider is None else decider
    if type(sim._pool) is not InferencePool or config.interference is not None:
        return False
    if config.restart not in RESTART_CODES:
        return False
    if least_loss_horizon(policy.choose_reclaim) is None or getattr(decider, "relist_restarts", False):
        return False
    if getattr(type(decider), "bind_simulator", None) is not DefaultHooks.bind_simulator:
        return False
    return all(isinstance(job.truth, RateTable | MeasuredRates) for job in sim.jobs)


def loops_cached() -> bool:
    """Whether the loops an array episode calls are compiled and cached on disk already, so that
    the first one in a process loads them (about 0.5 s) instead of compiling them (about 25 CPU-s,
    once per install)."""
    from deepboot_env.sim import drain_loops as k

    return all(cached_on_disk(f) for f in (k.run_to_boundary, k.apply_counts_loops, k.advance_holders, k.drain_loops))


class ArrayEpisode:
    """The rest of ``sim``'s episode, from its current decision, on the arrays (see the module
    docstring); ``sim`` must meet :func:`array_episode_applies` and must not be used until
    :attr:`done` (it is then written back)."""

    def __init__(self, sim: Simulator, may_compile: bool = True) -> None:
        self.sim = sim
        self.may_compile = may_compile
        """Whether the policy's compiled decision may be compiled in this episode where it is not
        cached on disk yet (False: the policy decides in Python until it is)."""
        self.arrays = _DrainArrays.of(
            sim, sim.config.max_time, RequestColumns.of(sim._pool._specs), JobArrays.of(sim.jobs, sim.config.restart)
        )
        train, tables = self.arrays.training
        assert train is not None and tables is not None  # built with the jobs
        self.train: tuple[np.ndarray, ...] = train
        """The loop's ``train`` (:mod:`~deepboot_env.sim.drain_loops`): the job rows and the active jobs."""
        self.tables: tuple[np.ndarray, ...] = tables
        """The applications' stacked tables."""
        self.boundary = sim._boundary
        self.next_arrival = sim._training.next_arrival
        self.arrivals = [job.spec.arrival for job in sim.jobs]
        self.recent: deque[int] = deque(sim._recent, maxlen=sim._recent.maxlen)
        self.done = False
        self._jobs: list[TrainingJob] = sim.jobs
        self._fixed = [static_view_fields(job) for job in sim.jobs]
        self._targets: np.ndarray | None = None
        """Each application's target progress, by the rows' application number (built on first use)."""
        self._wanted = np.full(self.train[4].shape, -1, dtype=np.int64)
        """The GPUs per node each job is given at a decision (-1: none), refilled at each."""
        self._idle: dict[int, tuple[int, int, dict[str, object]]] = {}
        """Job -> (version, profiled cap, view fields) of the last view made of it while it held no
        GPU: a job without GPUs does not progress, so only its age changes until its version does
        (most of an overloaded cluster's views, as in the StateBuilder)."""
        self._booked = 0
        """The completed jobs (the first of ``train[8]``) handed to the simulator's books so far."""
        from deepboot_env.sim import drain_loops

        self._k = drain_loops
        """The compiled loops and their column numbers (imported with the first array episode:
        numba is not imported with the simulator; bound here, not imported at every call)."""
        self._heap_margin = len(sim.jobs) + 3 * len(self.arrays.reqs[0]) + 1
        """What a decision and the events up to the next can push on the heap: a TRAIN_DONE per job
        and what the drain sizing counts for the requests (:meth:`_ensure_heap_room`)."""
        config = sim.config
        self._max_time, self._interval = config.max_time, config.interval
        self._kinds, self._gpus_per_node = sim.ledger.kinds, config.cluster.gpus_per_node

    # ------------------------------------------------------------ the loop's interface
    @property
    def now(self) -> float:
        """The current time."""
        return float(self.arrays.fs[self._k.NOW])

    @property
    def active(self) -> list[int]:
        """The active jobs, in arrival order."""
        return self.train[5][: self.arrays.st[self._k.N_ACTIVE]].tolist()

    @property
    def active_jobs(self) -> list[int]:
        """The active jobs' ids (:attr:`active`; the simulator's own job objects are stale until
        the episode is written back)."""
        return self.active

    @property
    def jobs_finished(self) -> int:
        """Training jobs completed so far."""
        return int(np.isfinite(self.train[0][:, COMPLETION]).sum())

    def job_progress(self, ids: list[int]) -> float:
        """The summed progress of jobs ``ids`` (the watchdog's measure)."""
        progress = self.train[0][:, PROGRESS]
        return sum(progress[ids].tolist())  # summed as Simulator.job_progress sums

    @property
    def waiting_seconds(self) -> float:
        """``Simulator.waiting_seconds``: request-seconds spent waiting for a GPU so far."""
        return float(self.arrays.fs[self._k.WAIT_S])

    def job_seconds(self, t0: float, t1: float) -> float:
        """``Simulator.job_seconds``: training job-seconds in the system during [t0, t1], ``t1``
        at most now (the books hold every completion up to now, :meth:`advance` hands them over,
        and every job arrived by a decision is active at it)."""
        arrivals = self.arrivals
        return self.sim._books.job_seconds(t0, t1, [arrivals[j] for j in self.active])

    def advance_holders(self) -> None:
        """The jobs holding GPUs advanced to now (what a decision reads; :meth:`observe` does it)."""
        k, fs = self._k, self.arrays.fs
        k.advance_holders(self.train, self.tables, self.train[5][: self.arrays.st[k.N_ACTIVE]], float(fs[k.NOW]))

    def decision_inputs(self) -> DecisionInputs:
        """What a compiled decision reads at this decision, as arrays (the rows are the episode's
        own: read them, never change them); call :meth:`advance_holders` first."""
        k, a, train, tables = self._k, self.arrays, self.train, self.tables
        if self._targets is None:
            self._targets = _app_targets(self._jobs, train[1], len(tables[0]))
        return DecisionInputs(
            train[0], train[1], train[4], train[5][: a.st[k.N_ACTIVE]], tables[0], tables[3], tables[4],
            self._targets, a.pods[3], self._kinds, int(a.st[k.N_WAITING]), float(a.fs[k.NOW]),
            self._gpus_per_node, self.sim.adaptive, self._wanted,
        )  # fmt: skip

    def observe(self) -> ClusterState:
        """``Simulator.observe`` from the arrays: the jobs holding GPUs advanced to now."""
        a, now, active = self.arrays, self.now, self.active
        train = self.train
        self.advance_holders()
        jf, ji, pf, pi, jcounts = train[0], train[1], train[2], train[3], train[4]
        idle, new_view = self._idle, object.__new__
        views = []
        for j, f, i in zip(active, jf[active].tolist(), ji[active].tolist(), strict=True):
            if not i[REPLICAS]:  # a job without GPUs: the view cached at its version, only its age new
                hit = idle.get(j)
                if hit is not None and hit[0] == i[VERSION] and hit[1] == i[MAX_PROFILED]:
                    view = new_view(JobView)
                    view.__dict__.update(hit[2])
                    view.__dict__["age"] = now - self.arrivals[j]
                    views.append(view)
                    continue
            view = self._view(j, now, f, i, jcounts[j].tolist(), pf[j], pi[j])
            if not i[REPLICAS]:
                idle[j] = (i[VERSION], i[MAX_PROFILED], dict(view.__dict__))
            views.append(view)
        counts = a.pods[3].tolist()
        node_counts = (counts[0], counts[1], counts[2], counts[3])
        sim = self.sim
        config = sim.config
        waiting = int(a.st[self._k.N_WAITING])
        return filled_state(
            now,
            config.interval,
            config.cluster,
            sim.ledger.kinds,
            node_counts,
            views,
            waiting,
            self.recent,
            config.restart,
        )

    def _view(
        self, j: int, now: float, f: list[float], i: list[int], counts: list[int], pf: np.ndarray, pi: np.ndarray
    ) -> JobView:
        """Job ``j``'s view at ``now`` from its rows (``f``, ``i``: its float and int rows as lists)."""
        job, replicas = self._jobs[j], i[REPLICAS]
        phases = i[N_PHASES]
        stalled: float = 0
        if phases and any(pi[p, P_REPLICAS] == 0 for p in range(phases)):
            stalled = sum(float(pf[p, P_SECONDS]) for p in range(phases) if pi[p, P_REPLICAS] == 0)
        view = object.__new__(JobView)
        fields = view.__dict__
        fields.update(self._fixed[j])
        fields.update(
            age=now - fields["arrival"],
            num_restarts=i[RESTARTS],
            max_replicas=replica_cap(job, i[MAX_PROFILED], self.sim.adaptive),
            alloc=frozen_alloc(counts),
            throughput_ratio=f[SPEED] if replicas > 0 else 1.0,
            replicas=replicas,
            attained_service=f[SERVICE],
            epoch=i[EPOCH],
            progress_fraction=i[EPOCH] / job.app.max_epochs,
            stalled_seconds=stalled,
            remaining_work=job.target_progress - f[PROGRESS],
            trained=f[PROGRESS] > 0.0,
        )
        return view

    def apply(self, allocation: Allocation, state: ClusterState) -> None:
        """``Simulator.apply``: the allocation checked against ``state``, then applied compiled.

        Raises:
            AllocationError: an invalid allocation (the message names the job and node).
            ValueError: an allocation that asks for relisted restarts (no array episode plays those).
        """
        if getattr(allocation, "relist", None):
            raise ValueError("an array episode plays no relisted restarts (Allocation.relist)")
        ids, counts = checked_counts(state, allocation)
        self.apply_valid_counts(dict(zip(ids, counts.tolist(), strict=True)))

    def apply_valid_counts(self, counts: dict[int, list[int]]) -> None:
        """``Simulator.apply_valid_counts`` on the arrays."""
        wanted = self._wanted  # only the active jobs' rows are read: a row per job and node would
        wanted[self.train[5][: self.arrays.st[self._k.N_ACTIVE]]] = -1  # cost the whole workload's size
        for j, row in counts.items():
            wanted[j] = row
        self.apply_wanted(wanted)

    def apply_wanted(self, wanted: np.ndarray) -> None:
        """:meth:`apply_valid_counts` of ``wanted[j]``, the GPUs per node of each active job j (-1
        in its first column: none), valid (a compiled decision's; the rows are changed)."""
        a, k = self.arrays, self._k
        self._ensure_heap_room()
        k.apply_counts_loops(
            a.st, a.fs, a.pods, a.events, a.reqs, a.queue, self.train, self.tables, wanted, float(a.fs[k.NOW])
        )

    def advance(self) -> None:
        """``Simulator.advance``: every event up to the next decision, or to the end (then the
        simulator is written back and :attr:`done`)."""
        a, k = self.arrays, self._k
        while True:
            boundary = self._next_boundary()
            if boundary is None or boundary > self._max_time:
                self._drain()
                return
            self._ensure_heap_room()
            if a.st[k.ROWS] >= len(a.rows):
                self._hand_over_rows()
            k.run_to_boundary(a.st, a.fs, a.pods, a.events, a.reqs, a.queue, self.train, self.tables, boundary, a.rows)
            self.recent.append(int(a.rows[a.st[k.ROWS] - 1, -1]))
            self.boundary = boundary
            self._book_completions()
            self._admit(boundary)
            if a.st[k.N_ACTIVE]:
                return

    def stop(self) -> None:
        """End the episode here (a cut before its end): the simulator is written back as it is
        at this decision, and not finished."""
        self._write_back()
        self.done = True

    # ------------------------------------------------------------ steps
    def _next_boundary(self) -> float | None:
        """``Simulator._next_boundary``."""
        arrival = self.arrivals[self.next_arrival] if self.next_arrival < len(self.arrivals) else None
        return next_boundary(self.boundary, self._interval, bool(self.arrays.st[self._k.N_ACTIVE]), arrival)

    def _admit(self, now: float) -> None:
        """``TrainingJobs.admit``: every job arrived by ``now`` joins the active jobs."""
        st, active, at = self.arrays.st, self.train[5], self._k.N_ACTIVE
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival] <= now:
            active[st[at]] = self.next_arrival
            st[at] += 1
            self.next_arrival += 1

    def _book_completions(self) -> None:
        """The jobs completed since the last call, to the simulator's books (a few per call: the
        env's reward reads the books at every decision)."""
        done = int(self.arrays.st[self._k.N_DONE])
        if done > self._booked:
            completions, books = self.train[0][:, COMPLETION], self.sim._books
            for j in self.train[8][self._booked : done].tolist():
                books.job_done(j, self.arrivals[j], float(completions[j]))
            self._booked = done

    def _hand_over_rows(self) -> None:
        """The timeline rows written so far, to the books (when the buffer is full, and at the end:
        a row a boundary would cost a call each)."""
        a = self.arrays
        a.hand_over_rows(self.sim)
        a.st[self._k.ROWS] = 0

    def _ensure_heap_room(self) -> None:
        """Room on the event heap for what a decision and the events up to the next can push: a
        TRAIN_DONE per job, and what the drain sizing counts for the requests (grown by copying)."""
        a = self.arrays
        heap_t, heap_i = a.events
        need = int(a.st[self._k.HEAP_N]) + self._heap_margin
        if need > len(heap_t):
            grown_t, grown_i = np.empty(2 * need), np.empty((2 * need, heap_i.shape[1]), dtype=np.int64)
            grown_t[: len(heap_t)], grown_i[: len(heap_t)] = heap_t, heap_i
            a.events = (grown_t, grown_i)

    def _drain(self) -> None:
        """``Simulator._go_to_next_decision``'s end: the events to ``max_time`` interval by
        interval, then everything written back and the episode finished."""
        a, sim, k = self.arrays, self.sim, self._k
        a.fs[k.LIMIT], a.fs[k.DRAIN_T] = self._max_time, self.boundary
        self._ensure_heap_room()
        self._hand_over_rows()
        while True:
            answer = k.drain_loops(a.st, a.fs, a.pods, a.events, a.reqs, a.queue, self.train, self.tables, a.rows)
            self.recent.extend(int(arrivals) for arrivals in a.rows[: a.st[k.ROWS], -1].tolist())
            self._hand_over_rows()
            if answer != k.ROWS_FULL:
                break
        self._write_back()
        # cut at max_time: jobs or events left (the drain's last look at the heap), requests waiting
        left = a.fs[k.NEXT_T] < math.inf or bool(a.st[k.N_WAITING])
        sim.truncated = bool(self.active) or self.next_arrival < len(self.arrivals) or left
        sim._finish()
        self.done = True

    def _write_back(self) -> None:
        """Everything the Python loop would have left, into the simulator: the inference side (the
        drain's write-back), the jobs, the active jobs, the completions and the counters."""
        a, sim, k = self.arrays, self.sim, self._k
        self._hand_over_rows()
        a.write_back(sim)
        sim.ledger.counts["train"] = a.pods[3][0].tolist()  # the ledger replaces this list, never changes it
        train, st = self.train, a.st
        for job in self._jobs:
            _write_job(job, train)
        training = sim._training
        training.active[:] = self.active
        training.next_arrival = self.next_arrival
        training.restarts += int(st[k.RESTARTS])
        training.completions._deferred.clear()  # every completion is on the heap (projected at once)
        sim._pool.reclaims += int(st[k.RECLAIMS])
        sim._boundary = self.boundary
        sim._recent = self.recent
        self._book_completions()


class DecisionInputs(NamedTuple):
    """What a compiled decision reads (:meth:`ArrayEpisode.decision_inputs`)."""

    jf: np.ndarray
    """The jobs' float rows (:mod:`~deepboot_env.sim.progress_loops`' columns)."""
    ji: np.ndarray
    """The jobs' int rows."""
    counts: np.ndarray
    """GPUs per node each job holds."""
    active: np.ndarray
    """The active jobs, in index order (which is their arrival order)."""
    model: np.ndarray
    """The policy's rates by [application, multi-node flag, GPUs, epoch] (the loop's ``tables[T_MODEL]``)."""
    ends: np.ndarray
    """Each application's progress at the end of each epoch."""
    dims: np.ndarray
    """Each application's (epochs, most GPUs, measured, shapes)."""
    targets: np.ndarray
    """Each application's target progress."""
    ledger: np.ndarray
    """The ledger's GPUs per node: train, running, protect and sleep rows."""
    kinds: np.ndarray
    """The node kinds (``cluster.NODE_TRAIN`` ...)."""
    waiting: int
    """Inference requests waiting."""
    now: float
    """The decision's time."""
    gpus_per_node: int
    adaptive: bool
    """Whether the jobs choose their batch sizes (their caps grow with what they have run on)."""
    wanted: np.ndarray
    """The episode's buffer for the decision's GPUs per node (:meth:`ArrayEpisode.apply_wanted`)."""


def _app_targets(jobs: list[TrainingJob], ji: np.ndarray, apps: int) -> np.ndarray:
    """Each application's target progress by the rows' application number (``ji[:, APP]``).

    Raises:
        ValueError: a job whose rate table is not its truth's model (the stacked ``T_MODEL`` tables
            a compiled decision reads as the policy's rates).
    """
    targets = np.zeros(apps)
    for job in jobs:
        model = job.truth if isinstance(job.truth, RateTable) else getattr(job.truth, "model", None)
        if model is not job.rates:
            raise ValueError(f"job {job.index}: its rate table is not its truth's model")
        targets[ji[job.index, APP]] = job.rates.app.target_progress
    return targets


def _write_job(job: TrainingJob, train: tuple[np.ndarray, ...]) -> None:
    """``job``'s state from its rows (the inverse of :func:`~deepboot_env.sim.progress.job_rows`)."""
    j = job.index
    f, i = train[0][j].tolist(), train[1][j].tolist()
    counts = train[4][j].tolist()
    job._t, job.progress, job.speed, job.attained_service = f[T], f[PROGRESS], f[SPEED], f[SERVICE]
    job._anchor = None if math.isnan(f[ANCHOR_T]) else (f[ANCHOR_T], f[ANCHOR_P])
    job.completion = None if math.isnan(f[COMPLETION]) else f[COMPLETION]
    job.first_start = None if math.isnan(f[FIRST_START]) else f[FIRST_START]
    job.epoch, job.version, job._settled = i[EPOCH], i[VERSION], i[SETTLED]
    job.num_restarts, job.max_profiled = i[RESTARTS], i[MAX_PROFILED]
    job.pending_profile = None if math.isnan(f[PENDING_T]) else (f[PENDING_T], i[PENDING_K])
    pf, pi = train[2][j], train[3][j]
    job._phases = tuple(
        Phase(float(pf[p, P_SECONDS]), int(pi[p, P_REPLICAS]), bool(pi[p, P_CLASS]), (), none_if_nan(pf[p, P_END]))
        for p in range(i[N_PHASES])
    )
    if counts != job.counts:
        job.counts, job.alloc = counts, frozen_alloc(counts)
        job.replicas = sum(counts)
        job.multi_node = len(counts) - counts.count(0) > 1
        job.rate_class = job.truth.placement_class(counts, job.multi_node)
        job.epoch_rates = job.truth.rate_column(job.rate_class, job.replicas)
