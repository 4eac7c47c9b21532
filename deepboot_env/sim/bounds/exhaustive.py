"""The exhaustive optimum of the simulator itself on tiny instances: every allocation at every boundary.

A depth-first search over the simulator's own decisions (:meth:`Simulator.snapshot
<deepboot_env.sim.simulator.Simulator.snapshot>` and ``restore``): at each scheduling boundary
every allocation of the active jobs is tried, every GPU count per node that the boundary's
training capacity and the jobs' limits allow (lending every lendable GPU; the default ATS-I hook
takes lent GPUs back). It returns the smallest mean JCT of any sequence of decisions, the optimum
of every adaptive policy, exactly, for the instance. A branch is cut once the job-seconds it has
spent plus each unfinished job's fastest remaining time (docs/bounds.md §2) reach the best
episode found, which keeps the search exact.

Only tiny instances are searchable: the branching is the product over jobs of their placements,
to the power of the number of boundaries (docs/bounds.md §7 gives the sizes the tests use).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from deepboot_env.sim.apps import AppProfile
from deepboot_env.sim.bounds.envelope import rate_ceiling
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.hooks import DefaultHooks
from deepboot_env.sim.jobs import TrainingJob
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.state import Allocation, ClusterState
from deepboot_env.sim.workload import Workload


class _Hooks(DefaultHooks):
    """The policy object the searched simulator calls back: every default hook (adaptive
    batches, ATS-I reclaims); it never decides itself."""

    name = "exhaustive"
    adaptive_batch = True


@dataclass(frozen=True)
class SearchResult:
    """The outcome of an exhaustive search.

    Attributes:
        best: the smallest mean training JCT over every sequence of decisions (s).
        episodes: complete episodes simulated.
        decisions: allocations tried in all.
    """

    best: float
    episodes: int
    decisions: int


def exhaustive_optimum(
    workload: Workload,
    config: SimConfig,
    max_decisions: int = 200_000,
    profiles: Mapping[str, AppProfile] | None = None,
) -> SearchResult:
    """The optimum mean JCT of ``workload`` on ``config`` (with application ``profiles``, default
    the shipped ones) over every allocation sequence (module docstring).

    Raises:
        ValueError: if the search would try more than ``max_decisions`` allocations.
    """
    sim = Simulator(workload, config, _Hooks(), None if profiles is None else dict(profiles))
    cluster = config.cluster
    search = _Search(sim, max_decisions, cluster.num_nodes, cluster.gpus_per_node)
    search.run()
    return SearchResult(search.best / len(workload.jobs), search.episodes, search.decisions)


class _Search:
    """The depth-first search's state: the simulator, the best total JCT so far and counters."""

    def __init__(self, sim: Simulator, limit: int, nodes: int, gpus_per_node: int) -> None:
        self.sim = sim
        self.limit = limit
        self.shape = (nodes, gpus_per_node)
        self.best = np.inf
        self.episodes = 0
        self.decisions = 0

    def run(self) -> None:
        """Try every allocation at the simulator's current boundary, recursively."""
        sim = self.sim
        if sim.done:
            self._finish()
            return
        state = sim.observe()
        if self._floor(state.time) >= self.best:
            return
        snap = sim.snapshot()
        for allocation in allocations(state):
            self.decisions += 1
            if self.decisions > self.limit:
                raise ValueError(f"the exhaustive search passed {self.limit} decisions: the instance is too large")
            sim.restore(snap)
            sim.apply(allocation, state)
            sim.advance()
            self.run()
        sim.restore(snap)

    def _finish(self) -> None:
        self.episodes += 1
        metrics = self.sim.metrics()
        if metrics.train_jobs_done == metrics.train_jobs:
            self.best = min(self.best, sum(metrics.jcts.values()))

    def _floor(self, now: float) -> float:
        """Job-seconds every completion of this branch spends at least: the time each job has
        been in the system, plus the fastest remaining time of each unfinished one (arrived or
        not)."""
        total = 0.0
        for job in self.sim.jobs:
            arrival = job.spec.arrival
            if job.completion is not None:
                total += job.completion - arrival
            else:
                total += max(now, arrival) - arrival + self._remaining(job)
        return total

    def _remaining(self, job: TrainingJob) -> float:
        """Seconds ``job`` needs at least to finish from where it is: each epoch's remaining
        progress at its fastest rate on the cluster, less half a second (its end's rounding)."""
        peak = rate_ceiling(job.truth, job.rates.max_replicas, *self.shape)[:, -1]
        thresholds = np.asarray(job.app.epoch_progress, dtype=float)
        starts = np.concatenate([[0.0], thresholds[:-1]])
        left = np.maximum(thresholds - np.maximum(starts, job.progress), 0.0)
        return float(np.sum(np.maximum(left / peak - 0.5, 0.0)))


def allocations(state: ClusterState) -> list[Allocation]:
    """Every allocation of ``state``'s active jobs: GPUs per node within the training capacity
    (every lendable GPU) and each job's limit, giving nothing included; those with the most GPUs
    first, so that the search's first descent completes the episode and bounds the rest."""
    capacity = state.training_capacity(lend=1.0).tolist()
    per_job = [
        [c for c in itertools.product(*(range(cap + 1) for cap in capacity)) if sum(c) <= job.max_replicas]
        for job in state.jobs
    ]
    out: list[tuple[int, int, Allocation]] = []
    for combo in itertools.product(*per_job):
        used = [sum(column) for column in zip(*combo, strict=True)] if combo else []
        if all(u <= cap for u, cap in zip(used, capacity, strict=False)):
            gpus = {job.id: np.array(c, dtype=np.int64) for job, c in zip(state.jobs, combo, strict=True) if sum(c)}
            out.append((-sum(map(sum, combo)), len(out), Allocation(gpus)))
    return [allocation for *_, allocation in sorted(out, key=lambda item: item[:2])]
