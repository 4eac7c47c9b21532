"""The one evaluation loop every policy runs through, heuristic or learned.

:func:`run_episode` can report how far an episode has come (``progress``, a callback called every
``progress_every`` decisions with an :class:`EpisodeProgress`) and stops an episode that makes no
training progress at all for ``stall_limit_s`` of simulated time while training jobs are active
(:class:`StalledEpisodeError`): a policy that never gives a job a GPU would otherwise run to
``max_time`` (30 simulated days) without a word.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from deepboot_env.config import sim_config
from deepboot_env.policy import ClusterState, Policy, checked_policy, make_policy
from deepboot_env.sim.array_episode import ArrayEpisode, array_episode_applies, loops_cached
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.workload import Workload

STALL_LIMIT_S = 7 * 86400.0
"""Default watchdog bound: simulated seconds without any training progress while jobs are active.

A gang policy waiting for GPUs always has some job running; a policy that starves every job does
not. Measured with the shipped baselines on the shipped and reference workloads, the longest such
stretch is one interval (60 s); in the test suite 480 s for a heuristic and about 3 hours for an
untrained agent (docs/simulator.md §1).
"""

PROGRESS_EVERY = 500
"""Default number of decisions between two calls of the ``progress`` callback."""


class StalledEpisodeError(ValueError):
    """An episode made no training progress for too long while training jobs were active."""


@dataclass(frozen=True)
class EpisodeProgress:
    """Where an episode stands, passed to :func:`run_episode`'s ``progress`` callback.

    Attributes:
        decisions: scheduling decisions taken so far.
        sim_time: simulated time now (s).
        max_time: simulated time at which the episode is cut (s).
        jobs_done: training jobs completed so far.
        jobs_total: training jobs in the workload.
        active_jobs: training jobs arrived and not finished.
        wall_s: wall-clock seconds since :func:`run_episode` started.
        done: True for the one call made when the episode has ended.
    """

    decisions: int
    sim_time: float
    max_time: float
    jobs_done: int
    jobs_total: int
    active_jobs: int
    wall_s: float
    done: bool = False

    def line(self) -> str:
        """One human-readable line, e.g. ``day 2.41 of 30, 57/160 jobs done, 12 active, 3,105
        decisions, 14 s``."""
        return (
            f"day {self.sim_time / 86400:.2f} of {self.max_time / 86400:g}, {self.jobs_done}/{self.jobs_total} jobs "
            f"done, {self.active_jobs} active, {self.decisions:,} decisions, {self.wall_s:.0f} s"
        )


def run_episode(
    policy: Policy | str,
    workload: Workload,
    config: SimConfig | None = None,
    seed: int = 0,
    *,
    progress: Callable[[EpisodeProgress], None] | None = None,
    progress_every: int = PROGRESS_EVERY,
    stall_limit_s: float | None = STALL_LIMIT_S,
    max_decisions: int | None = None,
) -> EpisodeMetrics:
    """Simulate ``workload`` from start to end under ``policy`` and return its metrics.

    Args:
        policy: a :class:`~deepboot_env.policy.Policy` (every member of the contract, checked)
            or a registry name. The loop calls ``reset(seed)`` once, then ``decide(state)`` at
            every boundary; the simulator calls the hooks (:mod:`deepboot_env.sim.hooks`).
        workload: what arrives.
        config: cluster, restart model, protect scale, interval (default: :func:`~deepboot_env.config.sim_config`, v1).
        seed: reseeds the policy (the simulator itself is deterministic).
        progress: called with an :class:`EpisodeProgress` every ``progress_every`` decisions and
            once more when the episode has ended (``done=True``); nothing is called between
            decisions (stretches with no training job active, inference only, pass silently).
        progress_every: decisions between two ``progress`` calls (>= 1).
        stall_limit_s: the watchdog: simulated seconds the episode may go without any training
            progress (no job's progress grows, none completes) while jobs are active; None
            turns it off. Checked every ``min(1 h, stall_limit_s / 8)`` of simulated time, so it
            fires at most that long after the bound.
        max_decisions: end the episode after this many decisions, as the env's
            ``max_episode_steps`` ends its episodes, but never before every training job has
            arrived (so that each counts in a censored JCT); the metrics then say ``truncated``.
            None: run to the end (``config.max_time``).

    Raises:
        TypeError: if ``policy`` lacks a member of the policy contract.
        StalledEpisodeError: when the watchdog fires; the message names the policy, how long
            nothing progressed and the jobs waiting.
        WorkloadError: if the workload does not fit the simulation (see
            :meth:`Simulator.reset <deepboot_env.sim.simulator.Simulator.reset>`).
    """
    if progress_every < 1:
        raise ValueError(f"progress_every must be >= 1, got {progress_every}")
    if stall_limit_s is not None and not stall_limit_s > 0:
        raise ValueError(f"stall_limit_s must be > 0 or None, got {stall_limit_s}")
    if max_decisions is not None and max_decisions < 1:
        raise ValueError(f"max_decisions must be >= 1 or None, got {max_decisions}")
    start = time.perf_counter()
    policy = make_policy(policy) if isinstance(policy, str) else checked_policy(policy)
    policy.reset(seed)
    config = config or sim_config()
    sim = Simulator(workload, config, policy)
    driver = episode_driver(sim)
    total = len(workload.jobs)

    def report(decisions: int, done: bool = False) -> None:
        assert progress is not None
        progress(
            EpisodeProgress(
                decisions=decisions,
                sim_time=driver.now,
                max_time=config.max_time,
                jobs_done=driver.jobs_finished,
                jobs_total=total,
                active_jobs=len(driver.active_jobs),
                wall_s=time.perf_counter() - start,
                done=done,
            )
        )

    decisions = 0
    cut = math.inf if max_decisions is None else max_decisions
    last_arrival = max((job.arrival for job in workload.jobs), default=0.0)
    # watchdog, checked every `period` of simulated time (not at every decision, to cost nothing):
    # training progressed since the last check iff a job completed or the summed progress of the
    # active jobs (observe() advances those holding GPUs to now) grew; jobs admitted since then add exactly 0 (they
    # had no GPU yet), so the sums compare like with like. `since` is the last check that saw
    # progress: nothing progressed after it, so the stall reported never overstates.
    period = 0.0 if stall_limit_s is None else min(3600.0, stall_limit_s / 8)
    finished, work, since, next_check = -1, 0.0, driver.now, driver.now
    arrays = driver if isinstance(driver, ArrayEpisode) and hasattr(policy, "decide_on_arrays") else None
    while not driver.done:
        state = None
        if arrays is not None:  # no state unless the policy decides in Python (decide_once)
            arrays.advance_holders()  # what observe does: the decision reads the jobs at now
            ids = arrays.active
        else:
            state = driver.observe()
            ids = [view.id for view in state.jobs]
        if stall_limit_s is not None and driver.now >= next_check:
            next_check = driver.now + period
            now_finished = driver.jobs_finished
            now_work = driver.job_progress(ids)
            if now_finished != finished or now_work > work:
                since = driver.now
            elif driver.now - since > stall_limit_s:
                raise _stalled(policy, state or driver.observe(), driver.now, since)
            finished, work = now_finished, now_work
        decide_once(driver, policy, state, advanced=True)
        driver.advance()
        decisions += 1
        if decisions >= cut and not driver.done and driver.now >= last_arrival:
            break
        if progress is not None and decisions % progress_every == 0 and not driver.done:
            report(decisions)
    if progress is not None:
        report(decisions, done=True)
    if isinstance(driver, ArrayEpisode) and not driver.done:
        driver.stop()  # cut by max_decisions: the simulator holds the episode so far
    metrics = sim.metrics()
    return metrics if sim.done else replace(metrics, truncated=True)


ARRAY_EPISODES: bool | None = None
"""Whether :func:`run_episode` plays an episode on the compiled loop's arrays where that is the same
episode (:func:`~deepboot_env.sim.array_episode.array_episode_applies`): True always, False never,
None (the default) for a policy that decides compiled there (its ``decides_on_arrays``: ATS and
its variants, held scores), where the loops are cached on disk already, and otherwise from the
process's :data:`ARRAY_EPISODES_AFTER`-th such episode on (a policy that decides in Python on a
state built from the rows gains little and, on the Philly replay, lost: 47 CPU-s and 850 MB for
``fifo`` on 10,000 jobs against the simulator's 28.5 and 331). The loops compile in about 25 CPU-s once per
install, and a policy's compiled decision (ATS's: about 13 CPU-s) on its first use; a process that
plays one or a few episodes (``deepboot simulate``) does not pay that, and one that plays many (a
benchmark, a comparison) pays it once and caches it for every later one
(:attr:`ArrayEpisode.may_compile <deepboot_env.sim.array_episode.ArrayEpisode.may_compile>`)."""
ARRAY_EPISODES_AFTER = 20
"""The episodes a process plays before the default rule of :data:`ARRAY_EPISODES` compiles the loops."""
_applicable_episodes = 0
"""Episodes this process has played where an array episode applies."""


def episode_driver(
    sim: Simulator, decider: object | None = None, decides_compiled: bool | None = None
) -> Simulator | ArrayEpisode:
    """What :func:`run_episode` drives: ``sim`` itself, or its
    :class:`~deepboot_env.sim.array_episode.ArrayEpisode` where one applies (to ``decider``
    deciding, None: ``sim``'s policy; a fork's player) and :data:`ARRAY_EPISODES` says so
    (``decides_compiled``: whether the decisions are compiled there, None: the decider's
    ``decides_on_arrays``; the env's action codec says it for its own decoding)."""
    global _applicable_episodes
    if ARRAY_EPISODES is False or sim.done or not array_episode_applies(sim, decider):
        return sim
    if decides_compiled is None:
        decides_compiled = bool(getattr(sim.policy if decider is None else decider, "decides_on_arrays", False))
    if ARRAY_EPISODES is None and not decides_compiled:
        return sim  # its state built from the rows at every decision: no faster, and larger, than the simulator's
    _applicable_episodes += 1
    may_compile = bool(ARRAY_EPISODES) or _applicable_episodes >= ARRAY_EPISODES_AFTER
    if may_compile or loops_cached():
        return ArrayEpisode(sim, may_compile)
    return sim


def decide_once(
    driver: Simulator | ArrayEpisode, policy: Policy, state: ClusterState | None = None, advanced: bool = False
) -> None:
    """One decision of ``policy`` applied on ``driver``: on an array episode, the policy's compiled
    decision where it has one (``decide_on_arrays``, ``decide`` bit for bit; the holders advanced
    to now first, unless ``advanced``), else ``decide`` on the state (``state``: observed already)."""
    decide_on_arrays = getattr(policy, "decide_on_arrays", None) if isinstance(driver, ArrayEpisode) else None
    if state is None and decide_on_arrays is not None:
        assert isinstance(driver, ArrayEpisode)
        if not advanced:
            driver.advance_holders()
        wanted = decide_on_arrays(driver)
        if wanted is not None:
            driver.apply_wanted(wanted)
            return
    state = state or driver.observe()
    driver.apply(policy.decide(state), state)


def _stalled(policy: Policy, state: ClusterState, now: float, since: float) -> StalledEpisodeError:
    waiting = [job for job in state.jobs if job.replicas == 0]
    names = ", ".join(repr(job.name) for job in waiting[:3]) + (", ..." if len(waiting) > 3 else "")
    held = (
        f"{len(waiting)} of {len(state.jobs)} active jobs hold no GPU ({names})"
        if waiting
        else (f"all {len(state.jobs)} active jobs hold GPUs but none progresses")
    )
    return StalledEpisodeError(
        f"policy {policy.name!r} made no training progress for "
        f"{(now - since) / 86400:.1f} simulated days (t = {since:g} s to {now:g} s) while training jobs were "
        f"active: {held}; stopped by the watchdog (stall_limit_s)"
    )
