"""Restart-cost models: what a change of a training job's GPUs costs.

A change produces a short *plan* of phases the job goes through before it trains at the rate of
its new placement: each phase lasts some seconds and trains at the rate of a given number of
replicas (0 = stalled). Losing every GPU is free (the job is parked); a change to a non-empty
placement after the first start counts as one restart.

Models (``--restart``):

``full``
    Every change stalls the job for its application's full start-up delay
    (:data:`~deepboot_env.sim.apps.FULL_RESTART_DELAY_S`, 18-103 s).
``afe``
    DeepBoot's auto-fast-elastic rule (docs/restarts.md §4), with r_o / r_n the old / new GPU
    counts: first start (nothing held) -> full delay; scale-in -> fast delay NEXT; scale-out ->
    NEXT + floor((FULL - NEXT) * (r_n - r_o) / r_n); same count on other nodes -> full delay.
``pollux``
    The Pollux simulator's rule (docs/restarts.md §6): every change to a non-empty placement
    stalls the job for a flat 30 s, whatever the application. Used to reproduce Pollux's
    reference results for Pollux, Tiresias and Optimus.
``stopfree``
    EDL-style stop-free scaling. Workers that keep their GPU (per node, min of old and new) go on
    training while joiners start: for ``FULL`` seconds the job trains at the rate of the kept
    workers, then pauses ``NEXT`` seconds to synchronise the joiners. Scale-in (no joiners) only
    pays the ``NEXT`` synchronisation pause. With no kept worker it is a full start. The constants
    are the same measured per-application start-up (FULL) and fast-rescale (NEXT) delays as AFE,
    so the three models differ only in who waits, not in how long a worker takes to start.

A new change replaces whatever remains of an earlier plan (DeepBoot resets the countdown rather than
adding to it; docs/restarts.md §7).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from deepboot_env.sim.apps import AppProfile
from deepboot_env.sim.choices import validate_choice

RESTART_MODELS: tuple[str, ...] = ("full", "afe", "stopfree", "pollux")

POLLUX_RESTART_DELAY_S = 30.0
"""Flat restart delay of the Pollux simulator."""


class Phase(NamedTuple):
    """A stretch of time after a change (an immutable tuple: the simulator builds one at every
    advance that ends inside a restart stall, several times faster than a frozen dataclass).

    Attributes:
        seconds: duration.
        replicas: replicas that train during it (0 = stalled).
        multi_node: whether those replicas span more than one node.
        counts: GPUs per node of those replicas, in node order (only for a phase that trains;
            the measured truth reads the placement shape from it, docs/goodput.md §9).
        end: when the phase ends, once a job's advance has cut it (None: ``seconds`` after it
            starts). A cut phase keeps the end it had: its ``seconds`` left, added back to the
            time of the cut, may round to a neighbour of that end (the cut times are event
            times, fractions of a second), and the stretch after the phase, and the job's
            completion, would move with it.
    """

    seconds: float
    replicas: int
    multi_node: bool
    counts: tuple[int, ...] = ()
    end: float | None = None


@dataclass(frozen=True)
class RestartPlan:
    """Outcome of one change of placement.

    Attributes:
        phases: what happens before the new placement trains at full rate.
        counts_as_restart: whether ``num_restarts`` increments.
    """

    phases: tuple[Phase, ...]
    counts_as_restart: bool

    @property
    def stall_seconds(self) -> float:
        """Seconds with no progress at all."""
        return sum(p.seconds for p in self.phases if p.replicas == 0)


PARKED = RestartPlan((), False)
"""The plan of a change to no GPU at all: free, and not a restart."""


def validate_model(model: str) -> str:
    """Return ``model`` if known, else raise ``ValueError`` listing the choices."""
    return validate_choice("restart model", model, RESTART_MODELS)


_PLANS: dict[tuple[str, str, int, int, bool], RestartPlan] = {}
"""Plans that depend only on the GPU counts (every model but ``stopfree`` after the first start),
by (model, app, old count, new count, has_started); plans are immutable, so they are shared."""


def plan_change(
    model: str,
    app: AppProfile,
    old: np.ndarray,
    new: np.ndarray,
    has_started: bool,
    *,
    replicas: tuple[int, int] | None = None,
) -> RestartPlan:
    """Plan the cost of moving a job from placement ``old`` to ``new`` (GPUs per node).

    Args:
        model: ``full``, ``afe``, ``stopfree`` or ``pollux``.
        app: the job's application (delays).
        old: GPUs per node before the change.
        new: GPUs per node after the change.
        has_started: whether the job ever held GPUs before (restarts count only after that).
        replicas: ``(old.sum(), new.sum())`` when the caller knows them already.
    """
    r_old, r_new = (int(old.sum()), int(new.sum())) if replicas is None else replicas
    if r_new == 0:
        return PARKED
    if r_old > 0 and model not in ("full", "afe", "pollux"):
        return _plan_by_placement(app, old, new, r_new, has_started)
    key = (model, app.name, r_old, r_new, has_started)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _plan_by_counts(model, app, r_old, r_new, has_started)
    return plan


def _plan_by_counts(model: str, app: AppProfile, r_old: int, r_new: int, counts: bool) -> RestartPlan:
    full, fast = app.full_restart_delay, app.fast_restart_delay
    if model == "pollux":
        return RestartPlan((Phase(POLLUX_RESTART_DELAY_S, 0, False),), counts)
    if r_old == 0 or model == "full":
        return RestartPlan((Phase(full, 0, False),), counts)
    # afe
    if r_new < r_old:
        delay = fast
    elif r_new > r_old:
        delay = fast + math.floor((full - fast) * (r_new - r_old) / r_new)
    else:
        delay = full
    return RestartPlan((Phase(delay, 0, False),), counts)


def _plan_by_placement(app: AppProfile, old: np.ndarray, new: np.ndarray, r_new: int, counts: bool) -> RestartPlan:
    """``stopfree`` after the first start: who keeps a GPU matters."""
    full, fast = app.full_restart_delay, app.fast_restart_delay
    kept_per_node = np.minimum(old, new)
    kept = int(kept_per_node.sum())
    if kept == 0:
        return RestartPlan((Phase(full, 0, False),), counts)
    if kept == r_new:
        return RestartPlan((Phase(fast, 0, False),), counts)
    kept_multi = int(np.count_nonzero(kept_per_node)) > 1
    kept_counts = tuple(kept_per_node.tolist())
    return RestartPlan((Phase(full, kept, kept_multi, kept_counts), Phase(fast, 0, False)), counts)
