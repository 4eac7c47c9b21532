"""What the simulator calls on a policy: the hooks, each with its default (docs/policies.md §1).

The simulator never looks a hook up by name: the object it runs (``Simulator(policy=...)``) has
every one of :class:`SimulatorHooks`, and :class:`DefaultHooks` gives a default for each;
:class:`deepboot_env.policy.BasePolicy` inherits them, and a simulator given no policy (the env,
a bare run) uses :class:`DefaultHooks` itself.

* ``adaptive_batch`` (default True): whether the policy's jobs re-choose their batch size by
  goodput; read once, when the simulator is built.
* ``choose_reclaim(state, request) -> GpuRef | None`` (default DeepBoot's ATS-I rule): the lent
  training GPU a cold inference request takes when it finds no free inference GPU and no SLEEP
  pod, or None to let it wait. Not called in Aryl mode.
* ``choose_inference_server(state, request) -> int | None`` (default Aryl mode's own rule): in
  Aryl mode only (``SimConfig.inference_placement="aryl"``), the inference node a cold request
  lands on (its training replicas are evicted), or None to let it wait.
* ``bind_simulator(sim)`` (default: nothing): called with the simulator at the end of every
  reset, before the first decision of an episode; only a policy that looks into the simulator
  itself needs it (``oracle-lookahead``, ``mpc``).

The two defaults that choose are marked (:func:`~deepboot_env.sim.reclaim.ats_i_rule`,
:func:`~deepboot_env.sim.aryl_mode.aryl_server_rule`): the simulator makes a marked choice itself
from its books, without building the whole state for the hook (the same choice); so it does for a
:class:`~deepboot_env.sim.reclaim.RestartAwareRule` hook (:func:`~deepboot_env.sim.reclaim.least_loss_horizon`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from deepboot_env.sim.aryl_mode import aryl_server_of, aryl_server_rule
from deepboot_env.sim.reclaim import ats_i_rule, ats_i_victim
from deepboot_env.sim.state import ClusterState, GpuRef, RequestView

if TYPE_CHECKING:
    from deepboot_env.sim.simulator import Simulator

SIMULATOR_HOOKS = ("adaptive_batch", "choose_reclaim", "choose_inference_server", "bind_simulator")
"""The members of :class:`SimulatorHooks` (named in the error of :func:`checked_hooks`)."""


@runtime_checkable
class SimulatorHooks(Protocol):
    """What the simulator reads and calls on the policy it runs (the module docstring)."""

    adaptive_batch: bool

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """The lent training GPU a cold inference request takes, or None to let it wait."""

    def choose_inference_server(self, state: ClusterState, request: RequestView) -> int | None:
        """In Aryl mode, the inference node a cold request lands on, or None to let it wait."""

    def bind_simulator(self, sim: Simulator) -> None:
        """Called with the simulator at the end of every reset."""


class DefaultHooks:
    """Every hook of :class:`SimulatorHooks` at its default (the module docstring)."""

    adaptive_batch = True

    @ats_i_rule
    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """DeepBoot's ATS-I rule: the lent GPU whose loss lowers the sum of speedups least (marked
        :func:`~deepboot_env.sim.reclaim.ats_i_rule`: the simulator computes it directly)."""
        return ats_i_victim(state)

    @aryl_server_rule
    def choose_inference_server(self, state: ClusterState, request: RequestView) -> int | None:
        """Aryl mode's own rule (:func:`~deepboot_env.sim.aryl_mode.aryl_server`; marked
        :func:`~deepboot_env.sim.aryl_mode.aryl_server_rule`: the simulator computes it directly)."""
        return aryl_server_of(state)

    def bind_simulator(self, sim: Simulator) -> None:
        """Nothing: a deployable policy sees only the states it is given."""


def checked_hooks(policy: object) -> SimulatorHooks:
    """``policy`` if it has every hook of :class:`SimulatorHooks`.

    Raises:
        TypeError: naming the hooks it lacks (subclass :class:`DefaultHooks` or
            :class:`deepboot_env.policy.BasePolicy` for their defaults).
    """
    if isinstance(policy, SimulatorHooks):
        return policy
    missing = ", ".join(name for name in SIMULATOR_HOOKS if not hasattr(policy, name))
    raise TypeError(
        f"{type(policy).__name__} lacks the simulator hooks {missing}; subclass deepboot_env.policy.BasePolicy "
        "(or deepboot_env.sim.hooks.DefaultHooks) for their defaults"
    )
