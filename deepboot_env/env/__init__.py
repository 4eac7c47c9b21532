"""Gymnasium adapter (``DeepBoot-v0``) over the gym-free simulator."""

from deepboot_env.env.deepboot_env import DeepBootEnv

__all__ = ["DeepBootEnv"]
