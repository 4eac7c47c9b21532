"""Observation encoding of :class:`~deepboot_env.env.DeepBootEnv` (gymnasium-free).

Job slots hold the first ``max_jobs`` active training jobs in arrival order; each slot has
:data:`JOB_FEATURES` features and every feature lies in [0, 1]. Cluster features
(:data:`CLUSTER_FEATURES`) describe free and lendable GPUs, pod states, inference demand and the
time of day. The action and its mask are the codec's (:mod:`deepboot_env.env.action`).

:func:`encode_observation` is the one way to turn a :class:`~deepboot_env.sim.state.ClusterState`
into what an agent sees; ``DeepBootEnv`` and the ``ppo:<path>`` policy adapter both call it. It
builds every slot in one pass over plain Python floats and casts them to float32 once.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Mapping, Sequence

import numpy as np

from deepboot_env.forecast import PeriodicForecaster, inference_demand
from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.sim.cluster import node_layout
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.state import ClusterState, JobView
from deepboot_env.sim.workload import Workload

SPEEDUP_POINTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""GPU counts at which a job's speedup curve is observed."""

JOB_FEATURES: tuple[str, ...] = (
    "present",
    *(f"app_{a}" for a in APP_NAMES),
    "gpus",
    "max_gpus",
    "age",
    "attained_service",
    "restarts",
    "epoch_fraction",
    *(f"speedup_{k}" for k in SPEEDUP_POINTS),
    "lent_share",
    "stalled",
)
"""Names of the per-slot features, in column order."""

CLUSTER_FEATURES: tuple[str, ...] = (
    "free_training",
    "idle_inference",
    "sleep",
    "protect",
    "running",
    "lent",
    "waiting_requests",
    "arrivals_last_interval",
    "arrivals_recent_mean",
    "time_of_day_sin",
    "time_of_day_cos",
    "active_jobs",
    "jobs_beyond_slots",
)
"""Names of the cluster features."""

_LOG_AGE = math.log1p(2 * 86400.0)
_LOG_SERVICE = math.log1p(1e7)
_ARRIVAL_SCALE = 60.0
"""Inference arrivals per interval that map to 1.0."""

_APP_PREFIX = {name: (1.0, *(1.0 if other == name else 0.0 for other in APP_NAMES)) for name in APP_NAMES}
"""The first features of a job row by application: present, then the application one-hot."""


def _inference_nodes(state: ClusterState) -> tuple[int, ...]:
    """Indices of the inference-cluster nodes (cached per node layout)."""
    return node_layout(state.node_kinds).inference


def slot_jobs(state: ClusterState, max_jobs: int) -> list[JobView]:
    """Jobs in slots: the first ``max_jobs`` active jobs in arrival order."""
    return list(state.jobs[:max_jobs])


def _job_rows(jobs: Sequence[JobView], state: ClusterState) -> list[float]:
    """The features of ``jobs``, row after row, as one flat list (Python floats, cast to float32
    by the caller): present, application one-hot, GPUs and GPU limit over the cluster's GPUs, log
    age, log attained service, restarts / 20, epoch fraction, speedup curve at
    :data:`SPEEDUP_POINTS` GPUs over its peak, share of the job's GPUs that are lent, restart stall
    left / 120 s, each capped at 1."""
    total = state.config.total_gpus
    g = state.gpus_per_node
    infer = _inference_nodes(state)
    contiguous = infer == tuple(range(infer[0], infer[-1] + 1)) if infer else True
    lo, hi = (infer[0], infer[-1] + 1) if infer else (0, 0)
    log1p = math.log1p
    flat: list[float] = []
    # min(x, 1.0) is written `1.0 if x > 1.0 else x` and max(x, 0.0) `0.0 if 0.0 > x else x`:
    # the same comparisons and results (NaN included), without the calls; each row is appended
    # in pieces (`+=` of tuples, no star-unpacking)
    for job in jobs:
        replicas = job.replicas
        if replicas:
            counts = job.alloc.tolist()
            lent = sum(counts[lo:hi]) if contiguous else sum([counts[node] for node in infer])
            lent_share = lent / replicas
        else:
            lent_share = 0.0
        gpus = replicas / total
        max_gpus = job.max_replicas / total
        age = job.age
        age = log1p(0.0 if 0.0 > age else age) / _LOG_AGE
        service = log1p(job.attained_service) / _LOG_SERVICE
        restarts = job.num_restarts / 20.0
        stalled = job.stalled_seconds / 120.0
        flat += _APP_PREFIX[job.app]
        flat += (
            1.0 if gpus > 1.0 else gpus,
            1.0 if max_gpus > 1.0 else max_gpus,
            1.0 if age > 1.0 else age,
            1.0 if service > 1.0 else service,
            1.0 if restarts > 1.0 else restarts,
            job.progress_fraction,
        )
        flat += job.rates.speedup_values(job.epoch, SPEEDUP_POINTS, g)
        flat += (lent_share, 1.0 if stalled > 1.0 else stalled)
    return flat


def encode_cluster(state: ClusterState, max_jobs: int, out: np.ndarray) -> None:
    """Write the cluster features into ``out`` (length ``len(CLUSTER_FEATURES)``)."""
    g = state.gpus_per_node
    infer = _inference_nodes(state)
    n_nodes, n_infer = len(state.node_kinds), len(infer)
    train_total = max((n_nodes - n_infer) * g, 1)
    infer_total = max(n_infer * g, 1)
    train_used, running, protect, sleeping = state.node_counts
    # held GPUs (training + pods) on each side; free = nodes x g - held (exact integer sums)
    lent = sum([train_used[node] for node in infer])
    held_infer = lent + sum([running[node] + protect[node] + sleeping[node] for node in infer])
    held_train = sum(train_used) + sum(running) + sum(protect) + sum(sleeping) - held_infer
    out[0] = ((n_nodes - n_infer) * g - held_train) / train_total
    out[1] = (n_infer * g - held_infer) / infer_total if n_infer else 0.0
    all_gpus = state.config.total_gpus
    out[2] = sum(sleeping) / all_gpus
    out[3] = sum(protect) / all_gpus
    out[4] = sum(running) / all_gpus
    out[5] = lent / infer_total if n_infer else 0.0
    out[6] = min(state.waiting_requests / all_gpus, 1.0)
    recent = state.recent_arrivals
    out[7] = min(recent[-1] / _ARRIVAL_SCALE, 1.0) if recent else 0.0
    # the mean of small integer counts: the float sum is exact, as in np.mean
    out[8] = min(float(sum(recent)) / len(recent) / _ARRIVAL_SCALE, 1.0) if recent else 0.0
    phase = 2 * math.pi * (state.time % 86400.0) / 86400.0
    out[9] = 0.5 + 0.5 * math.sin(phase)
    out[10] = 0.5 + 0.5 * math.cos(phase)
    out[11] = min(len(state.jobs) / max_jobs, 1.0)
    out[12] = min(max(len(state.jobs) - max_jobs, 0) / max_jobs, 1.0)


def encode_observation(state: ClusterState, max_jobs: int) -> dict[str, np.ndarray]:
    """The ``DeepBoot-v0`` observation of ``state``: ``{"jobs": (max_jobs * len(JOB_FEATURES),),
    "cluster": (len(CLUSTER_FEATURES),)}``, float32, every value in [0, 1].

    The env's observation and the ``ppo:<path>`` policy adapter's input are this function's output;
    empty slots are all zero.
    """
    slots = slot_jobs(state, max_jobs)
    jobs = np.zeros(max_jobs * len(JOB_FEATURES), dtype=np.float32)
    if slots:  # Python floats cast to float32 once (C casts, as encode_job's element stores)
        jobs[: len(slots) * len(JOB_FEATURES)] = np.frombuffer(
            _float32_packer(len(slots)).pack(*_job_rows(slots, state)), dtype=np.float32
        )
    cluster = np.zeros(len(CLUSTER_FEATURES), dtype=np.float32)
    encode_cluster(state, max_jobs, cluster)
    return {"jobs": jobs, "cluster": cluster}


@functools.cache
def _float32_packer(slots: int) -> struct.Struct:
    """Packs the features of ``slots`` job rows as float32 (faster than ``np.array`` of a list)."""
    return struct.Struct(f"={slots * len(JOB_FEATURES)}f")


def observation_limits(workload: Workload, config: SimConfig) -> list[str]:
    """The features whose scale ``workload`` exceeds on ``config``'s cluster (empty if none):
    ``arrivals_last_interval`` (and ``arrivals_recent_mean``, its mean) when more inference
    requests arrive in one interval than :data:`_ARRIVAL_SCALE`: the feature then reads 1.0 in
    every busier interval. (More active jobs than slots is not a limit of a scenario but of a
    moment; ``jobs_beyond_slots`` reports it in the observation.)
    """
    if not workload.requests:
        return []
    arrivals = np.fromiter((r.arrival for r in workload.requests), dtype=float, count=len(workload.requests))
    if np.bincount((arrivals // config.interval).astype(np.int64)).max() > _ARRIVAL_SCALE:
        return ["arrivals_last_interval", "arrivals_recent_mean"]
    return []


OUTLOOK_HORIZONS_H: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Hours ahead at which the ``outlook`` entry forecasts inference demand."""

OUTLOOK_FEATURES: tuple[str, ...] = (
    "demand_now",
    *(f"forecast_{h:g}h" for h in OUTLOOK_HORIZONS_H),
    "forecast_peak_8h",
    "forecast_coverage",
    "queued_jobs",
    "job_gpu_limits",
)
"""Names of the ``outlook`` features (``outlook=True``), in order."""

_DEMAND_SCALE = 2.0
"""Inference demand (GPUs asked for over the inference cluster's GPUs) that maps to 1.0: demand
beyond the cluster (queued requests) stays visible up to twice its size."""


class OutlookEncoder:
    """The ``outlook`` observation entry (``outlook=True``): what a scheduler needs to anticipate,
    from what it has seen (non-clairvoyant), every value in [0, 1]:

    * ``demand_now``: inference demand (:func:`~deepboot_env.forecast.inference_demand`: running
      pods + waiting requests over the inference GPUs) / 2;
    * ``forecast_<h>h``: demand forecast 0.5, 1, 2, 4 and 8 h ahead / 2, and
      ``forecast_peak_8h``: its maximum over the next 8 h (half-hour grid), by the periodic profile
      learnt online in this episode (:class:`~deepboot_env.forecast.PeriodicForecaster`);
    * ``forecast_coverage``: the history's length over the fitted period (how far to trust it);
    * ``queued_jobs``: active jobs holding no GPU / slots;
    * ``job_gpu_limits``: the active jobs' GPU limits summed, over all GPUs (how much the jobs
      could use).

    It is stateful: call :meth:`reset` at each episode's start and :meth:`encode` once per
    decision, in order (the env and the ``ppo:<path>`` adapter both do).
    """

    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max_jobs
        self.forecaster = PeriodicForecaster()
        self._peak_offsets = np.arange(0.5, 8.01, 0.5) * 3600.0
        self._horizons = np.asarray(OUTLOOK_HORIZONS_H) * 3600.0

    def reset(self) -> None:
        """Start an episode (forget the demand history)."""
        self.forecaster.reset()

    def encode(self, state: ClusterState) -> np.ndarray:
        """Observe ``state``'s inference demand and return the outlook features (float32)."""
        demand = inference_demand(state)
        self.forecaster.observe(state.time, demand)
        ahead = self.forecaster.predict(state.time + np.concatenate([self._horizons, self._peak_offsets]))
        n = len(self._horizons)
        out = np.empty(len(OUTLOOK_FEATURES), dtype=np.float32)
        out[0] = demand / _DEMAND_SCALE
        out[1 : n + 1] = ahead[:n] / _DEMAND_SCALE
        out[n + 1] = ahead[n:].max() / _DEMAND_SCALE
        out[n + 2] = self.forecaster.coverage()
        jobs = state.jobs
        out[n + 3] = sum(1 for job in jobs if not job.replicas) / self.max_jobs
        out[n + 4] = sum(job.max_replicas for job in jobs) / state.config.total_gpus
        return np.minimum(out, 1.0)


def agent_observation(
    state: ClusterState, max_jobs: int, outlook: OutlookEncoder | None, extra: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The agent's observation of ``state``, in the order of the env's spaces: the job slots and
    cluster features (:func:`encode_observation`), the ``outlook`` entry when an encoder is given
    (it observes ``state``: once per decision), then the action codec's extra entries ``extra``.
    The env and the ``ppo:<path>`` adapter both build it here."""
    obs = encode_observation(state, max_jobs)
    if outlook is not None:
        obs["outlook"] = outlook.encode(state)
    obs.update(extra)
    return obs
