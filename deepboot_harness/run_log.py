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
from pathlib import Path
from typing import Any

from deepboot_env.atomic import append_text, write_text

RUNS_FILE = "runs.jsonl"
"""One JSON object per finished run."""


class RunLogError(ValueError):
    """A bad output folder or resume: the message is one line for the user."""


def open_run_log(
    out: Path, kind: str, settings: dict[str, Any], resume: bool, extra: Any = None, overwrite: bool = False
) -> list[dict[str, Any]]:
    """Check and set up ``out`` for a grid of kind ``kind``; the runs already saved when resuming.

    Args:
        out: the folder (created).
        kind: ``benchmark`` or ``comparison``: names the settings file (``<kind>.json``) and the messages.
        settings: what a resumed grid must share with the saved one (JSON-able).
        resume: continue the grid ``out`` holds.
        extra: stored beside the settings, not compared (for the reader).
        overwrite: without ``resume``, start a grid the folder holds over (its saved runs are
            dropped) instead of refusing.

    Raises:
        RunLogError: if ``out`` is a file or cannot be written; if it holds a grid and neither
            ``resume`` nor ``overwrite`` is on; if ``resume`` is on and the saved settings differ.
    """
    check_run_folder(out)
    settings_path, runs_path = out / f"{kind}.json", out / RUNS_FILE
    if settings_path.exists() and not resume and not overwrite:
        raise RunLogError(f"--out {out}: holds a {kind} already; add --resume to continue it, or pick another folder")
    if settings_path.exists() and not resume:
        runs_path.unlink(missing_ok=True)  # overwrite: start over
    elif settings_path.exists():
        try:
            saved = json.loads(settings_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunLogError(f"{settings_path}: unreadable ({exc})") from None
        before, now = saved.get("settings") or {}, json.loads(json.dumps(settings))
        if before != now:
            differ = "; ".join(
                f"{key} {before.get(key)!r}, not {now.get(key)!r}"
                for key in sorted(set(before) | set(now))
                if before.get(key) != now.get(key)
            )
            raise RunLogError(f"--resume: {settings_path} was run with other settings ({differ}); use another --out")
    record: dict[str, Any] = {"settings": settings}
    if extra is not None:
        record["spec"] = extra
    write_text(settings_path, json.dumps(record, indent=2) + "\n")
    rows = read_runs(runs_path)
    if runs_path.exists():  # rewrite without a line an interruption cut short, so appends start on a new line
        write_text(runs_path, "".join(json.dumps(row) + "\n" for row in rows))
    return rows


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


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The runs saved in ``path`` (a line cut short by an interruption is dropped)."""
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows
