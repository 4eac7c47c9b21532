"""Training that survives SIGINT and SIGTERM: stop at the next step, keep the model, say how to resume.

While a run trains, :class:`StopOnSignal` replaces the SIGINT and SIGTERM handlers with one that
only records the signal; its callback then ends ``model.learn`` at the next environment step (SB3
stops when a callback returns False). The caller saves the model and its config as after a normal
end and raises :class:`TrainingInterrupted`, which the command line turns into one line naming
the resume command and the exit status 128 + signal (130 for SIGINT, 143 for SIGTERM). A second
signal while stopping is handled the same way: the model being saved is not cut short.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a run cleanly."""


class TrainingInterrupted(Exception):
    """A run stopped on a signal after saving its model (``model``) in ``run_dir``."""

    def __init__(self, signum: int, run_dir: Path, model: Path) -> None:
        self.signum = signum
        self.run_dir = run_dir
        self.model = model
        name = signal.Signals(signum).name
        super().__init__(
            f"{name}: stopped; model and config saved in {run_dir}; resume with "
            f"deepboot train --resume {model} -n <more steps> (plus the same --workload/--preset)"
        )

    @property
    def exit_status(self) -> int:
        """128 + the signal number, as a shell reports a process ended by it."""
        return 128 + self.signum


class StopOnSignal(BaseCallback):
    """Records SIGINT/SIGTERM while entered (a context manager) and stops training at the next step.

    Args:
        on_stop: called once when training stops on a signal (e.g. to skip a final evaluation).

    Attributes:
        signum: the first signal received, or None.
    """

    def __init__(self, on_stop: Callable[[], None] | None = None) -> None:
        super().__init__(verbose=0)
        self.signum: int | None = None
        self._on_stop = on_stop
        self._previous: dict[int, Any] = {}

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread handles signals (a Ray Tune trial runs in another)
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_step(self) -> bool:
        if self.signum is None:
            return True
        if self._on_stop is not None:
            self._on_stop()
            self._on_stop = None
        return False
