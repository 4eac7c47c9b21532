"""Fitting the seven throughput parameters of one application (docs/goodput.md §6.2).

:func:`fit_throughput` fits (alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma) to
observed times: start [0.1, 0.01] x 3 + [1.001], bounds [1e-8, inf) x 6 and gamma in [1, 10],
the freezing rules (:func:`fit_start_and_bounds`), loss = RMS log error of the compute time + RMS
log error of the synchronising step time + 1e-3 (gamma - 1)^2 + 1e-2 ((beta_n / alpha_n)^2 +
(beta_r / alpha_r)^2) (:func:`fit_loss`), L-BFGS-B with an analytic gradient from the fixed
start, and the post-fit prior when no multi-node observation exists. With ``pin`` the plain fit
is followed by a refit under compute_time(m0) = t0, the single-GPU anchor of
:mod:`traces.calibrate`. The model's times are :func:`~deepboot_env.sim.goodput.compute_time`
and :func:`~deepboot_env.sim.goodput.sync_step_time`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.optimize

PARAM_NAMES: tuple[str, ...] = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")
"""Order of the seven throughput parameters."""

INITIAL_PARAMS: tuple[float, ...] = (0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.001)
"""Fixed starting point of the fit (docs/goodput.md §6.2)."""

LOWER_BOUNDS: tuple[float, ...] = (1e-8,) * 6 + (1.0,)
UPPER_BOUNDS: tuple[float, ...] = (math.inf,) * 6 + (10.0,)
FROZEN_NETWORK_VALUE = 1e-8
"""Value at which unobserved network parameters are frozen (their lower bound)."""

GAMMA_REG = 1e-3
RETROGRESSION_REG = 1e-2
PRIOR_INTER_NODE_FACTOR = 1.1
"""Post-fit prior: inter-node terms at least 10 % above intra-node ones when never multi-node."""


def fit_start_and_bounds(
    nodes: np.ndarray, replicas: np.ndarray, local_bsz: np.ndarray, t_acc_obs: np.ndarray
) -> tuple[np.ndarray, list[tuple[float, float | None]]]:
    """Initial point and L-BFGS-B bounds after the docs/goodput.md §6.2 freezing rules.

    A frozen parameter has lower = upper = its initial value.

    Returns:
        (x0, bounds) with ``None`` for an infinite upper bound.
    """
    x0 = np.array(INITIAL_PARAMS, dtype=float)
    lower = np.array(LOWER_BOUNDS, dtype=float)
    upper = np.array(UPPER_BOUNDS, dtype=float)

    def freeze(index: int, value: float) -> None:
        x0[index] = lower[index] = upper[index] = value

    if len(np.unique(local_bsz)) == 1:
        freeze(0, float(np.mean(t_acc_obs)) / 2.0)
    if not np.any(nodes > 1):
        freeze(2, FROZEN_NETWORK_VALUE)
        freeze(3, FROZEN_NETWORK_VALUE)
    if not np.any((nodes == 1) & (replicas > 1)):
        freeze(4, FROZEN_NETWORK_VALUE)
        freeze(5, FROZEN_NETWORK_VALUE)
    if not np.any(replicas > 2):
        freeze(3, FROZEN_NETWORK_VALUE)
        freeze(5, FROZEN_NETWORK_VALUE)
    bounds = [(float(lo), None if math.isinf(hi) else float(hi)) for lo, hi in zip(lower, upper, strict=True)]
    return x0, bounds


def _rms(err: np.ndarray, derr: np.ndarray) -> tuple[float, np.ndarray]:
    """RMS of ``err`` and its gradient given d err / d params (shape (7, n))."""
    rms = math.sqrt(float(np.mean(err**2)))
    if rms == 0.0:
        return 0.0, np.zeros(derr.shape[0])
    return rms, derr @ err / (len(err) * rms)


def fit_loss(
    params: np.ndarray,
    nodes: np.ndarray,
    replicas: np.ndarray,
    local_bsz: np.ndarray,
    log_acc_obs: np.ndarray,
    log_step_obs: np.ndarray,
) -> tuple[float, np.ndarray]:
    """The docs/goodput.md §6.2 loss and its analytic gradient with respect to the seven parameters.

    Loss = RMS(log T_acc error) + RMS(log T_sync_step error) + 1e-3 (gamma - 1)^2
    + 1e-2 ((beta_n / alpha_n)^2 + (beta_r / alpha_r)^2).
    """
    a_c, b_c, a_n, b_n, a_r, b_r, gamma = (float(v) for v in params)
    extra = np.maximum(replicas - 2.0, FROZEN_NETWORK_VALUE)
    inter = nodes > 1
    intra = ~inter & (replicas > 1)
    t_acc = a_c + b_c * local_bsz
    t_net = np.where(inter, a_n + b_n * extra, np.where(intra, a_r + b_r * extra, FROZEN_NETWORK_VALUE * (1.0 + extra)))
    log_acc, log_net = np.log(t_acc), np.log(t_net)
    log_s = np.logaddexp(gamma * log_acc, gamma * log_net)
    log_sync = log_s / gamma
    share_acc = np.exp(gamma * log_acc - log_s)  # A^g / S
    share_net = np.exp(gamma * log_net - log_s)  # N^g / S

    n = len(local_bsz)
    d_acc = np.zeros((7, n))  # d log T_acc / d params
    d_acc[0] = 1.0 / t_acc
    d_acc[1] = local_bsz / t_acc
    d_net = np.zeros((7, n))  # d log T_net / d params
    d_net[2] = np.where(inter, 1.0, 0.0) / t_net
    d_net[3] = np.where(inter, extra, 0.0) / t_net
    d_net[4] = np.where(intra, 1.0, 0.0) / t_net
    d_net[5] = np.where(intra, extra, 0.0) / t_net
    d_sync = share_acc * d_acc + share_net * d_net
    d_sync[6] = -log_s / gamma**2 + (share_acc * log_acc + share_net * log_net) / gamma

    rms_acc, g_acc = _rms(log_acc - log_acc_obs, d_acc)
    rms_sync, g_sync = _rms(log_sync - log_step_obs, d_sync)
    reg = GAMMA_REG * (gamma - 1.0) ** 2 + RETROGRESSION_REG * ((b_n / a_n) ** 2 + (b_r / a_r) ** 2)
    grad = g_acc + g_sync
    grad[6] += 2.0 * GAMMA_REG * (gamma - 1.0)
    grad[2] += -2.0 * RETROGRESSION_REG * b_n**2 / a_n**3
    grad[3] += 2.0 * RETROGRESSION_REG * b_n / a_n**2
    grad[4] += -2.0 * RETROGRESSION_REG * b_r**2 / a_r**3
    grad[5] += 2.0 * RETROGRESSION_REG * b_r / a_r**2
    return rms_acc + rms_sync + reg, grad


def _pinned_params(x: np.ndarray, pin: tuple[float, float]) -> np.ndarray:
    """Parameters with alpha_c derived from beta_c so that compute_time(pin[0]) == pin[1]."""
    params = np.array(x, dtype=float)
    params[0] = pin[1] - pin[0] * params[1]
    return params


def _pinned_loss(x: np.ndarray, pin: tuple[float, float], *args: np.ndarray) -> tuple[float, np.ndarray]:
    """:func:`fit_loss` over x = params with x[0] unused and alpha_c = t0 - m0 * beta_c."""
    loss, grad = fit_loss(_pinned_params(x, pin), *args)
    grad = grad.copy()
    grad[1] -= pin[0] * grad[0]
    grad[0] = 0.0
    return loss, grad


def _pinned_start(
    plain: np.ndarray, bounds: list[tuple[float, float | None]], pin: tuple[float, float]
) -> tuple[np.ndarray, list[tuple[float, float | None]]]:
    """Start and bounds of the pinned refit: the plain optimum projected onto the pin."""
    m0, t0 = pin
    hi = (t0 - LOWER_BOUNDS[0]) / m0
    if hi <= LOWER_BOUNDS[1]:
        raise ValueError(f"fit_throughput(): pin time {t0} too small for local batch {m0}")
    x0 = np.array(plain, dtype=float)
    x0[0] = 0.0
    x0[1] = min(max(x0[1], LOWER_BOUNDS[1]), hi)
    bounds = list(bounds)
    bounds[0] = (0.0, 0.0)
    bounds[1] = (LOWER_BOUNDS[1], hi)
    return x0, bounds


def fit_throughput(
    nodes: np.ndarray,
    replicas: np.ndarray,
    local_bsz: np.ndarray,
    t_acc_obs: np.ndarray,
    t_step_obs: np.ndarray,
    pin: tuple[float, float] | None = None,
) -> np.ndarray:
    """Fit the seven throughput parameters to observed times (docs/goodput.md §6.2).

    Args:
        nodes: nodes N per observation.
        replicas: GPUs K per observation.
        local_bsz: micro-batch m per observation.
        t_acc_obs: observed compute-only time (step_time - sync_time), seconds.
        t_step_obs: observed synchronising step time (step_time), seconds.
        pin: optional (m0, t0). ``None`` is the plain docs/goodput.md §6.2 procedure. Otherwise the plain fit
            is followed by a refit, started from its optimum, under the equality constraint
            compute_time(m0) = t0 (alpha_c = t0 - beta_c * m0; this supersedes the freezing
            rule of alpha_c). The single-GPU synchronising step at m0 then equals t0 (its
            network term is 1e-8). Used for the single-GPU anchor of the calibration.

    Returns:
        Array (alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma).

    Raises:
        ValueError: on empty or mismatched inputs or non-positive times.
    """
    arrays = [np.asarray(a, dtype=float).ravel() for a in (nodes, replicas, local_bsz, t_acc_obs, t_step_obs)]
    n, k, m, acc, step = arrays
    if len({len(a) for a in arrays}) != 1 or len(n) == 0:
        raise ValueError("fit_throughput(): inputs must be non-empty and of equal length")
    if np.any(acc <= 0) or np.any(step <= 0):
        raise ValueError("fit_throughput(): observed times must be positive")
    args = (n, k, m, np.log(acc), np.log(step))
    x0, bounds = fit_start_and_bounds(n, k, m, acc)
    result = scipy.optimize.minimize(fit_loss, x0, args=args, jac=True, method="L-BFGS-B", bounds=bounds)
    params = np.asarray(result.x, dtype=float)
    if pin is not None:
        pin = (float(pin[0]), float(pin[1]))
        x0, bounds = _pinned_start(params, bounds, pin)
        result = scipy.optimize.minimize(
            _pinned_loss, x0, args=(pin, *args), jac=True, method="L-BFGS-B", bounds=bounds
        )
        params = _pinned_params(result.x, pin)
    if not np.any(n > 1):
        params[2] = max(params[2], PRIOR_INTER_NODE_FACTOR * params[4])
        params[3] = max(params[3], PRIOR_INTER_NODE_FACTOR * params[5])
    return params
