"""Observation and action encoding of :class:`~deepboot_env.env.DeepBootEnv` (gymnasium-free).

Observation: job slots hold the first ``max_jobs`` active training jobs in arrival order; each slot
has :data:`JOB_FEATURES` features and every feature lies in [0, 1]. Cluster features describe free
and lendable GPUs, pod states, inference demand and the time of day.

Action: per slot an index into :data:`GPU_BUCKETS` (the job's GPU target) plus one lending level
``l`` in 0..L-1: training may use ``l / (L - 1)`` of the lendable (idle or SLEEP) inference GPUs.
:func:`decode_action` turns it into an :class:`~deepboot_env.sim.state.Allocation` with a
documented deterministic repair when the targets exceed the capacity.
"""

from __future__ import annotations

import math

import numpy as np

from deepboot_env.placement import place_counts
from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.sim.cluster import NODE_INFER
from deepboot_env.sim.state import Allocation, ClusterState, JobView

GPU_BUCKETS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32)
"""GPU targets a slot can ask for."""

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


def slot_jobs(state: ClusterState, max_jobs: int) -> list[JobView]:
    """Jobs in slots: the first ``max_jobs`` active jobs in arrival order."""
    return list(state.jobs[:max_jobs])


def encode_job(job: JobView, state: ClusterState, out: np.ndarray) -> None:
    """Write the features of ``job`` into ``out`` (length ``len(JOB_FEATURES)``)."""
    total = state.config.total_gpus
    out[0] = 1.0
    out[1 : 1 + len(APP_NAMES)] = 0.0
    out[1 + APP_NAMES.index(job.app)] = 1.0
    i = 1 + len(APP_NAMES)
    replicas = job.replicas
    out[i] = min(replicas / total, 1.0)
    out[i + 1] = min(job.max_replicas / total, 1.0)
    out[i + 2] = min(math.log1p(max(job.age, 0.0)) / _LOG_AGE, 1.0)
    out[i + 3] = min(math.log1p(job.attained_service) / _LOG_SERVICE, 1.0)
    out[i + 4] = min(job.num_restarts / 20.0, 1.0)
    out[i + 5] = job.progress_fraction
    out[i + 6 : i + 6 + len(SPEEDUP_POINTS)] = job.rates.speedup_curve(job.epoch, SPEEDUP_POINTS, state.gpus_per_node)
    j = i + 6 + len(SPEEDUP_POINTS)
    lent = int(job.alloc[state.node_kinds == NODE_INFER].sum())
    out[j] = lent / replicas if replicas else 0.0
    out[j + 1] = min(job.stalled_seconds / 120.0, 1.0)


def encode_cluster(state: ClusterState, max_jobs: int, out: np.ndarray) -> None:
    """Write the cluster features into ``out`` (length ``len(CLUSTER_FEATURES)``)."""
    infer = state.node_kinds == NODE_INFER
    g = state.gpus_per_node
    train_total = max(int((~infer).sum()) * g, 1)
    infer_total = max(int(infer.sum()) * g, 1)
    pods = state.running + state.protect + state.sleeping
    free = g - state.train_used - pods
    out[0] = free[~infer].sum() / train_total
    out[1] = free[infer].sum() / infer_total if infer.any() else 0.0
    all_gpus = state.config.total_gpus
    out[2] = state.sleeping.sum() / all_gpus
    out[3] = state.protect.sum() / all_gpus
    out[4] = state.running.sum() / all_gpus
    out[5] = state.train_used[infer].sum() / infer_total if infer.any() else 0.0
    out[6] = min(state.waiting_requests / all_gpus, 1.0)
    recent = state.recent_arrivals
    out[7] = min(recent[-1] / _ARRIVAL_SCALE, 1.0) if recent else 0.0
    out[8] = min(float(np.mean(recent)) / _ARRIVAL_SCALE, 1.0) if recent else 0.0
    phase = 2 * math.pi * (state.time % 86400.0) / 86400.0
    out[9] = 0.5 + 0.5 * math.sin(phase)
    out[10] = 0.5 + 0.5 * math.cos(phase)
    out[11] = min(len(state.jobs) / max_jobs, 1.0)
    out[12] = min(max(len(state.jobs) - max_jobs, 0) / max_jobs, 1.0)


def action_mask(state: ClusterState, max_jobs: int, lend_levels: int) -> np.ndarray:
    """Boolean mask over the flattened MultiDiscrete choices (slot by slot, then lending)."""
    nb = len(GPU_BUCKETS)
    mask = np.zeros(max_jobs * nb + lend_levels, dtype=bool)
    buckets = np.array(GPU_BUCKETS)
    for slot, job in enumerate(slot_jobs(state, max_jobs)):
        mask[slot * nb : (slot + 1) * nb] = buckets <= job.max_replicas
    for slot in range(len(state.jobs[:max_jobs]), max_jobs):
        mask[slot * nb] = True
    lendable = bool(np.any(state.node_kinds == NODE_INFER))
    mask[max_jobs * nb :] = True if lendable else np.arange(lend_levels) == 0
    return mask


def lending_capacity(state: ClusterState, fraction: float) -> np.ndarray:
    """Training capacity per node when ``fraction`` of the lendable inference GPUs may be used.

    Lendable = idle or SLEEP inference GPUs plus those training already holds there. The budget
    floor(fraction x lendable) is spread over inference nodes, the nodes training already uses
    first, then the ones with most lendable GPUs (fewer nodes to reclaim from).
    """
    cap = state.training_capacity(lend=True)
    infer = np.flatnonzero(state.node_kinds == NODE_INFER)
    if len(infer) == 0:
        return cap
    out = cap.copy()
    out[infer] = 0
    budget = int(math.floor(fraction * cap[infer].sum() + 1e-9))
    order = sorted(infer, key=lambda n: (-state.train_used[n], -cap[n], n))
    for node in order:
        take = min(budget, int(cap[node]))
        out[node] = take
        budget -= take
    return out


def decode_action(action: np.ndarray, state: ClusterState, max_jobs: int, lend_levels: int) -> tuple[Allocation, int]:
    """Turn an action into an allocation; returns it and the number of GPUs the repair removed.

    Repair (deterministic): each slot's target is capped at the job's ``max_replicas`` (masked
    choices repaired the same way); empty slots are ignored; while the targets exceed the
    capacity, one GPU is taken from the job with the largest target (ties: most attained service,
    then latest arrival). Jobs beyond the slots get no GPU. Placement: jobs whose count is unchanged
    keep their GPUs, the others best-fit on the training cluster first, then on lent GPUs.
    """
    action = np.asarray(action, dtype=np.int64).reshape(-1)
    if action.shape != (max_jobs + 1,):
        raise ValueError(f"action must have {max_jobs + 1} entries, got shape {action.shape}")
    nb = len(GPU_BUCKETS)
    if np.any(action[:max_jobs] < 0) or np.any(action[:max_jobs] >= nb) or not 0 <= action[-1] < lend_levels:
        raise ValueError(f"action {action.tolist()} outside the action space")
    jobs = slot_jobs(state, max_jobs)
    fraction = action[-1] / (lend_levels - 1) if lend_levels > 1 else 0.0
    cap = lending_capacity(state, float(fraction))
    capacity = int(cap.sum())
    repaired = 0
    targets: dict[int, int] = {}
    for slot, job in enumerate(jobs):
        want = GPU_BUCKETS[int(action[slot])]
        if want > job.max_replicas:
            repaired += want - job.max_replicas
            want = job.max_replicas
        targets[job.id] = want
    excess = sum(targets.values()) - capacity
    if excess > 0:
        repaired += excess
        trim_to_capacity(targets, {job.id: job for job in jobs}, excess)
    return Allocation(place_counts(state, targets, cap)), repaired


def trim_to_capacity(targets: dict[int, int], jobs: dict[int, JobView], excess: int) -> None:
    """Remove ``excess`` GPUs, one at a time from the largest target (ties: most attained service,
    then latest arrival), computed level by level instead of GPU by GPU."""
    order = sorted(targets, key=lambda j: (-targets[j], -jobs[j].attained_service, -jobs[j].arrival))
    while excess > 0:
        top = targets[order[0]]
        group = [j for j in order if targets[j] == top]
        below = max((targets[j] for j in order if targets[j] < top), default=0)
        per_job = top - below
        if per_job * len(group) <= excess:
            for j in group:
                targets[j] = below
            excess -= per_job * len(group)
        else:
            full, extra = divmod(excess, len(group))
            for i, j in enumerate(group):
                targets[j] = top - full - (1 if i < extra else 0)
            excess = 0
        order.sort(key=lambda j: (-targets[j], -jobs[j].attained_service, -jobs[j].arrival))
