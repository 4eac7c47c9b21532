"""What no schedule can beat for one training job: its fastest rates and earliest start.

The JCT lower bounds (docs/bounds.md §2) need, per job, an *upper* bound on the progress rate it
can make with k GPUs at every epoch, whatever the policy does. :func:`rate_ceiling` takes the
largest true rate over everything the simulator lets a job of the application run at:

* every placement class of K GPUs that the cluster can realise (single- or multi-node under the
  fitted truth; every shape under the measured truth, docs/goodput.md §9.2), because a policy
  chooses the placement;
* K from 1 to the rate table's ``max_replicas``, the most GPUs the simulator lets the job hold
  (an allocation beyond it is refused), made non-decreasing in K (a job may leave GPUs idle);
* the batch policy: the rate table a job gets under adaptive policies, or the one of its
  submitted batch under fixed-batch policies (:func:`job_ceiling` takes one of them).

:func:`concave_lines` turns a ceiling into the lines of its least concave majorant in K (through
0 at K = 0): by Jensen's inequality a job whose GPU count varies over a stretch of time progresses
at most as fast as the majorant at its mean count, which is what makes the relaxations linear.

Rounding and restarts: an epoch ends at its exact time rounded to whole seconds, so it may end up
to half a second early (docs/simulator.md §4), i.e. with up to half a second of its fastest rate
not worked for; :class:`JobCeiling` subtracts that from each epoch's work. A job's first start
always stalls (the restart models' first-start delay, cut short at the earliest by a fast-elastic
rescale under ``afe`` and ``stopfree``), which :func:`earliest_progress` counts; every later
restart is free in the relaxations.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from deepboot_env.sim.apps import AppProfile
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.measured import GRID_NODE_CAP, MeasuredRates
from deepboot_env.sim.rates import ProgressRates
from deepboot_env.sim.restart import POLLUX_RESTART_DELAY_S
from deepboot_env.sim.training import job_rate_table, progress_truth
from deepboot_env.sim.workload import TrainingJobSpec

KNOWN_SHAPE_NODES = 4
"""Shapes of at most this many nodes may be measured ones (the traces' ids have 1-4 digits)."""


@dataclass(frozen=True)
class JobCeiling:
    """The most one training job can achieve, epoch by epoch (docs/bounds.md §2).

    Attributes:
        arrival: submission time (s).
        start: earliest time it can progress at all (:func:`earliest_progress`).
        work: per epoch, the progress it must earn at its rates: the epoch's progress less half
            a second at its peak rate (the rounding of the epoch's end), at least 0.
        rates: (epochs, K + 1) array: the fastest true rate with at most K GPUs (column 0 is 0;
            non-decreasing in K).
        fastest: seconds of progress it needs at least: :attr:`alone_seconds`, or under the
            exploration cap of adaptive policies :func:`ramped_seconds`.
    """

    arrival: float
    start: float
    work: np.ndarray
    rates: np.ndarray
    fastest: float

    @property
    def peak(self) -> np.ndarray:
        """Per epoch, the fastest rate with any number of GPUs."""
        return self.rates[:, -1]

    @property
    def per_gpu(self) -> np.ndarray:
        """Per epoch, the most progress one GPU-second can buy (the best rate per GPU)."""
        ks = np.arange(1, self.rates.shape[1])
        return (self.rates[:, 1:] / ks).max(axis=1)

    @property
    def alone_seconds(self) -> float:
        """Seconds of progress it needs even with every GPU it can use: the work at the peak."""
        return float(np.sum(self.work / self.peak))

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds of progress it needs at least: the work at the best rate per GPU."""
        return float(np.sum(self.work / self.per_gpu))

    def gpu_time_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """The fewest GPU-seconds that complete the job within T seconds of progress, as a convex
        piecewise-linear, non-increasing function of T: (breakpoints T, values G), from
        T = :attr:`alone_seconds` (every epoch at its peak) to T where every epoch runs at its
        best rate per GPU (G = :attr:`gpu_seconds`; constant after). Epoch e done in t_e
        seconds needs at least t_e * h_e^-1(w_e / t_e) GPU-seconds (Jensen, h_e its concave
        majorant), a convex piecewise-linear function of t_e through (w_e / y, w_e * k / y) at the
        majorant's vertices (k, y); spending a total time T across epochs, the cheapest way
        relaxes the segments that save the most GPU-seconds per second first."""
        base_t = base_g = 0.0
        lengths: list[np.ndarray] = []
        rates: list[np.ndarray] = []
        for w, curve in zip(self.work, self.rates, strict=True):
            if w <= 0:
                continue
            k, y = hull_vertices(curve)
            t, g = w / y, w * k / y  # fastest last
            base_t += t[-1]
            base_g += g[-1]
            lengths.append(-np.diff(t))  # relaxing from vertex v + 1 to v takes this much longer
            rates.append(np.diff(g) / np.diff(t))  # and saves this many GPU-seconds per second (< 0)
        length = np.concatenate(lengths) if lengths else np.zeros(0)
        saving = np.concatenate(rates) if rates else np.zeros(0)
        order = np.argsort(saving, kind="stable")
        length, saving = length[order], saving[order]
        times = base_t + np.concatenate([[0.0], np.cumsum(length)])
        values = base_g + np.concatenate([[0.0], np.cumsum(length * saving)])
        return times, values


def ramped_seconds(arrival: float, start: float, work: np.ndarray, rates: np.ndarray, interval: float) -> float:
    """Seconds of progress a job needs at least under the exploration cap of adaptive policies
    (at most 2^j GPUs in the j-th interval after its admission, whatever the cap's growth
    rule; docs/goodput.md §9.7): every epoch at the fastest rate the cap allows, the cap counted
    from the boundary that admits it (its first at or after ``arrival``), progress from ``start``."""
    admitted = math.ceil(arrival / interval) * interval
    top = rates.shape[1] - 1
    t = start
    for e, w in enumerate(work.tolist()):
        left = w
        while left > 0:
            j = max(int((t - admitted) // interval), 0)
            k = top if j >= 62 else min(top, 2**j)
            rate = float(rates[e, k])
            end = admitted + (j + 1) * interval
            if k == top or rate * (end - t) >= left:
                t += left / rate
                break
            left -= rate * (end - t)
            t = end
    return t - start


def placement_classes(truth: ProgressRates, replicas: int, nodes: int, gpus_per_node: int) -> list[Hashable]:
    """Every placement class of ``replicas`` GPUs that a cluster of ``nodes`` nodes of
    ``gpus_per_node`` GPUs can realise, in ``truth``'s keys: the multi-node flag (fitted), or the
    measured shapes and interpolation-grid classes (measured; :func:`measured_classes`)."""
    if isinstance(truth, MeasuredRates):
        return list(measured_classes(truth, nodes, gpus_per_node).get(replicas, ()))
    out: list[Hashable] = []
    if replicas <= gpus_per_node:
        out.append(False)
    if nodes >= 2 and 2 <= replicas <= nodes * gpus_per_node:
        out.append(True)
    return out


_MEASURED_CLASSES: weakref.WeakKeyDictionary[MeasuredRates, dict[tuple[int, int], dict[int, set[Hashable]]]] = (
    weakref.WeakKeyDictionary()
)


def measured_classes(truth: MeasuredRates, nodes: int, gpus_per_node: int) -> Mapping[int, set[Hashable]]:
    """Per GPU count, the measured truth's placement classes a cluster can realise (cached): each
    sequence of GPUs per used node (1 to ``gpus_per_node`` each) on up to 4 nodes, classed as the
    simulator classes it (a measured shape, or the grid's (nodes, GPUs)); on 5 nodes or more
    every shape is a grid class (min(nodes, 16), GPUs)."""
    cache = _MEASURED_CLASSES.setdefault(truth, {})
    key = (nodes, gpus_per_node)
    if key not in cache:
        out: dict[int, set[Hashable]] = {}
        for n in range(1, min(nodes, KNOWN_SHAPE_NODES) + 1):
            for counts in product(range(1, gpus_per_node + 1), repeat=n):
                out.setdefault(sum(counts), set()).add(truth.placement_class(list(counts), n > 1))
        for n in range(KNOWN_SHAPE_NODES + 1, nodes + 1):
            for k in range(n, n * gpus_per_node + 1):
                out.setdefault(k, set()).add((min(n, GRID_NODE_CAP), k))
        cache[key] = out
    return cache[key]


_CEILINGS: weakref.WeakKeyDictionary[ProgressRates, dict[tuple[int, int, int], np.ndarray]] = (
    weakref.WeakKeyDictionary()
)


def rate_ceiling(truth: ProgressRates, max_replicas: int, nodes: int, gpus_per_node: int) -> np.ndarray:
    """(epochs, max_replicas + 1) array (cached, read-only): per epoch, the fastest rate
    ``truth`` gives with at most K GPUs on any placement the cluster can realise."""
    cache = _CEILINGS.setdefault(truth, {})
    key = (int(max_replicas), nodes, gpus_per_node)
    table = cache.get(key)
    if table is None:
        columns = [np.zeros(len(_thresholds(truth)))]
        for k in range(1, int(max_replicas) + 1):
            best = columns[-1]
            for cls in placement_classes(truth, k, nodes, gpus_per_node):
                best = np.maximum(best, np.asarray(truth.rate_column(cls, k), dtype=float))
            columns.append(best)
        table = np.column_stack(columns)
        table.flags.writeable = False
        cache[key] = table
    return table


def _thresholds(truth: ProgressRates) -> np.ndarray:
    app: AppProfile = truth.app  # type: ignore[attr-defined]
    return app.epoch_progress


def earliest_progress(arrival: float, app: AppProfile, config: SimConfig) -> float:
    """The earliest time a job arriving at ``arrival`` can progress: it is admitted at the first
    boundary at or after its arrival, and its first start stalls for the restart model's
    first-start delay, which no later change can shorten below: the full delay under ``full``
    (every change restarts it), 30 s under ``pollux``, and the fast-elastic rescale delay under
    ``afe`` and ``stopfree`` (a reclaim during the first stall replaces it by that delay; under
    ``stopfree`` a scale-out at the next boundary lets the kept workers train at once)."""
    interval = config.interval
    admitted = math.ceil(arrival / interval) * interval
    full, fast = app.full_restart_delay, app.fast_restart_delay
    if config.restart == "full":
        stall = full
    elif config.restart == "pollux":
        stall = POLLUX_RESTART_DELAY_S
    elif config.restart == "afe":
        stall = min(full, fast)
    else:
        stall = min(full, fast, interval)
    return admitted + stall


def job_ceiling(
    spec: TrainingJobSpec, app: AppProfile, config: SimConfig, adaptive: bool, table_cap: int | None = None
) -> JobCeiling:
    """The :class:`JobCeiling` of one job under adaptive (``adaptive``) or fixed-batch policies
    on ``config``'s cluster with its truth; ``table_cap`` is for tests only (the cap of the rate
    table; None: the simulator's own)."""
    cluster = config.cluster
    fixed = None if adaptive else spec.batch_size
    table = job_rate_table(app, fixed, cluster.total_gpus, config.batch_stats)
    truth = progress_truth(table, config.trace_set if config.truth == "measured" else None)
    cap = table.max_replicas if table_cap is None else table_cap
    rates = rate_ceiling(truth, cap, cluster.num_nodes, cluster.gpus_per_node)
    peak = rates[:, -1]
    if not np.all(peak > 0):
        raise ValueError(f"job {spec.name!r} ({app.name}) has an epoch no placement makes progress in")
    work = np.maximum(np.diff(app.epoch_progress, prepend=0.0) - 0.5 * peak, 0.0)
    arrival = float(spec.arrival)
    start = earliest_progress(arrival, app, config)
    if adaptive:
        fastest = ramped_seconds(arrival, start, work, rates, config.interval)
    else:
        fastest = float(np.sum(work / peak))
    return JobCeiling(arrival=arrival, start=start, work=work, rates=rates, fastest=fastest)


def concave_lines(curve: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least concave majorant through (0, 0) of the points (K, ``curve[K]``), K = 0, 1, ...
    (``curve[0]`` is ignored and taken as 0), as lines: slopes and intercepts such that the
    majorant at any k >= 0 is ``min(slopes * k + intercepts)``. The first line passes through the
    origin (its slope is the best rate per GPU), the last is flat at the peak. Non-decreasing
    ``curve`` gives non-negative slopes."""
    y = np.asarray(curve, dtype=float).copy()
    y[0] = 0.0
    hull = [0]
    for k in range(1, len(y)):
        while len(hull) >= 2:
            k1, k2 = hull[-2], hull[-1]
            # drop k2 if it lies on or below the chord from k1 to k
            if (y[k2] - y[k1]) * (k - k1) <= (y[k] - y[k1]) * (k2 - k1):
                hull.pop()
            else:
                break
        hull.append(k)
    ys = y[hull]
    top = int(np.argmax(ys))  # the majorant is flat from its first vertex at the peak on
    xs = np.array(hull[: top + 1], dtype=float)
    ys = ys[: top + 1]
    slopes = np.append(np.diff(ys) / np.diff(xs), 0.0)
    intercepts = np.append(ys[:-1] - slopes[:-1] * xs[:-1], ys[-1])
    return slopes, intercepts


def hull_vertices(curve: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vertices (K, rate) with K >= 1 of the least concave majorant through (0, 0) of the
    points (K, ``curve[K]``), up to the first that reaches the peak (ascending in both)."""
    slopes, intercepts = concave_lines(curve)
    # consecutive lines meet at the vertices; the first line starts at the origin
    k = (intercepts[1:] - intercepts[:-1]) / (slopes[:-1] - slopes[1:])
    y = slopes[:-1] * k + intercepts[:-1]
    return k, y


def fewer_lines(slopes: np.ndarray, intercepts: np.ndarray, count: int, kmax: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``count`` (>= 2) of the lines of a concave majorant (:func:`concave_lines`),
    always the first (the best rate per GPU) and the last (the peak): the minimum over a subset
    of the lines lies above the minimum over all, so it is still a majorant, only looser. Lines
    are added greedily where the subset overestimates most on K = 0..``kmax``."""
    if len(slopes) <= count:
        return slopes, intercepts
    ks = np.arange(kmax + 1, dtype=float)
    values = slopes[:, None] * ks[None, :] + intercepts[:, None]
    exact = values.min(axis=0)
    chosen = [0, len(slopes) - 1]
    while len(chosen) < count:
        gap = values[chosen].min(axis=0) - exact
        worst = int(np.argmax(gap))
        if gap[worst] <= 0:
            break
        chosen.append(int(np.argmin(values[:, worst])))
    keep = np.array(sorted(set(chosen)))
    return slopes[keep], intercepts[keep]
