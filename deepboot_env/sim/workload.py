"""Workload: the training jobs and inference requests one episode replays.

A :class:`Workload` is an immutable, validated, column-oriented description of what arrives
when. Loaders in :mod:`traces` build it from CSV files; generators build it from statistics.
The simulator never reads files itself.

Training jobs follow the Pollux workload format (name, arrival time, application, requested
replicas, requested total batch size). Inference requests follow the DeepBoot format: each
request belongs to an *app instance* (``infer-<model>-<k>``) and needs one GPU for
``duration`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepboot_env.sim.apps import APP_NAMES, default_profiles


class WorkloadError(ValueError):
    """A workload is malformed; the message names the source, row and field."""


@dataclass(frozen=True)
class TrainingJobSpec:
    """One training job as submitted.

    Attributes:
        name: unique job name.
        arrival: submission time in seconds since the start of the episode.
        app: application name (one of :data:`deepboot_env.sim.apps.APP_NAMES`).
        num_replicas: GPUs requested (used by gang schedulers such as FIFO and Tiresias; a
            fixed-batch simulation refuses more than the cluster's GPUs, see
            :meth:`Workload.check_fits`).
        batch_size: requested total batch size (used by fixed-batch schedulers), at most the
            application's ``max_batch_size`` (checked by :meth:`Workload.validate`).
    """

    name: str
    arrival: float
    app: str
    num_replicas: int
    batch_size: int


@dataclass(frozen=True)
class InferenceRequestSpec:
    """One inference request: one GPU for ``duration`` seconds after any cold start.

    Attributes:
        name: request name (need not be unique across requests).
        arrival: arrival time in seconds.
        instance: app instance key, e.g. ``infer-bert-1``; warm pods are bound to it.
        app: the model served (one of :data:`APP_NAMES`), which fixes the cold-start delay.
        duration: service time in seconds (> 0).
    """

    name: str
    arrival: float
    instance: str
    app: str
    duration: float


@dataclass(frozen=True)
class Workload:
    """Training jobs and inference requests of one episode, each sorted by arrival.

    Attributes:
        name: human-readable name (file stem or generator description).
        jobs: training jobs, sorted by arrival, unique names.
        requests: inference requests, sorted by arrival.
        source: where the workload came from (a path or a generator description).
    """

    name: str
    jobs: tuple[TrainingJobSpec, ...]
    requests: tuple[InferenceRequestSpec, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every invariant the simulator relies on.

        Raises:
            WorkloadError: naming the workload source, the row (1-based, in arrival order of
                its kind) and the field that is wrong. Besides the checks of each field on its
                own, a job's batch size may not exceed its application's ``max_batch_size`` (of
                the shipped profiles, :func:`~deepboot_env.sim.apps.default_profiles`).
        """
        src = self.source or self.name
        profiles = default_profiles()
        seen: set[str] = set()
        last = -np.inf
        for i, job in enumerate(self.jobs, start=1):
            where = f"{src}: training job {i} ({job.name!r})"
            if job.name in seen:
                raise WorkloadError(f"{where}: field 'name': duplicate job name")
            seen.add(job.name)
            if job.app not in APP_NAMES:
                raise WorkloadError(
                    f"{where}: field 'application': unknown application {job.app!r}; "
                    f"expected one of {', '.join(APP_NAMES)}"
                )
            last = _check_arrival(where, job.arrival, last)
            if job.num_replicas < 1:
                raise WorkloadError(f"{where}: field 'num_replicas': must be >= 1, got {job.num_replicas}")
            if job.batch_size < 1:
                raise WorkloadError(f"{where}: field 'batch_size': must be >= 1, got {job.batch_size}")
            max_bsz = profiles[job.app].max_batch_size
            if job.batch_size > max_bsz:
                raise WorkloadError(
                    f"{where}: field 'batch_size': batch size {job.batch_size} exceeds the largest total batch "
                    f"of {job.app} ({max_bsz})"
                )
        if _requests_valid(self.requests):
            self._check_not_empty(src)
            return
        last = -np.inf
        for i, req in enumerate(self.requests, start=1):
            where = f"{src}: inference request {i} ({req.name!r})"
            if req.app not in APP_NAMES:
                raise WorkloadError(
                    f"{where}: field 'application': unknown inference model {req.app!r} "
                    f"in instance {req.instance!r}; expected one of {', '.join(APP_NAMES)}"
                )
            last = _check_arrival(where, req.arrival, last)
            if not np.isfinite(req.duration) or req.duration <= 0:
                raise WorkloadError(f"{where}: field 'duration': must be > 0, got {req.duration}")
        self._check_not_empty(src)

    def _check_not_empty(self, src: str) -> None:
        if not self.jobs and not self.requests:
            raise WorkloadError(f"{src}: the workload has no training jobs and no inference requests")

    def check_horizon(self, max_time: float) -> None:
        """Check that nothing arrives after ``max_time``, the simulated time at which an episode
        is cut (:attr:`SimConfig.max_time <deepboot_env.sim.config.SimConfig.max_time>`): such a
        job or request would never be seen. Called by the simulator at each reset; O(log n).

        Raises:
            WorkloadError: naming the first job (or request) that arrives too late.
        """
        src = self.source or self.name
        for kind, items in (("training job", self.jobs), ("inference request", self.requests)):
            if items and items[-1].arrival > max_time:
                i = _first_after(items, max_time)
                item = items[i]
                days = max_time / 86400
                limit = f"{max_time:.0f}" if float(max_time).is_integer() and max_time < 1e15 else f"{max_time:g}"
                raise WorkloadError(
                    f"{src}: {kind} {i + 1} ({item.name!r}): field 'time': arrives at {item.arrival:g} s, after the "
                    f"end of the simulation (max_time {limit} s, {days:g} day{'' if days == 1 else 's'}); "
                    f"{len(items) - i} of {len(items)} {kind}s arrive after it"
                )

    def check_fits(self, total_gpus: int, cluster: str = "") -> None:
        """Check that no training job requests more GPUs than ``total_gpus``, all the GPUs of the
        cluster (training and inference nodes): more than a policy that keeps the submitted
        size could ever give it, even lending every inference GPU. The simulator calls it at
        each reset for such policies (``adaptive_batch = False``: FIFO, Tiresias, Optimus), for
        which the requested count is the job's size; adaptive policies choose the count
        themselves and may run the job on fewer GPUs. A request between the training cluster's
        GPUs and ``total_gpus`` passes: gang policies cap it at what they can place.

        Raises:
            WorkloadError: naming the first such job.
        """
        src = self.source or self.name
        for i, job in enumerate(self.jobs, start=1):
            if job.num_replicas > total_gpus:
                on = f"the cluster {cluster}" if cluster else "the cluster"
                raise WorkloadError(
                    f"{src}: training job {i} ({job.name!r}): field 'num_replicas': requests {job.num_replicas} GPUs "
                    f"but {on} has only {total_gpus} GPUs in all"
                )

    @property
    def last_arrival(self) -> float:
        """Latest arrival of any job or request (seconds)."""
        times = [j.arrival for j in self.jobs[-1:]] + [r.arrival for r in self.requests[-1:]]
        return max(times) if times else 0.0

    def summary(self) -> dict[str, object]:
        """Counts per application and the arrival span, for printing."""
        per_app: dict[str, int] = {}
        for job in self.jobs:
            per_app[job.app] = per_app.get(job.app, 0) + 1
        return {
            "name": self.name,
            "training_jobs": len(self.jobs),
            "inference_requests": len(self.requests),
            "inference_instances": len({r.instance for r in self.requests}),
            "jobs_per_app": per_app,
            "last_arrival_s": self.last_arrival,
        }


def _first_after(items: tuple[TrainingJobSpec, ...] | tuple[InferenceRequestSpec, ...], t: float) -> int:
    """Index of the first of ``items`` (sorted by arrival) that arrives after ``t``, by bisection."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid].arrival > t:
            hi = mid
        else:
            lo = mid + 1
    return lo


_APP_SET = frozenset(APP_NAMES)


def _requests_valid(requests: tuple[InferenceRequestSpec, ...]) -> bool:
    """Whether every request passes the checks of :meth:`Workload.validate`, tested on whole
    columns at once (the row-by-row checks then run only to name the first bad row)."""
    if not requests:
        return True
    try:
        arrivals = np.fromiter((r.arrival for r in requests), dtype=float, count=len(requests))
        durations = np.fromiter((r.duration for r in requests), dtype=float, count=len(requests))
    except (TypeError, ValueError):
        return False
    return (
        {r.app for r in requests} <= _APP_SET
        and bool(np.isfinite(arrivals).all() and (arrivals >= 0).all() and (np.diff(arrivals) >= 0).all())
        and bool(np.isfinite(durations).all() and (durations > 0).all())
    )


def _check_arrival(where: str, arrival: float, previous: float) -> float:
    """Check the arrival time of the row ``where`` (a finite time >= 0, not before ``previous``,
    the arrival of the row before it of the same kind) and return it."""
    if not np.isfinite(arrival):
        raise WorkloadError(f"{where}: field 'time': not a finite number ({arrival!r})")
    if arrival < 0:
        raise WorkloadError(f"{where}: field 'time': negative time {arrival}")
    if arrival < previous:
        raise WorkloadError(f"{where}: field 'time': rows are not sorted by arrival time")
    return arrival
