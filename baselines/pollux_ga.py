"""Pollux's genetic search, one round: the problem and its operators (docs/policies.md §9.1-§9.2).

:func:`build_problem` turns a :class:`~deepboot_env.policy.ClusterState` into a
:class:`PolluxProblem`: jobs in priority order x the nodes the variant may use, fair-share
speedup tables, restart factors. The problem evaluates solutions (fitness = power mean of the
scaled speedups, utility as tie-break), repairs them to the hard constraints, and varies them
(job-row crossover; reset / zero-out / grow mutation). The GA loop that uses it (population,
tournaments, survival, warm start) is :class:`baselines.pollux.PolluxPolicy`, whose module
docstring lists where and why this re-implementation departs from the original.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from baselines.job_order import job_priority_key
from deepboot_env.policy import ClusterState
from deepboot_env.sim.cluster import NODE_INFER

RESTART_DELAY_S = 30.0
"""Assumed restart delay (s) in the restart factor."""
POWER_P = -1.0
"""Exponent of the power mean over jobs (p = -1: harmonic mean)."""
FITNESS_EPS = 1e-3
"""Added to every scaled speedup inside the power mean."""
MAX_NODES_PER_JOB = 16
"""Hard-coded node cap per job in the original repair."""
CROSSOVER_PROB = 0.9
RESET_PROB = 0.1
ZERO_ROW_PROB = 0.1
ZERO_CELL_PROB = 0.1


def restart_factor(age: float, restarts: int, delay: float = RESTART_DELAY_S) -> float:
    """max(age - delay restarts, 0) / (age + delay) (delay = 30 s in Pollux, 10 s in DeepBoot's copy)."""
    return max(age - delay * restarts, 0.0) / (age + delay)


def power_mean(values: np.ndarray, p: float = POWER_P, axis: int = -1) -> np.ndarray:
    """((1/J) sum v^p)^(1/p) along ``axis`` (geometric mean for p = 0)."""
    if p == 0:
        return np.exp(np.mean(np.log(values), axis=axis))
    if p == -1:
        return values.shape[axis] / np.add.reduce(1.0 / values, axis=axis)
    return np.mean(values**p, axis=axis) ** (1.0 / p)


def count_over_nodes(mask: np.ndarray) -> np.ndarray:
    """Number of True cells per (solution, job) of a (M, J, N) boolean array."""
    if mask.shape[2] < 256:
        return np.einsum("mjn->mj", mask.view(np.uint8))
    return mask.sum(axis=2)


def count_over_jobs(mask: np.ndarray) -> np.ndarray:
    """Number of True cells per (solution, node) of a (M, J, N) boolean array."""
    if mask.shape[1] < 256:
        return np.einsum("mjn->mn", mask.view(np.uint8))
    return mask.sum(axis=1)


def bernoulli_positions(rng: np.random.Generator, size: int, p: float) -> np.ndarray:
    """Indices in [0, size) of independent Bernoulli(p) successes (geometric gaps; exact)."""
    if size <= 0 or p <= 0:
        return np.zeros(0, dtype=np.int64)
    if p >= 1:
        return np.arange(size)
    out = []
    last = -1
    while True:
        mu = (size - last) * p
        gaps = rng.geometric(p, size=int(mu + 6 * math.sqrt(mu) + 16))
        pos = last + np.cumsum(gaps)
        out.append(pos[pos < size])
        if pos[-1] >= size:
            return np.concatenate(out) if len(out) > 1 else out[0]
        last = int(pos[-1])


@dataclass
class PolluxProblem:
    """One round's optimisation problem.

    Solutions are (M, J, N) float64 arrays holding whole numbers (float keeps the reductions on
    fast BLAS/einsum paths): M solutions, J jobs in priority order, N axis nodes.

    Attributes:
        job_ids: job ids in priority order (rows).
        nodes: cluster node index of each axis column.
        cap: usable GPUs per axis node this round.
        base: current allocation (J, N).
        max_replicas: per-job replica cap.
        speedup: flat (J * 2 * kdim) fair-share speedups indexed [job, multi, K].
        kdim: replica dimension of the table (max K + 1).
        scale: d * nodes, the objective's scale factor.
        phi: per-job restart factors.
        avoid: apply the interference-avoidance repair (at most one distributed job per node).
    """

    job_ids: np.ndarray
    nodes: np.ndarray
    cap: np.ndarray
    base: np.ndarray
    max_replicas: np.ndarray
    speedup: np.ndarray
    kdim: int
    scale: float
    phi: np.ndarray
    avoid: bool = True

    def __post_init__(self) -> None:
        self.num_jobs = len(self.job_ids)
        self.num_nodes = len(self.nodes)
        self.cap = np.asarray(self.cap, dtype=float)
        self.base = np.asarray(self.base, dtype=float)
        self.max_replicas = np.asarray(self.max_replicas, dtype=float)
        self.offsets = np.arange(self.num_jobs) * (2 * self.kdim)
        self._fac_same = np.full(self.num_jobs, self.scale)
        self._fac_changed = self.scale * np.asarray(self.phi, dtype=float)
        # Integer weights keep the fingerprints exact in float64 (sums < 2**53), so equal rows
        # or solutions always get equal fingerprints, whatever the summation order.
        wrng = np.random.default_rng(12345)
        n_cells = max(self.num_jobs * self.num_nodes, 1)
        row_w = wrng.integers(1, 2**52 // (16 * max(self.num_nodes, 1)), size=self.num_nodes)
        self._row_w = np.stack([np.ones(self.num_nodes), row_w.astype(float)], axis=1)
        self._base_rh = self.base @ self._row_w[:, 1]
        self._sol_w = wrng.integers(1, 2**52 // (16 * n_cells), size=n_cells).astype(float)
        self._jobs = np.arange(self.num_jobs)
        self._lower = np.tril(np.ones((self.num_jobs, self.num_jobs)))
        self._strict = np.tril(np.ones((self.num_jobs, self.num_jobs)), -1)

    # ------------------------------------------------------------ objectives
    def evaluate(self, pop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fitness, utility) of every solution in ``pop`` (M, J, N)."""
        fit, util, _ = self.evaluate_full(pop)
        return fit, util

    def evaluate_full(self, pop: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fitness, utility, fingerprint) of every solution in ``pop`` (M, J, N)."""
        m = len(pop)
        kh = pop.reshape(-1, self.num_nodes) @ self._row_w
        k = np.minimum(kh[:, 0], self.kdim - 1).astype(np.intp).reshape(m, self.num_jobs)
        changed = kh[:, 1].reshape(m, self.num_jobs) != self._base_rh
        multi = count_over_nodes(pop > 0) > 1
        s = self.speedup.take(self.offsets + multi * self.kdim + k)
        scaled = s * np.where(changed, self._fac_changed, self._fac_same)
        fit = power_mean(scaled + FITNESS_EPS, POWER_P, axis=1)  # p = -1: J / sum(1 / x)
        used = (np.einsum("mjn->mn", pop) > 0) @ self.cap
        util = np.where(used > 0, s.sum(axis=1) / np.maximum(used, 1.0), 0.0)
        return fit, util, pop.reshape(m, -1) @ self._sol_w

    # ------------------------------------------------------------ repair
    def repair(self, pop: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Hard constraints in the original order (docs/policies.md §9.2); modifies and returns ``pop``."""
        # Interference avoidance: on each node only the first distributed job (in job order)
        # keeps its replicas; `earlier` counts the distributed jobs before it on the node.
        if self.avoid:
            pos = pop > 0
            m = pos & (count_over_nodes(pos) > 1)[:, :, None]
            earlier = self._strict @ m.astype(float)
            pop *= ~(m & (earlier > 0))
        n = self.num_nodes
        flat = pop.reshape(-1, n)
        over = np.flatnonzero((np.einsum("mjn->mj", pop) > self.max_replicas).ravel())
        if len(over):
            # Visit each row's nodes in a fresh random order, keeping replicas up to the cap.
            rows = flat[over]
            order = (np.argsort(rng.random(rows.shape), axis=1) + (np.arange(len(over)) * n)[:, None]).ravel()
            xs = rows.ravel()[order].reshape(rows.shape)
            kept = np.minimum(np.cumsum(xs, axis=1), self.max_replicas[over % self.num_jobs][:, None])
            kept[:, 1:] -= kept[:, :-1].copy()
            new = np.empty(rows.size)
            new[order] = kept.ravel()
            flat[over] = new.reshape(rows.shape)
        if n > MAX_NODES_PER_JOB:
            wide = np.flatnonzero(count_over_nodes(pop > 0).ravel() > MAX_NODES_PER_JOB)
            if len(wide):
                rows = flat[wide]
                order = (np.argsort(rng.random(rows.shape), axis=1) + (np.arange(len(wide)) * n)[:, None]).ravel()
                xs = rows.ravel()[order].reshape(rows.shape)
                keep = np.cumsum(xs > 0, axis=1) <= MAX_NODES_PER_JOB
                new = np.empty(rows.size)
                new[order] = np.where(keep, xs, 0.0).ravel()
                flat[wide] = new.reshape(rows.shape)
        overfull = np.einsum("mjn->mn", pop) > self.cap
        if overfull.any():
            sols = np.flatnonzero(overfull.any(axis=1))
            held = np.minimum(self._lower @ pop[sols], self.cap)
            held[:, 1:] -= held[:, :-1].copy()
            pop[sols] = held
        return pop

    # ------------------------------------------------------------ variation
    def crossover(self, pop: np.ndarray, w1: np.ndarray, w2: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Job-row one-point crossover of each mating (pop[w1[i]], pop[w2[i]]) (docs/policies.md §9.2).

        With probability 0.9 a cut c is drawn uniformly from {0, ..., J-1}; child 1 takes rows
        j < c from parent 2 and the rest from parent 1, child 2 the opposite; otherwise the
        children copy their parents. Returns the 2 len(w1) children (all first children first).
        """
        n = len(w1)
        j = self.num_jobs
        do = rng.random(n) < CROSSOVER_PROB
        cut = np.floor(rng.random(n) * j)
        swap = (self._jobs < cut[:, None]) & do[:, None]
        a, b = w1[:, None] * j, w2[:, None] * j
        rows = np.concatenate([np.where(swap, b, a), np.where(swap, a, b)]) + self._jobs
        return pop.reshape(-1, self.num_nodes).take(rows.ravel(), axis=0).reshape(2 * n, j, self.num_nodes)

    def mutate(self, pop: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Reset, zero-out and grow (docs/policies.md §9.2); modifies and returns ``pop``.

        Grow draws, for every node with a free GPU, each job with probability ``1/J`` (p1) or,
        for jobs resident on the node, ``1/#resident`` (p2); the two independent events are
        sampled separately (p1 by geometric gaps, as all its cells share one probability), which
        is the same distribution as one draw with ``p1 + p2 - p1 p2`` per cell.
        """
        m, j, n = pop.shape
        pop = np.ascontiguousarray(pop)
        flat = pop.reshape(m * j, n)
        u = rng.random(2 * m * j)
        reset = np.flatnonzero(u[: m * j] < RESET_PROB)
        if len(reset):
            flat[reset] = self.base[reset % j]
        sel = np.flatnonzero(u[m * j :] < ZERO_ROW_PROB)
        if len(sel):
            flat[sel] *= rng.random((len(sel), n)) >= ZERO_CELL_PROB
        has_free = (self.cap - np.einsum("mjn->mn", pop)) >= 1
        pairs = np.flatnonzero(has_free)
        if len(pairs) == 0:
            return pop
        e1 = bernoulli_positions(rng, len(pairs) * j, 1.0 / j)
        pm, pn = np.divmod(pairs[e1 // j], n)
        cells1 = (pm * j + e1 % j) * n + pn
        resident = (pop > 0) & has_free[:, None, :]
        res_cells = np.flatnonzero(resident)
        if len(res_cells):
            n_res = count_over_jobs(resident)
            rm, rest = np.divmod(res_cells, j * n)
            p2 = 1.0 / n_res[rm, rest % n]
            cells2 = res_cells[rng.random(len(res_cells)) < p2]
            cells = np.concatenate([cells1, cells2])  # a repeated cell just draws twice
        else:
            cells = cells1
        if len(cells):
            values = pop.reshape(-1)
            cur = values[cells]
            hi = np.maximum(self.cap[cells % n], cur)
            values[cells] = cur + np.floor(rng.random(len(cells)) * (hi - cur + 1.0))
        return pop


def build_problem(
    state: ClusterState, lend: bool, restart_delay: float = RESTART_DELAY_S, avoid: bool = True
) -> PolluxProblem | None:
    """The round's problem, or None when there is nothing to allocate."""
    jobs = sorted(state.jobs, key=job_priority_key)
    if not jobs:
        return None
    nodes = np.arange(state.num_nodes) if lend else np.flatnonzero(state.node_kinds != NODE_INFER)
    cap = np.maximum(state.training_capacity(lend=lend)[nodes], 0).astype(np.int64)
    capacity = int(cap.sum())
    if capacity <= 0:
        return None
    nj = len(jobs)
    max_rep = np.array([max(0, min(job.max_replicas, capacity)) for job in jobs], dtype=np.int64)
    kdim = int(max_rep.max()) + 1
    fair = math.ceil(capacity / nj)
    table = np.zeros((nj, 2, kdim))
    for i, job in enumerate(jobs):
        rates = job.rate_table()
        width = min(rates.shape[1], kdim)
        table[i, :, :width] = rates[:, :width]
        if width < kdim:
            table[i, :, width:] = rates[:, width - 1 : width]
        base = rates[0, max(1, min(fair, rates.shape[1] - 1))]
        table[i] /= base if base > 0 else 1.0
    table[:, :, 0] = 0.0
    base_alloc = np.stack([job.alloc[nodes] for job in jobs]).astype(np.int64)
    phi = np.array([restart_factor(job.age, job.num_restarts, restart_delay) for job in jobs])
    scale = np.count_nonzero(cap) / capacity
    return PolluxProblem(
        job_ids=np.array([job.id for job in jobs], dtype=np.int64),
        nodes=nodes,
        cap=cap,
        base=base_alloc,
        max_replicas=max_rep,
        speedup=table.reshape(-1),
        kdim=kdim,
        scale=scale,
        phi=phi,
        avoid=avoid,
    )
