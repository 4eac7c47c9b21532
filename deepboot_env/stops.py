"""Clean stops on SIGINT, SIGTERM and SIGHUP: the one mechanism of every long command.

While a :class:`StopSignals` is entered (in the main thread), SIGINT (Ctrl-C), SIGTERM and SIGHUP
(a closed terminal) are caught and the first one is recorded (:attr:`StopSignals.signum`). What
happens next depends on the section the program is in:

* **interruptible** (the default: ``deepboot compare``, ``benchmark``, ``generate``, ``simulate``,
  and any :func:`interruptible` block such as a pool of worker processes): the handler raises
  :class:`Stopped` at once (inside an import or numba's compiler, :data:`RETRY_S` later, when the
  signal comes again: :func:`in_unsafe_code`), a :class:`KeyboardInterrupt` that
  ``except Exception`` does not catch; the pool stops its workers
  (:func:`deepboot_env.pool.run_pool`) and the command saves what finished, prints one line and
  exits with :attr:`Stopped.exit_status`;
* **deferred** (a training loop between two steps, a model being saved): the signal is only
  recorded; the code polls :func:`stop_requested` at its next safe point and ends there.

Only the first signal counts: a second one while stopping is recorded and ignored, so the saving
of what finished is never cut short. The exit status is that of a shell for a process ended by the
signal: 128 + its number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). Before a command's
:class:`StopSignals` is entered (its imports), :mod:`deepboot_harness.launch` stops it as cleanly.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a command cleanly: Ctrl-C, ``kill``, and a closed terminal or dropped
SSH session (SIGHUP, treated as SIGTERM is)."""


class Stopped(KeyboardInterrupt):
    """Raised in an interruptible section by the first SIGINT or SIGTERM (``signum``)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal_name(signum))

    @property
    def exit_status(self) -> int:
        """128 + the signal number, as a shell reports a process ended by it."""
        return 128 + self.signum


def signal_name(signum: int) -> str:
    """``SIGINT``, ``SIGTERM``, ... for a signal number."""
    return signal.Signals(signum).name


UNSAFE_MODULES: tuple[str, ...] = ("importlib._bootstrap", "llvmlite", "numba")
"""Code that a :class:`Stopped` raised by the handler must not cut: an import in progress (an
exception inside a compiled extension's initialisation can abort the interpreter) and numba's
compiler, whose LLVM callbacks swallow an exception ("Exception ignored on calling ctypes callback
function") and would lose the stop."""

RETRY_S = 0.05
"""How soon a signal that came in :data:`UNSAFE_MODULES`' code is sent again (to this process)."""


def in_unsafe_code(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller of it runs code of :data:`UNSAFE_MODULES`."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(UNSAFE_MODULES):
            return True
        frame = frame.f_back
    return False


_ACTIVE: list[StopSignals] = []
"""The entered :class:`StopSignals`, innermost last."""


class StopSignals:
    """Catch SIGINT and SIGTERM while entered (a context manager; nothing happens off the main
    thread, where Python delivers no signal).

    Args:
        interruptible: whether the first signal raises :class:`Stopped` at once (True) or is
            only recorded until an :meth:`interruptible` section or a poll (False).

    Attributes:
        signum: the first signal received, or None.
    """

    def __init__(self, interruptible: bool = True) -> None:
        self.signum: int | None = None
        self._interruptible = interruptible
        self._raised = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            _ACTIVE.append(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def install(self) -> None:
        """Put this object's handler back (after a library such as Ray replaced it)."""
        if self._previous and threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        if not self._interruptible:
            return
        if in_unsafe_code(frame):  # raised there, it would be swallowed or abort: come back shortly
            threading.Timer(RETRY_S, self._again, (signum,)).start()
            return
        self._raise()

    def _again(self, signum: int) -> None:
        """Send ``signum`` to this process again, if this handler is still the one entered."""
        if self in _ACTIVE:
            os.kill(os.getpid(), signum)

    def _raise(self) -> None:
        """Raise :class:`Stopped` for the recorded signal, once."""
        if self.signum is not None and not self._raised:
            self._raised = True
            raise Stopped(self.signum)

    @contextmanager
    def section(self, interruptible: bool) -> Iterator[None]:
        """A block in which a signal raises :class:`Stopped` (``interruptible``; at once on entry
        if one came before) or is only recorded."""
        before = self._interruptible
        self._interruptible = interruptible
        try:
            if interruptible:
                self._raise()
            yield
        finally:
            self._interruptible = before


def active() -> StopSignals | None:
    """The innermost entered :class:`StopSignals`, or None (always off the main thread, which
    alone receives signals: a worker thread neither polls nor switches the main thread's sections)."""
    if not _ACTIVE or threading.current_thread() is not threading.main_thread():
        return None
    return _ACTIVE[-1]


def stop_requested() -> bool:
    """Whether a SIGINT or SIGTERM came while the active :class:`StopSignals` was entered."""
    stops = active()
    return stops is not None and stops.signum is not None


@contextmanager
def interruptible() -> Iterator[None]:
    """A block that a signal ends at once with :class:`Stopped` (a pool of worker processes, an
    evaluation): the active :class:`StopSignals`' interruptible section, or nothing without one."""
    stops = active()
    if stops is None:
        yield
        return
    with stops.section(True):
        yield


def reinstall() -> None:
    """Put the active :class:`StopSignals`' handler back, after a library replaced it (Ray's
    ``ray.init`` sets its own SIGTERM handler)."""
    stops = active()
    if stops is not None:
        stops.install()
