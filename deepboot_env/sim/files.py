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


def read_stream(fh: Any, limit: int, chunk: int = 1 << 20) -> bytes | None:
    """The bytes of the binary stream ``fh`` if there are at most ``limit`` of them, else None;
    read in chunks, so that neither a long stream nor a large ``limit`` costs more memory than
    the bytes there are (plus one chunk). The one bounded read of the project: the readers of
    :mod:`deepboot_env.limits` use it too."""
    parts: list[bytes] = []
    total = 0
    while part := fh.read(min(chunk, limit + 1 - total)):
        parts.append(part)
        total += len(part)
        if total > limit:
            return None
    return b"".join(parts)


def read_table(path: str | Path, what: str) -> Any:
    """The JSON value of the file at ``path`` (a ``what``, for the message), read with a bound.

    Raises:
        ValueError: the file is larger than :data:`MAX_TABLE_BYTES`, or not JSON, naming it.
        OSError: the file cannot be opened or read.
    """
    with open(path, "rb") as fh:
        data = read_stream(fh, MAX_TABLE_BYTES)
    if data is None:
        raise ValueError(f"{path}: {what} is larger than the limit of {MAX_TABLE_BYTES:,} bytes")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0][:120]
        raise ValueError(f"{path}: {what} is not valid JSON ({reason})") from None
