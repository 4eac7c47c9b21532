"""A Philly-scale replay: every filtered Philly job at its own arrival time (docs/workloads.md §9).

Where :func:`traces.generate.generate_training` samples 160 jobs of an 8-hour window from the
Philly statistics, the replay keeps the raw trace's jobs themselves:

* **jobs**: every job that passes Pollux's filters (:func:`traces.philly.filter_mask`: duration
  >= 60 s, GPU time < 1,000 GPU-h; 74,428 of the 82,247 rows), in order of submission, arriving
  at its timestamp minus the first one's (integer seconds); ``num_jobs`` keeps the first N;
* **applications**: from each job's GPU-time bucket exactly as the generator maps them
  (:func:`traces.generate.job_specs`: the application, then ``(num_replicas, batch_size)`` from
  its TunedJobs list, drawn from ``seed``);
* **cluster** (:func:`replay_cluster`): two clusters of equal size, as the default ``8x4+8x4``;
  the training cluster holds the jobs' peak concurrent GPU demand in the trace (each job holding
  its Philly GPU count from submission for its Philly duration), rounded up to whole 4-GPU
  nodes: 1,061 GPUs for the whole trace, hence ``266x4+266x4`` (2,128 GPUs);
* **inference** (:func:`replay_inference`): the periodic generator over the trace's span at the
  default workloads' relative load (a mean offered load of 31.25 % of the inference GPUs, peak
  x 1.85, trough x 0.15, 24-h period), its trough at 04:00 of the trace's wall clock as in the
  default workloads, one instance per model. The service times are the default ranges times
  ``service_scale`` (default: inference GPUs / 32), so a request stands for as much of the
  cluster as in the default workloads and their number per day stays near the defaults'
  4,700 (about 500,000 requests over the trace instead of 16 million one-GPU requests of
  minutes, which would not fit the replay's memory budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.workload import InferenceRequestSpec, Workload
from traces.generate import DAY_S, DEFAULT_INFERENCE_AMPLITUDE, generate_periodic_inference, job_specs, make_rng
from traces.loaders import PhillyTrace
from traces.philly import filter_mask, gpu_time_bucket

GPUS_PER_NODE = 4
"""GPUs per node of the replay's cluster (as the default 8x4+8x4)."""
INFERENCE_LOAD = 10.0 / 32.0
"""Mean offered inference load over the inference GPUs: the default workloads' 10 GPUs of 32."""
DEFAULT_INFERENCE_GPUS = 32
"""Inference GPUs of the default cluster; the default service scale is inference GPUs over this."""
TROUGH_TIME_OF_DAY_S = 4 * 3600.0
"""Wall-clock time of day of the inference trough (the default workloads: 2 h after their 02:00 start)."""


@dataclass(frozen=True)
class PhillyReplay:
    """A replay workload and the cluster it is sized for.

    Attributes:
        workload: the training jobs (and inference requests).
        cluster: the cluster (:func:`replay_cluster`).
        span_s: seconds from the first to the last job's arrival.
        peak_gpus: the jobs' peak concurrent GPU demand in the trace.
    """

    workload: Workload
    cluster: ClusterConfig
    span_s: float
    peak_gpus: int

    @property
    def max_days(self) -> int:
        """A simulation horizon (``deepboot simulate --max-days``): the span plus 30 days."""
        return math.ceil(self.span_s / DAY_S) + 30


def filtered_jobs(trace: PhillyTrace, num_jobs: int | None = None) -> np.ndarray:
    """Indices of the trace rows that pass Pollux's filters, in order of submission (stable);
    the first ``num_jobs`` of them where given.

    Raises:
        ValueError: if ``num_jobs`` is below 1 or above the jobs that pass the filters.
    """
    rows = np.flatnonzero(filter_mask(trace))
    rows = rows[np.argsort(trace.timestamp[rows], kind="stable")]
    if num_jobs is not None:
        if not 1 <= num_jobs <= rows.size:
            raise ValueError(f"--jobs must be between 1 and {rows.size} (the jobs after the filters), got {num_jobs}")
        rows = rows[:num_jobs]
    return rows


def peak_concurrent_gpus(start: np.ndarray, duration: np.ndarray, gpus: np.ndarray) -> int:
    """The most GPUs held at once by jobs holding ``gpus`` over ``[start, start + duration)``."""
    times = np.concatenate([start, start + duration])
    delta = np.concatenate([gpus, -gpus])
    order = np.lexsort((delta, times))  # at equal times, releases first
    return int(np.cumsum(delta[order]).max(initial=0))


def replay_cluster(peak_gpus: int) -> ClusterConfig:
    """Training and inference clusters of equal size, the training one holding ``peak_gpus``
    in whole nodes of :data:`GPUS_PER_NODE` GPUs (at least 12 nodes: imagenet's largest
    TunedJobs option, 48 GPUs, fits)."""
    nodes = max(math.ceil(peak_gpus / GPUS_PER_NODE), 48 // GPUS_PER_NODE)
    return ClusterConfig(train_nodes=nodes, infer_nodes=nodes, gpus_per_node=GPUS_PER_NODE)


def replay_inference(
    span_s: float,
    first_time_of_day_s: float,
    inference_gpus: int,
    rng: np.random.Generator,
    service_scale: float | None = None,
) -> list[InferenceRequestSpec]:
    """Periodic inference over ``[0, span_s)`` at the default relative load (module docstring).

    Args:
        span_s: the horizon (the trace's span).
        first_time_of_day_s: wall-clock time of day of t = 0 (the first job's submission).
        inference_gpus: GPUs of the inference cluster.
        rng: the generator to draw from.
        service_scale: service times over the default ranges (None: ``inference_gpus / 32``).
    """
    from traces.families import service_times

    scale = inference_gpus / DEFAULT_INFERENCE_GPUS if service_scale is None else float(service_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"--service-scale must be a number > 0, got {service_scale}")
    # rate 1 + A sin(2 pi (t - phase) / day) is lowest at phase + 3/4 day
    phase_s = (TROUGH_TIME_OF_DAY_S - first_time_of_day_s - 0.75 * DAY_S) % DAY_S
    return generate_periodic_inference(
        horizon_s=max(span_s, 1.0),
        mean_gpus=INFERENCE_LOAD * inference_gpus,
        amplitude=DEFAULT_INFERENCE_AMPLITUDE,
        period_s=DAY_S,
        phase_s=phase_s,
        seed=rng,
        duration_model=service_times(scale),
    )


def philly_replay(
    trace: PhillyTrace,
    num_jobs: int | None = None,
    seed: int = 0,
    inference: bool = True,
    service_scale: float | None = None,
    name: str | None = None,
) -> PhillyReplay:
    """The replay of the module docstring from a loaded trace.

    Args:
        trace: the raw Philly trace (:func:`traces.loaders.load_philly`).
        num_jobs: only the first N filtered jobs (None: all of them).
        seed: seed of the application draws (then of the inference requests).
        inference: add periodic inference requests.
        service_scale: inference service times over the default ranges (None: inference GPUs / 32).
        name: workload name (default ``philly-replay-<jobs>``).
    """
    rows = filtered_jobs(trace, num_jobs)
    stamps = trace.timestamp[rows]
    arrivals = (stamps - stamps[0]).astype(float)
    rng = make_rng(seed)
    jobs = job_specs(arrivals, gpu_time_bucket(trace.gpu_time[rows]), rng)
    peak = peak_concurrent_gpus(stamps, trace.duration[rows], trace.num_gpus[rows])
    cluster = replay_cluster(peak)
    span = float(arrivals[-1])
    requests: list[InferenceRequestSpec] = []
    if inference:
        tod = float(stamps[0] % int(DAY_S))
        requests = replay_inference(span, tod, cluster.infer_nodes * cluster.gpus_per_node, rng, service_scale)
    source = f"philly replay of {Path(trace.source).name}: first {len(rows)} filtered jobs, seed {seed}"
    workload = Workload(
        name=name or f"philly-replay-{len(rows)}", jobs=tuple(jobs), requests=tuple(requests), source=source
    )
    return PhillyReplay(workload=workload, cluster=cluster, span_s=span, peak_gpus=peak)
