"""Atomic, locked outputs: every file a command writes goes through this module.

* :func:`atomic_write` (and :func:`write_text`, :func:`write_json`, :func:`write_bytes`): the content goes to a
  temporary file in the same folder (``.<name>.<pid>.tmp``), is flushed and fsynced, and then
  replaces the target with :func:`os.replace`. A reader, a kill or a full disk never sees or
  leaves half a file: the target holds its previous content or the new one, and the temporary
  file is removed on failure.
* :func:`append_text`: a log that grows as work finishes (``runs.jsonl``, ``evaluations.csv``)
  gets whole rows only: the rows are written at the end of the file and fsynced, and a write that
  fails (a full disk) is cut back to the previous end. :func:`append_csv` appends dict rows to a
  CSV file so (the header first in a new file).
* :func:`lock_folder`: a run folder has one writer. The lock is an ``fcntl.flock`` on
  :data:`LOCK_FILE` in the folder, held while the command runs and released by the system
  when the process ends, however it ends; a second command on the same folder is refused with
  :class:`FolderInUse`, naming the holder's process id.

No write follows a symbolic link: the atomic writers replace a link at the target with the new
file (the link's target is left as it was), and :func:`append_text`, :func:`append_csv` and
:func:`lock_folder` refuse a link, or anything but a regular file, where they would write
(:func:`open_for_writing`). A folder handed over with ``runs.jsonl -> ~/.bashrc`` in it therefore
changes nothing outside it.

Errors are :class:`OSError` naming the target file (not the temporary one), so that commands
report them in one line.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from deepboot_env.limits import safe_cell, safe_frame

LOCK_FILE = ".lock"
"""The lock file of a run folder (kept after the run; it holds the last holder's process id)."""


class FolderInUse(OSError):
    """A run folder is locked by another process: the message is one line for the user."""


class LinkInFolder(OSError):
    """A run folder holds a symbolic link: the message is one line for the user."""


def temporary_path(path: Path) -> Path:
    """Where :func:`atomic_write` writes ``path`` before renaming it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


_WRITE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
"""Added to every open for writing: no link is followed, and a FIFO does not block the open."""


def open_for_writing(path: Path, flags: int) -> int:
    """A descriptor of the regular file at ``path`` opened with ``flags`` (``os.O_WRONLY`` and
    the like) and never through a symbolic link; a FIFO, a device or a folder there is refused.

    Raises:
        OSError: ``ELOOP`` for a link, ``EINVAL`` for another kind of file, or the open's own
            error, naming ``path``.
    """
    try:
        fd = os.open(path, flags | _WRITE_FLAGS, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR) or (exc.errno == errno.ENXIO and stat.S_ISFIFO(_lmode(path))):
            raise _refused(path) from None
        raise _named(exc, path) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refused(path)
    os.set_blocking(fd, True)
    return fd


def _lmode(path: Path) -> int:
    """The mode of ``path`` itself (a link's own), 0 if there is nothing."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _refused(path: Path) -> OSError:
    """The error for a write refused at ``path``: a link (``ELOOP``), or not a regular file."""
    link = stat.S_ISLNK(_lmode(path))
    kind, code = ("a symbolic link", errno.ELOOP) if link else ("not a regular file", errno.EINVAL)
    return OSError(code, f"is {kind}; nothing is written through it (remove it, or use another folder)", str(path))


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` instead of the temporary file (same errno, same class)."""
    if exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror, str(path))


@contextmanager
def atomic_write(path: str | Path, binary: bool = False, encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """A file object whose content replaces ``path`` when the block ends without an error (text
    with ``encoding`` and no newline translation, or ``binary``); on an error ``path`` is left
    as it was.

    Raises:
        OSError: a write, fsync or rename failure (disk full, permission), naming ``path``.
    """
    target = Path(path)
    tmp = temporary_path(target)
    with suppress(FileNotFoundError):
        tmp.unlink()  # a stale one of an earlier process of this id, or a link planted there
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _WRITE_FLAGS, 0o666)
    except OSError as exc:
        raise _named(exc, target) from None
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding=encoding, newline="") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise _named(exc, target) from None
        raise
    _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    """fsync a folder, so that a rename in it survives a crash (best effort)."""
    with suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``text`` atomically (:func:`atomic_write`); returns the path."""
    with atomic_write(path, encoding=encoding) as fh:
        fh.write(text)
    return Path(path)


def write_json(path: str | Path, doc: Any, sort_keys: bool = False) -> Path:
    """Replace ``path`` with ``doc`` as indented JSON and a final newline (:func:`write_text`)."""
    return write_text(path, json.dumps(doc, indent=2, sort_keys=sort_keys) + "\n")


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically (:func:`atomic_write`); returns the path."""
    with atomic_write(path, binary=True) as fh:
        fh.write(data)
    return Path(path)


def write_csv(frame: Any, path: str | Path) -> Path:
    """A pandas ``frame`` as CSV (no index column) at ``path``, atomically, with text cells that
    a spreadsheet would read as a formula neutralised (:func:`deepboot_env.limits.safe_frame`);
    returns the path."""
    with atomic_write(path) as fh:
        safe_frame(frame).to_csv(fh, index=False)
    return Path(path)


def append_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Add ``text`` (whole rows) at the end of ``path`` (created if missing) and fsync it; on
    any failure the file is cut back to its previous end, so it never ends in a partial row. An
    interruption (Ctrl-C) once every byte is written keeps the rows: they are whole, and a caller
    that saw them in the file may count them saved.

    Raises:
        OSError: a write failure (disk full, permission), or ``path`` is a link or not a regular
            file (:func:`open_for_writing`), naming ``path``.
    """
    target = Path(path)
    data = memoryview(text.encode(encoding))
    fd = open_for_writing(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        end = os.fstat(fd).st_size
        try:
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except BaseException as exc:
            if data or isinstance(exc, OSError):  # a cut row, or rows the disk may not hold
                with suppress(OSError):
                    os.ftruncate(fd, end)
            if isinstance(exc, OSError):
                raise _named(exc, target) from None
            raise
    finally:
        os.close(fd)


def append_csv(path: str | Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Append ``rows`` (dicts over ``columns``) to the CSV file at ``path``, with the header
    first if the file is new (``evaluations.csv`` and the like, written as a run goes): whole rows
    or nothing (:func:`append_text`), text cells that a spreadsheet would read
    as a formula neutralised (:func:`~deepboot_env.limits.safe_cell`)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(columns), lineterminator="\r\n")
    target = Path(path)
    if not stat.S_ISREG(_lmode(target)) or target.lstat().st_size == 0:  # new (a link is refused below)
        writer.writeheader()
    writer.writerows({key: safe_cell(value) for key, value in row.items()} for row in rows)
    append_text(target, text.getvalue())


def _refuse_links_in(folder: Path, flag: str) -> None:
    """Refuse a run folder that holds a symbolic link, before any work: a command writes only
    its own files there, and would refuse the link only at its first write to it (minutes in).

    Raises:
        LinkInFolder: naming ``flag``, the folder and the link.
    """
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_symlink():
                raise LinkInFolder(
                    f"{flag} {folder}: {entry.name!r} is a symbolic link; a run folder's files must be its own "
                    "(nothing is written through a link)"
                )


@contextmanager
def lock_folder(folder: str | Path, flag: str = "--out") -> Iterator[Path]:
    """Hold the lock of ``folder`` (created) for the block: one writer per run folder.

    Raises:
        FolderInUse: another process holds it (one line naming ``flag``, the folder and its id).
        LinkInFolder: the folder holds a symbolic link.
        OSError: the folder or its lock file cannot be created, or the lock file is not a
            regular file (:func:`open_for_writing`).
    """
    where = Path(folder)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: no lock
        yield where
        return
    where.mkdir(parents=True, exist_ok=True)
    _refuse_links_in(where, flag)
    lock = where / LOCK_FILE
    fd = open_for_writing(lock, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise FolderInUse(
                f"{flag} {where}: in use by another process (pid {holder}); wait for it to end, or use another folder"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:  # a full disk: refused before any other write
            raise _named(exc, lock) from None
        yield where
    finally:
        os.close(fd)
