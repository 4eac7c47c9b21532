"""Lower bounds on the mean training JCT that any policy can reach on a scenario (docs/bounds.md).

:func:`jct_bounds` computes, for a workload on a simulation setting, every bound of docs/bounds.md
and their maximum, the tightest:

* ``alone`` (§2): each job alone from its earliest start at its fastest rate at every epoch;
* ``pooled`` (§4): SRPT on one machine as fast as every GPU training could hold, with each job's
  fewest GPU-seconds (:mod:`~deepboot_env.sim.bounds.pooled`);
* ``pooled_speed`` (§4.2): the most jobs any schedule can have completed by each time, with the
  GPU-seconds a job needs to complete that soon (its speedup is concave, so finishing sooner
  costs more GPU-seconds);
* ``lp`` (§5, on request: it costs seconds to minutes): the time-indexed linear program with
  concave per-job speedups (:mod:`~deepboot_env.sim.bounds.lp`).

Each bound holds for every policy of the project: adaptive ones (which choose batch sizes and are
subject to the exploration cap) and fixed-batch ones (which keep each job's submitted batch);
:func:`jct_bounds` computes a bound for each kind and keeps the smaller. The capacity comes from
the inference trace in hindsight (:mod:`~deepboot_env.sim.bounds.capacity`), valid for every policy
whose reclaim hook gives a lent GPU back whenever one exists, as every built-in policy's does.
"""

from __future__ import annotations

import time as wallclock
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from deepboot_env.sim.apps import AppProfile, default_profiles
from deepboot_env.sim.bounds.capacity import StepCurve, training_capacity
from deepboot_env.sim.bounds.envelope import JobCeiling, job_ceiling
from deepboot_env.sim.bounds.lp import LpResult, lp_bound
from deepboot_env.sim.bounds.pooled import pooled_bound, srpt_completions
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.workload import Workload

__all__ = ["BOUND_NAMES", "JctBounds", "jct_bounds", "training_capacity"]

BOUND_NAMES: tuple[str, ...] = ("alone", "pooled", "pooled_speed", "lp")
"""The bounds of :class:`JctBounds`, weakest first (``lp`` only when computed)."""

COUNT_STEP_S = 60.0
"""Grid of the speed-dependent count (§4.2): finer grids are tighter by a few seconds."""


@dataclass(frozen=True)
class JctBounds:
    """Lower bounds on the mean training JCT (s) of every policy on one scenario.

    Attributes:
        alone: each job alone at its fastest from its earliest start.
        pooled: SRPT on the pooled capacity (docs/bounds.md §4).
        pooled_speed: the pooled count with speed-dependent GPU-seconds (§4.2).
        lp: the time-indexed linear program (§5), or None if not computed.
        lp_result: the program's size and solve time (the adaptive policies' program), or None.
        cpu_seconds: CPU seconds spent on all of them.
    """

    alone: float
    pooled: float
    pooled_speed: float
    lp: float | None
    lp_result: LpResult | None
    cpu_seconds: float

    @property
    def best(self) -> float:
        """The tightest (largest) bound."""
        values = [self.alone, self.pooled, self.pooled_speed] + ([self.lp] if self.lp is not None else [])
        return max(values)

    def as_dict(self) -> dict[str, float | None]:
        """The bounds by name (:data:`BOUND_NAMES`) and ``best``."""
        return {
            "alone": self.alone,
            "pooled": self.pooled,
            "pooled_speed": self.pooled_speed,
            "lp": self.lp,
            "best": self.best,
        }


def ceilings(
    workload: Workload, config: SimConfig, adaptive: bool, profiles: Mapping[str, AppProfile] | None = None
) -> list[JobCeiling]:
    """Every training job's :class:`JobCeiling` under adaptive or fixed-batch policies."""
    apps = default_profiles() if profiles is None else profiles
    return [job_ceiling(spec, apps[spec.app], config, adaptive) for spec in workload.jobs]


def jct_bounds(
    workload: Workload,
    config: SimConfig,
    *,
    lp: bool = False,
    lp_slot: float = 600.0,
    profiles: Mapping[str, AppProfile] | None = None,
) -> JctBounds:
    """The lower bounds of docs/bounds.md on the mean training JCT of any policy (adaptive or
    fixed-batch) on ``workload`` under ``config`` (module docstring); ``lp`` adds the linear
    program with slots of ``lp_slot`` seconds (for the adaptive policies; the fixed-batch ones
    keep their combinatorial bounds).

    Raises:
        ValueError: for a workload without training jobs.
    """
    if not workload.jobs:
        raise ValueError(f"{workload.name}: no training jobs, so no JCT to bound")
    start = wallclock.process_time()
    capacity = training_capacity(workload.requests, config)
    per_kind = []
    lp_result = None
    for adaptive in (True, False):
        jobs = ceilings(workload, config, adaptive, profiles)
        values = _combinatorial(jobs, capacity)
        if lp and adaptive:
            lp_result = lp_bound(
                jobs, capacity, slot=lp_slot, interval=config.interval, cutoff=_cutoffs(jobs, capacity)
            )
            values.append(lp_result.bound)
        per_kind.append(values)
    adaptive_values, fixed_values = per_kind
    # a bound for both kinds of policies: per bound, the smaller of the two kinds' (the LP bounds the
    # adaptive kind only, so the fixed kind's tightest stands in for it)
    merged = [min(a, f) for a, f in zip(adaptive_values, fixed_values, strict=False)]
    lp_value = min(adaptive_values[3], max(fixed_values)) if lp else None
    return JctBounds(
        alone=merged[0],
        pooled=merged[1],
        pooled_speed=merged[2],
        lp=lp_value,
        lp_result=lp_result,
        cpu_seconds=wallclock.process_time() - start,
    )


def _combinatorial(jobs: list[JobCeiling], capacity: StepCurve) -> list[float]:
    """[alone, pooled, pooled_speed] of ``jobs`` on ``capacity``."""
    alone = sum(j.start + j.fastest - j.arrival for j in jobs) / len(jobs)
    return [alone, pooled_bound(jobs, capacity), pooled_bound(jobs, capacity, step=COUNT_STEP_S)]


def _cutoffs(jobs: list[JobCeiling], capacity: StepCurve) -> list[float]:
    """Per job, where the program's slots end (docs/bounds.md §5): twice as long after its
    start as SRPT on the pooled capacity takes to complete it, plus twice its alone time and an
    hour. Any cutoff keeps the bound valid; a late one only costs program size."""
    start = np.array([j.start for j in jobs])
    done = srpt_completions(start, np.array([j.gpu_seconds for j in jobs]), capacity)
    alone = np.array([j.alone_seconds for j in jobs])
    return (start + 2 * (done - start) + 2 * alone + 3600.0).tolist()
