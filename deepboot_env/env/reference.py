"""A base policy's episode on the same scenario, as the reference of a relative reward.

``DeepBootEnv(relative_reward=True)`` subtracts from each step's reward terms what the base
policy (the residual mode's base, the score mode's prior) spent on the same scenario over the
same simulated time: training job-seconds and inference waiting seconds. An episode's return is
then exactly the difference of the two episodes' (scaled) costs, zero for the base policy itself:
an input-dependent baseline (Mao et al., ICLR 2019) that removes the scenario's own difficulty
from the return, which dominates its variance.

The reference is the base policy's whole episode, simulated once per scenario and kept in a
bounded per-process cache (:func:`reference_curve`). What a step needs of it is answered in
O(log jobs): the integral of the number of training jobs in the system between two times from
the sorted arrival and completion times, and the waiting seconds from their running total at
each of its boundaries (:class:`ReferenceEpisode`).
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict
from dataclasses import dataclass

from deepboot_env.policy import make_policy
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.workload import Workload

CACHE_SIZE = 256
"""Reference episodes kept per process (least recently used dropped first)."""


@dataclass(frozen=True)
class JobSecondsCurve:
    """The training job-seconds of one finished episode as a function of time.

    Attributes:
        arrivals, completions: each job's arrival and completion time, each list sorted (a job
            that never completed counts until the episode's end).
        arrival_sums, completion_sums: their prefix sums (index k: the sum of the first k).
    """

    arrivals: list[float]
    completions: list[float]
    arrival_sums: list[float]
    completion_sums: list[float]

    @classmethod
    def of(cls, workload: Workload, metrics: EpisodeMetrics) -> JobSecondsCurve:
        """The curve of ``metrics``, an episode of ``workload`` run to its end."""
        arrivals = sorted(job.arrival for job in workload.jobs)
        completions = sorted(
            job.arrival + metrics.jcts.get(job.name, metrics.sim_end - job.arrival) for job in workload.jobs
        )
        return cls(
            arrivals,
            completions,
            [0.0, *itertools.accumulate(arrivals)],
            [0.0, *itertools.accumulate(completions)],
        )

    def integral(self, t: float) -> float:
        """Job-seconds in the system during [0, t]: the sum over jobs arrived before t of
        ``min(t, completion) - arrival``."""
        arrived = bisect.bisect_left(self.arrivals, t)
        completed = bisect.bisect_left(self.completions, t)
        return (t * arrived - self.arrival_sums[arrived]) - (t * completed - self.completion_sums[completed])

    def between(self, t0: float, t1: float) -> float:
        """Job-seconds in the system during [t0, t1]."""
        return self.integral(t1) - self.integral(t0)

    @property
    def total(self) -> float:
        """The episode's sum of JCTs (every job-second)."""
        return self.completion_sums[-1] - self.arrival_sums[-1]

    @property
    def mean_jct(self) -> float:
        """The episode's mean JCT (0 without jobs)."""
        return self.total / len(self.arrivals) if self.arrivals else 0.0

    def after(self, t: float) -> float:
        """Job-seconds in the system after ``t``."""
        return self.total - self.integral(t)


@dataclass(frozen=True)
class ReferenceEpisode:
    """What a relative reward needs of the base policy's episode.

    Attributes:
        jobs: its training job-seconds over time.
        times: its boundary times (the start, then after each decision), increasing.
        waited: the inference request-seconds waited by each of those times.
    """

    jobs: JobSecondsCurve
    times: list[float]
    waited: list[float]

    def waited_between(self, t0: float, t1: float) -> float:
        """Request-seconds waited during [t0, t1] (linear between boundaries)."""
        return self._waited_by(t1) - self._waited_by(t0)

    def waited_after(self, t: float) -> float:
        """Request-seconds waited after ``t``."""
        return self.waited[-1] - self._waited_by(t)

    def _waited_by(self, t: float) -> float:
        times, waited = self.times, self.waited
        k = bisect.bisect_right(times, t)
        if k == 0:
            return 0.0
        if k == len(times):
            return waited[-1]
        t0, t1 = times[k - 1], times[k]
        return waited[k - 1] + (waited[k] - waited[k - 1]) * (t - t0) / (t1 - t0)


def simulate_reference(policy: str, workload: Workload, config: SimConfig) -> ReferenceEpisode:
    """Run ``policy`` (a registry name) on ``workload`` to the end, as
    :func:`~deepboot_env.evaluation.run_episode` does (seed 0, no watchdog), recording the
    waiting seconds at each boundary."""
    agent = make_policy(policy)
    agent.reset(0)
    sim = Simulator(workload, config, agent)
    times, waited = [sim.now], [sim.waiting_seconds]
    while not sim.done:
        state = sim.observe()
        sim.apply(agent.decide(state), state)
        sim.advance()
        times.append(sim.now)
        waited.append(sim.waiting_seconds)
    return ReferenceEpisode(JobSecondsCurve.of(workload, sim.metrics()), times, waited)


_CACHE: OrderedDict[tuple[str, ...], ReferenceEpisode] = OrderedDict()


def reference_curve(policy: str, scenario: Scenario, config: SimConfig) -> ReferenceEpisode:
    """The episode of ``policy`` (a registry name) on ``scenario`` under ``config`` (the
    scenario's own cluster and restart model applied), simulated on first use and cached."""
    key = (policy, scenario.name, str(scenario.family), str(scenario.seed), repr(config))
    episode = _CACHE.get(key)
    if episode is None:
        episode = _CACHE[key] = simulate_reference(policy, scenario.workload, config)
        if len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return episode
