"""A non-clairvoyant forecast of inference demand, learnt online from what a scheduler has seen.

Inference load in this world is periodic (day/night, or shorter periods in some workload
families) but the period, phase and amplitude differ between scenarios, and a scheduler must not
read the trace's future. :class:`PeriodicForecaster` fits, from the demand observed so far in the
episode, one harmonic ``a + b sin(2 pi t / P) + c cos(2 pi t / P)`` for every candidate period
``P`` (4-24 h in half-hour steps by default, :data:`CANDIDATE_PERIODS_H`) by ridge least squares,
keeps the period that fits best, and extrapolates it.

* Demand (:func:`inference_demand`) is the GPUs inference asks for now (running pods plus requests
  waiting for a GPU) over the inference cluster's GPUs (the whole pool in a shared pool); it can
  exceed 1 when requests queue.
* Observations are averaged over bins of ``bin_s`` (10 min), each capped at ``cap`` (1: the whole
  inference cluster; queues that build up beyond it in overloads and bursts are not periodic and
  would pull the fit); the fit uses closed bins only. Each closed bin updates the normal equations of every candidate
  (3 x 3 per period): the cost of an observation and of a forecast does not grow with the
  history's length.
* The forecast is the harmonic plus the last closed bin's residual decaying with time constant
  ``memory_s`` (1 h): near horizons follow what is happening now, far ones the profile.
* Until ``min_bins`` bins have closed (1 h) the forecast is the mean demand seen so far (the
  current demand at the very start). :meth:`PeriodicForecaster.coverage` tells how much of the
  chosen period the history spans (a fit over a small part of a period extrapolates poorly).
"""

from __future__ import annotations

import math

import numpy as np

from deepboot_env.sim.cluster import node_layout
from deepboot_env.sim.state import ClusterState

CANDIDATE_PERIODS_H: tuple[float, ...] = tuple(4.0 + 0.5 * i for i in range(41))
"""Periods (hours) the forecaster tries: 4 to 24 h in half-hour steps."""


def inference_demand(state: ClusterState) -> float:
    """GPUs inference asks for at ``state`` (running pods + waiting requests) over the inference
    cluster's GPUs (all GPUs in a shared pool)."""
    infer = node_layout(state.node_kinds).inference
    capacity = len(infer) * state.gpus_per_node if infer else state.config.total_gpus
    running = state.node_counts[1]
    return (sum(running) + state.waiting_requests) / max(capacity, 1)


class PeriodicForecaster:
    """One harmonic of the best-fitting period, refitted as history accumulates (module docstring).

    Args:
        bin_s: seconds per history bin.
        periods_h: candidate periods in hours.
        ridge: ridge penalty on the harmonic's two coefficients, per closed bin.
        min_bins: closed bins before the harmonic is used.
        memory_s: time constant of the last residual's decay.
        cap: bins are capped at this demand before fitting.
    """

    def __init__(
        self,
        bin_s: float = 600.0,
        periods_h: tuple[float, ...] = CANDIDATE_PERIODS_H,
        ridge: float = 1e-3,
        min_bins: int = 6,
        memory_s: float = 3600.0,
        cap: float = 1.0,
    ) -> None:
        if bin_s <= 0 or not periods_h or min(periods_h) <= 0 or ridge < 0 or min_bins < 1 or memory_s <= 0:
            raise ValueError(
                "PeriodicForecaster needs bin_s > 0, positive periods, ridge >= 0, min_bins >= 1 and memory_s > 0"
            )
        self.bin_s = float(bin_s)
        self.periods_s = np.asarray(periods_h, dtype=float) * 3600.0
        self.omega = 2 * math.pi / self.periods_s
        self.ridge = float(ridge)
        self.min_bins = int(min_bins)
        self.memory_s = float(memory_s)
        self.cap = float(cap)
        self.reset()

    def reset(self) -> None:
        """Forget the history (a new episode)."""
        n = len(self.periods_s)
        self._xtx = np.zeros((n, 3, 3))
        self._xty = np.zeros((n, 3))
        self._yty = 0.0
        self._sum = 0.0
        self._bins = 0
        self._first_bin: int | None = None
        self._bin: int | None = None
        self._bin_sum = 0.0
        self._bin_count = 0
        self._last = 0.0
        self._last_bin = (0.0, 0.0)
        self._fit: tuple[int, np.ndarray] | None = None

    @property
    def closed_bins(self) -> int:
        """History bins closed so far."""
        return self._bins

    def observe(self, time: float, demand: float) -> None:
        """Record ``demand`` seen at ``time`` (seconds; non-decreasing within an episode)."""
        index = int(time // self.bin_s)
        if self._bin is None:
            self._bin, self._first_bin = index, index
        elif index != self._bin:
            self._close_bin()
            self._bin = index
        self._bin_sum += demand
        self._bin_count += 1
        self._last = float(demand)

    def _close_bin(self) -> None:
        assert self._bin is not None
        y = min(self._bin_sum / self._bin_count, self.cap)
        t = (self._bin + 0.5) * self.bin_s
        x = np.stack([np.ones_like(self.omega), np.sin(self.omega * t), np.cos(self.omega * t)], axis=1)
        self._xtx += x[:, :, None] * x[:, None, :]
        self._xty += x * y
        self._yty += y * y
        self._sum += y
        self._bins += 1
        self._last_bin = (t, y)
        self._bin_sum, self._bin_count = 0.0, 0
        self._fit = None

    def _best_fit(self) -> tuple[int, np.ndarray]:
        """(index of the best period, its coefficients), cached until the next bin closes."""
        if self._fit is None:
            penalty = np.diag([0.0, 1.0, 1.0]) * (self.ridge * self._bins)
            coef = np.linalg.solve(self._xtx + penalty + 1e-9 * np.eye(3), self._xty[:, :, None])[:, :, 0]
            fitted = np.einsum("pi,pij,pj->p", coef, self._xtx, coef)
            sse = self._yty - 2 * np.einsum("pi,pi->p", coef, self._xty) + fitted
            best = int(np.argmin(sse))
            self._fit = (best, coef[best])
        return self._fit

    def period_h(self) -> float | None:
        """The period (hours) of the current fit, or None before ``min_bins`` bins."""
        if self._bins < self.min_bins:
            return None
        return float(self.periods_s[self._best_fit()[0]] / 3600.0)

    def coverage(self) -> float:
        """History length over the fitted period, capped at 1 (0 before ``min_bins`` bins)."""
        if self._bins < self.min_bins:
            return 0.0
        return min(self._bins * self.bin_s / float(self.periods_s[self._best_fit()[0]]), 1.0)

    def predict(self, times: np.ndarray) -> np.ndarray:
        """Forecast demand at ``times`` (seconds), each at least 0."""
        times = np.asarray(times, dtype=float)
        if self._bins < self.min_bins:
            level = self._sum / self._bins if self._bins else self._last
            return np.full(times.shape, max(level, 0.0))
        best, (a, b, c) = self._best_fit()
        w = self.omega[best]
        t_last, y_last = self._last_bin
        residual = y_last - (a + b * math.sin(w * t_last) + c * math.cos(w * t_last))
        decay = np.exp(-np.maximum(times - t_last, 0.0) / self.memory_s)
        harmonic = a + b * np.sin(w * times) + c * np.cos(w * times) + residual * decay
        return np.maximum(harmonic, 0.0)
