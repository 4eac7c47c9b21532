"""The one policy contract every scheduler implements, heuristic or learned, and its registry.

A policy answers two questions:

* ``decide(state) -> Allocation`` at every scheduling boundary: GPUs per node for each active
  training job;
* ``choose_reclaim(state, request) -> GpuRef | None`` when a cold inference request finds no free
  inference GPU and no SLEEP pod: which lent training GPU it takes (default: ATS-I).

It also declares ``adaptive_batch``: whether its jobs re-choose their batch size by goodput
(Pollux, DeepBoot) or keep the submitted batch size (FIFO, Tiresias, Optimus). The simulator
never branches on a policy's name.

One optional hook is not part of the :class:`Policy` protocol: ``bind_simulator(sim)``. The
:class:`~deepboot_env.sim.simulator.Simulator` looks it up by name and, if the policy has it, calls
it with itself at the end of every reset (so at the start of every episode, before the first
decision). Only a policy that looks into the simulator itself needs it: the clairvoyant
``oracle-lookahead`` upper reference (:mod:`baselines.oracle_lookahead`), which forks the simulator
to play the true future, and ``mpc`` (:mod:`baselines.mpc`), which forks it and plays a forecast of
the future instead. :class:`BasePolicy` has a no-op default.

A policy that decides GPU counts before it places them may also implement :class:`CountProposer`
(``propose_counts`` then ``place_proposal``, whose composition is ``decide``). The env's residual
action mode uses it to read a base policy's counts at every decision and to pay for the placement
only when the agent keeps them (ATS does; any other base policy is asked for ``decide``).

Policies are built by name with :func:`make_policy`. Packages register their own names and
prefixes (:func:`register_policy`, :func:`register_prefix`), with ``"module:attr"`` entry points
imported on first use, as Gymnasium's ``register(id, entry_point=...)`` does; the packages that do
are found through entry points (:mod:`deepboot_env.plugins`). The built-in ones: ``baselines`` (every
heuristic and ``ia:<name>``) and ``agents`` (``ppo:<path>``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from deepboot_env.plugins import load_plugins, resolve_entry_point
from deepboot_env.sim.reclaim import ats_i_rule, ats_i_victim
from deepboot_env.sim.state import (
    Allocation,
    AllocationError,
    ClusterState,
    GpuRef,
    JobView,
    RequestView,
    validate_allocation,
)

if TYPE_CHECKING:
    from deepboot_env.sim.simulator import Simulator

__all__ = [
    "Allocation",
    "AllocationError",
    "BasePolicy",
    "ClusterState",
    "CountProposer",
    "GpuRef",
    "JobView",
    "Policy",
    "RequestView",
    "PolicySpec",
    "ScoredProposer",
    "available_policies",
    "available_prefixes",
    "make_policy",
    "register_policy",
    "register_prefix",
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


@runtime_checkable
class CountProposer(Protocol):
    """A policy whose ``decide(state)`` is ``place_proposal(state, propose_counts(state))``."""

    def propose_counts(self, state: ClusterState) -> dict[int, int]:
        """GPUs per active job (0: none), in the order :meth:`place_proposal` places them."""

    def place_proposal(self, state: ClusterState, counts: Mapping[int, int]) -> Allocation:
        """Place the :meth:`propose_counts` of the same ``state`` on GPUs."""


@runtime_checkable
class ScoredProposer(Protocol):
    """A policy that decides from per-job priority scores on top of its own (ATS's knapsack and
    the policies built on it): what the ``score`` action mode adjusts
    (:class:`~deepboot_env.env.codec.ScoreCodec`)."""

    def decide_scored(self, state: ClusterState, scores: Mapping[int, float], lend: float) -> Allocation:
        """The allocation with each job's weight times ``exp(scores[job id])`` (absent: 0) and
        the lending share times ``lend`` in [0, 1]; zero scores and ``lend`` 1 are ``decide``."""

    def log_weights(self, state: ClusterState) -> dict[int, float]:
        """Each active job's log-weight before scores, relative to the heaviest job's (<= 0)."""


class BasePolicy:
    """Defaults shared by all policies: adaptive batch, ATS-I reclaim, no episode state."""

    name = "base"
    adaptive_batch = True

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset by default."""

    def decide(self, state: ClusterState) -> Allocation:
        """Subclasses implement the allocation."""
        raise NotImplementedError

    @ats_i_rule
    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """DeepBoot's ATS-I rule: the lent GPU whose loss lowers the sum of speedups least (marked
        :func:`~deepboot_env.sim.reclaim.ats_i_rule`: the simulator computes it directly)."""
        return ats_i_victim(state)

    def bind_simulator(self, sim: Simulator) -> None:
        """Called by the simulator that runs this policy, with itself, at the end of every reset
        (the optional hook of the module docstring). Nothing by default: a deployable policy sees
        only the states it is given."""


PolicyFactory = Callable[..., Policy]


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy: ``entry_point`` (``"module:attr"``, imported on first use, or a
    callable) called with ``kwargs`` updated by the caller's."""

    name: str
    entry_point: str | PolicyFactory
    kwargs: Mapping[str, object] = field(default_factory=dict)

    def factory(self) -> PolicyFactory:
        """The callable that builds the policy (imports its module the first time)."""
        return _resolve(self.entry_point)


_REGISTRY: dict[str, PolicySpec] = {}
_PREFIXES: dict[str, tuple[str | Callable[..., Policy], str]] = {}
"""Prefix -> (entry point, what its argument names)."""


def _resolve(entry_point: str | Callable[..., Policy]) -> Callable[..., Policy]:
    return cast("Callable[..., Policy]", resolve_entry_point(entry_point))  # it names a policy factory


def register_policy(name: str, entry_point: str | PolicyFactory, **kwargs: object) -> None:
    """Register a policy under ``name``: ``make_policy(name, **kw)`` calls the entry point
    (``"module:attr"`` imported lazily, or a callable) with ``kwargs`` updated by ``kw``.

    Raises:
        ValueError: if ``name`` is empty or contains ``:`` (reserved for prefixes).
    """
    if not name or ":" in name:
        raise ValueError(f"policy names are non-empty and have no ':', got {name!r}")
    _REGISTRY[name] = PolicySpec(name, entry_point, dict(kwargs))


def register_prefix(prefix: str, entry_point: str | Callable[..., Policy], arg: str = "arg") -> None:
    """Register ``prefix``: ``make_policy("prefix:ARG", **kw)`` calls the entry point with
    ``(ARG, **kw)`` (for example ``ppo:<path>`` or ``ia:<name>``); ``arg`` names ARG in messages."""
    if not prefix or ":" in prefix:
        raise ValueError(f"prefixes are non-empty and have no ':', got {prefix!r}")
    _PREFIXES[prefix] = (entry_point, arg)


def available_policies() -> list[str]:
    """Names :func:`make_policy` accepts (plus the registered ``prefix:<arg>`` forms)."""
    load_plugins()
    return sorted(_REGISTRY)


def available_prefixes() -> list[str]:
    """Registered prefixes with their argument (``ia:<name>``, ``ppo:<path>``, ...)."""
    load_plugins()
    return [f"{prefix}:<{_PREFIXES[prefix][1]}>" for prefix in sorted(_PREFIXES)]


def make_policy(name: str, **kwargs: object) -> Policy:
    """Build a policy by registry name, or ``prefix:<arg>`` for a registered prefix (``ppo:<path>``
    loads a saved agent, ``ia:<name>`` gives policy ``name`` interference-aware placement).

    Raises:
        ValueError: for an unknown name or prefix, listing the known ones.
        TypeError: if what the entry point builds does not implement :class:`Policy`.
    """
    load_plugins()
    prefix, sep, arg = name.partition(":")
    if sep:
        if prefix not in _PREFIXES:
            known = ", ".join(available_prefixes())
            raise ValueError(f"unknown policy prefix {prefix!r} in {name!r}; registered prefixes: {known}")
        policy = _resolve(_PREFIXES[prefix][0])(arg, **kwargs)
    else:
        spec = _REGISTRY.get(name)
        if spec is None:
            known = ", ".join([*sorted(_REGISTRY), *available_prefixes()])
            raise ValueError(f"unknown policy {name!r}; available: {known}")
        policy = spec.factory()(**{**spec.kwargs, **kwargs})
    if not isinstance(policy, Policy):
        raise TypeError(f"policy {name!r} does not implement the Policy protocol")
    return policy
