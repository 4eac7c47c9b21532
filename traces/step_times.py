"""The measured step-time table ``step_times.json``: the simulator's measured truth (docs/goodput.md §9).

Written by ``deepboot calibrate`` next to ``apps.json`` (:func:`traces.calibrate.run_calibration`).
From each application's trace folder it keeps, per placement shape, the measured times over the
local batch, and the ``scalability.csv`` rows; the per-(nodes, GPUs, local batch) means that
the interpolation beyond the known shapes also needs are computed from them at load time
(:class:`~deepboot_env.sim.measured.StepTimes`), as the originals compute them at start-up.

Two trace sets are kept (:data:`TRACE_SET_FILES`):

* ``pollux``: ``origin_placements.csv``, the Pollux artifact's ``placements.csv`` (108 shapes of
  1-4 nodes with 1-4 GPUs each);
* ``deepboot``: DeepBoot's ``placements.csv``, the same rows plus a copy of every shape with each
  digit shifted by 4 (``"5"`` timed like ``"1"``, docs/goodput.md §9.3). Written only when every
  application folder has that file.

Measurements shared by the sets are stored once: ``apps[app].shapes`` maps a shape id to its
series; each set lists the ids whose series is stored under their own id (``shapes``) and the
ids that carry another id's series (``copies``: id -> stored id; DeepBoot's shifted copies).

Format (``version`` 1)::

    {"version": 1, "source": ..., "license": ..., "quantity": ...,
     "apps": {app: {"shapes": {id: [[local batches, ascending], [step_time s], [sync_time s]]},
                    "scalability": [[num_nodes, num_replicas, local_bsz, step_time, sync_time], ...]}},
     "trace_sets": {set: {"placements": csv file name, "shapes": {app: [ids]},
                          "copies": {app: {id: stored id}}}}}

Times are rounded to 7 significant digits, as in ``apps.json``; rows keep the files' order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from deepboot_env.atomic import write_text
from deepboot_env.sim import measured as _measured_module
from deepboot_env.sim.apps import APP_NAMES
from traces.app_traces import TimingTable, TraceFormatError, read_placements, read_scalability
from traces.json_text import round_sig, table_json

TRACE_SET_FILES: dict[str, str] = {"pollux": "origin_placements.csv", "deepboot": "placements.csv"}
"""Placement trace file of each trace set, in the order the sets are stored (pollux first)."""

STEP_TIMES_NAME = Path(_measured_module.STEP_TIMES_PATH).name
"""File name of the table (written next to ``apps.json``)."""

DEFAULT_STEP_TIMES_OUT = Path(_measured_module.__file__).resolve().parent / _measured_module.STEP_TIMES_PATH
"""The shipped table."""

Series = tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]
"""(local batches ascending, step times, sync times) of one placement shape."""


def _as_int(value: float, what: str) -> int:
    if value != round(value):
        raise TraceFormatError(f"{what} must be an integer, got {value}")
    return int(round(value))


def shape_series(ids: Sequence[str], table: TimingTable, path: Path) -> dict[str, Series]:
    """The rows of a placement trace grouped by shape id (in order of first appearance), each
    sorted by local batch and rounded.

    Raises:
        TraceFormatError: if a shape has the same local batch twice.
    """
    rows: dict[str, list[tuple[int, float, float]]] = {}
    for i, pid in enumerate(ids):
        m = _as_int(float(table.local_bsz[i]), f"{path}: local_bsz of placement {pid}")
        rows.setdefault(pid, []).append((m, round_sig(table.step_time[i]), round_sig(table.sync_time[i])))
    out: dict[str, Series] = {}
    for pid, group in rows.items():
        group.sort(key=lambda r: r[0])
        batches = tuple(r[0] for r in group)
        if len(set(batches)) != len(batches):
            raise TraceFormatError(f"{path}: placement {pid} has the same local_bsz twice")
        out[pid] = (batches, tuple(r[1] for r in group), tuple(r[2] for r in group))
    return out


def scalability_rows(table: TimingTable) -> list[list[float | int]]:
    """``scalability.csv`` rows as [num_nodes, num_replicas, local_bsz, step_time, sync_time]."""
    return [
        [int(n), int(k), int(m), round_sig(step), round_sig(sync)]
        for n, k, m, step, sync in zip(
            table.nodes, table.replicas, table.local_bsz, table.step_time, table.sync_time, strict=True
        )
    ]


def available_trace_sets(apps_dir: Path, apps: Sequence[str] = APP_NAMES) -> list[str]:
    """The trace sets whose placement file every application folder has (``pollux`` always: its
    file is the one calibration requires)."""
    return [
        name
        for name, file in TRACE_SET_FILES.items()
        if name == "pollux" or all((Path(apps_dir) / app / file).is_file() for app in apps)
    ]


def build_step_times(apps_dir: Path, apps: Sequence[str] = APP_NAMES) -> dict:
    """The ``step_times.json`` object of the trace folders under ``apps_dir``.

    Raises:
        TraceFormatError: a file is missing or malformed.
    """
    apps_dir = Path(apps_dir)
    sets = available_trace_sets(apps_dir, apps)
    set_objs: dict[str, dict] = {
        name: {"placements": TRACE_SET_FILES[name], "shapes": {}, "copies": {}} for name in sets
    }
    app_objs: dict[str, dict] = {}
    for app in apps:
        folder = apps_dir / app
        pool: dict[str, Series] = {}
        stored_as: dict[Series, str] = {}
        for name in sets:
            path = folder / TRACE_SET_FILES[name]
            ids, table = read_placements(path)
            own: list[str] = []
            copies: dict[str, str] = {}
            for pid, series in shape_series(ids, table, path).items():
                if pool.get(pid) == series:
                    own.append(pid)
                    continue
                key = stored_as.get(series)
                if key is None:
                    key = pid if pid not in pool else f"{pid}@{name}"
                    pool[key] = series
                    stored_as[series] = key
                if key == pid:
                    own.append(pid)
                else:
                    copies[pid] = key
            set_objs[name]["shapes"][app] = own
            set_objs[name]["copies"][app] = copies
        app_objs[app] = {
            "shapes": {key: [list(m), list(step), list(sync)] for key, (m, step, sync) in pool.items()},
            "scalability": scalability_rows(read_scalability(folder / "scalability.csv")),
        }
    return {
        "version": 1,
        "source": (
            "traces/step_times.py (deepboot calibrate) from the per-application traces of the Pollux artifact "
            "(petuum/adaptdl osdi21-artifact simulator/traces/<app>/: origin_placements.csv, scalability.csv; "
            "placements.csv as redistributed in czq693497091/DeepBoot traces/). Copyright 2020 Petuum, Inc., "
            "licensed under the Apache License 2.0; derived data (regrouped, rounded to 7 significant digits). "
            "See docs/references.md 3 and docs/goodput.md 9"
        ),
        "license": "Apache-2.0",
        "quantity": (
            "step_time: seconds of one synchronising iteration at a local batch on the placement shape "
            "(GPUs per node as digits); sync_time: its non-overlapped communication seconds; an iteration "
            "with s accumulation steps takes step_time + s * (step_time - sync_time)"
        ),
        "apps": app_objs,
        "trace_sets": set_objs,
    }


def write_step_times(table: Mapping[str, object], path: Path) -> None:
    """Write the table with the deterministic layout of ``apps.json`` (diff-stable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, table_json(table) + "\n")


def step_times_path_for(apps_json: Path | None) -> Path:
    """Where calibration writes the step-time table: next to ``apps_json`` (the shipped one if
    None)."""
    return DEFAULT_STEP_TIMES_OUT if apps_json is None else Path(apps_json).with_name(STEP_TIMES_NAME)


def run(apps_dir: Path, out: Path | None = None) -> Path:
    """Build the table of ``apps_dir`` and write it to ``out`` (default: the shipped file)."""
    target = DEFAULT_STEP_TIMES_OUT if out is None else Path(out)
    write_step_times(build_step_times(apps_dir), target)
    return target
