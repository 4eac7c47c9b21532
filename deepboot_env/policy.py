"""The one policy contract every scheduler implements, heuristic or learned, and its registry.

The contract (:class:`Policy`) is every member the evaluation loop, the simulator and the harness
use; :class:`BasePolicy` has a default for each but ``decide``, so a policy subclasses it and
overrides what it changes (docs/policies.md §1):

* ``name``: how results and messages name it;
* ``reset(seed)``: forget episode state and reseed any randomness (default: nothing), called by
  :func:`~deepboot_env.evaluation.run_episode` before every episode;
* ``decide(state) -> Allocation`` at every scheduling boundary: GPUs per node for each active
  training job (no default);
* the simulator's hooks (:mod:`deepboot_env.sim.hooks`, declared by
  :class:`~deepboot_env.sim.hooks.SimulatorHooks` with their defaults in
  :class:`~deepboot_env.sim.hooks.DefaultHooks`):

  - ``adaptive_batch``: whether its jobs re-choose their batch size by goodput (Pollux,
    DeepBoot) or keep the submitted batch size (FIFO, Tiresias, Optimus); default True;
  - ``choose_reclaim(state, request) -> GpuRef | None`` when a cold inference request finds no
    free inference GPU and no SLEEP pod: which lent training GPU it takes (default: ATS-I);
  - ``choose_inference_server(state, request) -> int | None`` in Aryl mode: the inference node
    a cold request lands on (default: Aryl mode's own rule; ``lyra`` overrides it);
  - ``bind_simulator(sim)``, called with the simulator at the end of every reset, before the
    first decision (default: nothing). Only a policy that looks into the simulator itself needs
    it: the clairvoyant ``oracle-lookahead`` upper reference (:mod:`baselines.oracle_lookahead`),
    which forks the simulator to play the true future, and ``mpc`` (:mod:`baselines.mpc`), which
    forks it and plays a forecast of the future instead;
* ``repaired_gpus``: GPUs its action decoding removed from its decisions in the current episode,
  read by the harness after the episode (default 0; a learned agent counts them).

The simulator never branches on a policy's name and looks no hook up by name: a policy without
one of them is refused (:func:`make_policy`, :func:`~deepboot_env.evaluation.run_episode` and the
simulator raise ``TypeError`` naming what is missing).

Two optional protocols go beyond the contract; the env's action codecs
(:mod:`deepboot_env.env.action`) use them, and ATS and the policies built on it implement both:

* :class:`CountProposer` (``propose_counts`` then ``place_proposal``, whose composition is
  ``decide``): the residual action mode reads a base policy's counts at every decision and pays
  for the placement only when the agent keeps them (any other base policy is asked for
  ``decide``);
* :class:`ScoredProposer` (``decide_scored``, ``scored_placement``, ``log_weights``): the score action mode adjusts the
  per-job weights of its prior's knapsack (a prior must implement it).

Policies are built by name with :func:`make_policy`. Packages register their own names and
prefixes (:func:`register_policy`, :func:`register_prefix`), with ``"module:attr"`` entry points
imported on first use, as Gymnasium's ``register(id, entry_point=...)`` does; the packages that do
are found through entry points (:mod:`deepboot_env.plugins`). The built-in ones: ``baselines`` (every
heuristic, ``ia:<name>`` and ``jitter:<sigma>``) and ``agents`` (``ppo:<path>`` and
``priority:<path>``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

from deepboot_env.plugins import load_plugins, resolve_entry_point
from deepboot_env.sim.hooks import SIMULATOR_HOOKS, DefaultHooks, SimulatorHooks
from deepboot_env.sim.state import (
    Allocation,
    AllocationError,
    ClusterState,
    GpuRef,
    JobView,
    RequestView,
    validate_allocation,
)

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
    "SimulatorHooks",
    "available_policies",
    "available_prefixes",
    "checked_policy",
    "make_policy",
    "register_policy",
    "register_prefix",
    "validate_allocation",
]


@runtime_checkable
class Policy(SimulatorHooks, Protocol):
    """Everything the evaluation loop, the simulator and the harness use of a scheduler (the
    module docstring): the simulator's hooks and these."""

    name: str
    repaired_gpus: int

    def reset(self, seed: int | None = None) -> None:
        """Forget episode state and reseed any randomness."""

    def decide(self, state: ClusterState) -> Allocation:
        """Training allocation at a scheduling boundary."""


POLICY_CONTRACT = ("name", "reset", "decide", *SIMULATOR_HOOKS, "repaired_gpus")
"""The members of :class:`Policy` (named in the error of :func:`checked_policy`)."""


def checked_policy(policy: object, name: str | None = None) -> Policy:
    """``policy`` if it has every member of :class:`Policy`.

    Raises:
        TypeError: naming the policy (``name``, default its class) and the members it lacks.
    """
    if isinstance(policy, Policy):
        return policy
    missing = ", ".join(member for member in POLICY_CONTRACT if not hasattr(policy, member))
    label = type(policy).__name__ if name is None else name
    raise TypeError(
        f"policy {label!r} does not implement the Policy protocol: it lacks {missing} "
        "(subclass deepboot_env.policy.BasePolicy for their defaults)"
    )


@runtime_checkable
class CountProposer(Protocol):
    """A policy whose ``decide(state)`` is ``place_proposal(state, propose_counts(state))``."""

    def propose_counts(self, state: ClusterState) -> dict[int, int]:
        """GPUs per active job (0: none), in the order :meth:`place_proposal` places them."""

    def place_proposal(self, state: ClusterState, counts: Mapping[int, int]) -> Allocation:
        """Place the :meth:`propose_counts` of the same ``state`` on GPUs."""


WIDTH_CLASSES = 3
"""Width classes whose option values a :class:`ScoredProposer` reshapes by per-job
log-multipliers, besides the 1-GPU reference (:func:`baselines.ats.width_class`): 2 GPUs on one
node, 3 to G GPUs on one node, split across nodes."""


@runtime_checkable
class ScoredProposer(Protocol):
    """A policy that decides from per-job priority scores on top of its own (ATS's knapsack and
    the policies built on it): what the ``score`` action mode adjusts
    (:class:`~deepboot_env.env.action.ScoreCodec`)."""

    def decide_scored(
        self,
        state: ClusterState,
        scores: Mapping[int, float],
        lend: float,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> Allocation:
        """The allocation with each job's weight times ``exp(scores[job id])`` (absent: 0), the
        lending share times ``lend`` in [0, 1] and each job's option values reshaped by its
        width-class log-multipliers ``width_scores[job id]``
        (:func:`baselines.ats.width_scored_options`; absent: none); zero scores, no width scores
        and ``lend`` 1 are ``decide``."""

    def scored_placement(
        self,
        state: ClusterState,
        scores: Mapping[int, float],
        lend: float,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> dict[int, list[int]]:
        """:meth:`decide_scored`'s GPUs per node of each job as lists of ints, valid by
        construction (the score action's decoding, which hands them to the simulator unchecked)."""

    def log_weights(self, state: ClusterState) -> dict[int, float]:
        """Each active job's log-weight before scores, relative to the heaviest job's (<= 0)."""


class BasePolicy(DefaultHooks):
    """Defaults for every member of :class:`Policy` but ``decide``: the simulator's hooks of
    :class:`~deepboot_env.sim.hooks.DefaultHooks` (adaptive batch, ATS-I reclaim, Aryl mode's own
    server, nothing at bind), no episode state and no repaired GPUs."""

    name = "base"
    repaired_gpus = 0
    """GPUs the policy's action decoding removed in the current episode (none: it decodes none)."""

    def reset(self, seed: int | None = None) -> None:
        """Nothing to reset by default."""

    def decide(self, state: ClusterState) -> Allocation:
        """Subclasses implement the allocation."""
        raise NotImplementedError


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
    return checked_policy(policy, name)
