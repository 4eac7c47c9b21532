"""Lyra (Li et al., EuroSys 2023; arXiv 2202.07896 as "Aryl"): capacity loaning with elastic
scaling (docs/policies.md §14).

Taken from the paper:

* **base demand first**: the queued jobs get their base demand in the scheduler's queue order
  (shortest predicted remaining time first); a job whose base demand does not fit waits;
* **extra workers by a multiple-choice knapsack**: the GPUs left go to the elastic jobs that got
  their base; job j may take e = 0..E_j extra workers, worth the JCT reduction
  ``T_j(b_j) - T_j(b_j + e)`` (T = remaining work / rate), and the sum of reductions is maximised
  (:func:`baselines.ats.knapsack`);
* **capacity loaning per server**: an inference server is lent to training only when it is idle
  (no pod at all) and is then counted whole; training is placed on the training half when a job
  fits there, on lent servers otherwise;
* **reclaim minimising the preemption cost**: a cold request first takes an idle GPU of a server
  not lent, then a SLEEP pod's GPU there, and only then takes back the lent server with the
  smallest preemption cost: (jobs preempted = left below their base demand, training GPUs lost,
  jobs touched), then the lowest index (:meth:`LyraPolicy.choose_inference_server`; Aryl mode's
  server hook, :mod:`deepboot_env.sim.aryl_mode`).

Decided here (the paper leaves it to its setting): the base demand is 1 GPU and the most a job may
take is its submitted replica count (every job is elastic, as in DeepBoot's AFS/Aryl runs); jobs
keep their submitted batch size; T uses the simulator's oracle remaining work (the paper assumes
known running times) and the fitted rate; the inference half is ``[N/2, N)`` of a shared pool or
the inference cluster. The reclaim runs one request at a time, so "greedily reduce the total
preemption cost" is the cheapest server per request. Run it with ``--aryl-mode`` to get Lyra's
server-granular reclaim; without it the pool uses ATS-I (GPU-granular) and only the allocation
rules above apply.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from baselines.ats import knapsack
from deepboot_env.placement import place_counts
from deepboot_env.policy import Allocation, BasePolicy, ClusterState, JobView, RequestView
from deepboot_env.sim.aryl_mode import aryl_inference_nodes
from deepboot_env.sim.cluster import NODE_INFER, NODE_TRAIN

BASE_DEMAND = 1
"""GPUs of each job's base demand."""


def _time(job: JobView, replicas: int, gpus_per_node: int) -> float:
    """Predicted remaining time (s) of ``job`` on ``replicas`` GPUs packed on full nodes."""
    rate = job.rate((replicas + gpus_per_node - 1) // gpus_per_node, replicas) if replicas > 0 else 0.0
    return job.remaining_work / rate if rate > 0 else float("inf")


def loanable_capacity(state: ClusterState) -> list[int]:
    """GPUs per node Lyra's training may hold: every GPU not pinned by a RUNNING/PROTECT pod on
    the training half; on the inference half only idle servers (no pod at all), whole, and the
    GPUs training already holds beside pods (possible only outside Aryl mode), so jobs may keep them."""
    cap = state.training_capacity_list(lend=True)
    used, running, protect, sleeping = state.node_counts
    for node in aryl_inference_nodes(state.config):
        if running[node] + protect[node] + sleeping[node] > 0:
            cap[node] = min(cap[node], used[node])
    return cap


def extra_values(job: JobView, extra: int, gpus_per_node: int) -> np.ndarray:
    """JCT reductions of e = 0..extra workers beyond the base demand (index e)."""
    base = _time(job, BASE_DEMAND, gpus_per_node)
    out = np.zeros(extra + 1)
    for e in range(1, extra + 1):
        t = _time(job, BASE_DEMAND + e, gpus_per_node)
        out[e] = base - t if np.isfinite(base) and np.isfinite(t) else 0.0
    return out


def preemption_cost(state: ClusterState, node: int) -> tuple[int, int, int]:
    """(jobs left below their base demand, training GPUs lost, jobs touched) if ``node`` is
    taken back."""
    preempted = lost = touched = 0
    for job in state.jobs:
        held = int(job.alloc[node])
        if held > 0:
            touched += 1
            lost += held
            if job.replicas - held < BASE_DEMAND:
                preempted += 1
    return preempted, lost, touched


class LyraPolicy(BasePolicy):
    """Lyra: base demand in queue order, extra workers by MCKP on JCT reduction, whole-server loans."""

    name = "lyra"
    adaptive_batch = False

    def decide(self, state: ClusterState) -> Allocation:
        """Base demand shortest-first, then the MCKP over extra workers, then placement."""
        if not state.jobs:
            return Allocation({})
        g = state.gpus_per_node
        cap = loanable_capacity(state)
        left = sum(cap)
        order = sorted(state.jobs, key=lambda j: (_time(j, BASE_DEMAND, g), j.arrival, j.id))
        counts: dict[int, int] = {}
        elastic: list[JobView] = []
        for job in order:
            limit = min(job.requested_replicas, job.max_replicas)
            if limit >= BASE_DEMAND and left >= BASE_DEMAND:
                counts[job.id] = BASE_DEMAND
                left -= BASE_DEMAND
                if limit > BASE_DEMAND:
                    elastic.append(job)
        if elastic and left > 0:
            limits = [min(j.requested_replicas, j.max_replicas) - BASE_DEMAND for j in elastic]
            values = [extra_values(j, min(e, left), g) for j, e in zip(elastic, limits, strict=True)]
            for job, extra in zip(elastic, knapsack(values, left), strict=True):
                counts[job.id] += extra
        return Allocation(place_counts(_split_view(state), counts, np.array(cap, dtype=np.int64)))

    def choose_inference_server(self, state: ClusterState, request: RequestView) -> int | None:
        """Where a cold request goes in Aryl mode: an empty GPU of a server not lent, else a SLEEP
        pod's GPU there, else the lent server with the smallest preemption cost."""
        used, running, protect, sleeping = state.node_counts
        g = state.gpus_per_node
        nodes = aryl_inference_nodes(state.config)
        for node in nodes:
            if used[node] == 0 and running[node] + protect[node] + sleeping[node] < g:
                return node
        for node in nodes:
            if used[node] == 0 and sleeping[node] > 0:
                return node
        lent = [node for node in nodes if used[node] > 0]
        if not lent:
            return None
        return min(lent, key=lambda node: (*preemption_cost(state, node), node))


def _split_view(state: ClusterState) -> ClusterState:
    """``state`` with the inference half marked as inference nodes, so that placement puts a job
    on the training half when it fits there (a no-op for a two-cluster layout)."""
    if not state.config.shared_pool:
        return state
    kinds = np.full(state.num_nodes, NODE_TRAIN, dtype=state.node_kinds.dtype)
    kinds[aryl_inference_nodes(state.config)] = NODE_INFER
    return dataclasses.replace(state, node_kinds=kinds)
