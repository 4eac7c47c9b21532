"""Simulation settings: :class:`SimConfig` (also importable from :mod:`deepboot_env.sim.simulator`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepboot_env.sim.aryl_mode import validate_placement
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.interference import InterferenceModel, as_model
from deepboot_env.sim.jobs import validate_cap_growth
from deepboot_env.sim.measured import validate_trace_set, validate_truth
from deepboot_env.sim.rates import validate_batch_stats
from deepboot_env.sim.restart import validate_model

MIN_INTERVAL_S = 1.0
"""The shortest ``interval`` between scheduling boundaries: a shorter one makes an episode's
per-boundary records (30 days / interval rows) exhaust memory (docs/usage.md §7.1)."""


@dataclass(frozen=True)
class SimConfig:
    """Simulation settings.

    Attributes:
        cluster: cluster shape.
        restart: restart-cost model: ``full``, ``afe``, ``stopfree`` or ``pollux`` (flat 30 s).
        protect_scale: P, the scale of the pod protect time (1 = 30..120 s).
        interval: seconds between scheduling boundaries.
        max_time: the episode is cut (``truncated``) at this simulated time (s).
        interference: co-location interference between training jobs: None (off, the default),
            a number F (Pollux's flat rule: distributed jobs sharing a node run at 1 - F) or an
            :class:`~deepboot_env.sim.interference.InterferenceModel`; stored normalised (a model
            or None).
        truth: what a training job progresses at: ``fitted`` (the calibrated model, the default)
            or ``measured`` (the step times measured for its placement shape, as in the
            originals; docs/goodput.md §9). Schedulers see the fitted model either way.
        trace_set: the placement traces of the measured truth: ``pollux`` (the Pollux
            artifact's) or ``deepboot`` (DeepBoot's copy, with shapes shifted by 4 GPUs per node
            added); unused with ``truth="fitted"``.
        batch_stats: the gradient statistics an adaptive job's batch choice reads: ``m0`` (the
            epoch's statistics at the smallest traced batch, the default) or ``at_batch`` (each
            candidate's own, a stationary form of the originals' rule); docs/goodput.md §9.7.
        cap_growth: when the exploration cap (twice the most GPUs a job has trained with) grows:
            ``allocated`` (when the allocation is made, the default) or ``trained`` (once the job
            has trained at that size, after its restart stall, as in the originals);
            docs/goodput.md §9.7.
        inference_placement: where cold inference requests go and how they take GPUs back:
            ``deepboot`` (ATS-I on any inference node, GPU by GPU; the default) or ``aryl``
            (DeepBoot's Aryl mode: the inference half only, whole servers lent and reclaimed,
            training stripped from nodes hosting pods; :mod:`deepboot_env.sim.aryl_mode`).
    """

    cluster: ClusterConfig = ClusterConfig()
    restart: str = "afe"
    protect_scale: float = 1.0
    interval: float = 60.0
    max_time: float = 30 * 86400.0
    interference: InterferenceModel | float | None = None
    truth: str = "fitted"
    trace_set: str = "pollux"
    batch_stats: str = "m0"
    cap_growth: str = "allocated"
    inference_placement: str = "deepboot"

    def __post_init__(self) -> None:
        validate_model(self.restart)
        validate_placement(self.inference_placement)
        validate_truth(self.truth)
        validate_trace_set(self.trace_set)
        validate_batch_stats(self.batch_stats)
        validate_cap_growth(self.cap_growth)
        object.__setattr__(self, "interference", as_model(self.interference))
        if not (math.isfinite(self.protect_scale) and self.protect_scale > 0):
            raise ValueError(f"protect_scale must be a finite number > 0, got {self.protect_scale}")
        if not (math.isfinite(self.interval) and self.interval > 0):
            raise ValueError(f"interval must be a finite number > 0, got {self.interval}")
        if self.interval < MIN_INTERVAL_S:
            raise ValueError(f"interval must be >= {MIN_INTERVAL_S:g} s (the limit), got {self.interval:g}")
        if not (math.isfinite(self.max_time) and self.max_time > 0):
            raise ValueError(f"max_time must be a finite number > 0 (s), got {self.max_time}")
