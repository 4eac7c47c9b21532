"""A learned scheduler: ATS's knapsack with a learned per-job priority (``priority:<path>``).

ATS (docs/policies.md §8) chooses every job's GPUs with an exact group knapsack over speedup
values; ``ats-srpt`` (§8.6) weights each job's values by ``T ** -0.25``, T its remaining time at
its fair share. :class:`PriorityPolicy` learns that weight instead: a job's knapsack weight is

    w_j = exp(theta . phi_j)

where ``phi_j`` (:data:`FEATURES`, :func:`job_features`) describes the job and the cluster as a
real scheduler sees them (no ``remaining_work`` or other oracle), and ``theta`` is learned
(:mod:`agents.evolution`, evolution strategies on the train seeds of workload families). The
scorer is one linear map shared by every job, so the policy is permutation-equivariant in the jobs
like the set policy of :mod:`agents.set_policy`, and a job's weight never depends on its slot.
The knapsack keeps what makes ATS robust (its restart factor, caps and best-fit placement), the
learned part decides who is worth GPUs. ``theta = (-0.25, 0, ...)`` is ``ats-srpt`` (up to a
common factor, which does not change the knapsack's choice), the warm start of training.

A model is a small JSON file (:class:`PriorityModel`): the feature names, theta, and how it was
made. Loading reads JSON only (nothing in the file can run code) and checks every field; a bad
file fails with one line naming it and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from baselines.ats import AtsPolicy, epochs_left_work
from deepboot_env.atomic import write_text
from deepboot_env.limits import MAX_JSON_BYTES, parse_json, read_bounded, shown
from deepboot_env.policy import JobView
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


def job_features(jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray:
    """The ``(len(jobs), len(FEATURES))`` feature matrix of ``jobs`` (see :data:`FEATURES`) at
    fair share ``fair`` GPUs with ``capacity`` GPUs for training."""
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


def srpt_theta(power: float = 0.25) -> np.ndarray:
    """The theta of ``ats-srpt`` with SRPT power ``power`` (the warm start of training)."""
    theta = np.zeros(len(FEATURES))
    theta[FEATURES.index("log_remaining")] = -power
    return theta


class PriorityPolicy(AtsPolicy):
    """ATS whose knapsack weights each job by ``exp(theta . phi_j)`` (module docstring).

    Args:
        theta: one coefficient per feature of :data:`FEATURES`.
        label: the policy's name in results.

    Raises:
        ValueError: if theta has the wrong length or a value that is not finite.
    """

    def __init__(self, theta: Sequence[float] | np.ndarray, label: str = "priority") -> None:
        values = np.asarray(theta, dtype=float)
        if values.shape != (len(FEATURES),) or not np.isfinite(values).all():
            raise ValueError(
                f"theta must be {len(FEATURES)} finite numbers ({', '.join(FEATURES)}), got {shown(theta)}"
            )
        super().__init__(lend=True, label=label)
        self.theta = values

    def job_weights(self, jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray:
        """``exp(theta . phi_j)`` per job over the heaviest job's, at least e^-:data:`MAX_SPREAD`."""
        scores = job_features(jobs, fair, capacity) @ self.theta
        return np.exp(np.maximum(scores - scores.max(), -MAX_SPREAD))


@dataclass(frozen=True)
class PriorityModel:
    """A learned priority: theta over named features, and how it was made.

    Attributes:
        theta: one coefficient per feature, in the order of ``features``.
        features: the feature names (must be :data:`FEATURES`).
        info: provenance, plain JSON (command, budget, validation score, ...).
    """

    theta: tuple[float, ...]
    features: tuple[str, ...] = FEATURES
    info: Mapping[str, Any] = field(default_factory=dict)

    def policy(self, label: str = "priority") -> PriorityPolicy:
        """The policy this model defines."""
        return PriorityPolicy(self.theta, label=label)

    def save(self, path: Path) -> None:
        """Write the model as JSON to ``path`` (its folder is created; atomically:
        :func:`deepboot_env.atomic.write_text`)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format": FORMAT, "features": list(self.features), "theta": list(self.theta), "info": dict(self.info)}
        write_text(path, json.dumps(doc, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> PriorityModel:
        """Read and check a model file (JSON only: nothing in it runs).

        Raises:
            PriorityModelError: one line naming the file and what is wrong with it.
        """
        try:
            data = read_bounded(path, MAX_JSON_BYTES, "a priority model", PriorityModelError)
        except FileNotFoundError:
            raise PriorityModelError(f"{path}: no such priority model file") from None
        except OSError as exc:
            raise PriorityModelError(f"{path}: cannot read the priority model ({exc.strerror or exc})") from None
        doc = parse_json(data, str(path), PriorityModelError, what="a JSON priority model")
        if not isinstance(doc, dict):
            raise PriorityModelError(f"{path}: expected a JSON object, got {type(doc).__name__}")
        if doc.get("format") != FORMAT:
            raise PriorityModelError(f"{path}: field 'format' must be {FORMAT!r}, got {shown(doc.get('format'))}")
        features = doc.get("features")
        if features != list(FEATURES):
            raise PriorityModelError(f"{path}: field 'features' must be {list(FEATURES)}, got {shown(features)}")
        theta = doc.get("theta")
        if not (
            isinstance(theta, list)
            and len(theta) == len(FEATURES)
            and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in theta)
        ):
            raise PriorityModelError(
                f"{path}: field 'theta' must be {len(FEATURES)} finite numbers, got {shown(theta)}"
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
