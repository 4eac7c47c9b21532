"""Training that survives SIGINT and SIGTERM: stop at the next safe point, keep the model, say how to resume.

Training uses the project's one stop mechanism, :class:`deepboot_env.stops.StopSignals`: while a
run trains, the first SIGINT or SIGTERM is recorded and :class:`agents.runs.callbacks.StopOnSignal`, an
SB3 callback, ends ``model.learn`` at the next environment step (SB3 stops when a callback returns False); a
pool of worker processes in progress (the warm start's demonstrations, an evaluation, an ES
generation) is stopped at once (:func:`deepboot_env.stops.interruptible`). The caller saves the
model and its config as after a normal end and raises :class:`TrainingInterrupted`, which the
command line turns into one line naming the resume command (:func:`resume_command`, the run's
own command with ``--resume`` and the steps left) and the exit status 128 + signal (130 for
SIGINT, 143 for SIGTERM). A second signal while stopping is ignored: the model being saved is not
cut short.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from deepboot_env.stops import signal_name


class TrainingInterrupted(Exception):
    """A run stopped on a signal after saving its model (``model``) in ``run_dir``; ``resume`` is
    the command that continues it, ``note`` what was cut short (or empty)."""

    def __init__(self, signum: int, run_dir: Path, model: Path, resume: str, note: str = "") -> None:
        self.signum = signum
        self.run_dir = run_dir
        self.model = model
        self.resume = resume
        cut = f" ({note})" if note else ""
        super().__init__(
            f"{signal_name(signum)}: stopped{cut}; model and config saved in {run_dir}; resume with: {resume}"
        )

    @property
    def exit_status(self) -> int:
        """128 + the signal number, as a shell reports a process ended by it."""
        return 128 + self.signum


def command_words(command: str | None) -> list[str]:
    """The words of a run's command line: ``command`` (shell syntax, as ``train_policy.main``
    records it), else this process's interpreter and arguments."""
    return shlex.split(command) if command else [sys.executable, *sys.argv]


def resume_command(command: Sequence[str], run_dir: str | Path) -> str:
    """The shell command that continues a stopped run: the program of ``command`` (the run's
    words up to its first flag: ``deepboot train``, ``python train_policy.py``, ``python -m
    deepboot_harness train``) and ``--resume run_dir``; the run folder gives back everything else
    (:mod:`agents.runs.resume`)."""
    program: list[str] = []
    words = iter(command)
    for word in words:
        if word == "-m":  # python -m <module>: the module is part of the program
            program += [word, next(words, "")]
        elif word.startswith("-"):
            break
        else:
            program.append(word)
    return shlex.join([*program, "--resume", str(run_dir)])
