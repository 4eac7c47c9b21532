"""Placement helpers shared by policies: turning GPU counts into GPUs per node."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from deepboot_env.sim.cluster import node_layout

if TYPE_CHECKING:
    from deepboot_env.sim.state import ClusterState, JobView


def _available(free: np.ndarray | list[int], allowed: np.ndarray | list[bool] | None) -> list[int]:
    """Free GPUs per node as Python ints, 0 where not ``allowed`` or negative."""
    if isinstance(free, np.ndarray):
        free = free.tolist()
    if allowed is None:
        return [int(f) if f > 0 else 0 for f in free]
    if isinstance(allowed, np.ndarray):
        allowed = allowed.tolist()
    return [int(f) if ok and f > 0 else 0 for f, ok in zip(free, allowed, strict=True)]


def _best_fit_takes(need: int, avail: list[int]) -> list[tuple[int, int]] | None:
    """:func:`best_fit` on plain lists: the (node, GPUs) taken, in order, or None if fewer than
    ``need`` are available (``avail`` is modified: the GPUs taken are removed)."""
    if need <= 0:
        return []
    if sum(avail) < need:
        return None
    takes = []
    while need > 0:
        f_max = max(avail)
        if need > f_max:
            node = avail.index(f_max)
            take = f_max
        else:  # the first node with the fewest free GPUs among those with enough
            fit = need
            while fit not in avail:
                fit += 1
            node = avail.index(fit)
            take = need
        takes.append((node, take))
        avail[node] -= take
        need -= take
    return takes


def _most_free_takes(need: int, avail: list[int]) -> list[tuple[int, int]] | None:
    """:func:`most_free_fill` on plain lists, as :func:`_best_fit_takes`."""
    if sum(avail) < need:
        return None
    takes = []
    while need > 0:
        f_max = max(avail)
        node = avail.index(f_max)
        take = min(need, f_max)
        takes.append((node, take))
        avail[node] -= take
        need -= take
    return takes


def _counts(takes: list[tuple[int, int]] | None, num_nodes: int) -> np.ndarray | None:
    """GPUs per node of ``takes`` (None stays None)."""
    if takes is None:
        return None
    out = [0] * num_nodes
    for node, take in takes:
        out[node] += take
    return np.array(out, dtype=np.int64)


def best_fit(need: int, free: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray | None:
    """Place ``need`` GPUs on nodes with ``free`` GPUs using DeepBoot's best-fit rule.

    Repeatedly: if ``need`` exceeds the largest free count, take all GPUs of the first node with
    that count; otherwise take ``need`` GPUs from the node with the fewest free GPUs among those
    with enough (first in node order on ties). This packs jobs on as few nodes as possible and
    keeps large holes for large jobs (docs/policies.md §3).

    Args:
        need: GPUs to place.
        free: free GPUs per node (not modified).
        allowed: optional boolean mask of nodes that may be used.

    Returns:
        GPUs per node, or None if fewer than ``need`` GPUs are free.
    """
    avail = _available(free, allowed)
    return _counts(_best_fit_takes(need, avail), len(avail))


def most_free_fill(need: int, free: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray | None:
    """Place ``need`` GPUs by repeatedly taking from the node with the most free GPUs.

    The rule of the Pollux artifact's Optimus and Tiresias baselines: take as many GPUs as the
    node with the most free GPUs has (first such node on ties), until ``need`` is met.

    Returns:
        GPUs per node, or None if fewer than ``need`` GPUs are free.
    """
    avail = _available(free, allowed)
    return _counts(_most_free_takes(need, avail), len(avail))


PLACEMENT_RULES = {"best_fit": best_fit, "most_free": most_free_fill}


def place_counts(
    state: ClusterState,
    counts: Mapping[int, int],
    capacity: np.ndarray | list[int],
    rule: str = "best_fit",
    ascending: bool = True,
    order: dict[int, list[int]] | None = None,
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
        order: if given, receives for each moved job the nodes in the order the rule took
            GPUs from them (each node once).
    """
    placed = place_count_lists(state, counts, capacity, rule, ascending, order)
    if not placed:
        return {}
    # one conversion for all jobs: their arrays are the rows of one matrix
    return dict(zip(placed, np.array(list(placed.values()), dtype=np.int64), strict=True))


def place_count_lists(
    state: ClusterState,
    counts: Mapping[int, int],
    capacity: np.ndarray | list[int],
    rule: str = "best_fit",
    ascending: bool = True,
    order: dict[int, list[int]] | None = None,
) -> dict[int, list[int]]:
    """:func:`place_counts` with the GPUs per node of each job as a list of ints (the same
    placements, in the same order)."""
    if rule not in PLACEMENT_RULES:
        raise KeyError(rule)
    place = _best_fit_takes if rule == "best_fit" else _most_free_takes
    by_id = state.job_by_id
    out: dict[int, list[int]] = {}
    # plain ints: a few nodes, many small steps
    free = list(capacity) if isinstance(capacity, list) else np.asarray(capacity).tolist()
    kept, moved = _kept_and_moved(by_id, counts, ascending)
    for job_id in kept:
        out[job_id] = by_id[job_id].alloc.tolist()
    if kept:  # what the kept jobs hold, node by node, in one pass
        free = list(map(operator.sub, free, map(sum, zip(*out.values(), strict=True))))
    if not moved:
        return out
    own = node_layout(state.node_kinds).own
    avail_all = [f if f > 0 else 0 for f in free]
    avail_own = [f if ok else 0 for f, ok in zip(avail_all, own, strict=True)]  # kept in step below
    n = len(free)
    for k, job_id in moved:
        # a placement rule changes the list it places on only when it succeeds
        takes = place(k, avail_own)
        if takes is not None:
            for node, taken in takes:
                avail_all[node] -= taken
        else:
            takes = place(k, avail_all)
            if takes is None:
                raise ValueError(f"cannot place {k} GPUs for job id {job_id}: only {sum(avail_all)} free")
            for node, taken in takes:
                if own[node]:
                    avail_own[node] -= taken
        row = out[job_id] = [0] * n
        for node, taken in takes:
            row[node] += taken
        if order is not None:
            order[job_id] = [node for node, _ in takes]
    return out


def placement_order(state: ClusterState, counts: Mapping[int, int], ascending: bool = True) -> dict[int, int]:
    """The jobs of ``counts`` that get GPUs, with their counts, in the order :func:`place_counts`
    returns them (jobs that keep their count first, then the moved ones in placement order),
    without placing anything."""
    by_id = state.job_by_id
    kept, moved = _kept_and_moved(by_id, counts, ascending)
    order = {job_id: counts[job_id] for job_id in kept}
    order.update((job_id, k) for k, job_id in moved)
    return order


def _kept_and_moved(
    by_id: Mapping[int, JobView], counts: Mapping[int, int], ascending: bool
) -> tuple[list[int], list[tuple[int, int]]]:
    """Jobs whose positive count is the one they hold (in the order of ``counts``), and (count,
    job id) of the other positive counts in placement order (ascending count, stable, if
    ``ascending``)."""
    kept: list[int] = []
    moved: list[tuple[int, int]] = []
    for job_id, k in counts.items():
        if k > 0 and k == by_id[job_id].replicas:
            kept.append(job_id)
        elif k > 0:
            moved.append((k, job_id))
    if ascending:
        moved.sort(key=operator.itemgetter(0))
    return kept, moved
