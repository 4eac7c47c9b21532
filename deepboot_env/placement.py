"""Placement helpers shared by policies: turning GPU counts into GPUs per node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from deepboot_env.sim.cluster import NODE_INFER

if TYPE_CHECKING:
    from deepboot_env.sim.state import ClusterState


def best_fit(need: int, free: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray | None:
    """Place ``need`` GPUs on nodes with ``free`` GPUs using DeepBoot's best-fit rule.

    Repeatedly: if ``need`` exceeds the largest free count, take all GPUs of the first node with
    that count; otherwise take ``need`` GPUs from the node with the fewest free GPUs among those
    with enough (first in node order on ties). This packs jobs on as few nodes as possible and
    keeps large holes for large jobs (deepboot-model.md §4.1 step 6).

    Args:
        need: GPUs to place.
        free: free GPUs per node (not modified).
        allowed: optional boolean mask of nodes that may be used.

    Returns:
        GPUs per node, or None if fewer than ``need`` GPUs are free.
    """
    avail = np.where(allowed, free, 0) if allowed is not None else free.copy()
    avail = np.maximum(avail, 0).astype(np.int64)
    if need <= 0:
        return np.zeros_like(avail)
    if avail.sum() < need:
        return None
    out = np.zeros_like(avail)
    while need > 0:
        f_max = int(avail.max())
        if need > f_max:
            node = int(np.argmax(avail))
            take = f_max
        else:
            candidates = np.flatnonzero(avail >= need)
            node = int(candidates[np.argmin(avail[candidates])])
            take = need
        out[node] += take
        avail[node] -= take
        need -= take
    return out


def most_free_fill(need: int, free: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray | None:
    """Place ``need`` GPUs by repeatedly taking from the node with the most free GPUs.

    The rule of the Pollux artifact's Optimus and Tiresias baselines: take as many GPUs as the
    node with the most free GPUs has (first such node on ties), until ``need`` is met.

    Returns:
        GPUs per node, or None if fewer than ``need`` GPUs are free.
    """
    avail = np.where(allowed, free, 0) if allowed is not None else free.copy()
    avail = np.maximum(avail, 0).astype(np.int64)
    if avail.sum() < need:
        return None
    out = np.zeros_like(avail)
    while need > 0:
        node = int(np.argmax(avail))
        take = min(need, int(avail[node]))
        out[node] += take
        avail[node] -= take
        need -= take
    return out


PLACEMENT_RULES = {"best_fit": best_fit, "most_free": most_free_fill}


def place_counts(
    state: ClusterState,
    counts: Mapping[int, int],
    capacity: np.ndarray,
    rule: str = "best_fit",
    ascending: bool = True,
) -> dict[int, np.ndarray]:
    """Turn GPU counts per job into GPUs per node.

    A job whose count is unchanged keeps its GPUs; the others (in ascending order of their new
    count, ties in the order of ``counts``, or all in that order when ``ascending`` is False) are placed from scratch on
    the capacity left, by ``rule`` (``best_fit`` or ``most_free``), on training-cluster nodes when
    they fit there and otherwise anywhere in ``capacity`` (lent inference GPUs).

    Args:
        state: the state the counts were decided on.
        counts: job id -> GPUs (jobs absent or at 0 get none).
        capacity: GPUs per node training may hold in total.
        rule: placement rule for moved jobs.
        ascending: place moved jobs smallest first.
    """
    place = PLACEMENT_RULES[rule]
    by_id = {job.id: job for job in state.jobs}
    out: dict[int, np.ndarray] = {}
    free = capacity.copy()
    moved: list[tuple[int, int]] = []
    for job_id, k in counts.items():
        job = by_id[job_id]
        if k > 0 and k == job.replicas:
            out[job_id] = job.alloc.copy()
            free -= job.alloc
        elif k > 0:
            moved.append((k, job_id))
    if ascending:
        moved.sort(key=lambda m: m[0])
    own = state.node_kinds != NODE_INFER
    for k, job_id in moved:
        placement = place(k, free, own)
        if placement is None:
            placement = place(k, free)
        if placement is None:
            raise ValueError(f"cannot place {k} GPUs for job id {job_id}: only {int(free.sum())} free")
        out[job_id] = placement
        free -= placement
    return out
