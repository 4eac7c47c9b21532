"""The time-indexed bound: a linear program over time slots with concave per-job speedups.

Time is cut into slots of ``slot`` seconds. In slot s, job i spends u seconds in phase f (a run of
consecutive epochs), holds g GPU-seconds there and makes progress p, with

    p <= a_j * g + b_j * u          for every line (a_j, b_j) of the phase's concave ceiling,

the perspective of the least concave majorant of its rates (Jensen: a job whose GPU count varies
within the slot does no better than at its mean count), the job's times summing to at most the
slot's length after its earliest start, the GPU-seconds of all jobs to at most the training
capacity's integral over the slot, and each phase's progress to its work. Adaptive jobs also
respect the exploration cap: at most 2^j GPUs in the j-th interval after their admission.

The objective is the sum of lower bounds on the jobs' completion times. Measure progress in
*alone-seconds* (progress over the phase's peak rate): a job earns at most one per second and L_i
in all. Its completion is at least its earliest start plus its fastest time (the exploration cap
included), at least each slot's start plus the alone-seconds still to earn then (the convex hull
of that where the job may have finished), and at least the mean time of its alone-seconds plus
L_i / 2 (within a slot that mean is at least the slot's start plus half its mass: an epigraph
variable bounded by tangents of m^2 / 2). After a per-job cutoff the job's slots are merged into
one tail that ignores the capacity: dropping constraints keeps the program a relaxation, so the
cutoff changes only the tightness (docs/bounds.md §5).
"""

from __future__ import annotations

import time as wallclock
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from deepboot_env.sim.bounds.capacity import StepCurve
from deepboot_env.sim.bounds.envelope import JobCeiling, concave_lines, fewer_lines


@dataclass(frozen=True)
class LpResult:
    """A solved time-indexed bound.

    Attributes:
        bound: the lower bound on the mean JCT (s).
        variables: columns of the program.
        constraints: rows of the program (inequalities and equalities).
        nonzeros: non-zero coefficients.
        solve_seconds: CPU seconds of the solver.
        build_seconds: CPU seconds spent building the program.
        slots: start of every slot with a capacity row (s).
        prices: the capacity rows' dual prices (per GPU-second; >= 0).
    """

    bound: float
    variables: int
    constraints: int
    nonzeros: int
    solve_seconds: float
    build_seconds: float
    slots: np.ndarray
    prices: np.ndarray


@dataclass(frozen=True)
class Phase:
    """Consecutive epochs of one job merged: their work and the concave ceiling of their rates,
    both in alone-seconds (progress over the run's peak rate; the program is better scaled so)."""

    work: float
    peak: float
    slopes: np.ndarray
    intercepts: np.ndarray


def phases_of(job: JobCeiling, count: int, lines: int = 6) -> list[Phase]:
    """``job``'s epochs in at most ``count`` runs of about equal work, each with the concave
    majorant of its epochs' largest rates (a valid ceiling for every epoch of the run)."""
    work = job.work
    total = float(work.sum())
    edges = np.searchsorted(np.cumsum(work), total * np.arange(1, count) / count, side="left") + 1
    bounds = np.unique(np.concatenate([[0], np.clip(edges, 1, len(work)), [len(work)]]))
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        curve = job.rates[lo:hi].max(axis=0)
        peak = float(curve[-1])
        slopes, intercepts = fewer_lines(*concave_lines(curve / peak), lines, len(curve) - 1)
        out.append(Phase(float(work[lo:hi].sum()) / peak, 1.0, slopes, intercepts))
    return [p for p in out if p.work > 0]


class _Builder:
    """Rows and columns of the program in COO form."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.rhs: list[float] = []
        self.eq_rows: list[int] = []
        self.eq_rhs: list[float] = []
        self.eq_cols: list[int] = []
        self.eq_vals: list[float] = []
        self.nrows = 0

    def columns(self, cost: np.ndarray, upper: np.ndarray | float = np.inf) -> np.ndarray:
        """New columns with these objective costs (and upper bounds); their indices."""
        start = len(self.cost)
        self.cost.extend(np.asarray(cost, dtype=float).tolist())
        self.upper.extend(np.broadcast_to(np.asarray(upper, dtype=float), np.shape(cost)).tolist())
        return np.arange(start, len(self.cost))

    def leq(self, cols: np.ndarray, vals: np.ndarray, rhs: np.ndarray) -> None:
        """Rows ``sum(vals[r] * x[cols[r]]) <= rhs[r]``: ``cols``, ``vals`` of shape (rows, terms)."""
        cols = np.atleast_2d(cols)
        vals = np.broadcast_to(np.atleast_2d(vals), cols.shape)
        ids = self.nrows + np.arange(cols.shape[0])
        self.rows.append(np.repeat(ids, cols.shape[1]))
        self.cols.append(cols.ravel())
        self.vals.append(vals.ravel())
        self.rhs.extend(np.broadcast_to(rhs, (cols.shape[0],)).tolist())
        self.nrows += cols.shape[0]

    def equal_rows(self, cols: np.ndarray, vals: np.ndarray, rhs: float = 0.0) -> None:
        """Rows ``sum(vals[r] * x[cols[r]]) == rhs``: ``cols``, ``vals`` of shape (rows, terms)."""
        rows = len(self.eq_rhs) + np.arange(cols.shape[0])
        self.eq_rows.extend(np.repeat(rows, cols.shape[1]).tolist())
        self.eq_cols.extend(cols.ravel().tolist())
        self.eq_vals.extend(vals.ravel().tolist())
        self.eq_rhs.extend([rhs] * cols.shape[0])

    def matrices(self) -> tuple[coo_matrix, coo_matrix]:
        """The inequality and equality constraint matrices of the rows added so far."""
        a_ub = coo_matrix(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.nrows, len(self.cost)),
        )
        return a_ub, coo_matrix((self.eq_vals, (self.eq_rows, self.eq_cols)), shape=(len(self.eq_rhs), len(self.cost)))

    def equal(self, cols: np.ndarray, rhs: float) -> None:
        """One row ``sum(x[cols]) == rhs``."""
        row = len(self.eq_rhs)
        self.eq_rows.extend([row] * len(cols))
        self.eq_cols.extend(np.asarray(cols).tolist())
        self.eq_vals.extend([1.0] * len(cols))
        self.eq_rhs.append(rhs)


def lp_bound(
    jobs: Sequence[JobCeiling],
    capacity: StepCurve,
    *,
    slot: float = 60.0,
    interval: float = 60.0,
    phases: int = 3,
    cutoff: Sequence[float] | None = None,
    ramp: bool = True,
    method: str = "highs",
    lines: int = 6,
) -> LpResult:
    """The time-indexed lower bound on the mean JCT of ``jobs`` on ``capacity`` (module docstring).

    Args:
        jobs: the jobs' ceilings.
        capacity: the most GPUs training can hold at each time.
        slot: slot length (s); slots start at 0.
        interval: the scheduling interval (s), for the exploration cap.
        phases: epoch runs per job.
        cutoff: per job, the time after which its slots merge into the tail (None: 4 times its
            alone time plus a day after its earliest start; any value keeps the bound valid).
        ramp: whether the exploration cap applies (adaptive policies only).
        method: scipy's ``linprog`` method (a HiGHS one).
        lines: the most lines of each run's concave ceiling (a subset keeps a majorant).

    Raises:
        RuntimeError: if HiGHS does not solve the program (it is always feasible and bounded).
    """
    t0 = wallclock.process_time()
    b = _Builder()
    cap_rows: dict[int, list[np.ndarray]] = {}
    const = _add_jobs(b, jobs, cap_rows, slot, interval if ramp else None, phases, cutoff, lines)
    first_cap_row = b.nrows
    slots = _add_capacity_rows(b, capacity, cap_rows, slot)
    n = b.nrows
    a_ub, a_eq = b.matrices()
    t1 = wallclock.process_time()
    res = linprog(
        np.array(b.cost),
        A_ub=a_ub.tocsr(),
        b_ub=np.array(b.rhs),
        A_eq=a_eq.tocsr(),
        b_eq=np.array(b.eq_rhs),
        bounds=np.column_stack([np.zeros(len(b.cost)), np.array(b.upper)]),
        method=method,
    )
    t2 = wallclock.process_time()
    if res.status != 0:
        raise RuntimeError(f"the time-indexed bound's program was not solved: {res.message}")
    return LpResult(
        bound=(float(res.fun) + const) / len(jobs),
        variables=len(b.cost),
        constraints=n + len(b.eq_rhs),
        nonzeros=a_ub.nnz + a_eq.nnz,
        solve_seconds=t2 - t1,
        build_seconds=t1 - t0,
        slots=slots * slot,
        prices=-np.asarray(res.ineqlin.marginals[first_cap_row:], dtype=float),
    )


def _add_jobs(
    b: _Builder,
    jobs: Sequence[JobCeiling],
    cap_rows: dict[int, list[np.ndarray]],
    slot: float,
    interval: float | None,
    phases: int,
    cutoff: Sequence[float] | None,
    lines: int,
) -> float:
    """Add every job's columns and rows (:func:`_add_job`; ``interval`` None: no exploration
    cap); the objective's constant term (completions minus arrivals of the jobs without
    columns, minus the arrivals of the others)."""
    const = 0.0
    for index, job in enumerate(jobs):
        end = job.start + 4 * job.alone_seconds + 86400.0 if cutoff is None else max(cutoff[index], job.start)
        runs = phases_of(job, phases, lines)
        if runs:
            _add_job(b, job, runs, end, slot, interval, cap_rows)
            const -= job.arrival
        else:  # all its epochs end within their rounding: it completes once it can start
            const += job.start - job.arrival
    return const


def _add_capacity_rows(
    b: _Builder, capacity: StepCurve, cap_rows: dict[int, list[np.ndarray]], slot: float
) -> np.ndarray:
    """Add one row per slot that some job can use: its GPU columns hold at most the slot's
    GPU-seconds of ``capacity``; the slots' indices, in order."""
    slots = np.array(sorted(cap_rows), dtype=int)
    if len(slots):
        gpu_seconds = capacity.integral(slots * slot, (slots + 1) * slot)
        for s, budget in zip(slots.tolist(), gpu_seconds.tolist(), strict=True):
            cols = np.concatenate(cap_rows[s])
            b.leq(cols[None, :], np.ones((1, len(cols))), np.array([budget]))
    return slots


def _add_job(
    b: _Builder,
    job: JobCeiling,
    runs: list[Phase],
    end: float,
    slot: float,
    interval: float | None,
    cap_rows: dict[int, list[np.ndarray]],
) -> int:
    """Add one job's columns and rows; its completion column (its objective term)."""
    mass = sum(r.work / r.peak for r in runs)  # alone-seconds of all its work
    first = int(job.start // slot)
    last = max(first, int(np.ceil(end / slot)) - 1)
    starts = np.arange(first, last + 1) * slot
    begin = np.maximum(starts, job.start)
    avail = np.maximum(starts + slot - begin, 0.0)
    k = len(starts)
    tail_start = (last + 1) * slot
    caps = _ramp_caps(job, starts + slot, interval) if interval is not None else None
    progress, gpus, times = _add_runs(b, runs, avail, caps)
    us = np.stack(times, axis=1)
    b.leq(us, np.ones(us.shape), avail)
    for j, s in enumerate(range(first, last + 1)):
        cap_rows.setdefault(s, []).append(np.array([g[j] for g in gpus]))
    # done[j]: alone-seconds earned before slot j (done[k]: before the tail), done[0] = 0
    done = b.columns(np.zeros(k))
    inv = np.array([1.0 / r.peak for r in runs])
    ps = np.stack(progress, axis=1)
    if k > 1:  # done[j + 1] - done[j] - sum(p[j] / peak) = 0, written as two inequalities' worth of equality
        b.equal_rows(
            np.column_stack([done[1:], done[:-1], ps[:-1]]),
            np.column_stack([np.ones(k - 1), -np.ones(k - 1), -np.tile(inv, (k - 1, 1))]),
        )
    b.equal_rows(np.array([[done[0]]]), np.ones((1, 1)))
    return _add_completion(b, job, done, ps, inv, begin, np.append(begin, tail_start), avail, mass)


def _add_runs(
    b: _Builder, runs: list[Phase], avail: np.ndarray, caps: np.ndarray | None
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Add each run's columns per slot (progress, GPU-seconds, time up to ``avail``) and rows:
    progress under the run's concave ceiling, GPUs under the exploration ``caps`` (None: no
    cap), and the run's work done by the end (a tail column takes what the slots do not);
    the columns' indices, per run."""
    k = len(avail)
    progress, gpus, times = [], [], []
    for r in runs:
        p = b.columns(np.zeros(k))
        g = b.columns(np.zeros(k))
        u = b.columns(np.zeros(k), avail)
        # p <= slope * g + intercept * u for every line of the run's concave ceiling
        lines = len(r.slopes)
        cols = np.stack([np.repeat(p, lines), np.repeat(g, lines), np.repeat(u, lines)], axis=1)
        vals = np.stack([np.ones(k * lines), -np.tile(r.slopes, k), -np.tile(r.intercepts, k)], axis=1)
        b.leq(cols, vals, np.zeros(k * lines))
        if caps is not None:
            limited = np.flatnonzero(np.isfinite(caps))
            if len(limited):
                b.leq(
                    np.stack([g[limited], u[limited]], axis=1),
                    np.stack([np.ones(len(limited)), -caps[limited]], axis=1),
                    np.zeros(len(limited)),
                )
        tail = b.columns(np.zeros(1))
        b.equal(np.concatenate([p, tail]), r.work)
        progress.append(p)
        gpus.append(g)
        times.append(u)
    return progress, gpus, times


def _add_completion(
    b: _Builder,
    job: JobCeiling,
    done: np.ndarray,
    ps: np.ndarray,
    inv: np.ndarray,
    begin: np.ndarray,
    at: np.ndarray,
    avail: np.ndarray,
    mass: float,
) -> int:
    """Add the job's completion column and the rows that bound it below, from ``done`` (the
    alone-seconds earned before each slot and the tail), ``ps`` (progress per slot and run),
    ``inv`` (per run, 1 / peak), ``begin`` (each slot's first usable time), ``at`` (``begin``
    and the tail's start), ``avail`` and ``mass``; the column's index."""
    k = len(begin)
    # completion bounds: no sooner than the job alone (§2), nor than what is left to earn at each
    # slot's start allows (docs/bounds.md §5)
    completion = b.columns(np.ones(1))
    b.leq(completion[None, :], -np.ones((1, 1)), np.array([-(job.start + job.fastest)]))
    slope, offset = _remaining_bound(at, job.start, mass)
    left_cols = np.column_stack([np.full(k, completion[0]), done])
    b.leq(left_cols, np.column_stack([-np.ones(k), -slope[:k]]), -(offset[:k] + slope[:k] * mass))
    b.leq(
        np.concatenate([[completion[0], done[-1]], ps[-1]])[None, :],
        np.concatenate([[-1.0, -slope[k]], -slope[k] * inv])[None, :],
        np.array([-(offset[k] + slope[k] * mass)]),
    )
    # and from the mean time of the alone-seconds: completion >= mean + mass / 2, the mean of a
    # slot's part at least its start plus half its size (q >= m^2 / 2 through two tangents)
    q = b.columns(np.zeros(k))
    mean_cols = np.concatenate([[completion[0]], ps.ravel(), q])
    mean_vals = np.concatenate([[-1.0], (np.outer(begin, inv) / mass).ravel(), np.full(k, 1.0 / mass)])
    b.leq(mean_cols[None, :], mean_vals[None, :], np.array([-mass / 2]))
    mq = np.column_stack([ps, q])
    for c in (avail / 2, avail):
        b.leq(mq, np.column_stack([np.outer(c, inv), -np.ones(k)]), c * c / 2)
    return int(completion[0])


def _remaining_bound(at: np.ndarray, start: float, mass: float) -> tuple[np.ndarray, np.ndarray]:
    """Per time ``at``, (slope, offset) of the bound completion >= offset + slope * R, R being the
    alone-seconds left to earn at that time (0 <= R <= ``mass``). A job with R > 0 left at t
    completes at t + R or later, and every job at ``start + mass`` or later; the valid region
    in (R, completion) is convex where t <= start + mass (offset t, slope 1) and otherwise has
    the chord from (0, start + mass) to (mass, t + mass) as its convex hull."""
    late = at - start > mass
    slope = np.where(late, (at - start) / mass, 1.0)
    offset = np.where(late, start + mass, at)
    return slope, offset


def _ramp_caps(job: JobCeiling, slot_ends: np.ndarray, interval: float) -> np.ndarray:
    """Per slot, the most GPUs the exploration cap allows before the slot ends: 2^j in the j-th
    interval after the job's admission (inf once beyond its most useful count)."""
    admitted = np.ceil(job.arrival / interval) * interval
    j = np.ceil((slot_ends - admitted) / interval) - 1
    caps = np.power(2.0, np.clip(j, 0, 62))
    caps[caps >= job.rates.shape[1] - 1] = np.inf
    return caps
