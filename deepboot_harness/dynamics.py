"""Which dynamics a run used, named in every output (titles, ``results.md``, result rows, the
metrics JSON, the leaderboard), and a warning when a saved PPO model runs on another world than
the one it was trained in.

A :class:`~deepboot_env.sim.simulator.SimConfig` keeps the options a dynamics version stands for
(:data:`deepboot_env.config.DYNAMICS`), not the version's name: :func:`dynamics_name` reads the
name back, so that two reports of the same workload can never be compared across worlds unawares
(ATS on test-01 is 1,489.6 s on v0 and 1,528.3 s on v1).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from deepboot_env.config import DYNAMICS
from deepboot_env.sim.simulator import SimConfig

CUSTOM = "custom"
"""The name of dynamics options that match no version (``--dynamics v0 --truth measured``)."""


def dynamics_name(config: SimConfig) -> str:
    """``v0`` or ``v1`` when ``config``'s dynamics options are that version's, else :data:`CUSTOM`."""
    for name, options in DYNAMICS.items():
        if all(getattr(config, option) == value for option, value in options.items()):
            return name
    return CUSTOM


def dynamics_title(config: SimConfig) -> str:
    """``DeepBoot-v1 dynamics``, ``DeepBoot-v0 dynamics`` or ``custom dynamics``: the name that
    heads titles; the options themselves are listed beside it where a report has room
    (:func:`deepboot_env.config.dynamics_notes`)."""
    name = dynamics_name(config)
    return "custom dynamics" if name == CUSTOM else f"DeepBoot-{name} dynamics"


def trained_dynamics_warnings(policies: Iterable[str], config: SimConfig) -> list[str]:
    """One line per ``ppo:<path>`` policy whose model was trained on other dynamics than
    ``config``'s (a model file that cannot be read is left to the policy's own error)."""
    ppo = [p for p in policies if p.startswith("ppo:")]
    if not ppo:
        return []
    from agents.saved.checkpoint import CheckpointError
    from agents.saved.policy_adapter import saved_dynamics

    running = dynamics_name(config)
    lines = []
    for policy in ppo:
        try:
            trained = saved_dynamics(policy[len("ppo:") :])
        except (OSError, CheckpointError):
            continue
        if trained != running:
            lines.append(
                f"warning: {policy} was trained on DeepBoot-{trained} dynamics and runs here on "
                f"{dynamics_title(config)} (--dynamics {trained} runs it in its own world)"
            )
    return lines


def warn_trained_dynamics(command: str, policies: Iterable[str], config: SimConfig) -> None:
    """Print :func:`trained_dynamics_warnings` on stderr, ``deepboot <command>: `` first."""
    for line in trained_dynamics_warnings(policies, config):
        print(f"deepboot {command}: {line}", file=sys.stderr)
