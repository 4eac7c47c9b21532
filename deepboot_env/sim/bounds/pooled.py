"""The pooled-capacity bound: SRPT on one machine as fast as every GPU training could hold.

Every GPU training could hold at time t (:func:`~deepboot_env.sim.bounds.capacity.training_capacity`)
is pooled into one machine of speed c(t) GPU-seconds per second. Job i needs at least W_i
GPU-seconds of progress (its work at its best rate per GPU) and cannot progress before its
earliest start e_i. Preemptive SRPT minimises the number of unfinished jobs at every time on such
a machine, and any real schedule is one of its schedules, so it has at least as many jobs in the
system at every t as SRPT has released and unfinished, plus those arrived and not yet startable.
Each job is also in the system from its arrival until at least e_i + L_i, L_i being its work at
its peak rate. The bound is the time integral of the larger of the two counts, per job
(docs/bounds.md §4).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from deepboot_env.sim.bounds.capacity import StepCurve
from deepboot_env.sim.bounds.envelope import JobCeiling


def srpt_completions(release: np.ndarray, size: np.ndarray, capacity: StepCurve) -> np.ndarray:
    """Completion times of preemptive SRPT on one machine of speed ``capacity`` (work per
    second), jobs released at ``release`` with work ``size`` (> 0)."""
    n = len(release)
    done = np.full(n, np.inf)
    order = np.argsort(release, kind="stable")
    cap_times, cap_values = capacity.times, capacity.values
    heap: list[tuple[float, int]] = []
    t = 0.0
    nxt = 0  # next job to release, in release order
    seg = 0  # capacity segment holding t
    while nxt < n or heap:
        if not heap:
            t = max(t, float(release[order[nxt]]))
        while nxt < n and release[order[nxt]] <= t:
            i = int(order[nxt])
            heapq.heappush(heap, (float(size[i]), i))
            nxt += 1
        while seg + 1 < len(cap_times) and cap_times[seg + 1] <= t:
            seg += 1
        speed = float(cap_values[seg])
        horizon = float(cap_times[seg + 1]) if seg + 1 < len(cap_times) else np.inf
        if nxt < n:
            horizon = min(horizon, float(release[order[nxt]]))
        left, i = heap[0]
        finish = t + left / speed if speed > 0 else np.inf
        if finish <= horizon:
            heapq.heappop(heap)
            done[i] = finish
            t = finish
        else:
            heapq.heapreplace(heap, (left - speed * (horizon - t), i))
            t = horizon
    return done


def count_integral(starts: np.ndarray, ends: np.ndarray, other: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """The time integral of the number of intervals ``[starts, ends)`` open at t, or of the
    larger of that number and the count of the ``other`` (starts, ends) intervals."""
    groups = [(starts, ends)] if other is None else [(starts, ends), other]
    times = np.unique(np.concatenate([x for pair in groups for x in pair]))
    counts = [
        np.searchsorted(np.sort(s), times, side="right") - np.searchsorted(np.sort(e), times, side="right")
        for s, e in groups
    ]
    height = np.maximum.reduce(counts) if len(counts) > 1 else counts[0]
    return float(np.sum(np.diff(times) * height[:-1]))


MAX_GRID_POINTS = 4000
"""The speed-dependent count is evaluated at most at this many times (a coarser grid for long
scenarios: any grid gives a valid bound, a finer one a tighter)."""


def pooled_bound(jobs: Sequence[JobCeiling], capacity: StepCurve, step: float | None = None) -> float:
    """The pooled-capacity lower bound on the mean JCT of ``jobs`` (module docstring); with
    ``step``, also the count of jobs that cannot have completed, with their speed-dependent
    GPU-seconds (:func:`most_completed`), on a grid of ``step`` seconds, or coarser so as to have
    at most :data:`MAX_GRID_POINTS` points."""
    if not jobs:
        return float("nan")
    arrival = np.array([j.arrival for j in jobs])
    start = np.array([j.start for j in jobs])
    size = np.array([j.gpu_seconds for j in jobs])
    alone = np.array([j.fastest for j in jobs])
    done = srpt_completions(start, size, capacity)
    # SRPT's count plus the jobs not startable yet is the count of [arrival, SRPT completion)
    if step is None:
        return count_integral(arrival, done, (arrival, start + alone)) / len(jobs)
    horizon = float(max(done.max(), (start + alone).max()))
    step = max(step, horizon / MAX_GRID_POINTS)
    grid = np.arange(0.0, horizon + step, step)
    completed = most_completed(jobs, capacity, grid)
    while completed[-1] < len(jobs):  # some job cannot be done by then: the count goes on
        more = grid[-1] + step * np.arange(1, len(grid) // 4 + 2)
        grid = np.concatenate([grid, more])
        completed = np.concatenate([completed, most_completed(jobs, capacity, more)])
    # on [grid[k], grid[k + 1]) at least arrived(t) - completed(grid[k + 1]) jobs are in the system
    times = np.unique(np.concatenate([grid, arrival, done, start + alone]))
    cell = np.clip(np.searchsorted(grid, times, side="right"), 1, len(grid) - 1)
    arrived = np.searchsorted(np.sort(arrival), times, side="right")
    counts = [
        arrived - completed[cell],
        _open_at(arrival, done, times),
        _open_at(arrival, start + alone, times),
    ]
    height = np.maximum.reduce(counts)
    return float(np.sum(np.diff(times) * height[:-1])) / len(jobs)


def _open_at(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """How many of the intervals ``[starts, ends)`` contain each of ``times``."""
    return np.searchsorted(np.sort(starts), times, side="right") - np.searchsorted(np.sort(ends), times, side="right")


def most_completed(jobs: Sequence[JobCeiling], capacity: StepCurve, times: np.ndarray) -> np.ndarray:
    """Per time t of ``times``, the most jobs any schedule can have completed by t.

    A job completed by t progressed for at most t - e_i seconds, so it used at least G_i(t - e_i)
    GPU-seconds (:meth:`JobCeiling.gpu_time_curve`), after e_i. Measured in GPU-seconds of
    capacity, the training cluster is one machine of speed 1, on which a job is released at the
    capacity accumulated by e_i; SRPT completes the most jobs by any time on it."""
    order = np.argsort([j.start for j in jobs], kind="stable")
    ordered = [jobs[i] for i in order]
    start = np.array([j.start for j in ordered])
    release = capacity.integral(0.0, start)
    fastest = np.array([j.fastest for j in ordered])
    curves: dict[tuple[int, bytes], tuple[np.ndarray, np.ndarray]] = {}
    groups: dict[tuple[int, bytes], list[int]] = {}
    for i, job in enumerate(ordered):
        key = (id(job.rates), job.work.tobytes())
        if key not in curves:
            curves[key] = job.gpu_time_curve()
        groups.setdefault(key, []).append(i)
    members = {key: np.array(idx) for key, idx in groups.items()}
    budget = capacity.integral(0.0, times)
    out = np.zeros(len(times), dtype=int)
    size = np.empty(len(ordered))
    for k, t in enumerate(np.asarray(times, dtype=float).tolist()):
        for key, idx in members.items():
            span, gpu = curves[key]
            left = t - start[idx]
            size[idx] = np.where(left < fastest[idx], np.inf, np.interp(left, span, gpu))
        out[k] = srpt_count(release, size, float(budget[k]))
    return out


def srpt_count(release: np.ndarray, size: np.ndarray, until: float) -> int:
    """How many jobs preemptive SRPT completes by ``until`` on a machine of speed 1, jobs
    released at ``release`` (ascending) with work ``size`` (inf: never completable)."""
    heap: list[float] = []
    now = 0.0
    i = 0
    n = len(release)
    done = 0
    while True:
        if not heap:
            if i >= n or release[i] > until:
                return done
            now = max(now, float(release[i]))
        while i < n and release[i] <= now:
            if size[i] < np.inf:
                heapq.heappush(heap, float(size[i]))
            i += 1
        if not heap:
            continue
        stop = min(float(release[i]) if i < n else np.inf, until)
        if now + heap[0] <= stop:
            now += heapq.heappop(heap)
            done += 1
        else:
            heapq.heapreplace(heap, heap[0] - (stop - now))
            now = stop
            if now >= until:
                return done
