"""The training side of one episode: the jobs, their placements, restarts, completions and interference.

:class:`TrainingJobs` owns the training jobs of an episode (built from the workload with their
rate tables), which of them are active, and the restarts so far. The
:class:`~deepboot_env.sim.simulator.Simulator` keeps the clock and the event loop and hands it
the current time: it admits the jobs that have arrived at a boundary, applies a policy's
allocation (:meth:`TrainingJobs.apply_counts`), gives a GPU up to an inference pod
(:meth:`TrainingJobs.take_gpu`, the simulator's
:class:`~deepboot_env.sim.inference.TrainingSide` delegates there) and completes a job at its
TRAIN_DONE event (:meth:`TrainingJobs.train_done`).

It counts GPUs on the simulator's shared :class:`~deepboot_env.sim.cluster.ClusterLedger`,
schedules completions through its :class:`~deepboot_env.sim.completions.CompletionSchedule` (on
the shared :class:`~deepboot_env.sim.events.EventQueue`), and touches the inference side only to
evict SLEEP pods in the way of an allocation and to serve waiting requests once training has
freed GPUs; it records completions in the :class:`~deepboot_env.sim.accounting.EpisodeAccount`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from deepboot_env.sim.accounting import EpisodeAccount
from deepboot_env.sim.apps import AppProfile
from deepboot_env.sim.cluster import NODE_TRAIN, ClusterLedger
from deepboot_env.sim.completions import CompletionSchedule
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.events import EventQueue
from deepboot_env.sim.fork import clone_object
from deepboot_env.sim.inference import InferencePool
from deepboot_env.sim.interference import InterferenceModel
from deepboot_env.sim.jobs import TrainingJob, frozen_alloc
from deepboot_env.sim.measured import shared_measured_rates
from deepboot_env.sim.rates import ProgressRates, RateTable, shared_rate_table
from deepboot_env.sim.restart import PARKED, plan_change
from deepboot_env.sim.state import AllocationError, GpuRef
from deepboot_env.sim.workload import TrainingJobSpec

__all__ = ["TrainingJobs", "job_rate_table", "progress_truth"]


def job_rate_table(app: AppProfile, fixed_batch: int | None, usable_gpus: int, batch_stats: str) -> RateTable:
    """The shared rate table a job of ``app`` gets on a cluster of ``usable_gpus`` GPUs: choosing
    its batch size (``fixed_batch`` None) up to its most useful GPU count, or at ``fixed_batch``
    up to ``fixed_batch // min_local_bsz`` GPUs. Its ``max_replicas`` is the most GPUs the
    simulator lets the job hold (the JCT bounds of :mod:`deepboot_env.sim.bounds` rely on it)."""
    if fixed_batch is None:
        cap = app.max_useful_replicas()
    else:
        cap = max(1, fixed_batch // app.min_local_bsz)
    return shared_rate_table(app, min(cap, usable_gpus), fixed_batch, batch_stats)


def progress_truth(table: RateTable, trace_set: str | None) -> ProgressRates:
    """What a job with rate table ``table`` progresses at: the table itself (the fitted truth,
    ``trace_set`` None) or its measured rates in ``trace_set``."""
    return table if trace_set is None else shared_measured_rates(table, trace_set)


class TrainingJobs:
    """The training jobs of one episode and what changes them (rebuilt at each reset).

    Every method that changes something at the current time takes that time as ``now`` (the
    simulator's clock).

    Args:
        specs: the workload's training jobs, in arrival order.
        profiles: application profiles by name.
        adaptive: whether jobs choose their batch size (else each keeps its spec's).
        config: simulation settings (cluster, restart model, interference, truth).
        ledger: the cluster's GPU ledger, shared with inference.
        events: the simulator's event queue (TRAIN_DONE events go there).
        pool: the inference pool (SLEEP pods evicted, waiting requests served).
        books: the episode's account (job completions recorded).

    Attributes:
        jobs: every training job, indexed by job index (arrival order).
        active: indices of the jobs admitted and not finished, in arrival order (changed in
            place, never replaced).
        next_arrival: index of the first job not admitted yet (``len(jobs)`` once all are).
        restarts: placement changes so far that counted as restarts.
        completions: the jobs' TRAIN_DONE events.
    """

    def __init__(
        self,
        specs: Sequence[TrainingJobSpec],
        profiles: Mapping[str, AppProfile],
        adaptive: bool,
        config: SimConfig,
        ledger: ClusterLedger,
        events: EventQueue,
        pool: InferencePool,
        books: EpisodeAccount,
    ) -> None:
        self.ledger = ledger
        self.pool = pool
        self.books = books
        self.restart = config.restart
        self.interference = config.interference
        self.num_nodes = num_nodes = config.cluster.num_nodes
        self._usable = config.cluster.total_gpus
        self._tables: dict[tuple[str, int | None], RateTable] = {}
        self._trace_set = config.trace_set if config.truth == "measured" else None
        self._batch_stats = config.batch_stats
        cap_after_training = config.cap_growth == "trained"
        self.jobs: list[TrainingJob] = []
        for i, spec in enumerate(specs):
            app = profiles[spec.app]
            fixed = None if adaptive else spec.batch_size
            table = self.table(app, fixed)
            self.jobs.append(TrainingJob(i, spec, app, table, num_nodes, self._truth(table), cap_after_training))
        self.active: list[int] = []
        self.next_arrival = 0
        self.restarts = 0
        self.completions = CompletionSchedule(self.jobs, events)
        self.relist_pending: dict[int, int] = {}
        """Job index -> job version: jobs whose GPU list the original's ATS-I would rewrite in
        node order at its next pass (see :meth:`mark_relist`); empty unless a policy asks."""

    _FORK_FIELDS = frozenset(
        {
            "ledger",
            "pool",
            "books",
            "restart",
            "interference",
            "num_nodes",
            "_usable",
            "_tables",
            "_trace_set",
            "_batch_stats",
            "jobs",
            "active",
            "next_arrival",
            "restarts",
            "completions",
            "relist_pending",
        }
    )
    """Every attribute of the training side (see :meth:`clone`)."""

    def clone(
        self, ledger: ClusterLedger, events: EventQueue, pool: InferencePool, books: EpisodeAccount
    ) -> TrainingJobs:
        """An independent copy on the copies ``ledger``, ``events``, ``pool`` and ``books``
        (:mod:`deepboot_env.sim.fork`): every job is copied, with the active jobs, the completion
        schedule and the relist marks; the rate tables (pure caches) are shared."""
        new = clone_object(self, self._FORK_FIELDS)
        new.ledger = ledger
        new.pool = pool
        new.books = books
        new._tables = self._tables.copy()
        new.jobs = jobs = [job.clone() for job in self.jobs]
        new.active = self.active.copy()
        new.completions = self.completions.clone(jobs, events)
        new.relist_pending = self.relist_pending.copy()
        return new

    def table(self, app: AppProfile, fixed_batch: int | None) -> RateTable:
        """The rate table of ``app`` (at ``fixed_batch``, or choosing the batch size if None),
        up to the GPUs it can use on this cluster."""
        key = (app.name, fixed_batch)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = job_rate_table(app, fixed_batch, self._usable, self._batch_stats)
        return table

    def truth_of(self, app: AppProfile) -> tuple[ProgressRates, int]:
        """The rates an adaptive-batch job of ``app`` truly progresses at on this cluster (its
        rate table, or the measured rates of that table), and the most GPUs it may use."""
        table = self.table(app, None)
        return self._truth(table), table.max_replicas

    def _truth(self, table: RateTable) -> ProgressRates:
        """What a job with rate table ``table`` progresses at: the table itself (the fitted
        truth) or its measured rates."""
        return progress_truth(table, self._trace_set)

    # ------------------------------------------------------------ arrivals
    def admit(self, now: float) -> None:
        """Admit every job arrived by ``now`` (a boundary)."""
        jobs, active = self.jobs, self.active
        while self.next_arrival < len(jobs) and jobs[self.next_arrival].spec.arrival <= now:
            active.append(self.next_arrival)
            self.next_arrival += 1

    def next_arrival_time(self) -> float | None:
        """Arrival time of the next job not admitted yet, None if every job was."""
        if self.next_arrival < len(self.jobs):
            return self.jobs[self.next_arrival].spec.arrival
        return None

    def unfinished_arrivals(self, before: float) -> list[float]:
        """Arrival times of the unfinished jobs, those not admitted yet only if they arrive
        ``before`` (see :meth:`~deepboot_env.sim.accounting.EpisodeAccount.job_seconds`)."""
        jobs = self.jobs
        out = [jobs[i].spec.arrival for i in self.active]
        for i in range(self.next_arrival, len(jobs)):
            arrival = jobs[i].spec.arrival
            if arrival >= before:
                break
            out.append(arrival)
        return out

    def drop_unadmitted(self) -> None:
        """Forget the jobs not admitted yet (:meth:`Simulator.forget_future
        <deepboot_env.sim.simulator.Simulator.forget_future>`): :attr:`jobs` is shortened in place,
        so the completion schedule and the state builder, which share the list, see it too. A job
        not admitted has no placement, no event and no record anywhere else."""
        del self.jobs[self.next_arrival :]

    # ------------------------------------------------------------ changes
    def apply_counts(self, wanted: Mapping[int, list[int]], now: float) -> None:
        """Apply a checked allocation (GPUs per node as lists of ints) at ``now``: evict the SLEEP
        pods in the way, update the ledger, then re-plan every job whose placement changes (in
        arrival order); waiting requests are served last (lent GPUs may have come back)."""
        n = self.num_nodes
        changes: list[tuple[TrainingJob, list[int]]] = []
        rows = [[0] * n]  # plain ints: a few nodes
        jobs = self.jobs
        for index in self.active:
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
            evict = self.pool.evict_one_sleeper
            for node, held in enumerate(used):
                for _ in range(held - cap):
                    evict(node)
            pods = led.pod_counts()
        led.set_training(total, "allocation", pods)
        for job, counts in changes:
            self._change_job(job, counts, now, update_ledger=False)
        if changes and self.interference is not None:
            self._refresh_interference(now)
        if self.pool.waiting:
            self.pool.serve_waiting(now)

    def mark_relist(self, job_ids: Iterable[int]) -> None:
        """Jobs of the allocation just applied whose GPU list, as the policy took the GPUs, is
        out of node order (:attr:`Allocation.relist <deepboot_env.sim.state.Allocation.relist>`):
        each restarts at the next :meth:`relist` unless its placement changes first. Ids of jobs
        that are not active or hold no GPU are ignored; earlier marks that no change has
        superseded stay (the original kept such a list until its next rewrite)."""
        jobs, pending = self.jobs, self.relist_pending
        active = set(self.active)
        for job_id in job_ids:
            if job_id in active and jobs[job_id].replicas > 0:
                pending[job_id] = jobs[job_id].version

    def relist(self, now: float) -> None:
        """The original's ATS-I pass at ``now`` rewrites every marked list in node order: each
        marked job whose placement has not changed since it was marked restarts as a same-count
        move (:func:`~deepboot_env.sim.restart.plan_change` from its placement to itself: the
        full start-up delay under ``full`` and ``afe``), counted as a restart."""
        jobs = self.jobs
        pending = self.relist_pending
        for index, version in pending.items():
            job = jobs[index]
            if job.version != version or job.completion is not None or not job.replicas:
                continue
            due = job.time_of_completion()
            if due is not None and due <= now:
                continue  # completes at this instant: its pending TRAIN_DONE event finishes it
            self._change_job(job, job.counts.copy(), now, update_ledger=False)
        pending.clear()

    def take_gpu(self, ref: GpuRef, now: float) -> None:
        """Take the GPU ``ref`` from its job at ``now`` for an inference pod: the job is re-planned
        on the rest of its GPUs.

        Raises:
            AllocationError: if ``ref`` is not a GPU of an active job on a node inference may use.
        """
        if not (0 <= ref.job_id < len(self.jobs)) or ref.job_id not in self.active:
            raise AllocationError(f"reclaim: job id {ref.job_id} is not an active training job")
        job = self.jobs[ref.job_id]
        if not (0 <= ref.node < len(job.alloc)) or job.alloc[ref.node] <= 0:
            raise AllocationError(f"reclaim: job {job.spec.name!r} holds no GPU on node {ref.node}")
        if self.ledger.kinds[ref.node] == NODE_TRAIN:
            raise AllocationError(f"reclaim: node {ref.node} is a training node; inference may not take it")
        counts = job.counts.copy()
        counts[ref.node] -= 1
        self._change_job(job, counts, now)
        if self.interference is not None:
            self._refresh_interference(now)

    def take_node(self, node: int, now: float) -> int:
        """Evict every training replica on ``node`` at ``now`` (Aryl mode's server-granular
        reclaim): each job there is re-planned once on the rest of its GPUs; the GPUs taken."""
        taken = 0
        jobs = self.jobs
        for index in list(self.active):
            job = jobs[index]
            held = job.counts[node]
            if held > 0:
                counts = job.counts.copy()
                counts[node] = 0
                self._change_job(job, counts, now)
                taken += held
        if taken and self.interference is not None:
            self._refresh_interference(now)
        return taken

    def train_done(self, job: TrainingJob, now: float) -> None:
        """``job`` completes at ``now`` (its TRAIN_DONE event is not stale): its GPUs are freed
        and waiting requests served."""
        index = job.index
        job.advance(now)
        if job.completion is None:  # pragma: no cover - projection and advance share one rule
            raise RuntimeError(f"job {job.spec.name!r} was projected to complete at t={now}")
        self.ledger.change_training(-job.alloc, f"job {job.spec.name!r}")
        job.apply_change(np.zeros_like(job.alloc), PARKED, now)
        self.active.remove(index)
        self.books.job_done(index, job.spec.arrival, job.completion)
        if self.interference is not None:
            self._refresh_interference(now)
        if self.pool.waiting:
            self.pool.serve_waiting(now)

    def _change_job(self, job: TrainingJob, counts: list[int], now: float, update_ledger: bool = True) -> None:
        """Move ``job`` to ``counts`` GPUs per node (a list of ints the job takes over) at ``now``."""
        job.advance(now)
        new = frozen_alloc(counts)
        replicas = sum(counts)
        plan = plan_change(
            self.restart,
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
        self.completions.schedule(job, now)

    def _refresh_interference(self, now: float) -> None:
        """Recompute every placed job's interference speed factor from the current placements;
        jobs whose factor changes are advanced to ``now``, re-anchored and re-projected."""
        model = self.interference
        assert isinstance(model, InterferenceModel)  # SimConfig stores a number as a model
        jobs = self.jobs
        placed = [jobs[i] for i in self.active if jobs[i].replicas > 0]
        if not placed:
            return
        factors = model.speed_factors(np.stack([j.alloc for j in placed]), [j.app.name for j in placed])
        for job, factor in zip(placed, factors, strict=True):
            if factor != job.speed:
                due = job.time_of_completion()
                if due is not None and due <= now:
                    continue  # completes at this instant: its pending TRAIN_DONE event finishes it
                job.advance(now)
                job.set_speed(float(factor))
                self.completions.schedule(job, now)
