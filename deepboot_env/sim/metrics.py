"""Episode metrics: JCT statistics, inference latency, GPU-seconds per state, lower bound.

All times are seconds. ``infer_latency_*`` is the delay a request suffers before its service
starts (queueing plus cold start); ``infer_jct_mean`` is arrival to completion, comparable with the
DeepBoot paper's inference JCT. ``jct_lower_bound_mean`` is the mean over jobs of the time each job
would need alone from its arrival with its best allocation at every epoch (no waiting for a
boundary, no restart cost), a bound no policy can beat.

:func:`episode_metrics` assembles an :class:`EpisodeMetrics` from the simulator's jobs, request
records and counters (:meth:`Simulator.metrics <deepboot_env.sim.simulator.Simulator.metrics>`
delegates to it). :func:`censored_jct_mean` is the mean JCT of an episode cut before every job
finished, its unfinished jobs counted up to the cut (what ``train_policy.py``'s evaluations score).
"""

from __future__ import annotations

import json
import math
import time as wallclock
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from deepboot_env.sim.apps import AppProfile
from deepboot_env.sim.rates import ProgressRates
from deepboot_env.sim.state import packed_counts

if TYPE_CHECKING:
    from deepboot_env.sim.inference import RequestRecord
    from deepboot_env.sim.jobs import TrainingJob
    from deepboot_env.sim.workload import Workload

GPU_STATES: tuple[str, ...] = ("training", "lent", "inference-running", "protect", "sleep", "idle")
"""GPU states counted in ``gpu_seconds_by_state`` (``lent`` = training on inference GPUs)."""


@dataclass
class EpisodeMetrics:
    """Outcome of one episode (the JSON keys of docs/simulator.md §5 plus a few extras)."""

    train_jct_mean: float
    train_jct_p50: float
    train_jct_p95: float
    train_jct_p99: float
    makespan: float
    train_jobs_done: int
    train_jobs: int
    infer_latency_mean: float
    infer_latency_p99: float
    infer_jct_mean: float
    infer_cold_starts: int
    infer_warm_hits: int
    infer_requests: int
    infer_requests_done: int
    restarts: int
    lent_gpu_seconds: float
    reclaims: int
    gpu_seconds_by_state: dict[str, float]
    jct_lower_bound_mean: float
    sim_events: int
    sim_end: float
    wall_seconds: float
    truncated: bool = False
    jcts: dict[str, float] = field(default_factory=dict)
    timeline: list[tuple[float, ...]] = field(default_factory=list, repr=False)
    """Per interval (each scheduling boundary, and every interval while inference drains): (time,
    mean GPUs over the interval ending then in training, lent, inference-running, protect, sleep, idle,
    waiting requests, inference arrivals in the last interval); not part of the JSON."""

    def to_dict(self, include_jcts: bool = True) -> dict[str, object]:
        """Plain dict for JSON (per-job JCTs under ``jcts`` when asked; never the timeline)."""
        # What dataclasses.asdict gives (field order, copied dicts), without deep-copying the
        # timeline only to drop it: its thousands of tuples dominated the cost of an episode end.
        out: dict[str, object] = {}
        for f in fields(self):
            name = f.name
            if name == "timeline" or (name == "jcts" and not include_jcts):
                continue
            value = getattr(self, name)
            out[name] = dict(value) if isinstance(value, dict) else value
        return out

    def to_json(self, include_jcts: bool = True) -> str:
        """Strict JSON text (sorted keys, stable floats; a NaN or infinite value, such as the mean
        JCT of an episode where no job completed, is ``null``). To save it, use
        :func:`deepboot_env.atomic.write_text` (atomic, and never through a link)."""
        return json.dumps(_json_safe(self.to_dict(include_jcts)), indent=2, sort_keys=True, allow_nan=False)

    def deterministic_dict(self) -> dict[str, object]:
        """The metrics without wall-clock time (equal across runs with the same seed)."""
        out = self.to_dict()
        out.pop("wall_seconds")
        return out


def censored_jct_mean(workload: Workload, metrics: EpisodeMetrics) -> float:
    """Mean JCT where unfinished jobs count (end of simulation - arrival): a lower bound of the
    true mean that penalises runs cut by the time limit; equals ``train_jct_mean`` when all
    jobs finished."""
    if not workload.jobs:
        return float("nan")
    done = metrics.jcts
    end = float(metrics.sim_end)
    total = sum(done[j.name] if j.name in done else max(end - j.arrival, 0.0) for j in workload.jobs)
    return total / len(workload.jobs)


def _json_safe(value: object) -> object:
    """``value`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def percentile(values: np.ndarray, q: float) -> float:
    """The q-th percentile (linear interpolation), NaN for an empty array."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


_LOWER_BOUNDS: weakref.WeakKeyDictionary[ProgressRates, dict[tuple[AppProfile, int, int], float]] = (
    weakref.WeakKeyDictionary()
)
"""lower_bound_seconds by truth (a pure cache of deterministic values, like the tables)."""


def lower_bound_seconds(app: AppProfile, truth: ProgressRates, max_replicas: int, gpus_per_node: int) -> float:
    """Seconds ``app`` needs alone with its best GPU count (1 to ``max_replicas``, packed on
    nodes) at every epoch, at the rates it truly progresses at (``truth``: the fitted
    :class:`~deepboot_env.sim.rates.RateTable` or the measured rates)."""
    cache = _LOWER_BOUNDS.setdefault(truth, {})
    key = (app, int(max_replicas), gpus_per_node)
    if key not in cache:
        cache[key] = _lower_bound_seconds(app, truth, int(max_replicas), gpus_per_node)
    return cache[key]


def _lower_bound_seconds(app: AppProfile, truth: ProgressRates, max_replicas: int, gpus_per_node: int) -> float:
    columns = []
    for k in range(1, max_replicas + 1):
        counts = packed_counts(k, gpus_per_node)
        columns.append(truth.rate_column(truth.placement_class(counts, len(counts) > 1), k))
    best = np.max(np.array(columns, dtype=float), axis=0)
    total = 0.0
    prev = 0.0
    for epoch, target in enumerate(app.epoch_progress):
        total += (float(target) - prev) / float(best[epoch])
        prev = float(target)
    return total


def episode_metrics(
    jobs: Sequence[TrainingJob],
    requests: Sequence[RequestRecord],
    truth_of: Callable[[AppProfile], tuple[ProgressRates, int]],
    *,
    gpus_per_node: int,
    gpu_seconds: Sequence[float],
    restarts: int,
    reclaims: int,
    sim_events: int,
    sim_end: float,
    wall_start: float,
    truncated: bool,
    timeline: Sequence[tuple[float, ...]],
) -> EpisodeMetrics:
    """The metrics of an episode so far.

    Args:
        jobs: every training job of the episode.
        requests: every inference request's record.
        truth_of: an application's true adaptive-batch rates and the most GPUs it may use (for
            the JCT lower bound).
        gpus_per_node: GPUs per node.
        gpu_seconds: GPU-seconds spent in each of :data:`GPU_STATES`.
        restarts: placement changes counted as restarts.
        reclaims: lent training GPUs taken back by inference.
        sim_events: events processed.
        sim_end: the current simulated time.
        wall_start: :func:`time.perf_counter` at the start of the episode.
        truncated: whether the episode was cut at its time limit.
        timeline: the per-interval samples (copied).
    """
    # (spec, completion) of the completed jobs
    done_jobs = [(j.spec, completion) for j in jobs if (completion := j.completion) is not None]
    jcts = np.array([completion - spec.arrival for spec, completion in done_jobs], dtype=float)
    lb = _lower_bounds(jobs, truth_of, gpus_per_node)
    gs = {name: float(v) for name, v in zip(GPU_STATES, gpu_seconds, strict=True)}
    return EpisodeMetrics(
        train_jct_mean=float(jcts.mean()) if len(jcts) else float("nan"),
        train_jct_p50=percentile(jcts, 50),
        train_jct_p95=percentile(jcts, 95),
        train_jct_p99=percentile(jcts, 99),
        makespan=max((completion for _, completion in done_jobs), default=0.0),
        train_jobs_done=len(done_jobs),
        train_jobs=len(jobs),
        **_inference_metrics(requests, sim_end),
        restarts=restarts,
        lent_gpu_seconds=gs["lent"],
        reclaims=reclaims,
        gpu_seconds_by_state=gs,
        jct_lower_bound_mean=float(lb.mean()) if len(lb) else float("nan"),
        sim_events=sim_events,
        sim_end=sim_end,
        wall_seconds=wallclock.perf_counter() - wall_start,
        truncated=truncated,
        jcts={spec.name: float(completion - spec.arrival) for spec, completion in done_jobs},
        timeline=list(timeline),
    )


def _inference_metrics(requests: Sequence[RequestRecord], sim_end: float) -> dict[str, Any]:
    """The ``infer_*`` fields of :class:`EpisodeMetrics` from every request's record (a request's
    finish is set together with its start)."""
    served = [
        (r, start, finish) for r in requests if (start := r.start) is not None and (finish := r.finish) is not None
    ]
    latency = np.array([start - r.arrival for r, start, _ in served], dtype=float)
    infer_jct = np.array([finish - r.arrival for r, _, finish in served], dtype=float)
    return {
        "infer_latency_mean": float(latency.mean()) if len(latency) else 0.0,
        "infer_latency_p99": percentile(latency, 99) if len(latency) else 0.0,
        "infer_jct_mean": float(infer_jct.mean()) if len(infer_jct) else 0.0,
        "infer_cold_starts": sum(1 for r, _, _ in served if r.cold),
        "infer_warm_hits": sum(1 for r, _, _ in served if not r.cold),
        "infer_requests": len(requests),
        "infer_requests_done": sum(1 for r in requests if r.finish is not None and r.finish <= sim_end),
    }


def _lower_bounds(
    jobs: Sequence[TrainingJob], truth_of: Callable[[AppProfile], tuple[ProgressRates, int]], gpus_per_node: int
) -> np.ndarray:
    """Per job, the JCT lower bound of its application (:func:`lower_bound_seconds`, computed
    once per application)."""
    bounds = {}
    for job in jobs:
        if job.app.name not in bounds:
            bounds[job.app.name] = lower_bound_seconds(job.app, *truth_of(job.app), gpus_per_node)
    return np.array([bounds[j.app.name] for j in jobs]) if jobs else np.array([])
