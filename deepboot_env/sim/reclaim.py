"""ATS-I: DeepBoot's choice of which lent training GPU an inference request takes back.

This is the core's default reclaim hook (:class:`deepboot_env.sim.hooks.DefaultHooks`, which
:class:`deepboot_env.policy.BasePolicy` inherits), so every policy reclaims by DeepBoot's rule
unless it overrides ``choose_reclaim``.

When a cold inference request finds neither an empty inference GPU nor a SLEEP pod, it reclaims a
GPU lent to training. ATS-I (docs/inference.md §6) evaluates every (training job, node)
pair that holds a reclaimable GPU and removes the one GPU whose loss lowers the sum of
fair-share-normalised speedups least; ties go to the first pair in job order (least attained
service, then earliest arrival), node order within a job.

Fair-share normalisation: each job's speedup is its rate divided by its rate at the fair share
``ceil(total GPUs / J_all)`` replicas on one node, where J_all counts the training jobs *and* the
inference pods, as the original does (its pods are pseudo-jobs; docs/inference.md §7). Only
the victim's term of the sum changes, so the rule compares each candidate's own speedup loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, TypeVar

import numpy as np

from deepboot_env.sim.cluster import node_layout
from deepboot_env.sim.rates import RateTable
from deepboot_env.sim.restart import plan_change
from deepboot_env.sim.state import ClusterState, GpuRef, JobView


def fair_share_base(job: JobView | Holder, fair_replicas: int) -> float:
    """Rate of ``job`` at its fair share (one node, ``fair_replicas`` GPUs); 1.0 if that is 0."""
    k = max(1, min(fair_replicas, job.rates.max_replicas))
    base = job.rates.rate(job.epoch, False, k)
    return base if base > 0 else 1.0


def ats_i_victim(state: ClusterState) -> GpuRef | None:
    """The lent training GPU ATS-I reclaims, or None if no training GPU is reclaimable.

    Reclaimable GPUs are training GPUs on inference nodes (two clusters) or on any node (shared
    pool): training-cluster GPUs are never taken by inference.
    """
    return least_loss_choice(state.jobs, len(state.jobs), state.node_kinds, state.node_counts, state.config.total_gpus)


def restart_aware_victim(state: ClusterState, horizon: float) -> GpuRef | None:
    """The lent training GPU whose loss costs the fewest fair-share speedup-seconds over the
    next ``horizon`` seconds, counting the restart the loss causes, or None if no training GPU is
    reclaimable (docs/policies.md §8.9).

    A candidate that leaves its job k - 1 >= 1 GPUs costs ``(before - after) * horizon + after *
    extra``: the rate it loses over the horizon, plus the new rate lost during the restart
    stall the shrink adds (the restart model's stall of the change less the stall already ahead
    of the job). One that parks its job costs ``before * (horizon + full start)``: the job's whole
    rate, and the full start it pays when it comes back. Speedups are over the fair share as in
    ATS-I, whose ranking this is when restarts cost nothing; ties as ATS-I.

    Raises:
        ValueError: if ``horizon`` is not a finite number > 0.
    """
    return least_loss_choice(
        state.jobs,
        len(state.jobs),
        state.node_kinds,
        state.node_counts,
        state.config.total_gpus,
        checked_horizon(horizon),
        state.restart_model,
    )


def checked_horizon(horizon: float) -> float:
    """``horizon`` as a float if it is a finite number of seconds > 0.

    Raises:
        ValueError: otherwise, in one line.
    """
    if isinstance(horizon, bool) or not (isinstance(horizon, int | float) and 0 < horizon < math.inf):
        raise ValueError(f"the reclaim horizon must be a finite number of seconds > 0, got {horizon!r}")
    return float(horizon)


class Holder(NamedTuple):
    """What the least-loss rules read of a job that holds a reclaimable GPU, in ATS-I's order:
    least attained service, then earliest arrival, then job id (ids are unique, so tuples of
    holders sort by those three alone)."""

    attained_service: float
    arrival: float
    id: int
    rates: RateTable
    epoch: int
    counts: list[int]
    """GPUs per node (a list the rules only read)."""
    nodes: list[int]
    """The nodes where it holds a reclaimable GPU."""
    stalled_seconds: float


def holders_of(jobs: Iterable[JobView], reclaimable: Sequence[int]) -> list[Holder]:
    """The :class:`Holder` of each job of ``jobs`` with a GPU on a ``reclaimable`` node."""
    holders = []
    for job in jobs:
        if not job.replicas:
            continue
        counts = job.alloc.tolist()
        nodes = [node for node in reclaimable if counts[node] > 0]
        if nodes:
            holders.append(
                Holder(
                    job.attained_service, job.arrival, job.id, job.rates, job.epoch, counts, nodes, job.stalled_seconds
                )
            )
    return holders


def least_loss_choice(
    jobs: Iterable[JobView],
    num_jobs: int,
    node_kinds: np.ndarray,
    node_counts: Sequence[Sequence[int]],
    total_gpus: int,
    horizon: float = 0.0,
    restart_model: str = "",
) -> GpuRef | None:
    """:func:`ats_i_victim` (``horizon`` 0) or :func:`restart_aware_victim` (``horizon`` > 0, under
    ``restart_model``) from their parts: ``jobs`` (those that hold no GPU may be left out: they
    are never candidates) of the ``num_jobs`` active jobs, the node kinds, the (train, running,
    protect, sleep) counts per node and the cluster's GPUs; the first of equal costs in ATS-I's
    order (:func:`least_loss_among`)."""
    holders = holders_of(jobs, node_layout(node_kinds).lendable)
    return least_loss_among(holders, fair_replicas(num_jobs, node_counts, total_gpus), horizon, restart_model)


def fair_replicas(num_jobs: int, node_counts: Sequence[Sequence[int]], total_gpus: int) -> int:
    """ATS-I's fair share: ``ceil(total GPUs / J_all)``, J_all the ``num_jobs`` active training
    jobs and the inference pods (the (train, running, protect, sleep) ``node_counts``' last three)."""
    _, running, protect, sleeping = node_counts
    pods = sum(running) + sum(protect) + sum(sleeping)
    return math.ceil(total_gpus / max(num_jobs + pods, 1))


def least_loss_among(holders: list[Holder], fair: int, horizon: float, restart_model: str) -> GpuRef | None:
    """The GPU of ``holders`` whose loss costs least at fair share ``fair`` (ATS-I with ``horizon``
    0, else the restart-aware cost over ``horizon`` under ``restart_model``); the first of equal
    costs in ATS-I's order. The simulator reclaims with it directly for the hooks
    :func:`least_loss_horizon` knows, from holders it makes of its jobs without a whole state."""
    best: tuple[float, GpuRef] | None = None
    for job in sorted(holders):
        counts = job.counts
        base = fair_share_base(job, fair)
        k = sum(counts)
        n = len(counts) - counts.count(0)
        before = job.rates.rate(job.epoch, n > 1, k)
        for node in job.nodes:
            n_after = n - 1 if counts[node] == 1 else n
            after = job.rates.rate(job.epoch, n_after > 1, k - 1)
            loss = (before - after) / base
            if horizon:
                loss *= horizon
                # The restart term is >= 0, so a candidate whose rate loss alone reaches the best
                # cannot win: skip its restart plan (most of this rule's cost), same choice.
                if best is not None and loss >= best[0] - 1e-12:
                    continue
                loss += _restart_loss(job, k, node, after, restart_model) / base
            if best is None or loss < best[0] - 1e-12:
                best = (loss, GpuRef(job.id, node))
    return None if best is None else best[1]


def _restart_loss(job: Holder, k: int, node: int, after: float, restart_model: str) -> float:
    """Progress lost to the restart that taking one GPU of ``job`` (``k`` GPUs) on ``node``
    causes: the new rate over the stall the shrink adds, or, when it parks the job, its rate now
    over the full start it pays when it comes back."""
    app = job.rates.app
    if after <= 0.0 or k == 1:
        return job.rates.rate(job.epoch, False, 1) * app.full_restart_delay
    old = np.asarray(job.counts)
    new = old.copy()
    new[node] -= 1
    stall = plan_change(restart_model, app, old, new, True, replicas=(k, k - 1)).stall_seconds
    return after * max(stall - job.stalled_seconds, 0.0)


_Hook = TypeVar("_Hook", bound=Callable[..., object])


def ats_i_rule(hook: _Hook) -> _Hook:
    """Mark a ``choose_reclaim`` hook that is ATS-I itself (``ats_i_victim(state)``, whatever the
    request): the simulator then reclaims by :func:`least_loss_choice` over the jobs that hold GPUs
    instead of building the whole state for the hook (the same choice; a hook that overrides a
    marked one is not marked unless it says so)."""
    hook.ats_i = True  # type: ignore[attr-defined]
    return hook


def is_ats_i_rule(hook: Callable[..., object]) -> bool:
    """Whether ``hook`` is marked :func:`ats_i_rule`."""
    return bool(getattr(hook, "ats_i", False))


class RestartAwareRule:
    """The restart-aware reclaim as a ``choose_reclaim`` hook: :func:`restart_aware_victim` at
    ``horizon`` seconds, whatever the request (``AtsPolicy(reclaim_horizon=...)``). The simulator
    computes it from the jobs that hold GPUs (:func:`least_loss_horizon`), as it does ATS-I.

    Raises:
        ValueError: if ``horizon`` is not a finite number of seconds > 0.
    """

    def __init__(self, horizon: float) -> None:
        self.horizon = checked_horizon(horizon)

    def __call__(self, state: ClusterState, request: object) -> GpuRef | None:
        """The victim of :func:`restart_aware_victim` in ``state``."""
        return restart_aware_victim(state, self.horizon)


def least_loss_horizon(hook: Callable[..., object]) -> float | None:
    """How the simulator may compute ``hook``'s choice from the jobs that hold GPUs
    (:func:`least_loss_choice`): 0 for the marked ATS-I rule, the horizon of a
    :class:`RestartAwareRule`, None for any other hook (it is called with the whole state)."""
    if is_ats_i_rule(hook):
        return 0.0
    if isinstance(hook, RestartAwareRule):
        return hook.horizon
    return None
