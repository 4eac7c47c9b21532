"""Action codecs of ``DeepBoot-v0``: what an action means, in one interface (gymnasium-free).

An :class:`ActionCodec` owns everything about the action: its ``MultiDiscrete`` shape, the mask
over its choices, the observation entries it adds, and its decoding into GPUs per node. The env,
the ``ppo:<path>`` policy adapter and behaviour cloning call the codec and never ask which mode
it is in. Two codecs exist (:data:`CODECS`):

* :class:`TargetCodec` (``action_mode="target"``): per job slot an index into
  :data:`GPU_BUCKETS` (the job's GPU target), then a lending level.
* :class:`ResidualCodec` (``action_mode="residual"``, residual policy learning: Silver et al.
  2018, Johannink et al. 2019): a base scheduler (ATS by default) proposes an allocation and
  the action chooses, per slot, a correction from :data:`RESIDUAL_DELTAS` GPUs, then a lending
  level. The neutral action (zero corrections at the top lending level) *is* the base policy's
  allocation; the observation gains ``base``: the proposed GPUs per slot over the cluster's GPUs.

Slots hold the first ``max_jobs`` active jobs in arrival order; jobs beyond the slots get no GPU
(target) or keep their base count (residual). Lending level ``l`` of ``L`` lets training use the
fraction ``l / (L - 1)`` of the lendable inference GPUs
(:meth:`~deepboot_env.sim.state.ClusterState.training_capacity_list`).

Decoding (deterministic, the one repair rule): each target is clipped to ``[0, max_replicas]``;
while the targets exceed the capacity of the lending level, GPUs are taken one at a time from the
largest target (:func:`trim_to_capacity`); the counts are placed by
:func:`~deepboot_env.placement.place_count_lists` (jobs whose count is unchanged keep their GPUs,
the others best-fit, training cluster first, then lent GPUs). The result is valid by construction,
so the simulator applies it without a second check; the number of GPUs the repair changed is
returned with it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from deepboot_env.env.observation import slot_jobs
from deepboot_env.limits import shown
from deepboot_env.placement import place_count_lists, placement_order
from deepboot_env.policy import WIDTH_CLASSES, CountProposer, Policy, ScoredProposer, make_policy
from deepboot_env.sim.cluster import node_layout
from deepboot_env.sim.hooks import DefaultHooks, SimulatorHooks
from deepboot_env.sim.state import Allocation, ClusterState, JobView, validate_allocation

if TYPE_CHECKING:
    from deepboot_env.sim.array_episode import ArrayEpisode

GPU_BUCKETS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32)
"""GPU targets a slot can ask for (target mode)."""

RESIDUAL_DELTAS: tuple[int, ...] = (-8, -4, -2, -1, 0, 1, 2, 4, 8)
"""GPU corrections a slot can apply to the base policy's count (residual mode)."""

NEUTRAL: int = RESIDUAL_DELTAS.index(0)
"""Index of the zero correction."""

Counts = dict[int, list[int]]
"""Job id -> GPUs per node, as lists of ints (what ``Simulator.apply_valid_counts`` takes)."""

_BUCKETS = np.asarray(GPU_BUCKETS)


def counts_allocation(counts: Counts) -> Allocation:
    """``counts`` (lists of GPUs per node by job id) as the :class:`Allocation` a policy returns."""
    return Allocation({job_id: np.array(row, dtype=np.int64) for job_id, row in counts.items()})


def split_action(action: np.ndarray, max_jobs: int, slot_choices: int, lend_levels: int) -> tuple[list[int], int]:
    """The per-slot choices (a list of ints) and the lending level of a MultiDiscrete action with
    ``max_jobs`` slots of ``slot_choices`` choices and ``lend_levels`` levels.

    Raises:
        ValueError: if the action is not a 1-D integer array of ``max_jobs + 1`` entries (a float
            or a (n, 1) array is refused, not truncated or flattened) or has a choice outside the
            action space.
    """
    raw = np.asarray(action)
    if raw.shape != (max_jobs + 1,):
        raise ValueError(f"action must have shape ({max_jobs + 1},), got {raw.shape}")
    if raw.dtype.kind not in "iu":
        raise ValueError(f"action must hold integers, got dtype {raw.dtype}")
    choices = raw.tolist()
    lend = choices.pop()
    if not (0 <= lend < lend_levels and 0 <= min(choices) and max(choices) < slot_choices):
        raise ValueError(f"action {shown(raw.tolist())} outside the action space")
    return choices, lend


def trim_to_capacity(targets: dict[int, int], jobs: Mapping[int, JobView], excess: int) -> None:
    """Remove ``excess`` GPUs, one at a time from the largest target (ties: most attained service,
    then latest arrival), computed level by level instead of GPU by GPU.

    One sort by (target, tie order) lists the jobs from the largest target down; lowering the top
    group to the next level merges it with the next jobs of that list, so the list needs no sorting
    again until the last, partial level, which takes one GPU more from the first jobs of its group
    in tie order.
    """

    def tie_key(j: int) -> tuple[float, float]:
        return (-jobs[j].attained_service, -jobs[j].arrival)

    order = sorted(targets, key=lambda j: (-targets[j], -jobs[j].attained_service, -jobs[j].arrival))
    levels = [targets[j] for j in order]
    size = 0
    while excess > 0:
        top = levels[size]
        while size < len(order) and levels[size] == top:
            size += 1
        below = levels[size] if size < len(order) else 0
        per_job = top - below
        if per_job * size <= excess:
            excess -= per_job * size
            for i in range(size):
                levels[i] = below
        else:
            full, extra = divmod(excess, size)
            for i, j in enumerate(sorted(order[:size], key=tie_key)):
                targets[j] = top - full - (1 if i < extra else 0)
            return
    for i in range(size):
        targets[order[i]] = levels[i]


class ActionCodec(ABC):
    """The meaning of a ``DeepBoot-v0`` action: shape, mask, extra observation and decoding.

    Per decision the caller calls :meth:`observe` once (it may ask a base policy), then
    :meth:`mask` and :meth:`decode` on the same state.

    Args:
        max_jobs: job slots.
        lend_levels: lending levels (the last one lends everything).
    """

    mode: ClassVar[str]
    """The ``action_mode`` name of the codec."""
    slot_choices: ClassVar[int]
    """Choices per job slot."""
    continuous: ClassVar[bool] = False
    """Whether the action is a ``Box`` of :attr:`action_size` reals instead of ``MultiDiscrete``."""

    def __init__(self, max_jobs: int, lend_levels: int) -> None:
        self.max_jobs = max_jobs
        self.lend_levels = lend_levels
        self.hooks: SimulatorHooks = DefaultHooks()
        """What the episode's simulator calls back (reclaims, batch sizes): the base policy's or
        prior's own hooks for a codec that corrects one, so that its neutral action plays in the
        base policy's world; the defaults (ATS-I reclaims, adaptive batches) otherwise."""

    @property
    def nvec(self) -> list[int]:
        """The ``MultiDiscrete`` sizes: one per slot, then the lending level."""
        return [self.slot_choices] * self.max_jobs + [self.lend_levels]

    @property
    def action_size(self) -> int:
        """Entries of the action: one per slot, then the lending level (or share)."""
        return self.max_jobs + 1

    def extra_observation(self) -> dict[str, int]:
        """Observation entries the codec adds (name -> length of its float32 vector in [0, 1])."""
        return {}

    def reset(self, seed: int | None = None) -> None:  # noqa: B027 - optional hook, nothing to reset by default
        """Start an episode."""

    def observe(self, state: ClusterState) -> dict[str, np.ndarray]:
        """The codec's observation entries for ``state`` (called once per decision)."""
        return {}

    def observe_on_arrays(self, state: ClusterState, episode: ArrayEpisode) -> dict[str, np.ndarray]:
        """:meth:`observe` of ``state``, observed from ``episode`` (a codec may read what it
        needs compiled from the episode's arrays; the same entries)."""
        return self.observe(state)

    @abstractmethod
    def mask(self, state: ClusterState) -> np.ndarray:
        """Valid choices per action dimension, flattened (for sb3-contrib MaskablePPO)."""

    @abstractmethod
    def decode(self, action: np.ndarray, state: ClusterState) -> tuple[Counts, int]:
        """GPUs per node for the jobs of ``state`` (valid by construction) and the GPUs the
        repair changed.

        Raises:
            ValueError: if the action has the wrong shape or a choice outside the action space.
        """

    @property
    def decides_on_arrays(self) -> bool:
        """Whether :meth:`decode_on_arrays` decodes compiled (else the env's episodes stay on the
        simulator by default: :func:`~deepboot_env.evaluation.episode_driver`)."""
        return False

    def decode_on_arrays(self, action: np.ndarray, state: ClusterState, episode: ArrayEpisode) -> np.ndarray | None:
        """:meth:`decode` compiled over ``episode``'s arrays at the decision ``state`` was observed
        at: the GPUs per node of each job (-1: none; the episode's buffer, for
        :meth:`ArrayEpisode.apply_wanted <deepboot_env.sim.array_episode.ArrayEpisode.apply_wanted>`),
        nothing repaired; or None where it decodes in Python (the caller then calls :meth:`decode`)."""
        return None

    def redecode_on_arrays(self, state: ClusterState, episode: ArrayEpisode) -> np.ndarray | None:
        """:meth:`redecode` as :meth:`decode_on_arrays` decodes, or None."""
        return None

    def decode_allocation(self, action: np.ndarray, state: ClusterState) -> tuple[Allocation, int]:
        """:meth:`decode` as an :class:`~deepboot_env.sim.state.Allocation` (what a policy returns)."""
        counts, repaired = self.decode(action, state)
        return counts_allocation(counts), repaired

    def decode_allocation_held(self, state: ClusterState) -> Allocation:
        """:meth:`redecode` as an :class:`~deepboot_env.sim.state.Allocation`."""
        return counts_allocation(self.redecode(state)[0])

    def neutral_action(self) -> np.ndarray | None:
        """The action that leaves a base policy's allocation as it is, or None without a base."""
        return None

    def redecode(self, state: ClusterState) -> tuple[Counts, int]:
        """:meth:`decode` of the latest action on a later ``state`` (the env's ``hold``).

        Raises:
            ValueError: if this codec cannot keep an action (only the score codec does).
        """
        raise ValueError(f"action_mode {self.mode!r} cannot hold an action over boundaries (hold > 1 needs 'score')")

    @abstractmethod
    def expert_action(self, expert: str, policy: Policy, state: ClusterState) -> np.ndarray:
        """The action that imitates ``policy`` (registry name ``expert``) on ``state``.

        Raises:
            ValueError: if this codec cannot express that expert.
        """

    def _lend_fraction(self, level: int) -> float:
        top = self.lend_levels - 1
        return level / top if top > 0 else 0.0

    def _place(
        self, state: ClusterState, targets: dict[int, int], level: int, jobs: Mapping[int, JobView]
    ) -> tuple[Counts, int]:
        """Trim ``targets`` to the capacity of lending ``level`` (:func:`trim_to_capacity`), then
        place them; returns the counts and the GPUs trimmed."""
        cap = state.training_capacity_list(self._lend_fraction(level))
        excess = sum(targets.values()) - sum(cap)
        if excess > 0:
            trim_to_capacity(targets, jobs, excess)
        return place_count_lists(state, targets, cap), max(excess, 0)


_MASK_ROWS: dict[int, bytes] = {}
"""Target mask row (one byte per GPU bucket) of a slot whose job may get at most the key GPUs."""
_EMPTY_SLOT = bytes(i == 0 for i in range(len(GPU_BUCKETS)))
"""Target mask row of an empty slot: only target 0."""
_RESIDUAL_MASK_ROWS: dict[tuple[int, int], bytes] = {}
"""Residual mask row (one byte per correction) of a slot whose base count and limit are the key."""
_NEUTRAL_SLOT = bytes(i == NEUTRAL for i in range(len(RESIDUAL_DELTAS)))
"""Residual mask row of an empty slot: only the zero correction."""


class TargetCodec(ActionCodec):
    """Per slot a GPU target from :data:`GPU_BUCKETS`, then a lending level."""

    mode = "target"
    slot_choices = len(GPU_BUCKETS)

    def mask(self, state: ClusterState) -> np.ndarray:
        """Targets up to each job's ``max_replicas``; empty slots only 0; every lending level
        (only level 0 without inference nodes)."""
        rows = _MASK_ROWS
        parts = []
        for job in state.jobs[: self.max_jobs]:
            limit = job.max_replicas
            row = rows.get(limit)
            if row is None:
                row = rows[limit] = bytes(bucket <= limit for bucket in GPU_BUCKETS)
            parts.append(row)
        parts.append(_EMPTY_SLOT * (self.max_jobs - len(parts)))
        if node_layout(state.node_kinds).inference:
            parts.append(b"\x01" * self.lend_levels)
        else:
            parts.append(b"\x01" + b"\x00" * (self.lend_levels - 1))
        return np.frombuffer(b"".join(parts), dtype=bool).copy()

    def decode(self, action: np.ndarray, state: ClusterState) -> tuple[Counts, int]:
        """Targets capped at ``max_replicas`` (masked choices repaired the same way), trimmed to
        the lending level's capacity, placed (module docstring)."""
        choices, lend = split_action(action, self.max_jobs, self.slot_choices, self.lend_levels)
        jobs = slot_jobs(state, self.max_jobs)
        repaired = 0
        targets: dict[int, int] = {}
        for job, choice in zip(jobs, choices, strict=False):
            want = GPU_BUCKETS[choice]
            limit = job.max_replicas
            if want > limit:
                repaired += want - limit
                want = limit
            targets[job.id] = want
        counts, trimmed = self._place(state, targets, lend, {job.id: job for job in jobs})
        return counts, repaired + trimmed

    def expert_action(self, expert: str, policy: Policy, state: ClusterState) -> np.ndarray:
        """The target action closest to the expert's allocation from below: each job's count
        rounded *down* to a bucket (never more than the expert held), and the smallest lending
        level whose budget covers the inference GPUs the expert borrowed."""
        alloc = policy.decide(state)
        action = np.zeros(self.max_jobs + 1, dtype=np.int64)
        for slot, job in enumerate(state.jobs[: self.max_jobs]):
            action[slot] = int(np.searchsorted(_BUCKETS, alloc.replicas(job.id), side="right") - 1)
        infer = state.inference_nodes()
        if self.lend_levels > 1 and infer.any():
            lent = sum(int(np.asarray(g)[infer].sum()) for g in alloc.gpus.values())
            lendable = int(state.training_capacity()[infer].sum())
            if lendable > 0 and lent > 0:
                level = int(np.ceil(min(lent / lendable, 1.0) * (self.lend_levels - 1) - 1e-9))
                action[-1] = min(max(level, 1), self.lend_levels - 1)
        return action


class ResidualCodec(ActionCodec):
    """Per slot a correction from :data:`RESIDUAL_DELTAS` to a base policy's count, then a
    lending level.

    A base policy that is a :class:`~deepboot_env.policy.CountProposer` (ATS) is asked only for
    its counts at :meth:`observe`; its placement is made (and checked) when :meth:`decode` meets
    the neutral action, the only action that uses it. Any other base policy is asked for its
    allocation at :meth:`observe`. Both give the same counts, placements and order.

    Args:
        max_jobs: job slots.
        lend_levels: lending levels.
        base: the base policy name (any :func:`~deepboot_env.policy.make_policy` name).

    Attributes:
        proposal: the base policy's GPUs per node for the latest :meth:`observe` state (checked
            once by :func:`~deepboot_env.sim.state.validate_allocation`; None until a
            count-proposing base's placement is needed).
    """

    mode = "residual"
    slot_choices = len(RESIDUAL_DELTAS)

    def __init__(self, max_jobs: int, lend_levels: int, base: str = "ats") -> None:
        super().__init__(max_jobs, lend_levels)
        self.base_name = base
        self.base = self.hooks = make_policy(base)
        self._proposer = self.base if isinstance(self.base, CountProposer) else None
        self.proposal: Counts | None = None
        self._proposed: dict[int, int] | None = None
        self._counts: dict[int, int] = {}
        self._wanted: np.ndarray | None = None
        """The base policy's compiled placement of the latest :meth:`observe_on_arrays` (None: none)."""

    def extra_observation(self) -> dict[str, int]:
        """``base``: the proposed GPUs per slot over the cluster's GPUs."""
        return {"base": self.max_jobs}

    def reset(self, seed: int | None = None) -> None:
        """Start an episode (resets the base policy)."""
        self.base.reset(seed)
        self.proposal = None
        self._proposed = None
        self._counts = {}
        self._wanted = None

    def observe(self, state: ClusterState) -> dict[str, np.ndarray]:
        """Ask the base policy for its counts (or allocation) of ``state``; observe its GPUs per slot."""
        if self._proposer is not None:
            self.proposal = None
            self._proposed = self._proposer.propose_counts(state)
            return self._observed(state, placement_order(state, self._proposed))
        self._set_proposal(state, self.base.decide(state))
        return self._observed(state, {job_id: sum(row) for job_id, row in self._checked_proposal().items()})

    def _observed(self, state: ClusterState, counts: dict[int, int]) -> dict[str, np.ndarray]:
        """The ``base`` entry of the base policy's ``counts`` (by job id, kept for :meth:`decode`)."""
        self._counts = counts
        out = np.zeros(self.max_jobs, dtype=np.float32)
        total = state.config.total_gpus
        for i, job in enumerate(slot_jobs(state, self.max_jobs)):
            out[i] = min(counts.get(job.id, 0) / total, 1.0)
        return {"base": out}

    @property
    def decides_on_arrays(self) -> bool:
        """Whether the base policy proposes compiled (``propose_on_arrays``: ATS and its variants)."""
        return bool(getattr(self.base, "decides_on_arrays", False)) and hasattr(self.base, "propose_on_arrays")

    def observe_on_arrays(self, state: ClusterState, episode: ArrayEpisode) -> dict[str, np.ndarray]:
        """:meth:`observe`, the base policy's counts and placement compiled where it has them
        (the same counts, placement and order)."""
        propose = getattr(self.base, "propose_on_arrays", None) if self._proposer is not None else None
        proposed = None if propose is None else propose(episode)
        self._wanted = None
        if proposed is None:
            return self.observe(state)
        self._proposed, self._wanted = proposed
        self.proposal = None
        return self._observed(state, placement_order(state, self._proposed))

    def decode_on_arrays(self, action: np.ndarray, state: ClusterState, episode: ArrayEpisode) -> np.ndarray | None:
        """The base policy's compiled placement for the neutral action (:meth:`decode` places
        any other in Python): the episode's buffer as :meth:`observe_on_arrays` left it."""
        if self._wanted is None or not self._is_neutral(action, state):
            return None
        return self._wanted

    def _set_proposal(self, state: ClusterState, allocation: Allocation) -> None:
        checked = validate_allocation(state, allocation)
        self.proposal = {job_id: row.tolist() for job_id, row in checked.items()}

    def _checked_proposal(self) -> Counts:
        assert self.proposal is not None
        return self.proposal

    def _base_allocation(self, state: ClusterState) -> Counts:
        """The base policy's allocation of the observed ``state`` (placed now if it was not yet)."""
        if self.proposal is None:
            assert self._proposer is not None and self._proposed is not None
            self._set_proposal(state, self._proposer.place_proposal(state, self._proposed))
        return {job_id: list(row) for job_id, row in self._checked_proposal().items()}

    def mask(self, state: ClusterState) -> np.ndarray:
        """Corrections that keep each target in [0, max_replicas]; empty slots only 0; every
        lending level."""
        rows = _RESIDUAL_MASK_ROWS
        parts = []
        for job in slot_jobs(state, self.max_jobs):
            key = (self._counts.get(job.id, 0), job.max_replicas)
            row = rows.get(key)
            if row is None:
                row = rows[key] = bytes(0 <= key[0] + delta <= key[1] for delta in RESIDUAL_DELTAS)
            parts.append(row)
        parts.append(_NEUTRAL_SLOT * (self.max_jobs - len(parts)))
        parts.append(b"\x01" * self.lend_levels)
        return np.frombuffer(b"".join(parts), dtype=bool).copy()

    def decode(self, action: np.ndarray, state: ClusterState) -> tuple[Counts, int]:
        """The proposal itself for the neutral action; otherwise base count + delta per slot,
        clipped to [0, max_replicas] (the clipping counts as repaired), trimmed and placed.

        Raises:
            RuntimeError: if :meth:`observe` was not called for this state.
            ValueError: if the action has the wrong shape or a choice outside the action space.
        """
        if self.proposal is None and self._proposed is None:
            raise RuntimeError("call observe(state) before decode()")
        choices, lend = split_action(action, self.max_jobs, self.slot_choices, self.lend_levels)
        jobs = slot_jobs(state, self.max_jobs)
        if self._neutral(choices, lend, len(jobs)):
            return self._base_allocation(state), 0
        targets = dict(self._counts)
        repaired = 0
        for job, choice in zip(jobs, choices, strict=False):
            want = self._counts.get(job.id, 0) + RESIDUAL_DELTAS[choice]
            clipped = min(max(want, 0), job.max_replicas)
            repaired += abs(want - clipped)
            targets[job.id] = clipped
        counts, trimmed = self._place(state, targets, lend, state.job_by_id)
        return counts, repaired + trimmed

    def _neutral(self, choices: Sequence[int], lend: int, jobs: int) -> bool:
        """Whether ``choices`` and ``lend`` (of an action on a state of ``jobs`` slot jobs) leave
        the base policy's allocation as it is."""
        return lend == self.lend_levels - 1 and all(choices[i] == NEUTRAL for i in range(jobs))

    def _is_neutral(self, action: np.ndarray, state: ClusterState) -> bool:
        """:meth:`_neutral` of ``action`` on ``state``.

        Raises:
            ValueError: if the action has the wrong shape or a choice outside the action space.
        """
        choices, lend = split_action(action, self.max_jobs, self.slot_choices, self.lend_levels)
        return self._neutral(choices, lend, min(len(state.jobs), self.max_jobs))

    def neutral_action(self) -> np.ndarray:
        """Zero corrections at the top lending level: the base policy's allocation."""
        action = np.full(self.max_jobs + 1, NEUTRAL, dtype=np.int64)
        action[-1] = self.lend_levels - 1
        return action

    def expert_action(self, expert: str, policy: Policy, state: ClusterState) -> np.ndarray:
        """The neutral action, exact for the base policy (the only expert a residual action can
        express).

        Raises:
            ValueError: if ``expert`` is not the base policy.
        """
        if expert != self.base_name:
            raise ValueError(f"in residual mode the expert must be the base policy {self.base_name!r}, got {expert!r}")
        return self.neutral_action()


SCORE_SCALE: float = 1.0
"""Default log-weight change of a score of 1 (score mode: a job's weight goes from w to w e^+-1)."""
_DRAW_BLOCK = 512
"""Uniforms the score codec draws from its generator at a time (:meth:`ScoreCodec._uniforms`)."""
_LOG_WEIGHT_RANGE = 12.0
"""Prior log-weights observed on [-12, 0] (mapped to [0, 1])."""


def _clipped(value: float) -> float:
    """``value`` clipped to [-1, 1] (a score action's entry)."""
    return -1.0 if value < -1.0 else 1.0 if value > 1.0 else value


class ScoreCodec(ActionCodec):
    """Per slot a real score added to a prior's log-weight, then a lending share; ATS's
    knapsack and placement decode it (``action_mode="score"``).

    The action is a ``Box(-1, 1, (max_jobs + 1,))`` vector (values outside are clipped): slot i's
    job gets the knapsack weight ``w_j * exp(score_scale * a_i)``, ``w_j`` its weight under the
    prior (a :class:`~deepboot_env.policy.ScoredProposer`: ``ats``, ``ats-srpt``,
    ``priority:<path>``), and training may borrow the share ``min(1, 1 + a_last)`` of what the
    prior lends. Jobs beyond the slots keep their prior weight. Every action decodes into the
    prior's own kind of schedule (restart factor, caps, best-fit placement), and the zero action
    *is* the prior, bit for bit.

    With ``width_classes`` = :data:`~deepboot_env.policy.WIDTH_CLASSES` the action also holds,
    after the slots' scores and before the lending share, that many width scores per slot
    (slot-major): slot i's job gets its option values reshaped by the log-multipliers
    ``score_scale * a`` of the width classes 2 GPUs on one node, 3 to G on one node, split
    (:func:`baselines.ats.width_scored_options`; its value at the fair share unchanged). The
    action is then ``Box(-1, 1, (max_jobs * (1 + width_classes) + 1,))``, the ``noise`` entry
    holds a code per width score too (in the action's layout, drawn once per job), and zero width
    scores are the prior's own valuation.

    Scores are kept per job between decisions (:meth:`redecode`: the env's ``hold``). The
    observation gains ``prior`` (each slot's prior log-weight relative to the heaviest job,
    mapped from [-12, 0] to [0, 1]) and ``noise``: a uniform code per slot, drawn once for each
    job and kept for its life, then one for the lending share drawn at every decision. Policies
    that explore with noise held per job read it (:mod:`agents.models.set_policy`); it carries no
    information about the state.

    Args:
        max_jobs: job slots.
        lend_levels: unused by this codec (kept for the common signature).
        base: the prior policy's name.
        score_scale: the log-weight change of a score of 1 (> 0).
        width_classes: width scores per slot: 0 (none) or :data:`~deepboot_env.policy.WIDTH_CLASSES`.

    Raises:
        ValueError: if the prior does not take scores, ``score_scale`` is not a finite number > 0,
            or ``width_classes`` is neither 0 nor :data:`~deepboot_env.policy.WIDTH_CLASSES`.
    """

    mode = "score"
    slot_choices = 0
    continuous = True

    def __init__(
        self,
        max_jobs: int,
        lend_levels: int,
        base: str = "ats-srpt",
        score_scale: float = SCORE_SCALE,
        width_classes: int = 0,
    ):
        super().__init__(max_jobs, lend_levels)
        if isinstance(score_scale, bool) or not (isinstance(score_scale, int | float) and 0 < score_scale < np.inf):
            raise ValueError(f"score_scale must be a finite number > 0, got {score_scale!r}")
        if isinstance(width_classes, bool) or width_classes not in (0, WIDTH_CLASSES):
            raise ValueError(f"width_classes must be 0 or {WIDTH_CLASSES}, got {width_classes!r}")
        prior = make_policy(base)
        if not isinstance(prior, ScoredProposer):
            raise ValueError(
                f"action_mode 'score' needs a prior that takes per-job scores (ats, ats-srpt, priority:<path>), "
                f"got base_policy {base!r}"
            )
        self.base_name = base
        self.prior: ScoredProposer = prior
        self.hooks = prior
        self.score_scale = float(score_scale)
        self.width_classes = int(width_classes)
        self._action_shape = (self.action_size,)
        self.held: dict[int, float] = {}
        """Job id -> log-weight change of the latest decision (what :meth:`redecode` applies)."""
        self.held_widths: dict[int, tuple[float, ...]] = {}
        """Job id -> width-class log-multipliers of the latest decision (jobs with any non-zero)."""
        self.held_lend = 1.0
        """The lending share of the latest decision."""
        self._codes: dict[int, float] = {}
        self._width_codes: dict[int, list[float]] = {}
        """Job id -> its codes of the width scores (held for its life, as its score's code)."""
        self._rng = np.random.default_rng()
        self._drawn: list[float] = []
        self._next_drawn = 0
        """Uniforms of :attr:`_rng` drawn ahead (see :meth:`_uniforms`) and the index of the next."""
        self._noise_key: int | None = None
        """With :meth:`pair_noise`: the key from which each job's code is derived (else None: the
        codes come from :attr:`_rng`)."""
        self._mirrored = False
        self._decisions = 0

    @property
    def nvec(self) -> list[int]:
        """Not a ``MultiDiscrete`` action.

        Raises:
            ValueError: always (the action is a ``Box`` of :attr:`action_size`).
        """
        raise ValueError("action_mode 'score' has a continuous Box action, not MultiDiscrete sizes")

    @property
    def action_size(self) -> int:
        """Entries of the action: a score per slot, ``width_classes`` width scores per slot, then
        the lending share."""
        return self.max_jobs * (1 + self.width_classes) + 1

    def extra_observation(self) -> dict[str, int]:
        """``prior`` (per slot) and ``noise`` (one code per action entry: per slot, then per slot's
        width scores, then the lending code)."""
        return {"prior": self.max_jobs, "noise": self.action_size}

    def reset(self, seed: int | None = None) -> None:
        """Start an episode: forget held scores and codes; reseed the codes' generator if
        ``seed`` is given (else its stream goes on)."""
        self.prior.reset(seed)  # type: ignore[attr-defined]
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._drawn, self._next_drawn = [], 0
        self.held, self.held_widths, self.held_lend, self._codes, self._width_codes = {}, {}, 1.0, {}, {}
        self._noise_key, self._mirrored, self._decisions = None, False, 0

    def pair_noise(self, key: int, mirrored: bool) -> None:
        """For this episode, derive each job's code from ``(key, job id)`` and the lending code
        from ``(key, decision)``, mirrored (``1 - u``) if ``mirrored``: two envs that play the same
        scenario with the same key and opposite ``mirrored`` explore with opposite noise on every
        job (antithetic pairs, as evolution strategies pair ``theta +- sigma e``), so that the
        difference of their returns is the effect of the noise's direction alone."""
        self._noise_key, self._mirrored = int(key), bool(mirrored)

    def _uniforms(self, count: int) -> list[float]:
        """The next ``count`` uniforms of :attr:`_rng`'s stream, drawn ahead in blocks of
        :data:`_DRAW_BLOCK`: the generator returns the same floats in one call as in several,
        and a call costs more than a few hundred floats do (one per env step otherwise)."""
        start, drawn = self._next_drawn, self._drawn
        if start + count > len(drawn):
            drawn = self._drawn = drawn[start:] + self._rng.random(max(_DRAW_BLOCK, count)).tolist()
            start = 0
        self._next_drawn = start + count
        return drawn[start : start + count]

    def _paired_code(self, *ids: int) -> float:
        """The code of ``ids`` under the episode's noise key (see :meth:`pair_noise`)."""
        assert self._noise_key is not None
        u = float(np.random.default_rng([self._noise_key, *ids]).random())
        return 1.0 - u if self._mirrored else u

    def observe(self, state: ClusterState) -> dict[str, np.ndarray]:
        """The prior's log-weights and the exploration codes of the slot jobs.

        Both arrays are views of one array built from one Python list (the observation is made
        at every env step: numpy's per-call cost, not the few values, is what it costs)."""
        jobs = slot_jobs(state, self.max_jobs)
        logs = self.prior.log_weights(state)
        return self._observed(jobs, [logs[job.id] for job in jobs])

    def observe_on_arrays(self, state: ClusterState, episode: ArrayEpisode) -> dict[str, np.ndarray]:
        """:meth:`observe`, the prior's log-weights compiled where it has them
        (``log_weights_on_arrays``: the same floats)."""
        compiled = getattr(self.prior, "log_weights_on_arrays", None)
        logs = None if compiled is None else compiled(episode)
        if logs is None:
            return self.observe(state)
        jobs = slot_jobs(state, self.max_jobs)
        return self._observed(jobs, logs[[job.id for job in jobs]].tolist())

    def _observed(self, jobs: Sequence[JobView], logs: list[float]) -> dict[str, np.ndarray]:
        """The ``prior`` and ``noise`` entries of the slot ``jobs``, whose prior log-weights are ``logs``."""
        ids = [job.id for job in jobs]
        empty = self.max_jobs - len(ids)
        # max(0.0, 1 + log / range) per slot, in one pass and without a call each
        prior = [value if (value := 1.0 + log / _LOG_WEIGHT_RANGE) > 0.0 else 0.0 for log in logs]
        old = self._codes
        # unpaired: one draw per slot and the lending code, as ever; paired: keyed codes
        if self._noise_key is None:
            fresh = self._uniforms(len(ids) + 1)
            codes = {job_id: old.get(job_id, fresh[i]) for i, job_id in enumerate(ids)}
            lend_code = fresh[-1]
        else:
            codes = {job_id: old[job_id] if job_id in old else self._paired_code(0, job_id) for job_id in ids}
            self._decisions += 1
            lend_code = self._paired_code(1, self._decisions)
        self._codes = codes
        noise = [*codes.values(), *[0.5] * empty]
        if self.width_classes:
            noise += self._width_noise(jobs).tolist()
        noise.append(lend_code)
        both = np.array(prior + [0.0] * empty + noise, dtype=np.float32)  # one array, two views
        return {"prior": both[: self.max_jobs], "noise": both[self.max_jobs :]}

    def _width_noise(self, jobs: Sequence[JobView]) -> np.ndarray:
        """The slots' width-score codes, slot-major (0.5 for empty slots): drawn once per job (or
        derived from the noise key, mirrored with it) and kept for its life."""
        width = self.width_classes
        out = np.full(self.max_jobs * width, 0.5, dtype=np.float32)
        old, kept = self._width_codes, {}
        for i, job in enumerate(jobs):
            codes = old.get(job.id)
            if codes is None:
                if self._noise_key is None:
                    codes = self._uniforms(width)
                else:
                    codes = [self._paired_code(2, job.id, k) for k in range(width)]
            kept[job.id] = codes
            out[i * width : (i + 1) * width] = codes
        self._width_codes = kept
        return out

    def mask(self, state: ClusterState) -> np.ndarray:
        """Not defined for a continuous action.

        Raises:
            ValueError: always (use PPO, not MaskablePPO, with this mode).
        """
        raise ValueError("action_mode 'score' has a continuous action: no action masks (use PPO, not MaskablePPO)")

    def scores_of(
        self, action: np.ndarray, state: ClusterState
    ) -> tuple[dict[int, float], dict[int, tuple[float, ...]], float]:
        """The log-weight changes by job id, the width-class log-multipliers by job id (jobs
        with any non-zero) and the lending share of ``action``.

        Raises:
            ValueError: if the action is not :attr:`action_size` finite numbers.
        """
        raw = np.asarray(action)
        if raw.shape != self._action_shape:
            raise ValueError(f"score action must have shape ({self.action_size},), got {raw.shape}")
        # tolist gives the entries as Python floats (or ints), float32 ones exactly
        values = raw.tolist() if raw.dtype.kind in "fiu" else [math.nan]
        # a finite sum is finite entries (one pass in C); only a sum that overflows looks further
        if not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
            raise ValueError(f"score action must hold finite numbers, got {raw.tolist()[:8]}...")
        scale = self.score_scale
        jobs = state.jobs[: self.max_jobs]  # fewer than the slots: the rest of the scores are unused
        # only the entries that are used are clipped to [-1, 1], on the Python floats (as
        # _clipped, inline: a call per slot is most of what the clipping costs)
        scores = {
            job.id: scale * (-1.0 if value < -1.0 else 1.0 if value > 1.0 else value)
            for job, value in zip(jobs, values, strict=False)
            if value != 0.0
        }
        widths: dict[int, tuple[float, ...]] = {}
        if self.width_classes:
            width = self.width_classes
            for i, job in enumerate(jobs):
                row = values[self.max_jobs + i * width : self.max_jobs + (i + 1) * width]
                if any(row):
                    widths[job.id] = tuple(scale * _clipped(value) for value in row)
        return scores, widths, min(1.0, 1.0 + _clipped(values[-1]))

    def decode(self, action: np.ndarray, state: ClusterState) -> tuple[Counts, int]:
        """The prior's schedule under the action's scores, width scores and lending share (kept
        for :meth:`redecode`); nothing is repaired.

        Raises:
            ValueError: if the action is not :attr:`action_size` finite numbers.
        """
        self.held, self.held_widths, self.held_lend = self.scores_of(action, state)
        return self.redecode(state)

    def redecode(self, state: ClusterState) -> tuple[Counts, int]:
        """The prior's schedule of ``state`` under the held scores (jobs that arrived since: 0)."""
        widths = self.held_widths or None  # none: the prior's call as ever
        return self.prior.scored_placement(state, self.held, self.held_lend, widths), 0

    @property
    def decides_on_arrays(self) -> bool:
        """Whether the prior decides compiled (:meth:`AtsPolicy.decides_on_arrays
        <baselines.ats.AtsPolicy.decides_on_arrays>`)."""
        return bool(getattr(self.prior, "decides_on_arrays", False))

    def decode_on_arrays(self, action: np.ndarray, state: ClusterState, episode: ArrayEpisode) -> np.ndarray | None:
        """:meth:`decode` by the prior's compiled decision (the same schedule, bit for bit).

        Raises:
            ValueError: if the action is not :attr:`action_size` finite numbers.
        """
        self.held, self.held_widths, self.held_lend = self.scores_of(action, state)
        return self.redecode_on_arrays(state, episode)

    def redecode_on_arrays(self, state: ClusterState, episode: ArrayEpisode) -> np.ndarray | None:
        """:meth:`redecode` by the prior's compiled decision, or None where the prior decides in
        Python (``episode``'s holders are at now: the env observed ``state`` from it)."""
        decide = getattr(self.prior, "decide_scored_on_arrays", None)
        if decide is None:
            return None
        return decide(episode, self.held, self.held_lend, self.held_widths or None)

    def neutral_action(self) -> np.ndarray:
        """All scores 0 and the full lending share: the prior itself."""
        return np.zeros(self.action_size, dtype=np.float32)

    def expert_action(self, expert: str, policy: Policy, state: ClusterState) -> np.ndarray:
        """The zero action, exact for the prior (the only expert it expresses).

        Raises:
            ValueError: if ``expert`` is not the prior.
        """
        if expert != self.base_name:
            raise ValueError(f"in score mode the expert must be the prior {self.base_name!r}, got {expert!r}")
        return self.neutral_action()


CODECS: dict[str, type[ActionCodec]] = {
    TargetCodec.mode: TargetCodec,
    ResidualCodec.mode: ResidualCodec,
    ScoreCodec.mode: ScoreCodec,
}
"""The codecs by ``action_mode``."""


def make_codec(
    mode: str,
    max_jobs: int,
    lend_levels: int,
    base_policy: str = "ats",
    score_scale: float = SCORE_SCALE,
    width_classes: int = 0,
) -> ActionCodec:
    """The codec of ``mode`` (``base_policy`` is used by codecs that correct a base policy or
    score over a prior; ``score_scale`` and ``width_classes`` by the score codec).

    Raises:
        ValueError: for an unknown mode, a base policy the mode cannot use, or width classes
            outside the score mode.
    """
    if width_classes and mode != ScoreCodec.mode:
        raise ValueError(f"width_classes needs action_mode 'score', got {mode!r}")
    if mode == ResidualCodec.mode:
        return ResidualCodec(max_jobs, lend_levels, base_policy)
    if mode == TargetCodec.mode:
        return TargetCodec(max_jobs, lend_levels)
    if mode == ScoreCodec.mode:
        return ScoreCodec(max_jobs, lend_levels, base_policy, score_scale, width_classes)
    raise ValueError(f"action_mode must be one of {tuple(CODECS)}, got {mode!r}")


def mode_of_nvec(nvec: np.ndarray) -> str:
    """The ``action_mode`` whose action space has these ``MultiDiscrete`` sizes.

    Raises:
        ValueError: if no codec has such an action space.
    """
    nvec = np.asarray(nvec, dtype=np.int64).reshape(-1)
    if nvec.size >= 2 and np.all(nvec[:-1] == nvec[0]):
        for mode, codec in CODECS.items():
            if int(nvec[0]) == codec.slot_choices:
                return mode
    raise ValueError(f"action space sizes {shown(nvec.tolist())} are not those of a DeepBoot action codec")
