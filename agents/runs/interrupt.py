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


RESUME_FLAGS = ("--resume", "-i", "--trained-agent")
"""The flags that name the model or run folder to continue."""
STEP_FLAGS = ("-n", "--n-timesteps")
"""The flags of the training budget (timesteps; generations with ``--algo es``)."""
FIXED_ON_RESUME = ("policy", "policy_kwargs")
"""``-params`` keys a resumed model keeps from its checkpoint (naming them again is refused)."""


def command_words(command: str | None) -> list[str]:
    """The words of a run's command line: ``command`` (shell syntax, as ``train_policy.main``
    records it), else this process's interpreter and arguments."""
    return shlex.split(command) if command else [sys.executable, *sys.argv]


def resume_command(command: Sequence[str], resume: str | Path, more: int) -> str:
    """The shell command that continues a stopped run: ``command`` (the run's program and
    arguments) without its ``--resume`` / ``-n`` flags and the ``-params`` a resume may not
    change, then ``--resume resume -n more``."""
    words = list(command)
    out: list[str] = []
    skip = 0
    params = False
    for word in words:
        if skip:
            skip -= 1
            continue
        name = word.split("=", 1)[0]
        if name in RESUME_FLAGS + STEP_FLAGS:
            skip = 0 if "=" in word else 1
            params = False
            continue
        if word.startswith("-"):
            params = name in ("-params", "--hyperparams")
        elif params and word.split(":", 1)[0] in FIXED_ON_RESUME:
            continue
        out.append(word)
    return shlex.join([*out, "--resume", str(resume), "-n", str(max(int(more), 1))])
