"""The measured truth: jobs progress at the step times measured for their placement shape.

With ``SimConfig(truth="measured")`` a training job advances as in the Pollux and DeepBoot
simulators (docs/goodput.md §9): the batch configuration is still chosen with the calibrated
model (:class:`~deepboot_env.sim.rates.RateTable`, which is also what every scheduler sees),
but one optimiser step then takes the time *measured* for the job's placement shape at its
micro-batch m, interpolated in the traces shipped as ``data/step_times.json``
(:mod:`traces.step_times`):

* the shape is the job's GPUs per node in node order with the empty nodes dropped, rotated to its
  lexicographically smallest rotation (``(2, 1)`` and ``(1, 2)`` are shape ``12``; ``(1, 2, 3)``
  and ``(2, 3, 1)`` are ``123``, but ``(1, 3, 2)`` is ``132``, measured separately);
* a shape of the trace set: linear interpolation in m between its measured local batches;
* any other shape (more than 4 nodes, or more GPUs on a node than the set has): piecewise-linear
  (Delaunay) interpolation in (min(nodes, 16), GPUs, m) over the per-(nodes, GPUs, m) means of
  the set's shapes together with the ``scalability.csv`` rows;
* a step with s accumulation passes takes ``step + s * (step - sync)``, and the job progresses at
  ``gain / that`` with the gain of the batch it uses (as with the fitted model);
* outside the measurements (m outside a shape's measured range, or a point outside the
  interpolation's hull), where the originals stop with an error, the fitted model's time is used.

:class:`StepTimes` holds one application's measurements in one trace set (``pollux``: the
artifact's placements; ``deepboot``: DeepBoot's copy, which adds every shape again with its digits
shifted by 4). :class:`MeasuredRates` is the per-epoch rate table keyed by placement class that
:class:`~deepboot_env.sim.jobs.TrainingJob` advances with, cached per (application, batch
policy, trace set) like the rate tables (:func:`shared_measured_rates`).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from deepboot_env.sim.choices import validate_choice
from deepboot_env.sim.files import read_table
from deepboot_env.sim.goodput import iteration_time, statistical_gain
from deepboot_env.sim.rates import RateTable, bounds_after, epoch_suffix, finish_time_from_suffix, seconds_from
from deepboot_env.sim.restart import Phase

TRUTHS: tuple[str, ...] = ("fitted", "measured")
"""Ground truths of a job's progress (``SimConfig.truth``)."""

TRACE_SETS: tuple[str, ...] = ("pollux", "deepboot")
"""Placement traces of the measured truth (``SimConfig.trace_set``)."""

STEP_TIMES_PATH = "data/step_times.json"
"""The shipped step-time table, relative to this package."""

GRID_NODE_CAP = 16
"""Shapes beyond the known ones are interpolated at min(nodes, 16), as in both originals."""

PlacementClass = str | tuple[int, int]
"""Key of a placement's measured rates: a known shape id (``"44"``) or, for any other shape,
(min(nodes, 16), GPUs) on the interpolation grid."""

_CLASS_CACHE_MAX = 16384


def validate_truth(truth: str) -> str:
    """Return ``truth`` if known, else raise ``ValueError`` listing the choices."""
    return validate_choice("truth", truth, TRUTHS)


def validate_trace_set(trace_set: str) -> str:
    """Return ``trace_set`` if known, else raise ``ValueError`` listing the choices."""
    return validate_choice("trace set", trace_set, TRACE_SETS)


def canonical_shape(counts: Sequence[int]) -> tuple[int, ...]:
    """GPUs per node without the empty nodes, rotated to the lexicographically smallest rotation."""
    used = tuple(int(c) for c in counts if c)
    if not used:
        return ()
    return min(used[i:] + used[:i] for i in range(len(used)))


def class_nodes_replicas(cls: PlacementClass) -> tuple[int, int]:
    """(nodes, GPUs) of a placement class (nodes capped at 16 for a grid class)."""
    if isinstance(cls, str):
        return len(cls), sum(int(c) for c in cls)
    return cls


class StepTimes:
    """Measured step and sync times of one application in one trace set.

    Args:
        app: application name.
        trace_set: trace set name.
        shapes: shape id -> (local batches ascending, step times, sync times).
        scalability: rows (num_nodes, num_replicas, local_bsz, step_time, sync_time) of
            ``scalability.csv``, in file order.
    """

    def __init__(
        self,
        app: str,
        trace_set: str,
        shapes: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
        scalability: np.ndarray,
    ) -> None:
        self.app = app
        self.trace_set = trace_set
        self.shapes = dict(shapes)
        self.scalability = np.asarray(scalability, dtype=float).reshape(-1, 5)
        self._grid: Any = None
        self._classes: dict[tuple[int, ...], PlacementClass] = {}

    def placement_class(self, counts: Sequence[int]) -> PlacementClass:
        """The class of GPUs per node ``counts`` (cached): its shape id if the set measured it,
        else (min(nodes, 16), GPUs)."""
        key = tuple(counts)
        cls = self._classes.get(key)
        if cls is None:
            shape = canonical_shape(key)
            ident = "".join(map(str, shape)) if shape and max(shape) <= 9 else ""
            cls = ident if ident in self.shapes else (min(len(shape), GRID_NODE_CAP), sum(shape))
            if len(self._classes) >= _CLASS_CACHE_MAX:
                self._classes.clear()
            self._classes[key] = cls
        return cls

    def grid_points(self) -> tuple[np.ndarray, np.ndarray]:
        """The points (nodes, GPUs, m) and values (step, sync) of the interpolation beyond the
        known shapes: the means per (nodes, GPUs, m) of every row of the set's shapes, in
        ascending order, then the ``scalability.csv`` rows in file order (the originals' order,
        which fixes the Delaunay triangulation)."""
        rows = []
        for ident, (m, step, sync) in self.shapes.items():
            n, k = len(ident), sum(int(c) for c in ident)
            rows.append(np.column_stack([np.full(len(m), n), np.full(len(m), k), m, step, sync]))
        table = np.concatenate(rows) if rows else np.zeros((0, 5))
        order = np.lexsort((table[:, 2], table[:, 1], table[:, 0]))
        table = table[order]
        keys, start, counts = np.unique(table[:, :3], axis=0, return_index=True, return_counts=True)
        sums = np.add.reduceat(table[:, 3:], start, axis=0) if len(table) else np.zeros((0, 2))
        means = sums / counts[:, None]
        points = np.concatenate([keys, self.scalability[:, :3]])
        values = np.concatenate([means, self.scalability[:, 3:]])
        return points, values

    def _interpolator(self) -> Any:
        if self._grid is None:
            from scipy.interpolate import LinearNDInterpolator
            from scipy.spatial import Delaunay

            points, values = self.grid_points()
            tri = Delaunay(points)  # LinearNDInterpolator's own triangulation (same qhull options)
            if getattr(tri, "_transform", False) is None:
                # scipy computes the barycentric transforms lazily, one LAPACK call per simplex;
                # with a threaded BLAS on a busy machine that takes seconds instead of milliseconds.
                # The same transforms in closed form (if scipy ever renames the cache, it simply
                # computes them itself).
                tri._transform = barycentric_transforms(points, tri.simplices)
            self._grid = LinearNDInterpolator(tri, values)
        return self._grid

    def times(self, cls: PlacementClass, local_bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Measured (step, sync) seconds of class ``cls`` at micro-batches ``local_bsz`` (NaN
        outside the measurements)."""
        m = np.asarray(local_bsz, dtype=float)
        if isinstance(cls, str):
            xs, step, sync = self.shapes[cls]
            nan = float("nan")
            return np.interp(m, xs, step, left=nan, right=nan), np.interp(m, xs, sync, left=nan, right=nan)
        n, k = cls
        query = np.column_stack([np.full(m.size, float(n)), np.full(m.size, float(k)), m.ravel()])
        out = self._interpolator()(query)
        return out[:, 0].reshape(m.shape), out[:, 1].reshape(m.shape)


def barycentric_transforms(points: np.ndarray, simplices: np.ndarray) -> np.ndarray:
    """The affine maps to barycentric coordinates of 3-D simplices, as scipy's
    ``Delaunay.transform``: entry ``[i, :3]`` is the inverse of the 3x3 matrix whose column j is
    vertex j minus vertex 3 of simplex i, entry ``[i, 3]`` is vertex 3; all NaN for a simplex whose
    reciprocal 1-norm condition number is below 1000 machine epsilons (a flat one), as scipy
    marks them. Computed in closed form (cofactors), vectorised over the simplices."""
    v = np.asarray(points, dtype=float)[simplices]  # (S, 4, 3)
    r = v[:, 3, :]
    t = np.transpose(v[:, :3, :] - r[:, None, :], (0, 2, 1))  # t[i, row, col] = v_col[row] - r[row]
    a, b, c = t[:, 0, 0], t[:, 0, 1], t[:, 0, 2]
    d, e, f = t[:, 1, 0], t[:, 1, 1], t[:, 1, 2]
    g, h, k = t[:, 2, 0], t[:, 2, 1], t[:, 2, 2]
    adjugate = np.stack(
        [
            np.stack([e * k - f * h, c * h - b * k, b * f - c * e], axis=-1),
            np.stack([f * g - d * k, a * k - c * g, c * d - a * f], axis=-1),
            np.stack([d * h - e * g, b * g - a * h, a * e - b * d], axis=-1),
        ],
        axis=1,
    )
    det = a * adjugate[:, 0, 0] + b * adjugate[:, 1, 0] + c * adjugate[:, 2, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = adjugate / det[:, None, None]
        rcond = 1.0 / (np.abs(t).sum(axis=2).max(axis=1) * np.abs(inverse).sum(axis=2).max(axis=1))
    flat = ~(np.isfinite(rcond) & (rcond >= 1000 * np.finfo(float).eps))
    out = np.empty((len(simplices), 4, 3))
    out[:, :3, :] = inverse
    out[:, 3, :] = r
    out[flat] = np.nan
    return out


def _series(value: object, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not (isinstance(value, list) and len(value) == 3):
        raise ValueError(f"{where}: expected [local batches, step times, sync times]")
    m, step, sync = (np.asarray(v, dtype=float) for v in value)
    if not (m.ndim == 1 and m.shape == step.shape == sync.shape and len(m) > 0 and np.all(np.diff(m) > 0)):
        raise ValueError(f"{where}: the three lists must be equally long, with ascending local batches")
    return m, step, sync


def step_times_from_json(data: Mapping[str, Any], trace_set: str, origin: str) -> dict[str, StepTimes]:
    """The :class:`StepTimes` of every application of ``trace_set`` in a ``step_times.json`` object.

    Raises:
        ValueError: if the set or an application is missing or malformed.
    """
    validate_trace_set(trace_set)
    if not isinstance(data, Mapping):
        raise ValueError(f"{origin}: a step-time table must be a JSON object")
    sets = data.get("trace_sets", {})
    if data.get("version") != 1 or trace_set not in sets:
        raise ValueError(f"{origin}: no trace set {trace_set!r} (version 1 expected; has {', '.join(sets)})")
    chosen = sets[trace_set]
    out: dict[str, StepTimes] = {}
    for app, obj in data.get("apps", {}).items():
        pool = obj.get("shapes", {})
        links = {ident: ident for ident in chosen.get("shapes", {}).get(app, [])}
        links.update(chosen.get("copies", {}).get(app, {}))
        try:
            shapes = {
                ident: _series(pool[stored], f"{origin}: {app} shape {stored}") for ident, stored in links.items()
            }
        except KeyError as exc:
            raise ValueError(f"{origin}: {app}: trace set {trace_set!r} names unknown shape {exc.args[0]!r}") from None
        out[app] = StepTimes(app, trace_set, shapes, np.asarray(obj.get("scalability", []), dtype=float))
    return out


def load_step_times(trace_set: str, path: str | Path | None = None) -> dict[str, StepTimes]:
    """The measured step times of ``trace_set`` from ``path`` or the shipped table."""
    if path is None:
        return dict(_shipped_step_times(validate_trace_set(trace_set)))
    return step_times_from_json(read_table(path, "a step-time table"), trace_set, str(path))


@lru_cache(maxsize=len(TRACE_SETS))
def _shipped_step_times(trace_set: str) -> dict[str, StepTimes]:
    text = resources.files("deepboot_env.sim").joinpath(STEP_TIMES_PATH).read_text()
    return step_times_from_json(json.loads(text), trace_set, "deepboot_env/sim/" + STEP_TIMES_PATH)


class MeasuredRates:
    """Per-epoch progress rates of the measured truth by placement class, for one rate table.

    The batch configuration of every epoch is the one ``model`` chooses at the class's (multi-node
    flag, GPUs); its step takes the measured time (:class:`StepTimes`). Offers the methods of
    :class:`~deepboot_env.sim.rates.RateTable` that advance a job, with the placement class in
    place of the multi-node flag (see :class:`~deepboot_env.sim.jobs.TrainingJob`).

    Args:
        model: the fitted rate table (batch choice; the schedulers' view).
        steps: the application's measured step times.
    """

    def __init__(self, model: RateTable, steps: StepTimes) -> None:
        self.model = model
        self.app = model.app
        self.steps = steps
        self._thresholds: list[float] = self.app.epoch_progress.tolist()
        self._zeros = [0.0] * len(self._thresholds)
        self._columns: dict[PlacementClass, list[float]] = {}
        self._suffix: dict[PlacementClass, list[float]] = {}
        self._after: dict[PlacementClass, list[float]] = {}

    def placement_class(self, counts: Sequence[int], multi_node: bool) -> PlacementClass:
        """The class of GPUs per node ``counts`` (:meth:`StepTimes.placement_class`)."""
        return self.steps.placement_class(counts)

    def phase_class(self, phase: Phase) -> PlacementClass:
        """The class of the replicas that train during a restart ``phase``.

        Raises:
            ValueError: if the phase does not say on which nodes they train (``counts``).
        """
        if sum(phase.counts) != phase.replicas:
            raise ValueError(f"a restart phase training {phase.replicas} replicas needs their GPUs per node")
        return self.steps.placement_class(phase.counts)

    def iteration_times(self, cls: PlacementClass, local_bsz: np.ndarray, accum_steps: np.ndarray) -> np.ndarray:
        """Seconds of one optimiser step of class ``cls``: ``step + s * (step - sync)`` measured,
        or the fitted model's time where the measurements do not reach."""
        m = np.asarray(local_bsz, dtype=float)
        s = np.asarray(accum_steps, dtype=float)
        step, sync = self.steps.times(cls, m)
        measured = step + s * (step - sync)
        missing = np.isnan(measured)
        if np.any(missing):
            n, k = class_nodes_replicas(cls)
            fitted = iteration_time(self.app.throughput_params, np.full(m.shape, n), np.full(m.shape, k), m, s)
            measured = np.where(missing, fitted, measured)
        return measured

    def rate_column(self, cls: PlacementClass, replicas: int) -> list[float]:
        """The progress rate of every epoch at class ``cls`` (cached; shared: do not modify)."""
        if replicas <= 0:
            return self._zeros
        column = self._columns.get(cls)
        if column is None:
            column = self._columns[cls] = self._column(cls)
        return column

    def _column(self, cls: PlacementClass) -> list[float]:
        n, k = class_nodes_replicas(cls)
        app = self.app
        m, s, feasible = self.model.batch_columns(n > 1, k)
        t_iter = self.iteration_times(cls, m, s)
        total = k * m * (s + 1)
        sqr, var = _stats_per_epoch(app.traced_batch_sizes, app.grad_sqr, app.grad_var, total)
        gain = statistical_gain(total, app.init_batch_size, sqr, var)
        return np.where(feasible, gain / t_iter, 0.0).tolist()

    def epoch_suffix_list(self, cls: PlacementClass, replicas: int) -> list[float]:
        """Suffix sums of the rounded per-epoch durations at class ``cls`` (cached; see
        :func:`~deepboot_env.sim.rates.epoch_suffix`)."""
        suffix = self._suffix.get(cls)
        if suffix is None:
            column = self.rate_column(cls, replicas)
            suffix = self._suffix[cls] = epoch_suffix(self.app.epoch_progress, column).tolist()
        return suffix

    def finish_time(self, t: float, epoch: int, cls: PlacementClass, replicas: int) -> float | None:
        """Completion time of a job starting ``epoch`` at ``t`` on a constant placement of class
        ``cls`` (None if some rate is 0)."""
        return finish_time_from_suffix(self.epoch_suffix_list(cls, replicas), t, epoch)

    def min_seconds_after(self, epoch: int, placement_class: PlacementClass | None = None) -> float:
        """A lower bound on the seconds a job training at ``placement_class`` needs from the end
        of ``epoch`` to finish (the fastest rate of that class over all epochs, see
        :func:`~deepboot_env.sim.rates.bounds_after`); 0 without a class."""
        if placement_class is None:
            return 0.0
        bounds = self._after.get(placement_class)
        if bounds is None:
            n, k = class_nodes_replicas(placement_class)
            peak = max(self.rate_column(placement_class, k))
            bounds = self._after[placement_class] = bounds_after(self._thresholds, peak)
        return bounds[epoch]

    def min_seconds_from(self, epoch: int, progress: float, cls: PlacementClass, replicas: int) -> float:
        """A lower bound on the seconds a job at ``progress`` in ``epoch`` needs on class ``cls``
        from now on (see :meth:`~deepboot_env.sim.rates.RateTable.min_seconds_from`)."""
        rate = self.rate_column(cls, replicas)[epoch]
        if rate <= 0:
            return float("inf")
        return seconds_from(self._thresholds, self.epoch_suffix_list(cls, replicas), rate, epoch, progress)


def _stats_per_epoch(
    batches: np.ndarray, grad_sqr: np.ndarray, grad_var: np.ndarray, total: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gradient statistics of epoch ``e`` at total batch ``total[e]``, for every epoch at once:
    :meth:`~deepboot_env.sim.apps.AppProfile.grad_stats` (linear in the batch, clamped to the
    traced range) vectorised over the epochs, with numpy's ``interp`` arithmetic."""
    x = np.clip(total, batches[0], batches[-1])
    j = np.clip(np.searchsorted(batches, x, side="right") - 1, 0, len(batches) - 1)
    rows = np.arange(len(x))
    out = []
    for table in (grad_sqr, grad_var):
        lo = table[rows, j]
        if len(batches) == 1:
            out.append(lo)
            continue
        j1 = np.minimum(j + 1, len(batches) - 1)
        span = batches[j1] - batches[j]
        safe = np.where(span > 0, span, 1.0)
        slope = (table[rows, j1] - lo) / safe
        out.append(np.where(span > 0, slope * (x - batches[j]) + lo, lo))
    return out[0], out[1]


_SHARED: weakref.WeakKeyDictionary[RateTable, dict[str, MeasuredRates]] = weakref.WeakKeyDictionary()


def shared_measured_rates(model: RateTable, trace_set: str) -> MeasuredRates:
    """The process-wide :class:`MeasuredRates` of rate table ``model`` in ``trace_set`` (a pure
    cache of deterministic values, shared like :func:`~deepboot_env.sim.rates.shared_rate_table`)."""
    per_set = _SHARED.setdefault(model, {})
    rates = per_set.get(trace_set)
    if rates is None:
        steps = _shipped_step_times(validate_trace_set(trace_set))
        if model.app.name not in steps:
            raise ValueError(f"the step-time table has no application {model.app.name!r} in trace set {trace_set!r}")
        rates = per_set[trace_set] = MeasuredRates(model, steps[model.app.name])
    return rates
