"""A training job's progress state and its application's rates as the arrays of
:mod:`deepboot_env.sim.progress_loops`, and back.

:class:`ProgressTables` holds one :class:`~deepboot_env.sim.rates.RateTable`'s rates at every
epoch and GPU count, with their rounded-duration suffix sums, as arrays (built once per table and
process: the table is shared, :func:`~deepboot_env.sim.rates.shared_rate_table`).
:func:`job_rows` writes a job's :data:`~deepboot_env.sim.jobs.ProjectionState` into the kernel's
row arrays, and :func:`compiled_run` is :func:`~deepboot_env.sim.jobs._run` through the compiled
kernel: what ``tests/sim/test_progress_kernel.py`` holds to the reference loop.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepboot_env.sim.jobs import ProjectionState, RunResult, TrainingJob
from deepboot_env.sim.rates import RateTable
from deepboot_env.sim.restart import Phase

# the kernel's row layout (deepboot_env.sim.progress_loops; literals there, for numba's cache)
T, PROGRESS, ANCHOR_T, ANCHOR_P, SPEED, SERVICE, COMPLETION, FIRST_START, ARRIVAL, PENDING_T = range(10)
EPOCH, REPLICAS, MULTI, N_PHASES, APP, VERSION, SETTLED, RESTARTS, MAX_PROFILED, CAP_AFTER, PENDING_K = range(11)
P_SECONDS, P_END = range(2)
P_REPLICAS, P_MULTI = range(2)
JF_WIDTH, JI_WIDTH, MAX_PHASES = 10, 11, 2
N_EPOCHS, K_MAX = range(2)
FULL_DELAY, FAST_DELAY = range(2)
RESTART_CODES = {"full": 0, "afe": 1, "pollux": 2}
"""The kernel's restart models (``stopfree`` plans by placement: the kernel does not)."""


@dataclass(frozen=True)
class ProgressTables:
    """One rate table as arrays: ``rates[cls, k, e]`` (class: the multi-node flag; ``k`` up to
    the table's ``max_replicas``), ``suffix[cls, k]`` (:meth:`RateTable.epoch_suffix_list`) and
    ``ends`` (the progress at each epoch's end)."""

    rates: np.ndarray
    suffix: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, table: RateTable) -> ProgressTables:
        """The arrays of ``table`` (cached per table: they are computed from it alone)."""
        tables = _TABLES.get(table)
        if tables is None:
            epochs = len(table.app.epoch_progress)
            rates = np.stack([table.rates(e) for e in range(epochs)], axis=-1)
            width = table.max_replicas + 1
            suffix = np.array([[table.epoch_suffix_list(bool(c), k) for k in range(width)] for c in (0, 1)])
            ends = np.asarray(table.app.epoch_progress, dtype=np.float64)
            tables = _TABLES[table] = cls(np.ascontiguousarray(rates), suffix, ends)
        return tables


_TABLES: weakref.WeakKeyDictionary[RateTable, ProgressTables] = weakref.WeakKeyDictionary()


def job_rows(
    job: TrainingJob, start: ProjectionState | None = None, app: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(jf, ji, pf, pi)``: one row each holding ``job`` (application number ``app``), at
    ``start`` (its time, epoch, progress, phases and anchor; None: as it is now).

    Raises:
        ValueError: a job whose truth is not a fitted rate table, or with more phases than a plan
            holds.
    """
    if not isinstance(job.truth, RateTable):
        kind = type(job.truth).__name__
        raise ValueError(f"job {job.index}: the compiled progress reads a fitted rate table, not {kind}")
    t, epoch, progress, phases, anchor = job.projection_state() if start is None else start
    if len(phases) > MAX_PHASES:
        raise ValueError(f"job {job.index}: {len(phases)} phases; a restart plan holds at most {MAX_PHASES}")
    jf = np.full((1, JF_WIDTH), np.nan)
    jf[0, [T, PROGRESS, SPEED, SERVICE, ARRIVAL]] = t, progress, job.speed, job.attained_service, job.spec.arrival
    if anchor is not None:
        jf[0, ANCHOR_T], jf[0, ANCHOR_P] = anchor
    if job.completion is not None:
        jf[0, COMPLETION] = job.completion
    if job.first_start is not None:
        jf[0, FIRST_START] = job.first_start
    pending = job.pending_profile
    if pending is not None:
        jf[0, PENDING_T] = pending[0]
    ints = (epoch, job.replicas, int(bool(job.rate_class)), len(phases), app, job.version, job._settled)
    caps = (job.num_restarts, job.max_profiled, int(job.cap_after_training), 0 if pending is None else pending[1])
    ji = np.array([[*ints, *caps]], dtype=np.int64)
    pf = np.full((1, MAX_PHASES, 2), np.nan)
    pi = np.zeros((1, MAX_PHASES, 2), dtype=np.int64)
    for p, phase in enumerate(phases):
        pf[0, p, P_SECONDS] = phase.seconds
        pf[0, p, P_END] = np.nan if phase.end is None else phase.end
        pi[0, p] = phase.replicas, int(phase.multi_node)
    return jf, ji, pf, pi


@dataclass
class JobArrays:
    """Every job of an episode as the kernel's rows (``jf``, ``ji``, ``pf``, ``pi`` and
    ``counts``, GPUs per node) and its applications' tables stacked (``tables``: rates, suffix,
    ends, dims and delays, by application number; :func:`~deepboot_env.sim.progress_loops.app_tables`),
    under restart model ``model`` (:data:`RESTART_CODES`)."""

    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    tables: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    model: int

    @classmethod
    def empty(cls, nodes: int) -> JobArrays:
        """No job (a drain's training side), on ``nodes`` nodes, with one empty table."""
        floats, ints = np.zeros((0, JF_WIDTH)), np.zeros((0, JI_WIDTH), dtype=np.int64)
        phases = (np.zeros((0, MAX_PHASES, 2)), np.zeros((0, MAX_PHASES, 2), dtype=np.int64))
        return cls((floats, ints, *phases, np.zeros((0, nodes), dtype=np.int64)), stacked_tables([]), 0)

    @classmethod
    def of(cls, jobs: Sequence[TrainingJob], restart: str) -> JobArrays:
        """The rows of ``jobs`` as they are now.

        Raises:
            ValueError: a restart model or a job the kernel does not take (:func:`job_rows`).
        """
        if restart not in RESTART_CODES:
            raise ValueError(f"the compiled progress plans restarts by {', '.join(RESTART_CODES)}, not {restart!r}")
        numbers: dict[int, int] = {}
        truths: list[RateTable] = []
        rows = []
        for job in jobs:
            app = numbers.setdefault(id(job.truth), len(numbers))
            if app == len(truths):
                truths.append(job.truth)  # type: ignore[arg-type]  # job_rows checks it
            rows.append(job_rows(job, app=app))
        stacked = tuple(np.concatenate([row[i] for row in rows]) for i in range(4))
        counts = np.array([job.counts for job in jobs], dtype=np.int64).reshape(len(jobs), -1)
        return cls((*stacked, counts), stacked_tables(truths), RESTART_CODES[restart])  # type: ignore[arg-type]


def stacked_tables(truths: Sequence[RateTable]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The :class:`ProgressTables` of ``truths``, padded to the largest and stacked, with each
    one's (epochs, ``max_replicas``) and its application's (full, fast) restart delays."""
    parts = [ProgressTables.of(truth) for truth in truths]
    width = max((p.rates.shape[1] for p in parts), default=1)
    epochs = max((p.rates.shape[2] for p in parts), default=1)
    count = max(len(parts), 1)  # at least one (empty) table: the arrays keep their dimensions
    rates = np.zeros((count, 2, width, epochs))
    suffix = np.full((count, 2, width, epochs + 1), np.inf)
    ends = np.zeros((count, epochs))
    dims = np.zeros((count, 2), dtype=np.int64)
    delays = np.zeros((count, 2))
    for a, (part, truth) in enumerate(zip(parts, truths, strict=True)):
        _, k, e = part.rates.shape
        rates[a, :, :k, :e], suffix[a, :, :k, : e + 1], ends[a, :e] = part.rates, part.suffix, part.ends
        dims[a] = e, k - 1
        delays[a] = truth.app.full_restart_delay, truth.app.fast_restart_delay
    return rates, suffix, ends, dims, delays


def compiled_run(job: TrainingJob, t1: float, start: ProjectionState) -> RunResult:
    """:func:`~deepboot_env.sim.jobs._run` ``(job, t1, start)`` by the compiled kernel: the same
    (epoch, progress, phases left, anchor, completion); the phases keep their ``counts``."""
    from deepboot_env.sim.progress_loops import advance_rows  # lazy: it imports numba

    jf, ji, pf, pi = job_rows(job, start)
    tables = ProgressTables.of(job.truth)  # type: ignore[arg-type]  # job_rows checked it
    out = np.empty(1)
    advance_rows(jf, ji, pf, pi, np.array([t1], dtype=np.float64), tables.rates, tables.suffix, tables.ends, out)
    phases = start[3]
    left = int(ji[0, N_PHASES])
    kept = [
        Phase(
            float(pf[0, p, P_SECONDS]),
            int(pi[0, p, P_REPLICAS]),
            bool(pi[0, p, P_MULTI]),
            phases[len(phases) - left + p].counts,
            _none_if_nan(pf[0, p, P_END]),
        )
        for p in range(left)
    ]
    anchor = None if math.isnan(jf[0, ANCHOR_T]) else (float(jf[0, ANCHOR_T]), float(jf[0, ANCHOR_P]))
    return int(ji[0, EPOCH]), float(jf[0, PROGRESS]), kept, anchor, _none_if_nan(out[0])


def _none_if_nan(value: float) -> float | None:
    """``value`` as a float, None for NaN (the kernel's None)."""
    return None if math.isnan(value) else float(value)
