"""Bounded reads of the simulator's own tables (application profiles, measured step times).

The simulation core imports nothing above it, so the limits of :mod:`deepboot_env.limits` are
not available here; the two tables a caller may name by path (``load_profiles(path)``,
``load_step_times(trace_set, path)``) are read through :func:`read_table`: never more than
:data:`MAX_TABLE_BYTES`, and a malformed or too deeply nested JSON is a one-line ``ValueError``
naming the file, not a ``RecursionError`` or a ``MemoryError``.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

MAX_TABLE_BYTES = 16 << 20
"""The largest table read (the shipped ones are 68 KB and 286 KB)."""


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


class NotRegularFile(OSError):
    """A path a reader was given is not a regular file (a FIFO, a device, a socket, a folder)."""


def open_regular(path: str | Path, encoding: str | None = None, newline: str | None = None) -> IO[Any]:
    """The file at ``path`` open for reading (binary, or text in ``encoding``), refused at once
    when it is not a regular file. The one way the project opens a file a user names: ``open()``
    of a FIFO blocks until a writer comes (no signal handler runs meanwhile), and ``/dev/zero``
    or a folder never ends or fails late. The path is opened non-blocking and checked on the
    descriptor (no window between a check and the open), then read as usual.

    Raises:
        NotRegularFile: ``[Errno 22] is a FIFO, not a regular file: '<path>'`` and the like.
        OSError: the file cannot be opened.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            what = _KINDS.get(kind, "a special file")
            raise NotRegularFile(errno.EINVAL, f"is {what}, not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    # Outside the try: once the file object exists it owns the descriptor. A signal's exception
    # raised as open() returns drops the object, which closes the descriptor; closing it again
    # here would turn a Ctrl-C into "Bad file descriptor" (a config error, exit 2).
    binary = open(fd, "rb")
    return binary if encoding is None else io.TextIOWrapper(binary, encoding=encoding, newline=newline)


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


def read_file(
    path: str | Path, what: str, limit: int | None = None, error: Callable[[str], Exception] = ValueError
) -> bytes:
    """The bytes of the regular file at ``path`` (a ``what``, for the message), at most ``limit``
    (None: :data:`MAX_TABLE_BYTES`): the one bounded read of a named file (``read_bounded`` of
    :mod:`deepboot_env.limits` is this one).

    Raises:
        error: ``"<path>: <what> is larger than the limit of <limit> bytes"``.
        OSError: the file cannot be opened or read, or is not a regular file (:class:`NotRegularFile`).
    """
    limit = MAX_TABLE_BYTES if limit is None else limit
    with open_regular(path) as fh:
        data = read_stream(fh, limit)
    if data is None:
        raise error(f"{path}: {what} is larger than the limit of {limit:,} bytes (docs/usage.md §7.1)")
    return data


def read_table(path: str | Path, what: str) -> Any:
    """The JSON value of the file at ``path`` (a ``what``, for the message), read with a bound.

    Raises:
        ValueError: the file is larger than :data:`MAX_TABLE_BYTES`, or not JSON, naming it.
        OSError: the file cannot be opened or read.
    """
    data = read_file(path, what)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0][:120]
        raise ValueError(f"{path}: {what} is not valid JSON ({reason})") from None
