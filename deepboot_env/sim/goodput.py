"""Pollux goodput model: throughput x statistical efficiency, batch-size choice, speedups.

All functions are vectorised over configurations. Notation (docs/goodput.md §1):

* ``nodes`` N, ``replicas`` K (one GPU each), per-GPU micro-batch m, extra accumulation steps s,
  total batch M = K * m * (s + 1), reference batch M0.
* Per-iteration time T = s * T_acc(m) + (T_acc(m)^gamma + T_net(N, K)^gamma)^(1/gamma).
* Efficiency E(M) = gain / (M / M0) with gain = (var + sqr) / (var / (M / M0) + sqr).
* Goodput = throughput x efficiency (examples/s at M0 worth); progress rate = gain / T
  (M0-equivalent iterations per second), which is what moves a job through its epochs.

By default the environment's ground truth and the schedulers' model share the calibrated
throughput model (``SimConfig(truth="measured")`` times the steps with measurements instead:
:mod:`deepboot_env.sim.measured`, docs/goodput.md §9).
A job chooses its batch configuration at (N, K, epoch) with :func:`optimize` using the gradient
statistics it observes, normalised to M0 (the epoch's statistics at the smallest traced batch, the
view Pollux's agent has; docs/references.md §6.1 uses the same); it then progresses at the *true*
rate of that configuration, with the statistics interpolated at the batch it actually uses. Only
whether N > 1 matters to the throughput model, so the rate tables (:mod:`deepboot_env.sim.rates`)
are indexed by (multi-node flag, K).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepboot_env.sim.apps import AppProfile

N_BATCH_CANDIDATES = 50
"""Candidate total batch sizes per configuration (numpy geomspace default, as Pollux)."""

_EPS = 1e-8


def network_time(params: np.ndarray, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """All-reduce time per synchronising step (seconds), choosing the slowest link class."""
    _, _, alpha_n, beta_n, alpha_r, beta_r, _ = params
    k = np.asarray(replicas, dtype=float)
    n = np.asarray(nodes, dtype=float)
    extra = np.maximum(k - 2.0, _EPS)
    return np.where(
        n > 1,
        alpha_n + beta_n * extra,
        np.where(k > 1, alpha_r + beta_r * extra, _EPS + _EPS * extra),
    )


def compute_time(params: np.ndarray, local_bsz: np.ndarray) -> np.ndarray:
    """Forward+backward time of one micro-batch on one GPU (seconds)."""
    return params[0] + params[1] * np.asarray(local_bsz, dtype=float)


def iteration_time(
    params: np.ndarray,
    nodes: np.ndarray,
    replicas: np.ndarray,
    local_bsz: np.ndarray,
    accum_steps: np.ndarray,
) -> np.ndarray:
    """Seconds per optimiser step: ``s`` accumulation steps plus one synchronising step."""
    gamma = params[6]
    t_acc = compute_time(params, local_bsz)
    t_net = network_time(params, nodes, replicas)
    t_sync = (t_acc**gamma + t_net**gamma) ** (1.0 / gamma)
    return np.asarray(accum_steps, dtype=float) * t_acc + t_sync


def sync_step_time(params: np.ndarray, nodes: np.ndarray, replicas: np.ndarray, local_bsz: np.ndarray) -> np.ndarray:
    """Seconds of one synchronising step (what ``step_time`` in the traces measures)."""
    return iteration_time(params, nodes, replicas, local_bsz, np.zeros_like(np.asarray(local_bsz, dtype=float)))


def statistical_gain(
    total_batch: np.ndarray, init_batch: float, grad_sqr: np.ndarray, grad_var: np.ndarray
) -> np.ndarray:
    """M0-sized steps one step at total batch M is worth (1 <= gain <= M / M0).

    A non-positive denominator (no gradient signal at all) gives gain 1.
    """
    scale = np.asarray(total_batch, dtype=float) / init_batch
    denom = grad_var / scale + grad_sqr
    safe = np.where(denom > 0, denom, 1.0)
    return np.where(denom > 0, (grad_var + grad_sqr) / safe, 1.0)


def efficiency(total_batch: np.ndarray, init_batch: float, grad_sqr: np.ndarray, grad_var: np.ndarray) -> np.ndarray:
    """Statistical efficiency in (0, 1]: gain / (M / M0)."""
    scale = np.asarray(total_batch, dtype=float) / init_batch
    return statistical_gain(total_batch, init_batch, grad_sqr, grad_var) / scale


@dataclass(frozen=True)
class BatchChoice:
    """Best batch configuration for each queried (N, K).

    Attributes:
        goodput: examples/s weighted by efficiency (0 where infeasible).
        rate: progress rate, M0-equivalent iterations per second (0 where infeasible).
        local_bsz: chosen micro-batch m.
        accum_steps: chosen extra accumulation steps s.
        total_batch: K * m * (s + 1).
    """

    goodput: np.ndarray
    rate: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray
    total_batch: np.ndarray


def split_batch(
    app: AppProfile, replicas: np.ndarray, total: np.ndarray, accumulation: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Split total batch sizes over ``replicas`` into (micro-batch m, accumulation steps s).

    Pollux's rule: s = ceil(L / mmax) - 1 with L = M / K; a single replica above M0 uses at least
    two micro-batches; m = ceil(L / (s + 1)); finally m is clipped so K * m * (s+1) <= Mmax.
    """
    k = np.asarray(replicas, dtype=float)
    local = np.asarray(total, dtype=float) / k
    if accumulation:
        s = np.ceil(local / app.max_local_bsz - _EPS) - 1
        s = np.where((k == 1) & (local > app.init_batch_size + _EPS), np.maximum(s, 1), s)
        s = np.maximum(s, 0)
    else:
        s = np.zeros_like(local)
    m = np.ceil(local / (s + 1) - _EPS)
    m = np.minimum(m, np.floor(app.max_batch_size / (k * (s + 1))))
    return m, s


def evaluate(
    app: AppProfile,
    nodes: np.ndarray,
    replicas: np.ndarray,
    local_bsz: np.ndarray,
    accum_steps: np.ndarray,
    epoch: int | None = None,
    stats: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(goodput, progress rate) of explicit configurations.

    Gradient statistics are those of ``epoch`` interpolated at each total batch, or ``stats``
    (sqr, var) given explicitly.
    """
    k = np.asarray(replicas, dtype=float)
    m = np.asarray(local_bsz, dtype=float)
    s = np.asarray(accum_steps, dtype=float)
    total = k * m * (s + 1)
    if stats is None:
        sqr, var = app.grad_stats(0 if epoch is None else epoch, total)
    else:
        sqr, var = stats
    t_iter = iteration_time(app.throughput_params, nodes, k, m, s)
    gain = statistical_gain(total, app.init_batch_size, sqr, var)
    throughput = total / t_iter
    return throughput * gain / (total / app.init_batch_size), gain / t_iter


def optimize(
    app: AppProfile,
    nodes: np.ndarray,
    replicas: np.ndarray,
    epoch: int | None = None,
    stats: tuple[float, float] | None = None,
    fixed_batch: int | None = None,
    accumulation: bool = True,
) -> BatchChoice:
    """Pollux's optimize(): the best total batch for each (N, K), vectorised.

    Candidates are 50 geometrically spaced totals between max(M0, mmin * K) and Mmax; each is
    split by :func:`split_batch`; configurations with m outside [mmin, mmax] are infeasible.
    With ``fixed_batch`` the only candidate is that total (fixed-batch schedulers).

    Args:
        app: application profile.
        nodes: node counts, shape (P,).
        replicas: replica counts, shape (P,), each >= 1.
        epoch: epoch whose gradient statistics are interpolated at each candidate batch.
        stats: alternatively a fixed (grad_sqr, grad_var) pair used for every candidate.
        fixed_batch: total batch to keep instead of searching.
        accumulation: allow gradient accumulation.
    """
    n = np.atleast_1d(np.asarray(nodes, dtype=float))
    k = np.atleast_1d(np.asarray(replicas, dtype=float))
    if np.any(k < 1):
        raise ValueError("optimize(): every configuration needs at least one replica")
    if fixed_batch is not None:
        totals = np.full((len(k), 1), float(fixed_batch))
    else:
        lo = np.maximum(app.init_batch_size, app.min_local_bsz * k)
        hi = np.full_like(lo, float(app.max_batch_size))
        lo = np.minimum(lo, hi)
        frac = np.linspace(0.0, 1.0, N_BATCH_CANDIDATES)
        totals = np.exp(np.log(lo)[:, None] + (np.log(hi) - np.log(lo))[:, None] * frac[None, :])
    kk = np.broadcast_to(k[:, None], totals.shape)
    nn = np.broadcast_to(n[:, None], totals.shape)
    m, s = split_batch(app, kk, totals, accumulation)
    if stats is not None:
        st = (np.full(totals.shape, stats[0]), np.full(totals.shape, stats[1]))
    else:
        st = None
    goodput, rate = evaluate(app, nn, kk, m, s, epoch=epoch, stats=st)
    if fixed_batch is None:
        feasible = (m >= app.min_local_bsz) & (m <= app.max_local_bsz)
    else:
        feasible = m >= 1
    goodput = np.where(feasible, goodput, 0.0)
    rate = np.where(feasible, rate, 0.0)
    best = np.argmax(goodput, axis=1)
    rows = np.arange(len(k))
    mb, sb = m[rows, best], s[rows, best]
    return BatchChoice(
        goodput=goodput[rows, best],
        rate=rate[rows, best],
        local_bsz=mb,
        accum_steps=sb,
        total_batch=k * mb * (sb + 1),
    )
