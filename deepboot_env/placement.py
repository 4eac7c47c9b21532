"""Placement helpers shared by policies: turning GPU counts into GPUs per node."""

from __future__ import annotations

import numpy as np


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
