"""Residual actions over a base policy (``DeepBootEnv(action_mode="residual")``), gymnasium-free.

Residual policy learning (Silver et al. 2018; Johannink et al. 2019): the agent does not choose
every job's GPUs from scratch; a base scheduler (ATS by default) proposes an allocation and the
agent chooses, per slot, a correction from :data:`RESIDUAL_DELTAS` GPUs, plus a lending level.
The all-zero correction at the top lending level *is* the base policy's allocation, so an agent
initialised to prefer it starts at the base policy's JCT and learning can only search around it.

Decoding a correction (deterministic, the same rule in the env and the ``ppo:<path>`` adapter):
each slot's target is the base count plus the chosen delta, clipped to ``[0, max_replicas]``; jobs
beyond the slots keep their base count; if the targets exceed the capacity of the chosen lending
level, :func:`~deepboot_env.env.encoding.trim_to_capacity` takes GPUs from the largest targets;
the counts are placed by :func:`~deepboot_env.placement.place_counts` (jobs whose count is unchanged
keep their GPUs, the others best-fit, training cluster first), the rule ATS itself places with.
"""

from __future__ import annotations

import numpy as np

from deepboot_env.env.encoding import _lending_capacity, slot_jobs, split_action, trim_to_capacity
from deepboot_env.placement import place_counts
from deepboot_env.policy import BasePolicy, make_policy
from deepboot_env.sim.state import Allocation, ClusterState

RESIDUAL_DELTAS: tuple[int, ...] = (-8, -4, -2, -1, 0, 1, 2, 4, 8)
"""GPU corrections a slot can apply to the base policy's count."""

NEUTRAL: int = RESIDUAL_DELTAS.index(0)
"""Index of the zero correction."""

_DELTAS = np.array(RESIDUAL_DELTAS, dtype=np.int64)


class ResidualCodec:
    """The base policy's proposal, the mask and the decoding of residual actions.

    Args:
        base: the base policy name (any :func:`~deepboot_env.policy.make_policy` name; ``ats``).
        max_jobs: job slots.
        lend_levels: lending levels (the last one lends everything, as ATS does).

    Attributes:
        proposal: the base policy's allocation for the latest :meth:`propose` state.
    """

    def __init__(self, base: str = "ats", max_jobs: int = 32, lend_levels: int = 5) -> None:
        policy = make_policy(base)
        if not isinstance(policy, BasePolicy):
            raise ValueError(f"base policy {base!r} is not a deepboot_env BasePolicy")
        self.base_name = base
        self.base = policy
        self.max_jobs = max_jobs
        self.lend_levels = lend_levels
        self.proposal: Allocation | None = None
        self._counts: dict[int, int] = {}

    def reset(self, seed: int | None = None) -> None:
        """Start an episode (resets the base policy)."""
        self.base.reset(seed)
        self.proposal = None
        self._counts = {}

    def propose(self, state: ClusterState) -> Allocation:
        """Ask the base policy for its allocation of ``state`` (kept for :meth:`decode`)."""
        self.proposal = self.base.decide(state)
        self._counts = {job_id: int(g.sum()) for job_id, g in self.proposal.gpus.items()}
        return self.proposal

    def base_counts(self, state: ClusterState) -> np.ndarray:
        """The proposal's GPUs per slot, as a fraction of the cluster's GPUs (observation)."""
        out = np.zeros(self.max_jobs, dtype=np.float32)
        total = state.config.total_gpus
        for i, job in enumerate(slot_jobs(state, self.max_jobs)):
            out[i] = min(self._counts.get(job.id, 0) / total, 1.0)
        return out

    def mask(self, state: ClusterState) -> np.ndarray:
        """Valid corrections per slot (the target stays in [0, max_replicas]; empty slots: only 0),
        then every lending level; flattened for MaskablePPO."""
        nd = len(RESIDUAL_DELTAS)
        mask = np.zeros(self.max_jobs * nd + self.lend_levels, dtype=bool)
        slots = mask[: self.max_jobs * nd].reshape(self.max_jobs, nd)
        jobs = slot_jobs(state, self.max_jobs)
        if jobs:
            base = np.array([self._counts.get(job.id, 0) for job in jobs])
            limit = np.array([job.max_replicas for job in jobs])
            target = base[:, None] + _DELTAS[None, :]
            slots[: len(jobs)] = (target >= 0) & (target <= limit[:, None])
        slots[len(jobs) :, NEUTRAL] = True
        mask[self.max_jobs * nd :] = True
        return mask

    def decode(self, action: np.ndarray, state: ClusterState) -> tuple[Allocation, int]:
        """The allocation of ``action`` over the latest proposal; returns it and the GPUs the
        clipping and the capacity repair removed (or added, for negative targets).

        Raises:
            RuntimeError: if :meth:`propose` was not called for this state.
            ValueError: if the action has the wrong shape or a choice outside the action space.
        """
        if self.proposal is None:
            raise RuntimeError("call propose(state) before decode()")
        choices, lend = split_action(action, self.max_jobs, len(RESIDUAL_DELTAS), self.lend_levels)
        jobs = slot_jobs(state, self.max_jobs)
        top = self.lend_levels - 1
        if lend == top and all(choices[i] == NEUTRAL for i in range(len(jobs))):
            return self.proposal, 0
        targets = dict(self._counts)
        repaired = 0
        for job, choice in zip(jobs, choices, strict=False):
            base = self._counts.get(job.id, 0)
            want = base + RESIDUAL_DELTAS[choice]
            clipped = min(max(want, 0), job.max_replicas)
            repaired += abs(want - clipped)
            targets[job.id] = clipped
        cap = _lending_capacity(state, lend / top if top > 0 else 0.0)
        excess = sum(targets.values()) - sum(cap)
        if excess > 0:
            repaired += excess
            trim_to_capacity(targets, {job.id: job for job in state.jobs}, excess)
        return Allocation(place_counts(state, targets, cap)), repaired
