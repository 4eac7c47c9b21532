"""Starting a command so that a stop is clean from its first line.

A command's own :class:`~deepboot_env.stops.StopSignals` is entered once its modules are imported,
and importing them (torch, SB3, pandas) takes seconds: a Ctrl-C, ``kill`` or closed terminal then
gave a traceback of the import in progress, or ended the process with no word. :func:`launch`
installs a handler for SIGINT, SIGTERM and SIGHUP first, with the standard library alone (this
module imports nothing of the project's until it is installed), then imports the command and runs
it; a signal before the command's own handler is in place ends it with one line and the shell's
status for that signal (130, 143, 129), once the import in progress has finished (an exception
raised inside the import of a compiled extension can abort the interpreter). The command's handler
replaces this one while it runs.

``deepboot`` (the console script) and ``python train_policy.py`` start through it.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Sequence
from types import FrameType

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals :mod:`deepboot_env.stops` stops a command on (kept equal by a test)."""


class StoppedWhileStarting(KeyboardInterrupt):
    """A stop signal came before the command's own handler was in place."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class _EarlyStop:
    """The handler of :func:`launch`: while the command's modules import, a signal is only
    recorded (an exception raised inside the import of a compiled extension such as torch can
    abort the interpreter); from then on it raises :class:`StoppedWhileStarting`."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.raising = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        if self.raising:
            raise StoppedWhileStarting(self.signum)

    def start_raising(self) -> None:
        """Raise from now on, at once for a signal recorded so far."""
        self.raising = True
        if self.signum is not None:
            raise StoppedWhileStarting(self.signum)


def launch(prog: str, target: str, argv: Sequence[str] | None = None) -> int:
    """Run ``target`` (``module:function``, a ``main(argv) -> int``) on ``argv`` with a clean stop
    from the first line; its exit status.

    Args:
        prog: the command's name, for the message.
        target: where its ``main`` is; imported only once the handler is installed.
        argv: its arguments (None: the command reads ``sys.argv``).
    """
    handler = _EarlyStop()
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    try:
        module, _, name = target.partition(":")
        main = getattr(importlib.import_module(module), name)
        handler.start_raising()
        return int(main(None if argv is None else list(argv)) or 0)
    except StoppedWhileStarting as stop:
        print(f"{prog}: {stop}: stopped while starting; nothing was written", file=sys.stderr)
        return 128 + stop.signum


def deepboot() -> int:
    """The ``deepboot`` console script: :func:`deepboot_harness.cli.main` through :func:`launch`."""
    return launch("deepboot", "deepboot_harness.cli:main")
