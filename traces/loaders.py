"""Load workloads from CSV files (Pollux and DeepBoot formats) and raw Philly traces.

Formats, detected from the header line:

* **Pollux** ``name,time,application,num_replicas,batch_size``: training jobs only
  (docs/workloads.md §2).
* **DeepBoot** Pollux columns plus ``duration`` (and optionally ``num_task``): training jobs
  and inference requests (docs/workloads.md §2). A row is an inference request iff its
  ``application`` starts with ``infer`` (``infer-<model>-<k>``, the app-instance key); its
  ``duration`` is the service time in seconds, its ``num_replicas``/``batch_size``/``num_task``
  are ignored (one GPU each). Training rows' ``duration`` and ``num_task`` are ignored.
* **Philly** ``timestamp,duration,num_gpus,gpu_time,cluster``: a raw cluster trace, not a
  workload. :func:`load_workload` refuses it (use ``deepboot generate``); :func:`load_philly`
  reads it for the statistics code (:mod:`traces.philly`).

Extra, unknown columns are ignored. Blank lines are skipped. Numbers must be written in standard
notation (:data:`NUMBER_PATTERN`: ASCII digits with an optional sign, decimal point and exponent,
surrounding spaces allowed); Python's extras (``1_000``, ``nan``, ``inf``, non-ASCII digits) are
refused. A training row's ``batch_size`` may not exceed its application's largest total batch
(``max_batch_size`` of its profile, :mod:`deepboot_env.sim.apps`). Every error is a
:class:`TraceError` naming the file, the CSV line number (1 = header) and the field.

Workloads shipped with the package live in ``traces/workloads/<split>/<name>.csv`` and can be
named instead of a path: ``load_workload("test/test-01")`` or, where the stem is unique,
``load_workload("test-01")``.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from deepboot_env.limits import (
    BYTES_PER_WORKLOAD_ROW,
    MAX_CSV_COLUMNS,
    MAX_LINE_CHARS,
    MAX_NAME_CHARS,
    MAX_TIME_S,
    MAX_WORKLOAD_ROWS,
    MIN_DURATION_S,
    open_regular,
    plain,
    shown,
)
from deepboot_env.limits import (
    names as list_names,
)
from deepboot_env.sim.apps import APP_NAMES, UnknownApplicationError, get_app, inference_model_of
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload, WorkloadError

POLLUX_COLUMNS: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")
"""Required columns of the Pollux workload format (training only)."""
DEEPBOOT_COLUMNS: tuple[str, ...] = (*POLLUX_COLUMNS, "duration")
"""Required columns of the DeepBoot format (``num_task`` is optional and unused)."""
DEEPBOOT_OUTPUT_COLUMNS: tuple[str, ...] = (*DEEPBOOT_COLUMNS, "num_task")
"""Columns :func:`traces.generate.write_workload_csv` writes."""
MAX_NUM_TASK = 1_000_000
"""Largest ``num_task`` accepted (the column is read for nothing, and the generator writes -1, but a
value of 1e20 is no count)."""
PHILLY_COLUMNS: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
"""Columns of the raw Philly trace (docs/workloads.md §3)."""

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"
"""Folder of the shipped workloads: ``<split>/<name>.csv``."""
SPLITS: tuple[str, ...] = ("train", "val", "test")
"""Splits of the shipped workloads."""
SHIPPED_FOLDERS: tuple[str, ...] = (*SPLITS, "smoke")
"""Folders of the shipped workloads: the splits, and ``smoke`` (``smoke/tiny``, the tiny workload
of the ``smoke`` training preset, shipped so that a smoke run needs no file of its own)."""

NUMBER_PATTERN = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""A number in standard notation (the whole field, once stripped of surrounding spaces): ``12``,
``-3.5``, ``.5``, ``1e6``, ``2.5E-3``. ``float()`` also accepts underscores (``1_000``), ``nan``,
``inf`` and non-ASCII digits; the loaders do not."""

_FORMATS: dict[str, tuple[str, ...]] = {
    "Pollux": POLLUX_COLUMNS,
    "DeepBoot": DEEPBOOT_COLUMNS,
    "Philly": PHILLY_COLUMNS,
}


class TraceError(WorkloadError):
    """A trace or workload file is missing or malformed.

    The message names the file and, where known, the CSV line number (1 = header line) and the
    field (column) at fault; they are also available as attributes.

    Attributes:
        path: the file (as given or resolved).
        line: 1-based physical line number in the file, or None.
        field: column name (or ``"header"``), or None.
        reason: the message without the location prefix.
    """

    def __init__(self, reason: str, path: str | Path | None = None, line: int | None = None, field: str | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.reason = reason
        where = []
        if self.path is not None:
            where.append(self.path)
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append("header" if field == "header" else f"field {field!r}")
        super().__init__(": ".join([*where, reason]))


# ----------------------------------------------------------------------------------------------
# shipped workloads


def list_shipped_workloads() -> list[str]:
    """Names (``<folder>/<stem>``) of the workloads shipped in ``traces/workloads/``, split by split
    (:data:`SHIPPED_FOLDERS`), sorted in each."""
    names: list[str] = []
    for split in SHIPPED_FOLDERS:
        folder = WORKLOADS_DIR / split
        if folder.is_dir():
            names.extend(f"{split}/{p.stem}" for p in sorted(folder.glob("*.csv")))
    return names


def expand_workload_sources(source: str | Path | Sequence[str | Path]) -> list[str | Path]:
    """Expand split names (``train``, ``val``, ``test``) into their shipped workloads' names;
    other sources are kept as they are.

    Raises:
        ValueError: if nothing is left.
    """
    # anything but a list or a tuple is one source
    items = list(source) if isinstance(source, list | tuple) else [cast("str | Path", source)]
    out: list[str | Path] = []
    for item in items:
        if isinstance(item, str) and item in SPLITS:
            out.extend(n for n in list_shipped_workloads() if n.startswith(item + "/"))
        else:
            out.append(item)
    if not out:
        raise ValueError(f"no workloads in {shown(source)}")
    return out


def load_workload_source(source: str | Path) -> list[Workload]:
    """The workloads one name stands for: a split's shipped workloads, or one workload (a CSV path
    or a shipped name). The env's default workload loader (:mod:`deepboot_env.workload_sources`).

    Raises:
        TraceError: as :func:`load_workload`.
    """
    return [load_workload(item) for item in expand_workload_sources(source)]


def resolve_workload(source: str | Path) -> Path:
    """The CSV file ``source`` refers to: an existing path, or a shipped workload's name.

    Raises:
        TraceError: if it is a directory, does not exist, or names no (or several) shipped
            workloads.
    """
    path = Path(source)
    if path.is_dir():
        raise TraceError("is a directory, not a workload CSV file", path)
    if path.exists():  # a file (anything but a regular one is refused when it is opened)
        return path
    key = str(source).replace("\\", "/")
    if key.endswith(".csv"):
        key = key[:-4]
    names = list_shipped_workloads()
    if key in names:
        return WORKLOADS_DIR / f"{key}.csv"
    matches = [n for n in names if n.split("/", 1)[1] == key]
    if len(matches) == 1:
        return WORKLOADS_DIR / f"{matches[0]}.csv"
    if len(matches) > 1:
        raise TraceError(f"ambiguous shipped workload name; use one of {', '.join(matches)}", source)
    hint = f"shipped workloads: {list_names(names, most=6)}" if names else "no workloads are shipped"
    raise TraceError(f"no such file, and not the name of a shipped workload ({hint})", source)


# ----------------------------------------------------------------------------------------------
# workloads


def detect_format(columns: list[str] | tuple[str, ...]) -> str:
    """``"DeepBoot"``, ``"Pollux"`` or ``"Philly"`` from a header; ``""`` if none matches."""
    cols = set(columns)
    if set(DEEPBOOT_COLUMNS) <= cols:
        return "DeepBoot"
    if set(POLLUX_COLUMNS) <= cols:
        return "Pollux"
    if set(PHILLY_COLUMNS) <= cols:
        return "Philly"
    return ""


def load_workload(source: str | Path, name: str | None = None) -> Workload:
    """Load a workload from a CSV file (Pollux or DeepBoot format) or a shipped workload name.

    Args:
        source: a CSV path, or a shipped name such as ``"test/test-01"`` or ``"test-01"``
            (see :func:`list_shipped_workloads`).
        name: the workload's name; defaults to the file stem.

    Returns:
        A validated :class:`Workload`; jobs and requests each in file (= arrival) order.

    Raises:
        TraceError: naming the file, line and field of the first problem found.
    """
    path = resolve_workload(source)
    with _open(path) as fh:
        reader = csv.reader(_lines(fh, path))
        header = _read_header(reader, path)
        fmt = detect_format(header)
        if fmt == "Philly":
            raise TraceError(
                "this is a raw Philly trace (timestamp,duration,num_gpus,gpu_time,cluster), not a workload; "
                "sample a workload from it with `deepboot generate` (traces.generate) and load that file",
                path,
                1,
                "header",
            )
        if not fmt:
            raise TraceError(_unsupported_header(header), path, 1, "header")
        col = {c: i for i, c in enumerate(header)}
        has_duration = fmt == "DeepBoot"
        jobs: list[TrainingJobSpec] = []
        requests: list[InferenceRequestSpec] = []
        name_lines: dict[str, int] = {}
        prev_time, prev_line = -np.inf, 0
        for line, row in _rows(reader, header, path, MAX_WORKLOAD_ROWS):

            def get(field: str, row: list[str] = row) -> str:
                return row[col[field]].strip()

            rec_name = _name(get("name"), path, line)
            if rec_name in name_lines:
                raise TraceError(
                    f"duplicate name {shown(rec_name)} (first at line {name_lines[rec_name]})", path, line, "name"
                )
            name_lines[rec_name] = line
            t = _number(get("time"), path, line, "time")
            if t < 0:
                raise TraceError(f"negative time {t:g}", path, line, "time")
            if t > MAX_TIME_S:
                raise TraceError(f"time {t:g} s is beyond the limit of {MAX_TIME_S:g} s", path, line, "time")
            if t < prev_time:
                raise TraceError(
                    f"rows are not sorted by time: {t:g} comes after {prev_time:g} (line {prev_line})",
                    path,
                    line,
                    "time",
                )
            prev_time, prev_line = t, line
            if "num_task" in col and get("num_task"):  # unused, but a value must still be a count
                tasks = _integer(get("num_task"), path, line, "num_task")
                if not -1 <= tasks <= MAX_NUM_TASK:
                    why = f"must be a count from 0 to {MAX_NUM_TASK:,} (or -1: unset), got {tasks:g}"
                    raise TraceError(why, path, line, "num_task")
            app = get("application")
            if app.startswith("infer"):
                if not has_duration:
                    raise TraceError(
                        f"inference row {shown(app)} needs a 'duration' column (DeepBoot format); "
                        "the Pollux format holds training jobs only",
                        path,
                        line,
                        "application",
                    )
                try:
                    model = inference_model_of(app)
                except UnknownApplicationError as exc:
                    raise TraceError(str(exc), path, line, "application") from None
                dur = _number(get("duration"), path, line, "duration")
                if dur <= 0:
                    raise TraceError(f"inference duration must be > 0, got {dur:g}", path, line, "duration")
                if not MIN_DURATION_S <= dur <= MAX_TIME_S:
                    raise TraceError(
                        f"inference duration must lie in [{MIN_DURATION_S:g}, {MAX_TIME_S:g}] s, got {dur:g}",
                        path,
                        line,
                        "duration",
                    )
                requests.append(InferenceRequestSpec(name=rec_name, arrival=t, instance=app, app=model, duration=dur))
            else:
                if app not in APP_NAMES:
                    raise TraceError(
                        f"unknown application {shown(app)}; expected one of {', '.join(APP_NAMES)} "
                        "or an inference instance 'infer-<model>-<k>'",
                        path,
                        line,
                        "application",
                    )
                reps = _integer(get("num_replicas"), path, line, "num_replicas")
                if reps < 1:
                    raise TraceError(f"must be >= 1, got {reps}", path, line, "num_replicas")
                bsz = _integer(get("batch_size"), path, line, "batch_size")
                if bsz < 1:
                    raise TraceError(f"must be >= 1, got {bsz}", path, line, "batch_size")
                if reps > bsz:
                    raise TraceError(
                        f"{shown(reps)} GPUs but a total batch of {bsz}: each GPU needs a sample",
                        path,
                        line,
                        "num_replicas",
                    )
                max_bsz = get_app(app).max_batch_size
                if bsz > max_bsz:
                    raise TraceError(
                        f"batch size {bsz} exceeds the largest total batch of {app} ({max_bsz})",
                        path,
                        line,
                        "batch_size",
                    )
                jobs.append(TrainingJobSpec(name=rec_name, arrival=t, app=app, num_replicas=reps, batch_size=bsz))
    return Workload(name=name or path.stem, jobs=tuple(jobs), requests=tuple(requests), source=str(path))


# ----------------------------------------------------------------------------------------------
# Philly


@dataclass(frozen=True, eq=False)
class PhillyTrace:
    """A raw Philly trace, column-oriented (one entry per job, file order).

    Attributes:
        source: the file read.
        timestamp: int64 seconds since 1970-01-01 of the submission wall-clock time (the trace's
            timestamps carry no time zone; ``timestamp % 86400`` is the time of day).
        duration: float64 run time, seconds.
        num_gpus: int64 GPUs used.
        gpu_time: float64 duration x num_gpus, seconds.
        cluster: str virtual-cluster hash.
    """

    source: str
    timestamp: np.ndarray
    duration: np.ndarray
    num_gpus: np.ndarray
    gpu_time: np.ndarray
    cluster: np.ndarray

    def __len__(self) -> int:
        return int(self.timestamp.shape[0])


def load_philly(path: str | Path) -> PhillyTrace:
    """Read a raw Philly trace (``timestamp,duration,num_gpus,gpu_time,cluster``).

    Raises:
        TraceError: naming the file, line and field of the first problem found.
    """
    path = Path(path)
    if path.is_dir():
        raise TraceError("is a directory, not a Philly trace CSV file", path)
    if not path.is_file():
        raise TraceError("no such file", path)
    with _open(path) as fh:
        reader = csv.reader(_lines(fh, path))
        header = _read_header(reader, path)
        missing = [c for c in PHILLY_COLUMNS if c not in header]
        if missing:
            raise TraceError(
                f"not a Philly trace: missing column(s) {', '.join(repr(c) for c in missing)} "
                f"(expected {','.join(PHILLY_COLUMNS)})",
                path,
                1,
                "header",
            )
        idx = [header.index(c) for c in PHILLY_COLUMNS]
        lines: list[int] = []
        cols: list[list[str]] = [[] for _ in PHILLY_COLUMNS]
        for line, row in _rows(reader, header, path):
            lines.append(line)
            for k, i in enumerate(idx):
                cols[k].append(row[i].strip())
    ts_s, dur_s, gpus_s, gt_s, cl_s = cols
    try:
        ts = np.array(ts_s, dtype="datetime64[s]").astype(np.int64)
    except ValueError:
        for k, v in enumerate(ts_s):
            try:
                np.datetime64(v, "s")
            except ValueError:
                raise TraceError(
                    f"not a timestamp (YYYY-MM-DD HH:MM:SS): {shown(v)}", path, lines[k], "timestamp"
                ) from None
        raise
    duration = _column(dur_s, lines, path, "duration")
    gpu_time = _column(gt_s, lines, path, "gpu_time")
    num_gpus_f = _column(gpus_s, lines, path, "num_gpus")
    for arr, fld in ((duration, "duration"), (gpu_time, "gpu_time")):
        bad = np.flatnonzero(arr < 0)
        if bad.size:
            raise TraceError(f"must be >= 0, got {arr[bad[0]]:g}", path, lines[bad[0]], fld)
    bad = np.flatnonzero((num_gpus_f < 1) | (num_gpus_f != np.round(num_gpus_f)))
    if bad.size:
        raise TraceError(f"must be an integer >= 1, got {shown(gpus_s[bad[0]])}", path, lines[bad[0]], "num_gpus")
    return PhillyTrace(
        source=str(path),
        timestamp=ts,
        duration=duration,
        num_gpus=num_gpus_f.astype(np.int64),
        gpu_time=gpu_time,
        cluster=np.array(cl_s, dtype=str),
    )


# ----------------------------------------------------------------------------------------------
# helpers


def _open(path: Path):
    try:
        return open_regular(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise TraceError(f"cannot open: {exc.strerror or exc}", path) from None


def _read_header(reader, path: Path) -> list[str]:
    try:
        header = next(reader, None)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(f"unreadable CSV: {exc}", path, 1, "header") from None
    if header is None:
        raise TraceError("empty file: expected a header line and data rows", path, 1, "header")
    if len(header) > MAX_CSV_COLUMNS:
        raise TraceError(f"{len(header):,} columns, more than the limit of {MAX_CSV_COLUMNS}", path, 1, "header")
    header = [c.strip() for c in header]
    if not any(header):
        raise TraceError("blank header line", path, 1, "header")
    dupes = sorted(c for c, n in Counter(header).items() if n > 1)
    if dupes:
        raise TraceError(f"duplicate column(s) {', '.join(repr(c) for c in dupes)}", path, 1, "header")
    return header


def _rows(reader, header: list[str], path: Path, max_rows: int | None = None):
    """Yield (line number, row) for non-blank rows; check field counts and (``max_rows``) the
    row count; require >= 1 row."""
    n = 0
    line = 1
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(
                    f"expected {len(header)} fields ({plain(','.join(header), 400)}), got {len(row):,}",
                    path,
                    line,
                    "row",
                )
            n += 1
            if max_rows is not None and n > max_rows:
                raise TraceError(_too_many_rows(max_rows), path, line, "row")
            yield line, row
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceError(f"unreadable CSV: {exc}", path, line + 1, "row") from None
    if n == 0:
        raise TraceError("no data rows after the header", path, 2, "row")


def _too_many_rows(limit: int) -> str:
    """The refusal of a workload of more than ``limit`` rows, with the estimate of its cost."""
    gigabytes = limit * BYTES_PER_WORKLOAD_ROW / 1e9
    return (
        f"more than the limit of {limit:,} rows: a workload this large needs over {gigabytes:.0f} GB and hours "
        "to simulate (about 5 GB per million rows); split it (docs/usage.md §7.1)"
    )


def _lines(fh, path: Path):
    """The lines of ``fh``, each read with a bound: a line longer than
    :data:`~deepboot_env.limits.MAX_LINE_CHARS` is refused without being read whole."""
    number = 0
    while True:
        line = fh.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_CHARS:
            where = "header" if number == 1 else "row"
            raise TraceError(f"longer than the limit of {MAX_LINE_CHARS:,} characters", path, number, where)
        yield line


def _name(text: str, path: Path, line: int) -> str:
    """A job or request name: not empty, at most :data:`~deepboot_env.limits.MAX_NAME_CHARS`
    characters, printable (no control characters such as a newline)."""
    if not text:
        raise TraceError("empty name", path, line, "name")
    if len(text) > MAX_NAME_CHARS:
        raise TraceError(
            f"name of {len(text):,} characters, longer than the limit of {MAX_NAME_CHARS}", path, line, "name"
        )
    if not text.isprintable():
        raise TraceError(f"name {shown(text)} holds a control character", path, line, "name")
    return text


def _unsupported_header(header: list[str]) -> str:
    """Explain an unsupported header against the format it is closest to (fewest missing columns)."""
    missing = {fmt: [c for c in required if c not in header] for fmt, required in _FORMATS.items()}
    best = min(missing, key=lambda fmt: len(missing[fmt]))  # ties: first in _FORMATS (Pollux)
    return (
        f"unsupported column set ({plain(','.join(header), 400)}); closest format is {best} "
        f"({','.join(_FORMATS[best])}), missing column(s) {', '.join(repr(c) for c in missing[best])}"
    )


def _number(text: str, path: Path, line: int, field: str) -> float:
    """``text`` (already stripped) as a float: a finite number in standard notation."""
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"not a number: {shown(text)}", path, line, field) from None
    if not np.isfinite(value):
        raise TraceError(f"not a finite number: {shown(text)}", path, line, field)
    if NUMBER_PATTERN.fullmatch(text) is None:
        plain = str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
        raise TraceError(
            f"not a number in standard notation: {shown(text)} (write {plain}: ASCII digits with an optional sign, "
            "decimal point and exponent; no underscores)",
            path,
            line,
            field,
        )
    return value


MAX_COUNT = 10**12
"""Largest whole number a workload field may hold (counts and sizes; each field has its own
tighter check): a value such as 1e308 is refused here, before a message would print its 309 digits."""


def _integer(text: str, path: Path, line: int, field: str) -> int:
    value = _number(text, path, line, field)
    if abs(value) > MAX_COUNT:
        raise TraceError(f"{shown(text)} is beyond the limit of {MAX_COUNT:.0e} for a whole number", path, line, field)
    if value != int(value):
        raise TraceError(f"not an integer: {shown(text)}", path, line, field)
    return int(value)


def _column(values: list[str], lines: list[int], path: Path, field: str) -> np.ndarray:
    try:
        arr = np.array(values, dtype=float)
    except ValueError:
        for k, v in enumerate(values):
            _number(v, path, lines[k], field)
        raise
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise TraceError(f"not a finite number: {shown(values[bad[0]])}", path, lines[bad[0]], field)
    joined = "".join(values)
    if "_" in joined or not joined.isascii():  # what float() accepts beyond standard notation, finite
        for k, v in enumerate(values):
            _number(v, path, lines[k], field)
    return arr
