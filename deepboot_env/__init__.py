"""deepboot-env: DeepBoot/Pollux GPU-cluster scheduling simulator and Gymnasium environment.

Importing the package registers the Gymnasium ids ``DeepBoot-v0`` (jobs progress at the fitted
goodput model; the shipped checkpoint's) and ``DeepBoot-v1`` (at the step times measured for their
placement shape, as in the original simulators; ``dynamics="v1"``, docs/environment.md) when
gymnasium is installed; the simulation core (:mod:`deepboot_env.sim`) never imports gymnasium.
A saved model comes back with a factory of the env it needs through :func:`agents.load_agent`.

Both ids register ``max_episode_steps`` = :data:`MAX_EPISODE_STEPS`, the env's default
``max_rounds``: ``gym.make``'s ``TimeLimit`` and the env's own truncation cut an episode at the
same decision. With another ``max_rounds``, pass the same ``max_episode_steps`` to ``gym.make``
(a ``TimeLimit`` shorter than ``max_rounds`` ends an episode without ``episode_metrics``).
"""

from __future__ import annotations

__version__ = "0.1.0"


FRONT_END_DYNAMICS = "v1"
"""The dynamics every command runs unless told otherwise (``deepboot simulate``, ``compare``,
``benchmark``, ``train`` / ``train_policy.py``) and the library builds unless told otherwise
(:func:`deepboot_env.config.sim_config`, :class:`~deepboot_env.config.EnvConfig`,
:func:`deepboot_env.evaluation.run_episode`): DeepBoot-v1's measured step times, the world the
benchmark and the learned models live in. v0 stays by name: ``dynamics="v0"``,
``gym.make("DeepBoot-v0")``, ``--dynamics v0`` / ``--env DeepBoot-v0``."""

REFERENCE_POLICY = "ats"
"""The policy every ratio is taken against unless one is named (``deepboot compare`` and
``benchmark``, the leaderboard, training's ``eval_reference``): ATS, DeepBoot's own scheduler."""

MAX_EPISODE_STEPS = 3000
"""Decisions per episode before truncation: the registered ``max_episode_steps`` and the default
of :attr:`EnvConfig.max_rounds <deepboot_env.config.EnvConfig.max_rounds>`."""


def _register() -> None:
    try:
        import gymnasium
    except ImportError:  # the core works without gymnasium
        return
    for version in ("v0", "v1"):
        if f"DeepBoot-{version}" not in gymnasium.registry:
            gymnasium.register(
                id=f"DeepBoot-{version}",
                entry_point="deepboot_env.env:DeepBootEnv",
                kwargs={"dynamics": version},
                max_episode_steps=MAX_EPISODE_STEPS,
            )


_register()
