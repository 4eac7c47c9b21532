"""The one error type of bad training settings: :class:`ConfigError`.

A bad flag value, ``k:v`` pair or configuration entry of ``train_policy.py`` (hyperparameters:
:mod:`agents.hyperparameters`; presets and flags: :mod:`agents.runs.run_config`; models and envs:
:mod:`agents.trainers.ppo`) raises it with a one-line message, which the command line prints as a
usage error (exit status 2).
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad flag value, ``k:v`` pair or configuration entry (one-line message)."""
