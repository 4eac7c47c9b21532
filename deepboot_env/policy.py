"""The one policy contract every scheduler implements, heuristic or learned, and its registry.

A policy answers two questions:

* ``decide(state) -> Allocation`` at every scheduling boundary: GPUs per node for each active
  training job (design.md §3 calls this ``allocate``; :class:`BasePolicy` provides that name as
  an alias);
* ``choose_reclaim(state, request) -> GpuRef | None`` when a cold inference request finds no free
  inference GPU and no SLEEP pod: which lent training GPU it takes (default: ATS-I).

It also declares ``adaptive_batch``: whether its jobs re-choose their batch size by goodput
(Pollux, DeepBoot) or keep the submitted batch size (FIFO, Tiresias, Optimus). The simulator
never branches on a policy's name.

Policies are built by name with :func:`make_policy`; ``ppo:<path>`` loads a trained agent and
``ia:<name>`` gives policy ``name`` interference-aware placement (:mod:`baselines.interference_aware`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from deepboot_env.sim.reclaim import ats_i_victim
from deepboot_env.sim.state import (
    Allocation,
    AllocationError,
    ClusterState,
    GpuRef,
    JobView,
    RequestView,
    repair_allocation,
    validate_allocation,
)

__all__ = [
    "Allocation",
    "AllocationError",
    "BasePolicy",
    "ClusterState",
    "GpuRef",
    "JobView",
    "Policy",
    "RequestView",
    "available_policies",
    "make_policy",
    "register_policy",
    "repair_allocation",
    "validate_allocation",
]


@runtime_checkable
class Policy(Protocol):
    """What the simulator and the evaluation loop need from a scheduler."""

    name: str
    adaptive_batch: bool

    def reset(self, seed: int | None = None) -> None:
        """Forget episode state and reseed any randomness."""

    def decide(self, state: ClusterState) -> Allocation:
        """Training allocation at a scheduling boundary."""

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """The lent training GPU a cold inference request takes, or None to let it wait."""


class BasePolicy:
    """Defaults shared by all policies: adaptive batch, ATS-I reclaim, no episode state."""

    name = "base"
    adaptive_batch = True

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset by default."""

    def decide(self, state: ClusterState) -> Allocation:
        """Subclasses implement the allocation."""
        raise NotImplementedError

    def allocate(self, state: ClusterState) -> Allocation:
        """Alias of :meth:`decide` (the name used in design.md)."""
        return self.decide(state)

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """DeepBoot's ATS-I rule: the lent GPU whose loss lowers the sum of speedups least."""
        return ats_i_victim(state)


PolicyFactory = Callable[..., Policy]

_REGISTRY: dict[str, PolicyFactory] = {}
_BUILTIN: dict[str, str] = {
    "fifo": "baselines.fifo",
    "ats": "baselines.ats",
    "ats-nolend": "baselines.ats",
    "tiresias": "baselines.tiresias",
    "optimus": "baselines.optimus",
    "afs": "baselines.afs",
    "afs-lend": "baselines.afs",
    "pollux": "baselines.pollux",
    "pollux-lend": "baselines.pollux",
    "pollux-noavoid": "baselines.pollux",
    "ones": "baselines.ones",
    "ones-lend": "baselines.ones",
    "interference-aware": "baselines.interference_aware",
}
"""Built-in policies -> the module that registers them, imported on first use so the core does
not depend on ``baselines``."""


def register_policy(name: str, factory: PolicyFactory | None = None) -> Callable[[PolicyFactory], PolicyFactory]:
    """Register ``factory`` under ``name`` (usable as a decorator)."""

    def _register(f: PolicyFactory) -> PolicyFactory:
        _REGISTRY[name] = f
        return f

    if factory is not None:
        _register(factory)
    return _register


def available_policies() -> list[str]:
    """Names :func:`make_policy` accepts (plus ``ppo:<path>`` and ``ia:<name>``)."""
    return sorted(set(_REGISTRY) | set(_BUILTIN))


def make_policy(name: str, **kwargs: object) -> Policy:
    """Build a policy by registry name, ``ppo:<path>`` for a saved agent, or ``ia:<name>`` for
    policy ``name``'s allocation with interference-aware placement.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name.startswith("ppo:"):
        module = importlib.import_module("agents.policy_adapter")
        return module.load_agent_policy(name[4:], **kwargs)
    if name.startswith("ia:"):
        module = importlib.import_module("baselines.interference_aware")
        return module.wrap(name[3:], **kwargs)
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    factory = _REGISTRY.get(name)
    if factory is None:
        known = ", ".join(available_policies())
        raise ValueError(f"unknown policy {name!r}; available: {known}, ppo:<path>, ia:<name>")
    policy = factory(**kwargs)
    if not isinstance(policy, Policy):
        raise TypeError(f"policy {name!r} does not implement the Policy protocol")
    return policy
