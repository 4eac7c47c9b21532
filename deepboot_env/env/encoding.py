"""Observation and action encoding of :class:`~deepboot_env.env.DeepBootEnv` (gymnasium-free).

Observation: job slots hold the first ``max_jobs`` active training jobs in arrival order; each slot
has :data:`JOB_FEATURES` features and every feature lies in [0, 1]. Cluster features describe free
and lendable GPUs, pod states, inference demand and the time of day.

Action: per slot an index into :data:`GPU_BUCKETS` (the job's GPU target) plus one lending level
``l`` in 0..L-1: training may use ``l / (L - 1)`` of the lendable (idle or SLEEP) inference GPUs.
:func:`decode_action` turns it into an :class:`~deepboot_env.sim.state.Allocation` with a
documented deterministic repair when the targets exceed the capacity.

:func:`encode_observation` and :func:`action_mask` are the one way to turn a
:class:`~deepboot_env.sim.state.ClusterState` into what an agent sees; ``DeepBootEnv`` and the
``ppo:<path>`` policy adapter both call them. :func:`encode_observation` builds every slot in one
pass over plain Python floats and casts them to float32 once; :func:`encode_job` is the same
encoding for a single job (the reference the tests compare it with).
"""

from __future__ import annotations

import functools
import math
import operator
import struct
from collections.abc import Sequence

import numpy as np

from deepboot_env.placement import node_layout, place_count_lists
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

_APP_PREFIX = {name: (1.0, *(1.0 if other == name else 0.0 for other in APP_NAMES)) for name in APP_NAMES}
"""The first features of a job row by application: present, then the application one-hot."""
_BUCKETS = np.array(GPU_BUCKETS)


def _inference_nodes(state: ClusterState) -> tuple[int, ...]:
    """Indices of the inference-cluster nodes (cached per node layout)."""
    return node_layout(state.node_kinds).inference


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


def _job_rows(jobs: Sequence[JobView], state: ClusterState) -> list[float]:
    """The features of ``jobs``, row after row, as one flat list: each row equals
    :func:`encode_job` (same Python float operations) before the cast to float32."""
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


_MASK_ROWS: dict[int, bytes] = {}
"""Mask row (one byte per GPU bucket) of a slot whose job may get at most the key GPUs."""
_EMPTY_SLOT = bytes(i == 0 for i in range(len(GPU_BUCKETS)))
"""Mask row of an empty slot: only target 0."""


def action_mask(state: ClusterState, max_jobs: int, lend_levels: int) -> np.ndarray:
    """Boolean mask over the flattened MultiDiscrete choices (slot by slot, then lending)."""
    # one bytes row per slot (cached per job limit), joined and read as bools once
    rows = _MASK_ROWS
    parts = []
    for job in state.jobs[:max_jobs]:
        limit = job.max_replicas
        row = rows.get(limit)
        if row is None:
            row = rows[limit] = bytes(bucket <= limit for bucket in GPU_BUCKETS)
        parts.append(row)
    parts.append(_EMPTY_SLOT * (max_jobs - len(parts)))
    if _inference_nodes(state):
        parts.append(b"\x01" * lend_levels)
    else:
        parts.append(b"\x01" + b"\x00" * (lend_levels - 1))
    return np.frombuffer(b"".join(parts), dtype=bool).copy()


def _lending_capacity(state: ClusterState, fraction: float) -> list[int]:
    """:func:`lending_capacity` as a list of ints."""
    g = state.config.gpus_per_node
    used, running, protect, _ = state.node_counts
    cap = [g - pinned for pinned in map(operator.add, running, protect)]
    infer = _inference_nodes(state)
    if not infer:
        return cap
    lendable = sum([cap[node] for node in infer])
    budget = int(math.floor(fraction * lendable + 1e-9))
    if budget >= lendable:  # every inference node lends all it can: the order does not matter
        return cap
    out = cap.copy()
    for node in infer:
        out[node] = 0
    if budget == 0:
        return out
    for _, _, node in sorted([(-used[n], -cap[n], n) for n in infer]):
        take = min(budget, cap[node])
        out[node] = take
        budget -= take
        if budget == 0:  # the nodes left lend nothing (out is 0 there already)
            break
    return out


def lending_capacity(state: ClusterState, fraction: float) -> np.ndarray:
    """Training capacity per node when ``fraction`` of the lendable inference GPUs may be used.

    Lendable = idle or SLEEP inference GPUs plus those training already holds there. The budget
    floor(fraction x lendable) is spread over inference nodes, the nodes training already uses
    first, then the ones with most lendable GPUs (fewer nodes to reclaim from).
    """
    return np.array(_lending_capacity(state, fraction), dtype=np.int64)


def decode_action(action: np.ndarray, state: ClusterState, max_jobs: int, lend_levels: int) -> tuple[Allocation, int]:
    """Turn an action into an allocation; returns it and the number of GPUs the repair removed.
    (:func:`decode_action_counts` documents the rule.)"""
    placed, repaired = decode_action_counts(action, state, max_jobs, lend_levels)
    return Allocation({job_id: np.array(row, dtype=np.int64) for job_id, row in placed.items()}), repaired


def split_action(action: np.ndarray, max_jobs: int, slot_choices: int, lend_levels: int) -> tuple[list[int], int]:
    """The per-slot choices (a list of ints) and the lending level of a MultiDiscrete action with
    ``max_jobs`` slots of ``slot_choices`` choices and ``lend_levels`` levels.

    Raises:
        ValueError: if the action has the wrong shape or a choice outside the action space.
    """
    action = np.asarray(action, dtype=np.int64).reshape(-1)
    if action.shape != (max_jobs + 1,):
        raise ValueError(f"action must have {max_jobs + 1} entries, got shape {action.shape}")
    choices = action.tolist()
    lend = choices.pop()
    if not (0 <= lend < lend_levels and 0 <= min(choices) and max(choices) < slot_choices):
        raise ValueError(f"action {action.tolist()} outside the action space")
    return choices, lend


def decode_action_counts(
    action: np.ndarray, state: ClusterState, max_jobs: int, lend_levels: int
) -> tuple[dict[int, list[int]], int]:
    """:func:`decode_action` with the GPUs per node of each job as a list of ints (what
    :meth:`~deepboot_env.sim.simulator.Simulator.apply_valid_counts` takes).

    Repair (deterministic): each slot's target is capped at the job's ``max_replicas`` (masked
    choices repaired the same way); empty slots are ignored; while the targets exceed the
    capacity, one GPU is taken from the job with the largest target (ties: most attained service,
    then latest arrival). Jobs beyond the slots get no GPU. Placement: jobs whose count is unchanged
    keep their GPUs, the others best-fit on the training cluster first, then on lent GPUs.
    """
    choices, lend = split_action(action, max_jobs, len(GPU_BUCKETS), lend_levels)
    jobs = slot_jobs(state, max_jobs)
    fraction = lend / (lend_levels - 1) if lend_levels > 1 else 0.0
    cap = _lending_capacity(state, fraction)
    repaired = 0
    targets: dict[int, int] = {}
    for job, choice in zip(jobs, choices, strict=False):
        want = GPU_BUCKETS[choice]
        limit = job.max_replicas
        if want > limit:
            repaired += want - limit
            want = limit
        targets[job.id] = want
    excess = sum(targets.values()) - sum(cap)
    if excess > 0:
        repaired += excess
        trim_to_capacity(targets, {job.id: job for job in jobs}, excess)
    return place_count_lists(state, targets, cap), repaired


def trim_to_capacity(targets: dict[int, int], jobs: dict[int, JobView], excess: int) -> None:
    """Remove ``excess`` GPUs, one at a time from the largest target (ties: most attained service,
    then latest arrival), computed level by level instead of GPU by GPU.

    One sort by (target, tie order) lists the jobs from the largest target down; lowering the top
    group to the next level merges it with the next jobs of that list, so the list needs no sorting
    again until the last, partial level, which takes one GPU more from the first jobs of its group
    in tie order.
    """

    def tie_key(j: int) -> tuple[float, float]:
        return (-jobs[j].attained_service, -jobs[j].arrival)

    order = sorted(targets, key=lambda j: (-targets[j], -jobs[j].attained_service, -jobs[j].arrival))
    levels = [targets[j] for j in order]
    size = 0
    while excess > 0:
        top = levels[size]
        while size < len(order) and levels[size] == top:
            size += 1
        below = levels[size] if size < len(order) else 0
        per_job = top - below
        if per_job * size <= excess:
            excess -= per_job * size
            for i in range(size):
                levels[i] = below
        else:
            full, extra = divmod(excess, size)
            for i, j in enumerate(sorted(order[:size], key=tie_key)):
                targets[j] = top - full - (1 if i < extra else 0)
            return
    for i in range(size):
        targets[order[i]] = levels[i]
