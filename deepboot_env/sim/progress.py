"""A training job's progress state and its application's rates as the arrays of
:mod:`deepboot_env.sim.progress_loops`, and back.

:class:`ProgressTables` holds one truth's rates (a fitted
:class:`~deepboot_env.sim.rates.RateTable`, or the measured
:class:`~deepboot_env.sim.measured.MeasuredRates`) at every epoch and placement class, with their
rounded-duration suffix sums, as arrays (built once per truth and process: truths are shared,
:func:`~deepboot_env.sim.rates.shared_rate_table`).
:func:`job_rows` writes a job's :data:`~deepboot_env.sim.jobs.ProjectionState` into the kernel's
row arrays, and :func:`compiled_run` is :func:`~deepboot_env.sim.jobs._run` through the compiled
kernel: what ``tests/sim/test_progress_kernel.py`` holds to the reference loop.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deepboot_env.sim.jobs import ProjectionState, RunResult, TrainingJob
from deepboot_env.sim.measured import MeasuredRates, canonical_shape
from deepboot_env.sim.rates import RateTable
from deepboot_env.sim.restart import Phase

# the kernel's row layout (deepboot_env.sim.progress_loops; literals there, for numba's cache)
T, PROGRESS, ANCHOR_T, ANCHOR_P, SPEED, SERVICE, COMPLETION, FIRST_START, ARRIVAL, PENDING_T = range(10)
EPOCH, REPLICAS, CLASS, N_PHASES, APP, VERSION, SETTLED, RESTARTS, MAX_PROFILED, CAP_AFTER, PENDING_K = range(11)
P_SECONDS, P_END = range(2)
P_REPLICAS, P_CLASS = range(2)
JF_WIDTH, JI_WIDTH, MAX_PHASES = 10, 11, 2
N_EPOCHS, K_MAX, MEASURED, N_SHAPES = range(4)
FULL_DELAY, FAST_DELAY = range(2)
GRID_NODES = 16
RESTART_CODES = {"full": 0, "afe": 1, "pollux": 2}
"""The kernel's restart models (``stopfree`` plans by placement: the kernel does not)."""

Truth = RateTable | MeasuredRates
"""A job's truth the kernel reads: the fitted rate table, or the measured step times' rates."""


@dataclass(frozen=True)
class ProgressTables:
    """One truth as arrays: ``rates[c, e]`` and ``suffix[c]`` (:meth:`RateTable.epoch_suffix_list`)
    by placement class ``c`` (:func:`class_id`), ``ends`` (the progress at each epoch's end),
    ``model`` (the fitted rates by [multi-node flag, GPUs, epoch]: what the schedulers and the
    reclaim rule weigh) and ``shapes`` (the measured truth's measured shapes, as keys: their
    digits as a number; none for the fitted truth)."""

    rates: np.ndarray
    suffix: np.ndarray
    ends: np.ndarray
    model: np.ndarray
    shapes: np.ndarray

    @property
    def measured(self) -> bool:
        """Whether the classes are the measured truth's (shapes, then the grid)."""
        return len(self.rates) != 2 * self.model.shape[1]

    @classmethod
    def of(cls, truth: Truth) -> ProgressTables:
        """The arrays of ``truth`` (cached per truth: they are computed from it alone; the
        measured truth's every class is computed here once per process, 1.2 CPU-s for the six
        applications of test/test-01)."""
        tables = _TABLES.get(truth)
        if tables is None:
            table = truth if isinstance(truth, RateTable) else truth.model
            epochs = len(table.app.epoch_progress)
            model = np.stack([table.rates(e) for e in range(epochs)], axis=-1)
            classes = _classes(truth, table.max_replicas)
            rates = np.array([truth.rate_column(c, k) if k else [0.0] * epochs for c, k in classes])
            suffix = np.array(
                [truth.epoch_suffix_list(c, max(k, 1)) if k else [np.inf] * epochs + [0.0] for c, k in classes]
            )
            shapes = np.array([int(c) for c, _ in classes if isinstance(c, str)], dtype=np.int64)
            ends = np.asarray(table.app.epoch_progress, dtype=np.float64)
            tables = _TABLES[truth] = cls(
                rates.reshape(len(classes), epochs), suffix, ends, np.ascontiguousarray(model), shapes
            )
        return tables


def _classes(truth: Truth, kmax: int) -> list[tuple[Any, int]]:
    """``truth``'s placement classes in the kernel's order, each with its GPUs (0: a class no
    placement has): the fitted truth's (multi-node flag, GPUs), the measured truth's measured
    shapes (by key), then its (nodes, GPUs) grid."""
    if isinstance(truth, RateTable):
        return [(flag, k) for flag in (False, True) for k in range(kmax + 1)]
    shapes: list[tuple[Any, int]] = [(shape, sum(map(int, shape))) for shape in sorted(truth.steps.shapes, key=int)]
    return shapes + [((n, k), k if n <= k else 0) for n in range(1, GRID_NODES + 1) for k in range(1, kmax + 1)]


def class_id(tables: ProgressTables, counts: list[int]) -> int:
    """The kernel's class of GPUs per node ``counts`` (at least one GPU) in ``tables``' truth
    (:func:`~deepboot_env.sim.progress_loops.class_of`)."""
    kmax = tables.model.shape[1] - 1
    used = [c for c in counts if c]
    k = sum(used)
    if not tables.measured:
        return (kmax + 1 if len(used) > 1 else 0) + min(k, kmax)
    shape = canonical_shape(used)
    if max(shape) <= 9:
        hits = np.flatnonzero(tables.shapes == int("".join(map(str, shape))))
        if len(hits):
            return int(hits[0])
    return len(tables.shapes) + (min(len(shape), GRID_NODES) - 1) * kmax + k - 1


_TABLES: weakref.WeakKeyDictionary[Truth, ProgressTables] = weakref.WeakKeyDictionary()


def job_rows(
    job: TrainingJob, start: ProjectionState | None = None, app: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(jf, ji, pf, pi)``: one row each holding ``job`` (application number ``app``), at
    ``start`` (its time, epoch, progress, phases and anchor; None: as it is now).

    Raises:
        ValueError: a job whose truth the kernel does not read, or with more phases than a plan
            holds.
    """
    truth = job.truth
    if not isinstance(truth, RateTable | MeasuredRates):
        raise ValueError(f"job {job.index}: the compiled progress reads no {type(truth).__name__}")
    tables = ProgressTables.of(truth)
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
    cls = class_id(tables, job.counts) if job.replicas else 0
    ints = (epoch, job.replicas, cls, len(phases), app, job.version, job._settled)
    caps = (job.num_restarts, job.max_profiled, int(job.cap_after_training), 0 if pending is None else pending[1])
    ji = np.array([[*ints, *caps]], dtype=np.int64)
    pf = np.full((1, MAX_PHASES, 2), np.nan)
    pi = np.zeros((1, MAX_PHASES, 2), dtype=np.int64)
    for p, phase in enumerate(phases):
        pf[0, p, P_SECONDS] = phase.seconds
        pf[0, p, P_END] = np.nan if phase.end is None else phase.end
        # a phase that trains (stop-free scaling's) says on which nodes: its class; a stall 0
        pi[0, p] = phase.replicas, class_id(tables, list(phase.counts)) if phase.replicas else 0
    return jf, ji, pf, pi


@dataclass
class JobArrays:
    """Every job of an episode as the kernel's rows (``jf``, ``ji``, ``pf``, ``pi`` and
    ``counts``, GPUs per node) and its applications' tables stacked (``tables``, by application
    number: :func:`stacked_tables`),
    under restart model ``model`` (:data:`RESTART_CODES`)."""

    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    tables: tuple[np.ndarray, ...]
    model: int

    @classmethod
    def of(cls, jobs: Sequence[TrainingJob], restart: str) -> JobArrays:
        """The rows of ``jobs`` as they are now.

        Raises:
            ValueError: a restart model or a job the kernel does not take (:func:`job_rows`).
        """
        if restart not in RESTART_CODES:
            raise ValueError(f"the compiled progress plans restarts by {', '.join(RESTART_CODES)}, not {restart!r}")
        numbers: dict[int, int] = {}
        truths: list[Truth] = []
        rows = []
        for job in jobs:
            app = numbers.setdefault(id(job.truth), len(numbers))
            if app == len(truths):
                truths.append(job.truth)  # type: ignore[arg-type]  # job_rows checks it
            rows.append(job_rows(job, app=app))
        stacked = tuple(np.concatenate([row[i] for row in rows]) for i in range(4))
        counts = np.array([job.counts for job in jobs], dtype=np.int64).reshape(len(jobs), -1)
        return cls((*stacked, counts), stacked_tables(truths), RESTART_CODES[restart])  # type: ignore[arg-type]


def stacked_tables(truths: Sequence[Truth]) -> tuple[np.ndarray, ...]:
    """The :class:`ProgressTables` of ``truths``, padded to the largest and stacked in the
    kernel's order (:data:`~deepboot_env.sim.progress_loops.T_MODEL` ...): the model's rates, the
    truth's rates and suffix sums by class, the ends, each one's (epochs, ``max_replicas``,
    measured, shapes), its application's (full, fast) restart delays and its shapes' keys."""
    parts = [ProgressTables.of(truth) for truth in truths]
    width = max((p.model.shape[1] for p in parts), default=1)
    epochs = max((len(p.ends) for p in parts), default=1)
    classes = max((len(p.rates) for p in parts), default=1)
    shapes = max((len(p.shapes) for p in parts), default=1)
    count = max(len(parts), 1)  # at least one (empty) table: the arrays keep their dimensions
    model = np.zeros((count, 2, width, epochs))
    rates = np.zeros((count, classes, epochs))
    suffix = np.full((count, classes, epochs + 1), np.inf)
    ends = np.zeros((count, epochs))
    dims = np.zeros((count, 4), dtype=np.int64)
    delays = np.zeros((count, 2))
    keys = np.full((count, shapes), -1, dtype=np.int64)
    for a, (part, truth) in enumerate(zip(parts, truths, strict=True)):
        k, e, c = part.model.shape[1], len(part.ends), len(part.rates)
        model[a, :, :k, :e], ends[a, :e] = part.model, part.ends
        rates[a, :c, :e], suffix[a, :c, : e + 1] = part.rates, part.suffix
        keys[a, : len(part.shapes)] = part.shapes
        dims[a] = e, k - 1, int(part.measured), len(part.shapes)
        delays[a] = truth.app.full_restart_delay, truth.app.fast_restart_delay
    return model, rates, suffix, ends, dims, delays, keys


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
            phases[len(phases) - left + p].multi_node,
            phases[len(phases) - left + p].counts,
            none_if_nan(pf[0, p, P_END]),
        )
        for p in range(left)
    ]
    anchor = None if math.isnan(jf[0, ANCHOR_T]) else (float(jf[0, ANCHOR_T]), float(jf[0, ANCHOR_P]))
    return int(ji[0, EPOCH]), float(jf[0, PROGRESS]), kept, anchor, none_if_nan(out[0])


def none_if_nan(value: float) -> float | None:
    """``value`` as a float, None for NaN (the rows' None)."""
    return None if math.isnan(value) else float(value)
