"""``oracle-lookahead``: a CLAIRVOYANT UPPER REFERENCE, not a deployable policy (docs/policies.md §15).

It knows the future: at a choice point it forks the simulator it runs in (the true workload, every
job's true length and speed, every inference request still to come) and plays each candidate
expert's decisions ahead, then follows the expert whose future turned out best. No scheduler can do
this; it exists to measure how much a scheduler that switches between the experts at the right
moments could gain over each of them (the headroom of a learned selector), and is reported as an
upper reference, never as a baseline.

Algorithm (defaults in brackets):

* every ``every`` boundaries [5], at a *choice point*, for each candidate in order: fork the
  simulator (:meth:`Simulator.fork <deepboot_env.sim.simulator.Simulator.fork>`, with the
  candidate's policy deep-copied as it is now), let the candidate decide at every boundary for
  ``horizon_s`` of simulated time [1,800 s: 30 boundaries], and score the future
  ``job_seconds(t0, t0 + horizon_s) + infer_weight * (waiting seconds added)`` [infer_weight 1.0]:
  the training job-seconds spent in the system over the horizon (the integral of the number of jobs
  in the system, whose sum over an episode is the total JCT) plus the inference request-seconds
  spent waiting, the two terms of the Gymnasium env's reward. An optional terminal term
  (``terminal_weight`` [0]) adds, per job still unfinished at the end of the horizon, that weight
  times its remaining work at its rate on its GPUs then (the time it would still need at that
  speed, a job without GPUs at one GPU): it counters the horizon's bias toward finishing short jobs
  at the expense of long ones;
* the lowest score wins, ties going to the earlier candidate (deterministic); until the next
  choice point the oracle returns that candidate's decisions, made by its live instance on the
  real states, and its reclaim hook (``choose_reclaim``) serves the real simulator's reclaims;
* every candidate's live instance stays consistent with the real episode: a *stateful* candidate
  (``ones-lend``: an evolving population and an RNG, or any policy not known to be stateless) is
  asked to decide at every real boundary, followed or not, so that its state is the one it would
  have had; a stateless one (ATS and its variants, AFS) is asked only when followed. During a
  lookahead the oracle's own hooks (the fork's simulator still calls the oracle's
  ``choose_reclaim``) serve the candidate being played.

In hindsight [``hindsight=True``]: the switching above is myopic and can lose to one of its own
candidates (it did to ``ones-lend`` on the workload families). So at the first decision the oracle
plays every *plan* to the end on a fork (the switching, and each candidate alone) and replays the
decisions of the plan with the lowest mean training JCT: never worse than a candidate, for one more
episode per candidate. ``hindsight=False`` gives the switching itself.

The switching machinery (candidates, live instances, scores, reclaims during a lookahead) is
:class:`baselines.lookahead.LookaheadSwitcher`, shared with ``mpc`` (its deployable counterpart,
which plays a forecast future instead of the true one, docs/policies.md §16); this module adds what
only an oracle can do: the true future as the lookahead root, the terminal term and hindsight.

Candidates [all, in this order]: ``ats``, ``ones-lend``, ``afs-lend``, ``ats-nolend``,
``ats-lend50`` (ATS lending half of the lendable inference GPUs) and ``ats-spread`` (ATS with
each job capped at its fair share). They all run in the oracle's simulator, whose jobs choose their
batch size (``adaptive_batch``): AFS, a fixed-batch policy on its own, proposes GPU counts there.

Cost: per choice point, one fork and ``horizon_s / interval`` decisions per candidate. Measured
(``benchmarks/bench_oracle.py``; 8x4+8x4, ``dynamics="v1"``, seed 0, defaults, 2-core machine):

==========  ===========  ===========  ================  ==========
workload    ats JCT (s)  ones-lend    oracle-lookahead  oracle CPU
==========  ===========  ===========  ================  ==========
test-01     1,528.3      1,479.5      1,430.0 (-6.4 %)  26 s
test-02     2,549.5      2,357.0      2,354.7 (-7.6 %)  40 s
==========  ===========  ===========  ================  ==========

It beats ATS by 6-8 % but the best single candidate (``ones-lend``) by 0.1-3.3 % only: a 30-minute
window sees which candidate finishes jobs soonest, not what its choices cost later; the longer
horizons, terminal terms and continuation rollouts tried did no better (docs/policies.md §15).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from baselines.lookahead import (
    CANDIDATES,
    DEFAULT_CANDIDATES,
    DEFAULT_EVERY,
    DEFAULT_HORIZON_S,
    DEFAULT_SETTINGS,
    Candidate,
    Choice,
    LookaheadSettings,
    LookaheadSwitcher,
    SpreadAtsPolicy,
    candidate,
)
from deepboot_env.policy import (
    Allocation,
    BasePolicy,
    ClusterState,
    GpuRef,
    Policy,
    RequestView,
)
from deepboot_env.sim.reclaim import is_ats_i_rule
from deepboot_env.sim.simulator import Simulator

__all__ = [
    "CANDIDATES",
    "DEFAULT_CANDIDATES",
    "DEFAULT_EVERY",
    "DEFAULT_HORIZON_S",
    "Candidate",
    "Choice",
    "LookaheadSettings",
    "OracleLookaheadPolicy",
    "SpreadAtsPolicy",
    "candidate",
]


class OracleLookaheadPolicy(LookaheadSwitcher):
    """Clairvoyant upper reference: follows, every ``every`` boundaries, the candidate expert whose
    simulated true future scores best (see the module docstring). Not a deployable policy.

    Args:
        settings: the lookahead's candidates, choice points, horizon and score weight
            (:class:`~baselines.lookahead.LookaheadSettings`).
        terminal_weight: weight of the remaining-time term at the end of the horizon (>= 0).
        hindsight: play the best in hindsight of the lookahead switching and of every candidate
            alone, each simulated to the end of the episode first (the default); False: the
            lookahead switching itself.

    Attributes:
        choices: every choice point of the episode so far, in order (the switching's own run).
        plan_scores: with ``hindsight``, the mean training JCT of each plan (:attr:`plan_labels`
            order) in its simulated episode.
        plan: with ``hindsight``, the label of the plan played.
    """

    name = "oracle-lookahead"

    def __init__(
        self, settings: LookaheadSettings = DEFAULT_SETTINGS, terminal_weight: float = 0.0, hindsight: bool = True
    ) -> None:
        if not terminal_weight >= 0:
            raise ValueError(f"terminal_weight must be >= 0, got {terminal_weight!r}")
        self.terminal_weight = float(terminal_weight)
        self.hindsight = bool(hindsight)
        super().__init__(settings)
        custom = [c.label for c, p in zip(self.candidates, self._live, strict=True) if _custom_reclaim(p)]
        if self.hindsight and custom:
            raise ValueError(
                f"hindsight replays decisions, not reclaims: candidates {custom} have their own reclaim rule; "
                "use hindsight=False"
            )

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int | None = None) -> None:
        """Fresh live instances of every candidate, reset with ``seed``; forget the episode."""
        super().reset(seed)
        self.plan_scores: tuple[float, ...] = ()
        self.plan = ""

    def _start_episode(self) -> None:
        """Forget the episode's choices and the plan being replayed."""
        super()._start_episode()
        self._replay: _Recording | None = None
        """With ``hindsight``: the decisions and reclaims of the plan played, replayed in order."""

    def bind_simulator(self, sim: Simulator) -> None:
        """Keep (weakly) the simulator this policy runs in: the one it forks at choice points.
        With ``hindsight``, simulate every plan to the end now and keep the best one's decisions."""
        super().bind_simulator(sim)
        if self.hindsight:
            self._plan_in_hindsight(sim)

    @property
    def plan_labels(self) -> tuple[str, ...]:
        """The plans compared in hindsight: the lookahead switching, then each candidate alone."""
        return ("lookahead", *(c.label for c in self.candidates))

    def _plan_in_hindsight(self, sim: Simulator) -> None:
        """ORACLE: play each plan on a fork of ``sim`` to the end; keep the best's recording."""
        switching = OracleLookaheadPolicy(self.settings, self.terminal_weight, hindsight=False)
        players: list[Policy] = [switching]
        for cand in self.candidates:
            alone = cand.build()
            players.append(alone)
        scores, recordings = [], []
        for player in players:
            player.reset(self._seed)
            twin = sim.fork()
            recording = _Recording(player)
            self._playing = recording
            try:
                player.bind_simulator(twin)
                while not twin.done:
                    state = twin.observe()
                    twin.apply(recording.decide(state), state)
                    twin.advance()
            finally:
                self._playing = None
            if player is switching:
                self.choices = switching.choices
            scores.append(_episode_jct(twin))
            recordings.append(recording)
        best = min(range(len(scores)), key=scores.__getitem__)  # the first of equals: the switching
        self.plan_scores = tuple(scores)
        self.plan = self.plan_labels[best]
        self._replay = recordings[best].replay()

    # ------------------------------------------------------------------ decisions
    def decide(self, state: ClusterState) -> Allocation:
        """The plan chosen in hindsight's next decision; without hindsight, the switching's
        (:meth:`LookaheadSwitcher.decide <baselines.lookahead.LookaheadSwitcher.decide>`).

        Raises:
            RuntimeError: if the policy is not bound to a simulator, or ``state`` is not the
                current state of the simulator it is bound to.
        """
        if self._replay is not None:
            self._bound_simulator(state)
            return self._replay.decide(state)
        return super().decide(state)

    def lookahead_root(self, sim: Simulator) -> Simulator:
        """ORACLE: the simulator itself, with the true future (each candidate plays on a fork)."""
        return sim

    def terminal_score(self, sim: Simulator) -> float:
        """ORACLE: ``terminal_weight`` times the true remaining seconds of the unfinished jobs
        (:func:`_remaining_seconds`); 0 with no weight or once the episode is over."""
        if self.terminal_weight and not sim.done:
            return self.terminal_weight * _remaining_seconds(sim)
        return 0.0

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """The reclaim of the candidate being played (in a lookahead or a plan), replayed (the
        plan chosen in hindsight) or followed."""
        if self._playing is None and self._replay is not None:
            return self._replay.choose_reclaim(state, request)
        return super().choose_reclaim(state, request)


class _Recording(BasePolicy):
    """Plays ``player`` and records its decisions (:meth:`replay` gives them back in order), or,
    built by :meth:`replay`, returns the recorded ones. Reclaims are not recorded: a plan's
    candidates all take GPUs back by the default ATS-I rule, a function of the state alone."""

    def __init__(self, player: Policy | None, decisions: Sequence[tuple[float, Allocation]] = ()) -> None:
        self.player = player
        self.decisions = list(decisions)
        self._next = 0

    def replay(self) -> _Recording:
        """A replayer of what was recorded."""
        return _Recording(None, self.decisions)

    def decide(self, state: ClusterState) -> Allocation:
        """The player's decision (recorded), or the next recorded one.

        Raises:
            RuntimeError: if a replayed decision is asked for at another time than recorded.
        """
        if self.player is not None:
            allocation = self.player.decide(state)
            self.decisions.append((state.time, allocation))
            return allocation
        time, allocation = self.decisions[self._next]
        if time != state.time:
            raise RuntimeError(
                f"oracle-lookahead replay diverged: decision {self._next} was at {time}, not {state.time}"
            )
        self._next += 1
        return allocation

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        """The player's reclaim, or (replaying) the default ATS-I rule every candidate uses."""
        if self.player is not None:
            return self.player.choose_reclaim(state, request)
        return super().choose_reclaim(state, request)


def _custom_reclaim(policy: Policy) -> bool:
    """Whether ``policy`` takes GPUs back by a rule of its own instead of the default ATS-I (its
    hook is not the marked ATS-I rule: ``AtsPolicy`` with a reclaim horizon, a wrapper of others)."""
    return not is_ats_i_rule(policy.choose_reclaim)


def _episode_jct(sim: Simulator) -> float:
    """The mean training JCT of ``sim``'s finished episode, counting an unfinished job's time so
    far (job-seconds in the system per job)."""
    return sim.job_seconds(0.0, sim.now) / max(len(sim.jobs), 1)


def _remaining_seconds(sim: Simulator) -> float:
    """ORACLE: per admitted unfinished job, the seconds its true remaining work needs at its true
    rate on its GPUs now (packed; one GPU if it holds none), summed."""
    state = sim.observe()
    g = state.gpus_per_node
    total = 0.0
    for job in state.jobs:
        rate = job.oracle_rate(max(job.replicas, 1), g)
        total += job.remaining_work / rate if rate > 0 else math.inf
    return total
