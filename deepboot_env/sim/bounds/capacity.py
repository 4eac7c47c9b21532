"""The most GPUs training can hold at each time, from the inference trace in hindsight.

Training may use every GPU of the cluster except those inference holds. What inference holds
depends on the policy (which pods it evicts by lending, which requests it makes wait by keeping
lent GPUs), so the capacity here subtracts only a lower bound on inference's holding that is valid
for *every* policy whose reclaim hook gives a lent GPU back whenever one exists (every built-in
policy: ATS-I, Aryl mode's server choice; docs/bounds.md §3 has the proof):

* a request needs one GPU from its start (never before its arrival) for at least its duration,
  so a request *nominally running* at t (arrival <= t < arrival + duration) is either running at
  t or still waiting;
* a request that has finished leaves its pod PROTECT (or RUNNING again for its own instance) for
  at least ``protect_time(0)`` seconds, and PROTECT pods are never pre-empted; so an instance
  with a request *nominally finished* within that time holds at least one GPU at t, unless the
  request still waits;
* a request waits only while every GPU inference may use is held by RUNNING or PROTECT pods.

Hence at every t inference holds at least ``min(I, sum over instances of max(running, recently
finished > 0))`` GPUs, I being the GPUs inference may use, and training at most the cluster's
GPUs minus that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepboot_env.sim.aryl_mode import aryl_inference_nodes
from deepboot_env.sim.cluster import NODE_TRAIN
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.inference import protect_time
from deepboot_env.sim.workload import InferenceRequestSpec


@dataclass(frozen=True)
class StepCurve:
    """A right-continuous step function of time: ``values[k]`` on ``[times[k], times[k + 1])``,
    ``values[-1]`` from ``times[-1]`` on, ``values[0]`` before ``times[0]`` as well.

    Attributes:
        times: ascending breakpoints (s), ``times[0]`` = 0.
        values: the value from each breakpoint on.
    """

    times: np.ndarray
    values: np.ndarray

    def at(self, t: np.ndarray | float) -> np.ndarray:
        """The value at each of ``t``."""
        idx = np.searchsorted(self.times, np.asarray(t, dtype=float), side="right") - 1
        return self.values[np.clip(idx, 0, len(self.values) - 1)]

    def integral(self, t0: np.ndarray | float, t1: np.ndarray | float) -> np.ndarray:
        """The integral over ``[t0, t1]`` (elementwise; ``t1 >= t0 >= 0``)."""
        return self._cumulative(np.asarray(t1, dtype=float)) - self._cumulative(np.asarray(t0, dtype=float))

    def _cumulative(self, t: np.ndarray) -> np.ndarray:
        """The integral over ``[0, t]``."""
        widths = np.diff(self.times)
        area = np.concatenate([[0.0], np.cumsum(widths * self.values[:-1])])
        idx = np.clip(np.searchsorted(self.times, t, side="right") - 1, 0, len(self.times) - 1)
        return area[idx] + (t - self.times[idx]) * self.values[idx]


def inference_gpus(config: SimConfig) -> tuple[int, int]:
    """(GPUs training alone may use, GPUs inference may also use) of ``config``'s cluster:
    the training nodes and the inference nodes of two clusters; nothing and every node in a
    shared pool; in Aryl mode, inference only on its half (:func:`aryl_inference_nodes`)."""
    cluster = config.cluster
    g = cluster.gpus_per_node
    if config.inference_placement == "aryl":
        shared = len(aryl_inference_nodes(cluster)) * g
    else:
        shared = int(np.count_nonzero(cluster.node_kinds() != NODE_TRAIN)) * g
    return cluster.total_gpus - shared, shared


def inference_floor(requests: Sequence[InferenceRequestSpec], protect_scale: float, limit: int) -> StepCurve:
    """The fewest GPUs inference holds at each time under any policy that never refuses a
    reclaim, capped at ``limit`` (the GPUs it may use): per app instance, the larger of its
    requests nominally running and one if a request of it nominally finished within the
    shortest protect time; summed over instances (module docstring)."""
    if not requests or limit <= 0:
        return StepCurve(np.array([0.0]), np.array([0.0]))
    protect = float(protect_time(0, protect_scale))
    arrival = np.array([r.arrival for r in requests], dtype=float)
    finish = arrival + np.array([r.duration for r in requests], dtype=float)
    names = [r.instance for r in requests]
    times = np.unique(np.concatenate([[0.0], arrival, finish, finish + protect]))
    held = np.zeros(len(times))
    for instance in sorted(set(names)):
        mine = np.array([name == instance for name in names])
        held += np.maximum(
            _open_count(arrival[mine], finish[mine], times),
            _open_count(finish[mine], finish[mine] + protect, times) > 0,
        )
    return StepCurve(times, np.minimum(held, float(limit)))


def _open_count(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """How many of the intervals ``[starts, ends)`` contain each of ``times``."""
    opened = np.searchsorted(np.sort(starts), times, side="right")
    closed = np.searchsorted(np.sort(ends), times, side="right")
    return (opened - closed).astype(float)


def training_capacity(requests: Sequence[InferenceRequestSpec], config: SimConfig) -> StepCurve:
    """The most GPUs training can hold at each time (module docstring): the cluster's GPUs less
    :func:`inference_floor`."""
    alone, shared = inference_gpus(config)
    floor = inference_floor(requests, config.protect_scale, shared)
    return StepCurve(floor.times, alone + shared - floor.values)
