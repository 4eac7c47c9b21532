"""AFS: elastic sharing by a pairwise tournament on marginal throughput (docs/policies.md §7).

Starting from no allocation, GPUs are handed out one at a time. Each time, the candidate jobs play
a tournament: job a beats job b if its relative marginal throughput
``(x_a(r_a + 1) - x_a(r_a)) / x_a(r_a + 1)`` is larger (1 for a job with no GPU); two jobs without
a GPU are compared by their predicted remaining time on one GPU (shorter wins). The winner gets the
GPU; the rounds stop when GPUs run out or nobody can grow. Placement is DeepBoot's (jobs with an
unchanged count keep their GPUs; the others best-fit, ascending count).

Decisions: jobs keep their submitted batch size and may grow up to their submitted replica count
(the DeepBoot code set max_replicas to it but never checked it; we enforce it); the remaining time
uses the simulator's oracle remaining work (AFS-L assumes known job lengths); ties are broken by
arrival order; capacity is the training cluster (``afs``) or also idle inference GPUs
(``afs-lend``).
"""

from __future__ import annotations

from deepboot_env.placement import place_counts
from deepboot_env.policy import Allocation, BasePolicy, ClusterState, JobView


def _rate(job: JobView, replicas: int, gpus_per_node: int) -> float:
    return job.rate((replicas + gpus_per_node - 1) // gpus_per_node, replicas) if replicas > 0 else 0.0


class AfsPolicy(BasePolicy):
    """AFS tournament allocator."""

    adaptive_batch = False

    def __init__(self, lend: bool = False) -> None:
        self.lend = lend
        self.name = "afs-lend" if lend else "afs"

    def _beats(self, a: JobView, b: JobView, counts: dict[int, int], g: int) -> bool:
        ra, rb = counts[a.id], counts[b.id]
        if ra == 0 and rb == 0:
            ta = a.remaining_work / max(_rate(a, 1, g), 1e-12)
            tb = b.remaining_work / max(_rate(b, 1, g), 1e-12)
            return ta < tb
        return self._gain(a, ra, g) > self._gain(b, rb, g)

    @staticmethod
    def _gain(job: JobView, r: int, g: int) -> float:
        if r == 0:
            return 1.0
        nxt = _rate(job, r + 1, g)
        return (nxt - _rate(job, r, g)) / nxt if nxt > 0 else 0.0

    def decide(self, state: ClusterState) -> Allocation:
        """Hand out GPUs one by one to tournament winners, then place."""
        cap = state.training_capacity(lend=self.lend)
        left = int(cap.sum())
        g = state.gpus_per_node
        counts = {job.id: 0 for job in state.jobs}
        limit = {job.id: min(job.requested_replicas, job.max_replicas) for job in state.jobs}
        while left > 0:
            winner: JobView | None = None
            for job in state.jobs:
                if counts[job.id] >= limit[job.id]:
                    continue
                if counts[job.id] > 0 and self._gain(job, counts[job.id], g) <= 0:
                    continue
                if winner is None or self._beats(job, winner, counts, g):
                    winner = job
            if winner is None:
                break
            counts[winner.id] += 1
            left -= 1
        return Allocation(place_counts(state, counts, cap))
