"""deepboot-env: DeepBoot/Pollux GPU-cluster scheduling simulator and Gymnasium environment.

Importing the package registers the Gymnasium ids ``DeepBoot-v0`` (jobs progress at the fitted
goodput model; the shipped checkpoint's) and ``DeepBoot-v1`` (at the step times measured for their
placement shape, as in the original simulators; ``dynamics="v1"``, docs/environment.md) when
gymnasium is installed; the simulation core (:mod:`deepboot_env.sim`) never imports gymnasium.
:func:`load_agent` loads a saved PPO / MaskablePPO model with a factory of the env it needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def load_agent(path: str | Path, *, device: str = "cpu", trust: bool = False) -> tuple[Any, Any]:
    """A saved PPO / MaskablePPO model and a factory of the env it needs::

        model, make_env = deepboot_env.load_agent("agents/pretrained/deepboot-v0.zip")
        env = make_env(workload="val")

    Nothing in the file is unpickled unless ``trust=True``; see
    :func:`agents.policy_adapter.load_agent` (stable-baselines3 is imported when called).
    """
    from agents.policy_adapter import load_agent as load

    return load(path, device=device, trust=trust)


def _register() -> None:
    try:
        import gymnasium
    except ImportError:  # the core works without gymnasium
        return
    for version in ("v0", "v1"):
        if f"DeepBoot-{version}" not in gymnasium.registry:
            gymnasium.register(
                id=f"DeepBoot-{version}", entry_point="deepboot_env.env:DeepBootEnv", kwargs={"dynamics": version}
            )


_register()
