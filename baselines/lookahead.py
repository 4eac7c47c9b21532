"""Switching between expert policies by looking ahead on a forked simulator: what ``oracle-lookahead``
(clairvoyant, docs/policies.md §15) and ``mpc`` (its deployable counterpart, §16) share.

:class:`LookaheadSwitcher` runs the switching, told how by one :class:`LookaheadSettings`
(candidates, ``every``, ``horizon_s``, ``infer_weight``; both subclasses take it): every ``every``
boundaries, at a *choice point*, each candidate expert is played for ``horizon_s`` on a fork of a
*lookahead root*, a simulator that continues from the current state, and the policy follows the
candidate whose future scores lowest.
What the root contains is the one difference between its subclasses: the true future
(``oracle-lookahead``: the simulator itself) or a forecast of it (``mpc``: a fork whose future
arrivals are replaced, :meth:`Simulator.forget_future
<deepboot_env.sim.simulator.Simulator.forget_future>`).

* The score of a future is ``job_seconds(t0, t0 + horizon_s) + infer_weight * (waiting seconds
  added)``: the training job-seconds spent in the system over the horizon (whose sum over an episode
  is the total JCT) plus the inference request-seconds spent waiting, the two terms of the Gymnasium
  env's reward; a subclass may add a terminal term (:meth:`LookaheadSwitcher.terminal_score`). The
  lowest score wins, ties going to the earlier candidate (deterministic).
* Until the next choice point the policy returns the followed candidate's decisions, made by its
  live instance on the real states, and that candidate's ``choose_reclaim`` serves the real
  simulator's reclaims; during a lookahead the hooks serve the candidate being played (the fork's
  simulator still calls the switcher's ``choose_reclaim``).
* Every candidate's live instance stays consistent with the real episode: a *stateful* candidate
  (``ones-lend``: an evolving population and an RNG, or any policy not known to be stateless) is
  asked to decide at every real boundary, followed or not; a stateless one (ATS and its variants,
  AFS) only when followed. A lookahead plays a deep copy of the live instance.

Candidates (:data:`CANDIDATES`, in this order): ``ats``, ``ones-lend``, ``afs-lend``,
``ats-nolend``, ``ats-lend50`` (ATS lending half of the lendable inference GPUs) and ``ats-spread``
(ATS with each job capped at its fair share). They all run in the switcher's simulator, whose jobs
choose their batch size (``adaptive_batch``): AFS, a fixed-batch policy on its own, proposes GPU
counts there. Any other registered policy name is a stateful candidate.
"""

from __future__ import annotations

import copy
import math
import numbers
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from baselines.ats import AtsPolicy
from deepboot_env.policy import (
    Allocation,
    BasePolicy,
    ClusterState,
    GpuRef,
    JobView,
    Policy,
    RequestView,
    make_policy,
)
from deepboot_env.sim.simulator import Simulator

__all__ = [
    "CANDIDATES",
    "DEFAULT_CANDIDATES",
    "DEFAULT_EVERY",
    "DEFAULT_HORIZON_S",
    "DEFAULT_SETTINGS",
    "Candidate",
    "Choice",
    "LookaheadSettings",
    "LookaheadSwitcher",
    "SpreadAtsPolicy",
    "candidate",
    "is_real",
]

DEFAULT_EVERY = 5
"""Boundaries between two choice points."""

DEFAULT_HORIZON_S = 1800.0
"""Simulated seconds each candidate is played ahead at a choice point."""


@dataclass(frozen=True)
class Candidate:
    """An expert a switcher may follow.

    Attributes:
        label: its name in :attr:`LookaheadSwitcher.choices` and reports.
        build: makes a fresh instance (the live one of an episode).
        stateless: whether its decisions depend only on the state it is shown (then it is asked
            only when followed; a stateful one decides at every real boundary).
    """

    label: str
    build: Callable[[], Policy]
    stateless: bool = False


class SpreadAtsPolicy(AtsPolicy):
    """ATS with each job capped at its fair share of the capacity (``ceil(C / J)`` GPUs): the
    knapsack spreads GPUs over more jobs instead of growing the ones that scale best."""

    def __init__(self, lend: bool | float = True, label: str = "ats-spread") -> None:
        super().__init__(lend=lend, label=label)

    def job_caps(self, jobs: Sequence[JobView], capacity: int, fair: int) -> list[int]:
        """Each job's cap, at most the fair share."""
        return [min(job.max_replicas, capacity, fair) for job in jobs]


CANDIDATES: dict[str, Candidate] = {
    c.label: c
    for c in (
        Candidate("ats", lambda: make_policy("ats"), stateless=True),
        Candidate("ones-lend", lambda: make_policy("ones-lend")),
        Candidate("afs-lend", lambda: make_policy("afs-lend"), stateless=True),
        Candidate("ats-nolend", lambda: make_policy("ats-nolend"), stateless=True),
        Candidate("ats-lend50", lambda: AtsPolicy(lend=0.5, label="ats-lend50"), stateless=True),
        Candidate("ats-spread", lambda: SpreadAtsPolicy(), stateless=True),
        Candidate("ats-srpt", lambda: make_policy("ats-srpt"), stateless=True),
    )
}
"""The known candidates by label; any other registered policy name is a stateful candidate."""

DEFAULT_CANDIDATES: tuple[str, ...] = tuple(CANDIDATES)
"""Every known candidate, in tie-breaking order (the default of both switchers)."""


def candidate(name: str) -> Candidate:
    """The known candidate ``name``, or the registered policy ``name`` as a stateful candidate."""
    known = CANDIDATES.get(name)
    if known is not None:
        return known
    make_policy(name)  # fails early, naming the known policies
    return Candidate(name, lambda: make_policy(name))


def is_real(value: object) -> bool:
    """Whether ``value`` is a real number (a bool is not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class LookaheadSettings:
    """How a switcher looks ahead: the settings ``oracle-lookahead`` and ``mpc`` share.

    Attributes:
        candidates: labels of :data:`CANDIDATES` or registered policy names, in tie-breaking order
            (checked against the registry when a switcher is built).
        every: boundaries between two choice points (>= 1).
        horizon_s: simulated seconds each candidate is played ahead (> 0).
        infer_weight: weight of the inference waiting seconds in the score (>= 0).

    Raises:
        ValueError: for a setting out of its range, or no candidate.
    """

    candidates: tuple[str, ...] = DEFAULT_CANDIDATES
    every: int = DEFAULT_EVERY
    horizon_s: float = DEFAULT_HORIZON_S
    infer_weight: float = 1.0

    def __post_init__(self) -> None:
        candidates, every, horizon_s, infer_weight = self.candidates, self.every, self.horizon_s, self.infer_weight
        if isinstance(candidates, str) or not candidates:
            raise ValueError("a lookahead needs at least one candidate (a sequence of policy names)")
        if not (isinstance(every, int) and not isinstance(every, bool) and every >= 1):
            raise ValueError(f"every must be an integer >= 1, got {every!r}")
        if not (is_real(horizon_s) and math.isfinite(horizon_s) and horizon_s > 0):
            raise ValueError(f"horizon_s must be a finite number > 0, got {horizon_s!r}")
        if not (is_real(infer_weight) and infer_weight >= 0):
            raise ValueError(f"infer_weight must be a number >= 0, got {infer_weight!r}")
        object.__setattr__(self, "candidates", tuple(candidates))
        object.__setattr__(self, "horizon_s", float(horizon_s))
        object.__setattr__(self, "infer_weight", float(infer_weight))


DEFAULT_SETTINGS = LookaheadSettings()
"""Every default: all known candidates, a choice point every 5 boundaries, 30 minutes ahead."""


@dataclass(frozen=True)
class Choice:
    """One choice point: what each candidate's future scored and which one was followed.

    Attributes:
        time: the simulated time of the choice.
        scores: per candidate (in candidate order), its lookahead score (lower is better).
        chosen: index of the candidate followed (the first with the lowest score).
    """

    time: float
    scores: tuple[float, ...]
    chosen: int


class LookaheadSwitcher(BasePolicy):
    """Follows, every ``every`` boundaries, the candidate expert whose future, simulated from
    :meth:`lookahead_root`, scores best (see the module docstring). A subclass says what the root
    is; this class alone has no root.

    Args:
        settings: the candidates, the choice points, the horizon and the score's weight.

    Attributes:
        candidates: the candidates of ``settings``, resolved (:func:`candidate`).
        choices: every choice point of the episode so far, in order.

    Raises:
        ValueError: for a candidate that is neither known nor registered.
    """

    name = "lookahead"
    adaptive_batch = True

    def __init__(self, settings: LookaheadSettings = DEFAULT_SETTINGS) -> None:
        self.settings = settings
        self.candidates: tuple[Candidate, ...] = tuple(candidate(name) for name in settings.candidates)
        self.reset(None)

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int | None = None) -> None:
        """Fresh live instances of every candidate, reset with ``seed``; forget the episode."""
        self._live: list[Policy] = []
        for cand in self.candidates:
            policy = cand.build()
            policy.reset(seed)
            self._live.append(policy)
        self._sim: weakref.ref[Simulator] | None = None
        self._playing: Policy | None = None
        """The candidate copy being played in a lookahead (its hooks serve the fork)."""
        self._seed = seed
        self._start_episode()

    def bind_simulator(self, sim: Simulator) -> None:
        """Keep (weakly) the simulator this policy runs in: the one it looks ahead from."""
        self._sim = weakref.ref(sim)
        self._start_episode()

    def _start_episode(self) -> None:
        """Forget what the episode so far decided (at :meth:`reset` and when bound to a
        simulator); a subclass with per-episode state of its own extends it."""
        self._decisions = 0
        self._following = 0
        self.choices: list[Choice] = []

    @property
    def following(self) -> str:
        """The label of the candidate followed now."""
        return self.candidates[self._following].label

    # ------------------------------------------------------------------ decisions
    def decide(self, state: ClusterState) -> Allocation:
        """At a choice point, look ahead and pick the candidate to follow; return the followed
        candidate's decision (every stateful candidate decides too, to stay in step).

        Raises:
            RuntimeError: if the policy is not bound to a simulator, or ``state`` is not the
                current state of the simulator it is bound to.
        """
        sim = self._bound_simulator(state)
        if self._decisions % self.settings.every == 0:
            choice = self.evaluate(sim)
            self.choices.append(choice)
            self._following = choice.chosen
        self._decisions += 1
        allocation: Allocation | None = None
        for i, (cand, live) in enumerate(zip(self.candidates, self._live, strict=True)):
            if i == self._following:
                allocation = live.decide(state)
            elif not cand.stateless:
                live.decide(state)  # its state follows the real episode
        assert allocation is not None
        return allocation

    def lookahead_root(self, sim: Simulator) -> Simulator:
        """The simulator each candidate's future is forked from, continuing from ``sim``'s current
        state (``sim`` itself must stay unchanged: return it or a fork of it).

        Raises:
            NotImplementedError: always here; a subclass says what the future is.
        """
        raise NotImplementedError(f"{type(self).__name__} does not say what it looks ahead on")

    def terminal_score(self, sim: Simulator) -> float:
        """A term added to a candidate's score, from its fork ``sim`` at the end of the horizon
        (0 here)."""
        return 0.0

    def evaluate(self, sim: Simulator) -> Choice:
        """Score every candidate's future from ``sim``'s current boundary (``sim`` itself is not
        changed: each candidate plays on a fork of :meth:`lookahead_root`, with a copy of its live
        instance)."""
        t0, waited = sim.now, sim.waiting_seconds
        end = t0 + self.settings.horizon_s
        root = self.lookahead_root(sim)
        scores = []
        for live in self._live:
            player = copy.deepcopy(live)
            twin = root.fork()
            self._playing = player
            try:
                while not twin.done and twin.now < end:
                    state = twin.observe()
                    twin.apply(player.decide(state), state)
                    twin.advance()
            finally:
                self._playing = None
            score = twin.job_seconds(t0, end) + self.settings.infer_weight * (twin.waiting_seconds - waited)
            score += self.terminal_score(twin)
            scores.append(score)
        best = min(range(len(scores)), key=scores.__getitem__)  # the first of equals
        return Choice(t0, tuple(scores), best)

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """The reclaim of the candidate being played in a lookahead, or of the one followed."""
        if self._playing is not None:
            return self._playing.choose_reclaim(state, request)
        return self._live[self._following].choose_reclaim(state, request)

    def _bound_simulator(self, state: ClusterState) -> Simulator:
        sim = self._sim() if self._sim is not None else None
        if sim is None:
            raise RuntimeError(
                f"{self.name} is not bound to a live simulator: it runs only inside a Simulator, which binds it "
                "at reset (bind_simulator)"
            )
        if sim.now != state.time or [job.index for job in sim.active_jobs] != [job.id for job in state.jobs]:
            raise RuntimeError(
                f"{self.name} was asked to decide on a state that is not the current state of the simulator it "
                "is bound to (it forks that simulator to look ahead)"
            )
        return sim
