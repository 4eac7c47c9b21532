"""Building the :class:`~deepboot_env.sim.state.ClusterState` a policy sees from the simulator's state.

:class:`StateBuilder` turns the training jobs and the cluster ledger into one read-only state
per call (:meth:`Simulator.observe <deepboot_env.sim.simulator.Simulator.observe>` delegates to
it). A state is built at every decision and at every reclaim, so it is built fast: the fields
of a job's view that change only with the job's version (a change of placement or speed) are
cached per job, and the frozen dataclasses are filled without their ``__init__``. A job that holds
no GPU makes no progress until its version changes, so every field of its view but ``age`` is
cached and the job is not advanced (its clock moves when its placement changes); in a busy
cluster most active jobs wait without GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from deepboot_env.sim.cluster import ClusterConfig, ClusterLedger
from deepboot_env.sim.fork import clone_object
from deepboot_env.sim.jobs import TrainingJob
from deepboot_env.sim.state import ClusterState, JobView


def max_replicas(job: TrainingJob, adaptive: bool) -> int:
    """The most GPUs ``job`` may get at a decision (:func:`replica_cap` of its own profile)."""
    return replica_cap(job, job.max_profiled, adaptive)


def replica_cap(job: TrainingJob, profiled: int, adaptive: bool) -> int:
    """The most GPUs ``job`` may get at a decision when the most it has run with is ``profiled``:
    its rate table's limit, and with adaptive batch sizes at most twice ``profiled`` (at least 1)."""
    cap = job.rates.max_replicas
    if adaptive:
        return max(1, min(cap, max(2 * profiled, 1)))
    return cap


def static_view_fields(job: TrainingJob) -> dict[str, object]:
    """The fields of ``job``'s views that never change (its submission, application and tables)."""
    spec = job.spec
    return {
        "id": job.index,
        "name": spec.name,
        "app": job.app.name,
        "arrival": spec.arrival,
        "requested_replicas": spec.num_replicas,
        "requested_batch": spec.batch_size,
        "rates": job.rates,
        "truth": job.truth,
    }


def _progress_fields(fields: dict[str, object], job: TrainingJob, max_epochs: int) -> None:
    """Set the fields of ``job``'s view that its progress changes (``max_epochs``: its app's)."""
    fields["attained_service"] = job.attained_service
    fields["epoch"] = epoch = job.epoch
    fields["progress_fraction"] = epoch / max_epochs
    fields["stalled_seconds"] = job.stalled_seconds_left
    fields["remaining_work"] = job.target_progress - job.progress
    fields["trained"] = job.progress > 0.0


ViewFields = tuple[int, dict[str, object], int, int]
"""(job version, the view fields fixed at that version, the app's epochs, the job's
``max_profiled`` then): what :class:`StateBuilder` caches per job."""


def _fixed_fields(job: TrainingJob, adaptive: bool) -> ViewFields:
    """The fields of ``job``'s views that change only with its version (a change of
    placement or speed) or its exploration cap, and its progress fields too while it holds no GPU
    (it does not progress until its version changes). The job's alloc is a read-only array
    (:func:`~deepboot_env.sim.jobs.frozen_alloc`), so its views share it."""
    replicas = job.replicas
    cached = (
        job.version,
        {
            **static_view_fields(job),
            "num_restarts": job.num_restarts,
            "max_replicas": max_replicas(job, adaptive),
            "alloc": job.alloc,
            "throughput_ratio": job.speed if replicas > 0 else 1.0,
            "replicas": replicas,  # JobView.replicas, precomputed
        },
        job.app.max_epochs,
        job.max_profiled,
    )
    if replicas == 0:
        _progress_fields(cached[1], job, cached[2])
    return cached


class StateBuilder:
    """Builds the states of one episode.

    Args:
        jobs: every training job of the episode (indexed by job id).
        ledger: the cluster's GPU ledger.
        cluster: the cluster shape.
        interval: seconds between scheduling boundaries.
        restart: the restart-cost model's name.
        adaptive: whether jobs choose their batch size (see :func:`max_replicas`).
    """

    def __init__(
        self,
        jobs: Sequence[TrainingJob],
        ledger: ClusterLedger,
        cluster: ClusterConfig,
        interval: float,
        restart: str,
        adaptive: bool,
    ) -> None:
        self.jobs = jobs
        self.ledger = ledger
        self.cluster = cluster
        self.interval = interval
        self.restart = restart
        self.adaptive = adaptive
        self._view_fields: dict[int, ViewFields] = {}
        """Job index -> its cached :data:`ViewFields`."""

    def clone(self, jobs: Sequence[TrainingJob], ledger: ClusterLedger) -> StateBuilder:
        """An independent builder for the copies ``jobs`` and ``ledger`` (:mod:`deepboot_env.sim.fork`).
        The per-job cache is copied, not shared: it is keyed by job versions, which the copies of a
        job reach again with different placements; its entries never change and are shared."""
        new = clone_object(
            self, frozenset({"jobs", "ledger", "cluster", "interval", "restart", "adaptive", "_view_fields"})
        )
        new.jobs = jobs
        new.ledger = ledger
        new._view_fields = self._view_fields.copy()
        return new

    def views(self, now: float, indices: Iterable[int]) -> list[JobView]:
        """The views at ``now`` of the jobs ``indices`` (active jobs), in that order; those that
        hold GPUs are advanced to ``now`` (see :meth:`build`)."""
        views = []
        fixed = self._view_fields
        new_view = object.__new__
        jobs = self.jobs
        adaptive = self.adaptive
        for index in indices:
            job = jobs[index]
            # A waiting job's cached view: only its age changes. This shortcut repeats the view's
            # last lines below on purpose: it is most of the views of an overloaded cluster, and
            # folding it into the general path measured about 1 % slower on bench_overload.
            if not job.replicas:
                cached = fixed.get(index)
                if (
                    cached is not None
                    and cached[0] == job.version
                    and cached[3] == job.max_profiled
                    and job.pending_profile is None
                ):
                    view = new_view(JobView)
                    fields = view.__dict__
                    fields.update(cached[1])
                    fields["age"] = now - fields["arrival"]
                    views.append(view)
                    continue
            job.advance(now)
            version = job.version
            if job.pending_profile is not None:
                job.profiled(now)  # SimConfig(cap_growth="trained"): the cap grows once trained
            cached = fixed.get(index)
            if cached is None or cached[0] != version or cached[3] != job.max_profiled:
                cached = fixed[index] = _fixed_fields(job, adaptive)
            # A JobView without its frozen-dataclass __init__ (several times slower): the same
            # instance dict, filled directly. tests/env/test_env.py checks every field is set.
            view = new_view(JobView)
            fields = view.__dict__
            fields.update(cached[1])
            fields["age"] = now - fields["arrival"]
            if job.replicas:
                _progress_fields(fields, job, cached[2])
            views.append(view)
        return views

    def build(self, now: float, active: Iterable[int], waiting: int, recent: Iterable[int]) -> ClusterState:
        """The state at ``now``: the ``active`` jobs in that order, those that hold GPUs advanced to
        ``now`` (one without GPUs is advanced when its placement changes).

        Args:
            now: the current time.
            active: indices of the active training jobs.
            waiting: inference requests waiting for a GPU.
            recent: inference arrivals per recent interval (oldest first).
        """
        views = self.views(now, active)
        counts = self.ledger.counts
        node_counts = (
            counts["train"].copy(),
            counts["running"].copy(),
            counts["protect"].copy(),
            counts["sleep"].copy(),
        )
        return filled_state(
            now, self.interval, self.cluster, self.ledger.kinds, node_counts, views, waiting, recent, self.restart
        )


def filled_state(
    now: float,
    interval: float,
    cluster: ClusterConfig,
    kinds: np.ndarray,
    node_counts: tuple[list[int], list[int], list[int], list[int]],
    views: list[JobView],
    waiting: int,
    recent: Iterable[int],
    restart: str,
) -> ClusterState:
    """The :class:`ClusterState` of these parts (``node_counts``: training GPUs, RUNNING, PROTECT
    and SLEEP pods per node, lists the state keeps), filled like the views: every field set once,
    without its ``__init__``."""
    arrays = np.array(node_counts, dtype=np.int64)  # one conversion; each field is a row
    state = object.__new__(ClusterState)
    state.__dict__.update(
        time=now,
        interval=interval,
        config=cluster,
        node_kinds=kinds,
        train_used=arrays[0],
        running=arrays[1],
        protect=arrays[2],
        sleeping=arrays[3],
        node_counts=node_counts,
        jobs=tuple(views),
        waiting_requests=waiting,
        recent_arrivals=tuple(recent),
        restart_model=restart,
    )
    return state
