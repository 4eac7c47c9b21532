"""Bounded reads of the simulator's own tables (application profiles, measured step times).

The simulation core imports nothing above it, so the limits of :mod:`deepboot_env.limits` are
not available here; the two tables a caller may name by path (``load_profiles(path)``,
``load_step_times(trace_set, path)``) are read through :func:`read_table`: never more than
:data:`MAX_TABLE_BYTES`, and a malformed or too deeply nested JSON is a one-line ``ValueError``
naming the file, not a ``RecursionError`` or a ``MemoryError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_TABLE_BYTES = 16 << 20
"""The largest table read (the shipped ones are 68 KB and 286 KB)."""


def read_table(path: str | Path, what: str) -> Any:
    """The JSON value of the file at ``path`` (a ``what``, for the message), read with a bound.

    Raises:
        ValueError: the file is larger than :data:`MAX_TABLE_BYTES`, or not JSON, naming it.
        OSError: the file cannot be opened or read.
    """
    with open(path, "rb") as fh:
        data = fh.read(MAX_TABLE_BYTES + 1)
    if len(data) > MAX_TABLE_BYTES:
        raise ValueError(f"{path}: {what} is larger than the limit of {MAX_TABLE_BYTES:,} bytes")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0][:120]
        raise ValueError(f"{path}: {what} is not valid JSON ({reason})") from None
