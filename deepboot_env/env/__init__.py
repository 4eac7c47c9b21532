"""Gymnasium adapter (``DeepBoot-v0``) over the gym-free simulator.

:class:`DeepBootEnv` is imported on first use, so :mod:`deepboot_env.env.encoding` (the observation
and action encoding, shared with the ``ppo:<path>`` policy adapter) works without gymnasium.
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
