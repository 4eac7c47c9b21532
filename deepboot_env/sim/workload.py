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
        num_replicas: GPUs requested (used by gang schedulers such as FIFO and Tiresias).
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
            _check_time(where, "time", job.arrival)
            if job.arrival < last:
                raise WorkloadError(f"{where}: field 'time': rows are not sorted by arrival time")
            last = job.arrival
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
        last = -np.inf
        for i, req in enumerate(self.requests, start=1):
            where = f"{src}: inference request {i} ({req.name!r})"
            if req.app not in APP_NAMES:
                raise WorkloadError(
                    f"{where}: field 'application': unknown inference model {req.app!r} "
                    f"in instance {req.instance!r}; expected one of {', '.join(APP_NAMES)}"
                )
            _check_time(where, "time", req.arrival)
            if req.arrival < last:
                raise WorkloadError(f"{where}: field 'time': rows are not sorted by arrival time")
            last = req.arrival
            if not np.isfinite(req.duration) or req.duration <= 0:
                raise WorkloadError(f"{where}: field 'duration': must be > 0, got {req.duration}")
        if not self.jobs and not self.requests:
            raise WorkloadError(f"{src}: the workload has no training jobs and no inference requests")

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


def _check_time(where: str, fieldname: str, value: float) -> None:
    if not np.isfinite(value):
        raise WorkloadError(f"{where}: field {fieldname!r}: not a finite number ({value!r})")
    if value < 0:
        raise WorkloadError(f"{where}: field {fieldname!r}: negative time {value}")
