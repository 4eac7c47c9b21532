"""Tiresias: two-queue discretised least-attained-service with gang scheduling (docs/policies.md §5).

Each job keeps its submitted GPU count (``num_replicas``, gang: all or nothing) and batch size.
New jobs enter queue Q0; a job is demoted to the back of Q1 once its attained service reaches
16 GPU-hours (57,600 GPU-s). At every boundary the policy walks Q0 then Q1 in queue order and
runs a job if its gang fits in the GPUs not yet reserved, skipping jobs that do not fit and
continuing with later ones (backfilling); a job that is not selected loses its GPUs (pre-emption).
Running jobs keep their nodes; newly started jobs take GPUs from the node with the most free GPUs,
repeatedly. Starvation promotion is disabled, as in the Pollux artifact.

Decisions: capacity is the training cluster (no lending) or, in a shared pool, every GPU not held
by a RUNNING/PROTECT pod; a gang larger than the whole usable capacity is capped at it; a job that
an inference reclaim shrank (shared pool) keeps running below its gang size until the next
boundary, where it is restored or pre-empted like any other (the original let it run shrunk).
"""

from __future__ import annotations

from deepboot_env.placement import place_counts
from deepboot_env.policy import Allocation, BasePolicy, ClusterState

DEMOTION_GPU_SECONDS = 57_600.0
"""Attained service (GPU-s) after which a job moves from Q0 to Q1."""


class TiresiasPolicy(BasePolicy):
    """2D-LAS with two queues, gang scheduling and backfilling."""

    name = "tiresias"
    adaptive_batch = False

    def __init__(self, threshold: float = DEMOTION_GPU_SECONDS, lend: bool = False) -> None:
        self.threshold = threshold
        self.lend = lend
        self._demoted: dict[int, int] = {}

    def reset(self, seed: int | None = None) -> None:
        """Forget queue positions."""
        self._demoted = {}

    def decide(self, state: ClusterState) -> Allocation:
        """Walk Q0 then Q1, run every gang that still fits."""
        for job in state.jobs:
            if job.id not in self._demoted and job.attained_service >= self.threshold:
                self._demoted[job.id] = len(self._demoted)
        q0 = [j for j in state.jobs if j.id not in self._demoted]
        q1 = sorted((j for j in state.jobs if j.id in self._demoted), key=lambda j: self._demoted[j.id])
        cap = state.training_capacity(lend=self.lend)
        usable = max(int(cap.sum()), 1)
        reserved = 0
        chosen = []
        for job in q0 + q1:
            gang = min(job.requested_replicas, job.max_replicas, usable)
            if reserved + gang <= usable:
                chosen.append((job, gang))
                reserved += gang
        counts = {job.id: gang for job, gang in chosen}
        return Allocation(place_counts(state, counts, cap, rule="most_free", ascending=False))
