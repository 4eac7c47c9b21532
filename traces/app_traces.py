"""Reading the measured application traces that :mod:`traces.calibrate` fits.

One folder per application holds the Pollux artifact files (docs/goodput.md §6.1):
``origin_placements.csv`` (placement id, local_bsz, step_time, sync_time; 1-4 nodes),
``scalability.csv`` (num_nodes, num_replicas, local_bsz, step_time, sync_time; 6-16 nodes) and
one ``validation-<B>.csv`` per traced total batch B (one row per epoch). :func:`read_app_traces`
reads a folder into a :class:`RawAppTraces` of :class:`TimingTable` and :class:`ValidationTrace`;
every problem is a :class:`TraceFormatError` naming the file, row and column.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deepboot_env.limits import open_regular

_PLACEMENT_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
_SCALABILITY_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
_VALIDATION_COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")
_VALIDATION_RE = re.compile(r"^validation-(\d+)\.csv$")
_PLACEMENT_RE = re.compile(r"^[1-9]+$")


class TraceFormatError(ValueError):
    """A raw trace file is missing or malformed; the message names the file, row and column."""


@dataclass(frozen=True)
class TimingTable:
    """Measured per-iteration times of configurations (one entry per trace row).

    Attributes:
        nodes: number of nodes N.
        replicas: number of GPUs K.
        local_bsz: per-GPU micro-batch m.
        step_time: seconds of one synchronising iteration.
        sync_time: seconds of it spent in non-overlapped communication.
    """

    nodes: np.ndarray
    replicas: np.ndarray
    local_bsz: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray

    def __len__(self) -> int:
        return len(self.step_time)

    @property
    def compute_time(self) -> np.ndarray:
        """Observed accumulation-step (compute-only) time: step_time - sync_time."""
        return self.step_time - self.sync_time

    @staticmethod
    def concat(tables: Sequence[TimingTable]) -> TimingTable:
        """Concatenate tables row-wise, in order."""
        return TimingTable(*(np.concatenate([getattr(t, f) for t in tables]) for f in _TIMING_FIELDS))


_TIMING_FIELDS = ("nodes", "replicas", "local_bsz", "step_time", "sync_time")


@dataclass(frozen=True)
class ValidationTrace:
    """Per-epoch statistics of one traced total batch size (``validation-<B>.csv``).

    Attributes:
        batch_size: traced total batch B.
        progress: cumulative M0-equivalent iterations at the end of each epoch.
        iteration: cumulative optimiser steps at the end of each epoch.
        metric: validation metric per epoch.
        grad_sqr: squared gradient norm per epoch.
        grad_var: gradient variance per epoch.
    """

    batch_size: int
    progress: np.ndarray
    iteration: np.ndarray
    metric: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray


@dataclass(frozen=True)
class RawAppTraces:
    """Everything read from one application's trace folder.

    Attributes:
        name: application name (the folder name).
        placement_ids: placement id per ``origin_placements.csv`` row (GPUs per node as digits).
        placements: timings of ``origin_placements.csv``.
        scalability: timings of ``scalability.csv``.
        validation: validation traces in ascending batch size.
    """

    name: str
    placement_ids: tuple[str, ...]
    placements: TimingTable
    scalability: TimingTable
    validation: tuple[ValidationTrace, ...]


def placement_shape(placement: str) -> tuple[int, int]:
    """(nodes, replicas) of a placement id: one digit per node, each the GPUs on that node.

    Args:
        placement: digit string such as ``"22"`` (two nodes with 2 GPUs each).

    Raises:
        ValueError: if the id is not a non-empty string of digits 1-9.
    """
    text = placement.strip()
    if not _PLACEMENT_RE.match(text):
        raise ValueError(f"placement id {placement!r} is not a string of digits 1-9")
    return len(text), sum(int(c) for c in text)


def _read_rows(path: Path, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """Rows of a CSV file as (line number, row) after checking the header has ``columns``."""
    try:
        fh = open_regular(path, encoding="utf-8", newline="")
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: file not found") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot open it ({exc.strerror or exc})") from None
    with fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in columns if c not in header]
        if missing:
            raise TraceFormatError(f"{path}: missing column(s) {', '.join(missing)} (header: {', '.join(header)})")
        reader.fieldnames = header
        rows = [(reader.line_num, row) for row in reader]
    if not rows:
        raise TraceFormatError(f"{path}: no data rows")
    return rows


def _number(path: Path, line: int, column: str, row: Mapping[str, str | None]) -> float:
    """The finite float in ``row[column]``, or a :class:`TraceFormatError` naming the cell."""
    text = row.get(column)
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceFormatError(f"{path}: row {line}, column {column!r}: non-numeric value {text!r}")
    return value


def _columns(path: Path, rows: list[tuple[int, dict[str, str]]], columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Numeric arrays of ``columns`` over ``rows``."""
    return {c: np.array([_number(path, line, c, row) for line, row in rows]) for c in columns}


def _check_times(path: Path, rows: list[tuple[int, dict[str, str]]], table: TimingTable) -> None:
    """Require step_time > sync_time >= 0 and positive sizes, naming the first bad row."""
    checks = (
        ("local_bsz", table.local_bsz > 0),
        ("replicas", table.replicas >= table.nodes),
        ("sync_time", table.sync_time >= 0),
        ("step_time", table.step_time > table.sync_time),
    )
    for column, ok in checks:
        if not np.all(ok):
            line = rows[int(np.argmin(ok))][0]
            raise TraceFormatError(f"{path}: row {line}, column {column!r}: implausible value")


def read_placements(path: Path) -> tuple[tuple[str, ...], TimingTable]:
    """Read ``origin_placements.csv``: placement ids and their timings.

    Raises:
        TraceFormatError: missing file or column, non-numeric value or malformed placement id.
    """
    rows = _read_rows(path, _PLACEMENT_COLUMNS)
    ids: list[str] = []
    shapes: list[tuple[int, int]] = []
    for line, row in rows:
        pid = (row.get("placement") or "").strip()
        try:
            shapes.append(placement_shape(pid))
        except ValueError as exc:
            raise TraceFormatError(f"{path}: row {line}, column 'placement': {exc}") from None
        ids.append(pid)
    num = _columns(path, rows, _PLACEMENT_COLUMNS[1:])
    shape = np.array(shapes, dtype=float)
    table = TimingTable(shape[:, 0], shape[:, 1], num["local_bsz"], num["step_time"], num["sync_time"])
    _check_times(path, rows, table)
    return tuple(ids), table


def read_scalability(path: Path) -> TimingTable:
    """Read ``scalability.csv`` (num_nodes, num_replicas, local_bsz, step_time, sync_time).

    Raises:
        TraceFormatError: missing file or column, or non-numeric value.
    """
    rows = _read_rows(path, _SCALABILITY_COLUMNS)
    num = _columns(path, rows, _SCALABILITY_COLUMNS)
    table = TimingTable(num["num_nodes"], num["num_replicas"], num["local_bsz"], num["step_time"], num["sync_time"])
    _check_times(path, rows, table)
    return table


def read_validation(path: Path, batch_size: int) -> ValidationTrace:
    """Read one ``validation-<B>.csv`` (one row per epoch).

    Raises:
        TraceFormatError: missing file or column, or non-numeric value.
    """
    rows = _read_rows(path, _VALIDATION_COLUMNS)
    num = _columns(path, rows, _VALIDATION_COLUMNS)
    return ValidationTrace(batch_size=batch_size, **num)


def read_app_traces(app_dir: Path) -> RawAppTraces:
    """Read one application's trace folder.

    Args:
        app_dir: folder with ``origin_placements.csv``, ``scalability.csv`` and
            ``validation-<B>.csv`` files; its name is the application name.

    Raises:
        TraceFormatError: a file is missing or malformed (the message names file, row, column),
            or the validation files disagree on the number of epochs.
    """
    app_dir = Path(app_dir)
    if not app_dir.is_dir():
        raise TraceFormatError(f"{app_dir}: application trace folder not found")
    ids, placements = read_placements(app_dir / "origin_placements.csv")
    scalability = read_scalability(app_dir / "scalability.csv")
    found = sorted((int(m.group(1)), p) for p in app_dir.iterdir() if (m := _VALIDATION_RE.match(p.name)) is not None)
    if not found:
        raise TraceFormatError(f"{app_dir}: no validation-<B>.csv files")
    validation = tuple(read_validation(p, b) for b, p in found)
    epochs = {len(v.progress) for v in validation}
    if len(epochs) != 1:
        counts = ", ".join(f"validation-{v.batch_size}.csv: {len(v.progress)}" for v in validation)
        raise TraceFormatError(f"{app_dir}: validation files disagree on the number of epochs ({counts})")
    return RawAppTraces(app_dir.name, ids, placements, scalability, validation)
