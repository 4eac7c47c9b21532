"""Measured step times per placement shape, interpolated as the Pollux and DeepBoot simulators do.

Both originals advance a job at the step time *measured* for its placement shape at its
micro-batch m (docs/goodput.md §9). The measurements are shipped as ``data/step_times.json``
(built by :mod:`traces.step_times`) and interpolated here:

* the shape is the job's GPUs per node in node order with the empty nodes dropped, rotated to its
  lexicographically smallest rotation (``(2, 1)`` and ``(1, 2)`` are shape ``12``; ``(1, 2, 3)``
  and ``(2, 3, 1)`` are ``123``, but ``(1, 3, 2)`` is ``132``, measured separately);
* a shape of the trace set: linear interpolation in m between its measured local batches;
* any other shape (more than 4 nodes, or more GPUs on a node than the set has): piecewise-linear
  (Delaunay) interpolation in (min(nodes, 16), GPUs, m) over the per-(nodes, GPUs, m) means of
  the set's shapes together with the ``scalability.csv`` rows;
* outside the measurements (m outside a shape's measured range, or a point outside the
  interpolation's hull), where the originals stop with an error, NaN is returned.

:class:`StepTimes` holds one application's measurements in one trace set (``pollux``: the
artifact's placements; ``deepboot``: DeepBoot's copy, which adds every shape again with its digits
shifted by 4).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

TRACE_SETS: tuple[str, ...] = ("pollux", "deepboot")
"""Placement trace sets of the table (docs/goodput.md §9.3)."""

STEP_TIMES_PATH = "data/step_times.json"
"""The shipped step-time table, relative to this package."""

GRID_NODE_CAP = 16
"""Shapes beyond the known ones are interpolated at min(nodes, 16), as in both originals."""

PlacementClass = str | tuple[int, int]
"""Key of a placement's measured rates: a known shape id (``"44"``) or, for any other shape,
(min(nodes, 16), GPUs) on the interpolation grid."""

_CLASS_CACHE_MAX = 16384


def validate_trace_set(trace_set: str) -> str:
    """Return ``trace_set`` if known, else raise ``ValueError`` listing the choices."""
    if trace_set not in TRACE_SETS:
        raise ValueError(f"unknown trace set {trace_set!r}; expected one of {', '.join(TRACE_SETS)}")
    return trace_set


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

            points, values = self.grid_points()
            self._grid = LinearNDInterpolator(points, values)
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
    return step_times_from_json(json.loads(Path(path).read_text()), trace_set, str(path))


@lru_cache(maxsize=len(TRACE_SETS))
def _shipped_step_times(trace_set: str) -> dict[str, StepTimes]:
    text = resources.files("deepboot_env.sim").joinpath(STEP_TIMES_PATH).read_text()
    return step_times_from_json(json.loads(text), trace_set, "deepboot_env/sim/" + STEP_TIMES_PATH)
