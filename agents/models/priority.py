"""A learned scheduler: ATS's knapsack with a learned per-job priority (``priority:<path>``).

ATS (docs/policies.md §8) chooses every job's GPUs with an exact group knapsack over speedup
values; ``ats-srpt`` (§8.6) weights each job's values by ``T ** -0.25``, T its remaining time at
its fair share. :class:`PriorityPolicy` learns that weight instead: a job's knapsack weight is

    w_j = exp(theta . phi_j)

where ``phi_j`` (:data:`FEATURES`, :func:`job_features`) describes the job and the cluster as a
real scheduler sees them (no ``remaining_work`` or other oracle), and ``theta`` is learned
(:mod:`agents.trainers.evolution`, evolution strategies on the train seeds of workload families). The
scorer is one linear map shared by every job, so the policy is permutation-equivariant in the jobs
like the set policy of :mod:`agents.models.set_policy`, and a job's weight never depends on its slot.
The knapsack keeps what makes ATS robust (its restart factor, caps and best-fit placement), the
learned part decides who is worth GPUs. ``theta = (-0.25, 0, ...)`` is ``ats-srpt`` (up to a
common factor, which does not change the knapsack's choice), the warm start of training. A model
may add :data:`EXTRA_FEATURES` after the seven: the arrival rank (``ats-srpt-fcfs``'s tilt) and
one indicator per application.

A model is a small JSON file (:class:`PriorityModel`): the feature names, theta, and how it was
made. Loading reads JSON only (nothing in the file can run code) and checks every field; a bad
file fails with one line naming it and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from baselines.ats import AtsPolicy, arrival_ranks, epochs_left_work
from deepboot_env.atomic import write_json
from deepboot_env.limits import read_json_file, shown
from deepboot_env.policy import JobView
from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.sim.reclaim import fair_share_base

FORMAT = "deepboot-priority/1"
"""The ``format`` field of a priority model file."""

FEATURES: tuple[str, ...] = (
    "log_remaining",
    "log_remaining_x_pressure",
    "log_age",
    "progress",
    "log_restarts",
    "scalability",
    "untrained",
)
"""The per-job features, in the order of theta (:func:`job_features`):

* ``log_remaining``: ln(T / 1 h), T the job's remaining time at its fair share in seconds, at
  least 1 s: the work of the epochs it has not completed (its application's epoch profile and its
  epoch counter) over its progress rate at ``fair`` GPUs on one node (what ``ats-srpt`` uses);
* ``log_remaining_x_pressure``: ``log_remaining`` times the queue pressure ln(active jobs /
  training capacity in GPUs), clipped to [-3, 1] (short-job-first matters more when jobs
  outnumber GPUs);
* ``log_age``: ln(1 + age / 1 h), the time since submission (ageing against starvation);
* ``progress``: the fraction of its epochs done (epoch counter plus the fraction of the epoch);
* ``log_restarts``: ln(1 + restarts so far);
* ``scalability``: ln(rate at 2 fair GPUs / rate at fair GPUs) on one node, both capped at the
  job's most replicas (how much more GPUs would help it);
* ``untrained``: 1 if the job has not trained yet (no throughput observed).
"""

EXTRA_FEATURES: tuple[str, ...] = ("arrival_rank", *(f"app_{name}" for name in APP_NAMES))
"""Features a model may add after :data:`FEATURES` (its file names them):

* ``arrival_rank``: +1 for the earliest arrival among the active jobs to -1 for the latest
  (ties by job id; 0 for a job alone): with coefficient 0.15 beside ``log_remaining`` at -0.25,
  the weights of ``ats-srpt-fcfs`` (its arrival tilt, docs/policies.md §8.7);
* ``app_<name>``: 1 for a job of that application, else 0: how much an application is worth to
  the knapsack beyond its remaining time, something a learner can find from experience where
  the fitted speedup model the knapsack reads is off (docs/history.md#per-app).
"""

KNOWN_FEATURES: tuple[str, ...] = FEATURES + EXTRA_FEATURES
"""Every feature a model may name, :data:`FEATURES` first."""

HOUR_S = 3600.0
PRESSURE_RANGE = (-3.0, 1.0)
"""The queue pressure is clipped to this range (from 1 job per 20 GPUs to 2.7 jobs per GPU)."""
MAX_SPREAD = 12.0
"""The weights are ``exp(theta . phi - max theta . phi)`` clipped below at e^-12: the heaviest job
weighs 1 and none less than 6e-6 of it, so no value falls under the knapsack's tie tolerance and
a GPU nobody else wants is still given (the knapsack's choice is otherwise unchanged by a common
factor)."""


class PriorityModelError(ValueError):
    """A priority model file cannot be used; the message names the file and the field."""


def job_features(jobs: Sequence[JobView], fair: int, capacity: int, features: Sequence[str] = FEATURES) -> np.ndarray:
    """The ``(len(jobs), len(features))`` feature matrix of ``jobs`` at fair share ``fair`` GPUs
    with ``capacity`` GPUs for training: :data:`FEATURES` (always computed), then any of
    :data:`EXTRA_FEATURES` that ``features`` names, in the order ``features`` gives."""
    rows = _base_features(jobs, fair, capacity)
    if tuple(features) == FEATURES:
        return rows
    columns = dict(zip(FEATURES, rows.T, strict=True))
    if "arrival_rank" in features:
        columns["arrival_rank"] = arrival_ranks(jobs)
    for name in APP_NAMES:
        if f"app_{name}" in features:
            columns[f"app_{name}"] = np.array([1.0 if job.app == name else 0.0 for job in jobs])
    return np.stack([columns[name] for name in features], axis=1) if len(jobs) else np.empty((0, len(features)))


def _base_features(jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray:
    """The :data:`FEATURES` columns of :func:`job_features`."""
    low, high = PRESSURE_RANGE
    pressure = min(max(math.log(max(len(jobs), 1) / max(capacity, 1)), low), high)
    rows = np.empty((len(jobs), len(FEATURES)))
    for i, job in enumerate(jobs):
        remaining = math.log(max(epochs_left_work(job) / fair_share_base(job, fair), 1.0) / HOUR_S)
        top = job.rates.max_replicas
        k = max(1, min(fair, top))
        here = job.rates.rate(job.epoch, False, k)
        more = job.rates.rate(job.epoch, False, min(2 * k, top))
        rows[i] = (
            remaining,
            remaining * pressure,
            math.log1p(job.age / HOUR_S),
            job.progress_fraction,
            math.log1p(job.num_restarts),
            math.log(more / here) if here > 0 and more > 0 else 0.0,
            0.0 if job.trained else 1.0,
        )
    return rows


def srpt_theta(power: float = 0.25, features: Sequence[str] = FEATURES, arrival_tilt: float = 0.0) -> np.ndarray:
    """The theta over ``features`` of ``ats-srpt`` with SRPT power ``power`` (the warm start of
    training), and with ``arrival_tilt`` on ``arrival_rank`` (0.15: ``ats-srpt-fcfs``)."""
    features = tuple(features)
    theta = np.zeros(len(features))
    theta[features.index("log_remaining")] = -power
    if arrival_tilt:
        theta[features.index("arrival_rank")] = arrival_tilt
    return theta


def check_features(features: Sequence[str]) -> tuple[str, ...]:
    """``features`` as a tuple, checked: :data:`FEATURES` first, then distinct names of
    :data:`EXTRA_FEATURES` in their order.

    Raises:
        ValueError: naming what is wrong.
    """
    names = tuple(features)
    extras = names[len(FEATURES) :]
    if names[: len(FEATURES)] != FEATURES or list(extras) != [name for name in EXTRA_FEATURES if name in extras]:
        raise ValueError(
            f"features must be {', '.join(FEATURES)}, then distinct extras among {EXTRA_FEATURES[0]}, "
            f"app_<application>, in that order; got {shown(list(names))}"
        )
    return names


class PriorityPolicy(AtsPolicy):
    """ATS whose knapsack weights each job by ``exp(theta . phi_j)`` (module docstring).

    Args:
        theta: one coefficient per feature of ``features``.
        label: the policy's name in results.
        features: :data:`FEATURES`, then any of :data:`EXTRA_FEATURES` (:func:`check_features`).

    Raises:
        ValueError: if theta has the wrong length or a value that is not finite, or the
            features are not valid.
    """

    def __init__(
        self, theta: Sequence[float] | np.ndarray, label: str = "priority", features: Sequence[str] = FEATURES
    ) -> None:
        self.features = check_features(features)
        values = np.asarray(theta, dtype=float)
        if values.shape != (len(self.features),) or not np.isfinite(values).all():
            raise ValueError(
                f"theta must be {len(self.features)} finite numbers ({', '.join(self.features)}), got {shown(theta)}"
            )
        super().__init__(lend=True, label=label)
        self.theta = values

    def job_weights(self, jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray:
        """``exp(theta . phi_j)`` per job over the heaviest job's, at least e^-:data:`MAX_SPREAD`."""
        scores = job_features(jobs, fair, capacity, self.features) @ self.theta
        return np.exp(np.maximum(scores - scores.max(), -MAX_SPREAD))


@dataclass(frozen=True)
class PriorityModel:
    """A learned priority: theta over named features, and how it was made.

    Attributes:
        theta: one coefficient per feature, in the order of ``features``.
        features: the feature names: :data:`FEATURES`, then any of :data:`EXTRA_FEATURES`.
        info: provenance, plain JSON (command, budget, validation score, ...).
    """

    theta: tuple[float, ...]
    features: tuple[str, ...] = FEATURES
    info: Mapping[str, Any] = field(default_factory=dict)

    def policy(self, label: str = "priority") -> PriorityPolicy:
        """The policy this model defines."""
        return PriorityPolicy(self.theta, label=label, features=self.features)

    def save(self, path: Path) -> None:
        """Write the model as JSON to ``path`` (its folder is created; atomically:
        :func:`deepboot_env.atomic.write_json`)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format": FORMAT, "features": list(self.features), "theta": list(self.theta), "info": dict(self.info)}
        write_json(path, doc)

    @classmethod
    def load(cls, path: Path) -> PriorityModel:
        """Read and check a model file (JSON only: nothing in it runs).

        Raises:
            PriorityModelError: one line naming the file and what is wrong with it.
        """
        doc = read_json_file(path, "priority model", FORMAT, PriorityModelError)
        features = doc.get("features")
        if not (isinstance(features, list) and all(isinstance(name, str) for name in features)):
            raise PriorityModelError(f"{path}: field 'features' must be a list of feature names, got {shown(features)}")
        try:
            check_features(features)
        except ValueError as exc:
            raise PriorityModelError(f"{path}: field 'features': {exc}") from None
        theta = doc.get("theta")
        if not (
            isinstance(theta, list)
            and len(theta) == len(features)
            and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in theta)
        ):
            raise PriorityModelError(
                f"{path}: field 'theta' must be {len(features)} finite numbers, got {shown(theta)}"
            )
        info = doc.get("info", {})
        if not isinstance(info, dict):
            raise PriorityModelError(f"{path}: field 'info' must be an object, got {type(info).__name__}")
        return cls(tuple(float(x) for x in theta), tuple(features), info)


def load_priority_policy(path: str, **kwargs: object) -> PriorityPolicy:
    """The policy of the model file at ``path`` (the ``priority:<path>`` prefix).

    Raises:
        PriorityModelError: for a missing or bad file; ValueError for options this policy lacks.
    """
    if kwargs:
        raise ValueError(f"priority:<path> takes no options, got {sorted(kwargs)}")
    return PriorityModel.load(Path(path)).policy(label=f"priority:{path}")
