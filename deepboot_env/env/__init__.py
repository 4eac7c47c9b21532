"""Gymnasium adapter (``DeepBoot-v0``, ``DeepBoot-v1``) over the gym-free simulator.

:mod:`~deepboot_env.env.observation` encodes what an agent sees, :mod:`~deepboot_env.env.action`
holds the action codecs (what an action means), :mod:`~deepboot_env.env.deepboot_env` the env
itself. :class:`DeepBootEnv` is imported on first use, so the observation and the action codecs
(shared with the ``ppo:<path>`` policy adapter) work without gymnasium.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deepboot_env.env.deepboot_env import DeepBootEnv

__all__ = ["DeepBootEnv"]


def __getattr__(name: str) -> Any:
    if name == "DeepBootEnv":
        from deepboot_env.env.deepboot_env import DeepBootEnv

        return DeepBootEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
