"""Optimus + Oracle: greedy GPU allocation by marginal reduction of remaining time (docs/policies.md §6).

Each job keeps its submitted total batch size; it may use up to ``batch // min_local_bsz`` GPUs
(ncf: 1). With the oracle remaining work R_j (the simulator's true remaining progress), a job's
remaining time at K GPUs is R_j / rate_j(K), with the oracle's true rate at K GPUs packed on
nodes (``JobView.oracle_rate``: the measured step time of that shape under the measured truth,
as the original's oracle reads the traces). Allocation: in
submission order every job first gets one GPU while GPUs remain; then, repeatedly, one more GPU goes
to the job with the largest reduction of remaining time, T_j(K) - T_j(K + 1), until GPUs run out or
no job gains. Jobs whose count is unchanged keep their nodes; the others, in ascending order of
their count, take GPUs from the node with the most free GPUs, repeatedly.

Decisions: the marginal gain is measured in seconds of remaining time (the original multiplied the
step-time reduction by remaining iterations, which is the same quantity for a fixed batch);
capacity is the training cluster (no lending) or, in a shared pool, every GPU not held by a
RUNNING/PROTECT pod.
"""

from __future__ import annotations

import heapq

from deepboot_env.placement import place_counts
from deepboot_env.policy import Allocation, BasePolicy, ClusterState, JobView


def remaining_time(job: JobView, replicas: int, gpus_per_node: int) -> float:
    """Oracle seconds to finish at ``replicas`` GPUs packed on nodes (inf at 0 GPUs)."""
    if replicas <= 0:
        return float("inf")
    rate = job.oracle_rate(replicas, gpus_per_node)
    return job.remaining_work / rate if rate > 0 else float("inf")


class OptimusPolicy(BasePolicy):
    """Optimus with oracle remaining work and fixed batch sizes."""

    name = "optimus"
    adaptive_batch = False

    def __init__(self, lend: bool = False) -> None:
        self.lend = lend

    def decide(self, state: ClusterState) -> Allocation:
        """One GPU each in arrival order, then greedy marginal gains."""
        cap = state.training_capacity(lend=self.lend)
        left = int(cap.sum())
        g = state.gpus_per_node
        counts: dict[int, int] = {}
        for job in state.jobs:
            if left <= 0:
                break
            counts[job.id] = 1
            left -= 1
        by_id = state.job_by_id
        heap: list[tuple[float, int]] = []

        def push(job: JobView) -> None:
            k = counts[job.id]
            if k + 1 > job.max_replicas:
                return
            gain = remaining_time(job, k, g) - remaining_time(job, k + 1, g)
            if gain > 0:
                heapq.heappush(heap, (-gain, job.id))

        for job_id in counts:
            push(by_id[job_id])
        while left > 0 and heap:
            _, job_id = heapq.heappop(heap)
            counts[job_id] += 1
            left -= 1
            push(by_id[job_id])
        return Allocation(place_counts(state, counts, cap, rule="most_free"))
