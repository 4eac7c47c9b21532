"""The output folder of a resumable grid of runs (``deepboot benchmark``, ``deepboot compare --out``).

A folder holds a settings file (``<kind>.json``: what a resumed grid must share with the one it
continues) and ``runs.jsonl``, one JSON line per finished run, appended as runs finish. After an
interruption (Ctrl-C, a killed process) the grid continues with ``--resume``: :func:`open_run_log`
checks the settings, drops a last line the interruption cut short and returns the runs already
done; :func:`append_run` adds one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from deepboot_env.atomic import append_text, write_json, write_text
from deepboot_env.limits import MAX_JSON_BYTES, parse_json, read_bounded, shown
from deepboot_env.stops import Stopped

RUNS_FILE = "runs.jsonl"
"""One JSON object per finished run."""

MAX_RUN_LOG_BYTES = 1 << 30
"""Largest ``runs.jsonl`` a resume reads (a benchmark's 180 runs take about 5 MB; a comparison's
rows hold every job's JCT, 2 MB a run on the full Philly trace)."""
MAX_RUN_ROW_VALUES = 2_000_000
"""Most values in one run's line (its per-job JCTs: 149,000 on the full Philly trace, and a timeline)."""

RowFields = Mapping[str, tuple[type, ...]]
"""The fields a grid's rows must hold, each with the types it may have (checked on resume)."""
NO_FIELDS: RowFields = MappingProxyType({})
"""Rows of any fields (a reader that only counts them)."""


class RunLogError(ValueError):
    """A bad output folder or resume: the message is one line for the user."""


def open_run_log(
    out: Path,
    kind: str,
    settings: dict[str, Any],
    resume: bool,
    fields: RowFields,
    extra: Any = None,
    overwrite: bool = False,
) -> list[dict[str, Any]]:
    """Check and set up ``out`` for a grid of kind ``kind``; the runs already saved when resuming.

    Args:
        out: the folder (created).
        kind: ``benchmark`` or ``comparison``: names the settings file (``<kind>.json``) and the messages.
        settings: what a resumed grid must share with the saved one (JSON-able).
        resume: continue the grid ``out`` holds.
        fields: what each saved run must hold (:func:`read_runs`).
        extra: stored beside the settings, not compared (for the reader).
        overwrite: without ``resume``, start a grid the folder holds over (its saved runs are
            dropped) instead of refusing.

    Raises:
        RunLogError: if ``out`` is a file or cannot be written; if it holds a grid and neither
            ``resume`` nor ``overwrite`` is on; if ``resume`` is on and the saved settings differ
            or the saved files are not what a grid writes.
    """
    check_run_folder(out)
    settings_path, runs_path = out / f"{kind}.json", out / RUNS_FILE
    for path in (settings_path, runs_path):
        if path.is_symlink():  # what a resume reads it rewrites: a folder's files are its own
            raise RunLogError(f"--out {out}: {path.name} is a symbolic link; a grid's files must be its own")
    if settings_path.exists() and not resume and not overwrite:
        raise RunLogError(f"--out {out}: holds a {kind} already; add --resume to continue it, or pick another folder")
    if settings_path.exists() and not resume:
        runs_path.unlink(missing_ok=True)  # overwrite: start over
    elif settings_path.exists():
        _check_saved_settings(settings_path, kind, json.loads(json.dumps(settings)))
    record: dict[str, Any] = {"settings": settings}
    if extra is not None:
        record["spec"] = extra
    write_json(settings_path, record)
    rows = read_runs(runs_path, fields)
    if runs_path.exists():  # rewrite without a line an interruption cut short, so appends start on a new line
        write_text(runs_path, "".join(json.dumps(row) + "\n" for row in rows))
    return rows


def _check_saved_settings(path: Path, kind: str, now: dict[str, Any]) -> None:
    """Refuse a resume whose settings differ from those saved at ``path`` (read bounded and
    checked: a FIFO, a huge or deeply nested file, or anything but ``{"settings": {...}}`` is
    one line naming it; differing values are shown cut short).

    Raises:
        RunLogError: naming the file.
    """
    try:
        data = read_bounded(path, MAX_JSON_BYTES, f"a {kind}'s settings", RunLogError)
    except OSError as exc:
        raise RunLogError(f"{path}: unreadable ({exc.strerror or exc})") from None
    saved = parse_json(data, str(path), RunLogError)
    before = saved.get("settings") if isinstance(saved, dict) else None
    if not isinstance(before, dict):
        raise RunLogError(f"{path}: not a {kind}'s settings (expected an object with a 'settings' object)")
    if before != now:
        differ = "; ".join(
            f"{key} {shown(before.get(key), 30)}, not {shown(now.get(key), 30)}"
            for key in sorted(set(before) | set(now))
            if before.get(key) != now.get(key)
        )
        differ = differ if len(differ) <= 80 else differ[:80] + "..."
        raise RunLogError(f"--resume: {path} was run with other settings ({differ}); use another --out")


def check_run_folder(out: Path) -> None:
    """Create ``out`` if missing and refuse it if it is a file or cannot be written.

    Raises:
        RunLogError: naming the folder.
    """
    if out.exists() and not out.is_dir():
        raise RunLogError(f"--out {out}: is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunLogError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    if not os.access(out, os.W_OK):
        raise RunLogError(f"--out {out}: the folder is not writable")


def append_run(out: Path, row: dict[str, Any]) -> None:
    """Save one finished run: one whole line, fsynced (:func:`deepboot_env.atomic.append_text`)."""
    append_text(out / RUNS_FILE, json.dumps(row) + "\n")


def read_runs(path: Path, fields: RowFields = NO_FIELDS) -> list[dict[str, Any]]:
    """The runs saved in ``path``: one JSON object a line, each holding ``fields``; the last line
    is dropped when an interruption cut it short (it is not JSON). The file is read bounded
    (:data:`MAX_RUN_LOG_BYTES`, :data:`MAX_RUN_ROW_VALUES`) and must be a regular file.

    Raises:
        RunLogError: a line that is not a run (naming the file, the line and the field), or a
            file too large or unreadable.
    """
    if not path.exists():
        return []
    try:
        data = read_bounded(path, MAX_RUN_LOG_BYTES, "a grid's run log", RunLogError)
    except OSError as exc:
        raise RunLogError(f"{path}: unreadable ({exc.strerror or exc})") from None
    lines = data.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    rows = []
    for number, line in enumerate(lines, 1):
        source = f"{path}: line {number}"
        try:
            row = parse_json(line, source, RunLogError, MAX_RUN_ROW_VALUES)
        except RunLogError:
            if number == len(lines) and not data.endswith(b"\n"):
                break  # the line an interruption cut short: that run is made again
            raise
        rows.append(_checked_row(row, source, fields))
    return rows


def _checked_row(row: Any, source: str, fields: RowFields) -> dict[str, Any]:
    """``row`` if it is an object holding ``fields`` with their types.

    Raises:
        RunLogError: ``"<source>: field 'metrics' is missing"`` and the like.
    """
    if not isinstance(row, dict):
        raise RunLogError(f"{source}: not a run (a JSON object), got {shown(row, 40)}")
    for key, types in fields.items():
        if key not in row:
            raise RunLogError(f"{source}: field {key!r} is missing")
        value = row[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise RunLogError(
                f"{source}: field {key!r} is {shown(value, 40)}, not {' or '.join(t.__name__ for t in types)}"
            )
    return row


def grid_stopped(command: str, out: str, exc: BaseException) -> int:
    """Report a grid of runs (``compare``, ``benchmark``) that stopped before its end, the finished
    runs saved in ``out``: one line on stderr; the exit status (130 for SIGINT / Ctrl-C, 143 for
    SIGTERM: :class:`deepboot_env.stops.Stopped`; 1 for runs that failed on Ray)."""
    if isinstance(exc, KeyboardInterrupt):
        stop = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
        why, status = f"{stop}: stopped; the finished runs", stop.exit_status
    else:
        why, status = f"error: {exc}; the finished runs", 1
    print(f"deepboot {command}: {why} are saved in {out}: continue with --resume", file=sys.stderr)
    return status
