"""FIFO: static gang allocation of each job's requested GPUs in arrival order, no lending.

Each job waits until its requested replicas (capped at what the training cluster can ever hold)
fit in the free training GPUs, then runs on them with its submitted batch size until it finishes:
no elasticity, no pre-emption. Strict arrival order: a job that does not fit blocks the jobs
behind it (no backfilling). It never lends inference GPUs; in a shared pool every node counts as
training capacity. A job that lost a GPU to an inference reclaim (shared pool) is topped up again
when GPUs are free.
"""

from __future__ import annotations

import numpy as np

from deepboot_env.placement import best_fit
from deepboot_env.policy import Allocation, BasePolicy, ClusterState


class FifoPolicy(BasePolicy):
    """First-in first-out gang scheduling of requested replicas."""

    name = "fifo"
    adaptive_batch = False

    def decide(self, state: ClusterState) -> Allocation:
        """Keep running jobs; start waiting jobs in arrival order while they fit."""
        cap = state.training_capacity(lend=False)
        usable = int(cap.sum())
        held = np.zeros(state.num_nodes, dtype=np.int64)
        out: dict[int, np.ndarray] = {}
        for job in state.jobs:
            if job.replicas > 0:
                out[job.id] = job.alloc.copy()
                held += job.alloc
        free = cap - held
        blocked = False
        for job in state.jobs:
            target = min(job.requested_replicas, job.max_replicas, max(usable, 1))
            have = out.get(job.id)
            if have is not None:
                missing = target - int(have.sum())
                if missing > 0:
                    extra = best_fit(missing, free)
                    if extra is not None:
                        out[job.id] = have + extra
                        free -= extra
                continue
            if blocked:
                continue
            placement = best_fit(target, free)
            if placement is None:
                blocked = True
                continue
            out[job.id] = placement
            free -= placement
        return Allocation(out)
