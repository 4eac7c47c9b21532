"""RL Baselines3 Zoo's configuration for DeepBoot-v0/v1, importable wherever the package is::

    python -m rl_zoo3.train --algo ppo --env DeepBoot-v1 --gym-packages deepboot_env -conf agents.zoo

The Zoo reads a ``-conf`` that is neither a ``.yml`` nor a ``.py`` path as a module and takes its
``hyperparams``: :data:`hyperparams` is the shipped ``agents/conf/zoo.yml`` (package data, the one
copy; ``-conf <that path>`` works as well), so the command needs no clone. Each entry names
:class:`OneTorchThread` as its ``callback``: the Zoo leaves torch at a thread per core unless
``--num-threads`` says otherwise, and these small networks train several times faster on one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from stable_baselines3.common.callbacks import BaseCallback

from agents.threads import use_torch_threads

ZOO_CONF = Path(__file__).resolve().parent / "conf" / "zoo.yml"
"""The Zoo's hyperparameters for the DeepBoot env ids (package data)."""

hyperparams: dict[str, dict[str, Any]] = yaml.safe_load(ZOO_CONF.read_text(encoding="utf-8"))
"""What the Zoo reads from ``-conf agents.zoo``: env id -> hyperparameters."""


class OneTorchThread(BaseCallback):
    """Sets torch to one thread when the Zoo builds its callbacks (before the model), unless the
    user chose a count: the Zoo's ``--num-threads`` (already applied by then) or
    ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``. Does nothing during training."""

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        if "--num-threads" not in sys.argv:
            use_torch_threads()

    def _on_step(self) -> bool:
        """Training goes on."""
        return True
