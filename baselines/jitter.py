"""The jitter control: ``ats-srpt`` (or ``ats-srpt-fcfs``) with a random per-job factor on its
knapsack weights.

Each job's weight is multiplied by ``exp(sigma * z_j)``, ``z_j`` one standard normal drawn when
the job is first seen and kept for its life (from a generator seeded by :meth:`reset`). It learns
nothing: a learned priority or score policy whose gain over its prior is no larger than this
control's has not shown that it learned anything (docs/history.md#jitter: persistent random jitter of
sigma 0.05 alone scores below ``ats-srpt`` on the families). ``jitter:<sigma>`` builds one over
``ats-srpt``; ``ats-srpt-fcfs-jitter`` is the control of the ``ats-srpt-fcfs`` prior and
``ats-srpt-fcfs-place-jitter`` that of ``ats-srpt-fcfs-place``, ``ats-srpt-fcfs-place-rr-jitter`` that
of ``ats-srpt-fcfs-place-rr``, ``ats-srpt-fcfs-place-rr-warm-jitter`` that of
``ats-srpt-fcfs-place-rr-warm``.

A score model with a width table also reshapes each job's option values by width class
(:func:`baselines.ats.width_scored_options`). Its control, ``ats-srpt-fcfs-place-rr-warm-wjitter``,
draws with ``width_sigma`` > 0 one more normal per width class and job, held for the job's life,
and decodes them as that job's width log-multipliers: random scores of the size of the model's own
(``deepboot-score-v5``'s are 0.047 per job, centred, and 0.054 per width class, in log-weight RMS
over the families' first val seeds: ``python -m agents.saved.score_sizes``; docs/history.md#controls-v5).
``-wjitter-v6`` is the same at ``deepboot-score-v6``'s size: 0.13 per job and 0.14 per width class,
and ``wjitter:<sigma>,<width_sigma>`` is the same at any size (a new model's control, measured by
``python -m agents.saved.score_sizes MODEL``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from baselines.ats import AtsPolicy, check_finite_nonnegative
from baselines.ats_chain import RR, WARM
from deepboot_env.policy import WIDTH_CLASSES, Allocation, ClusterState, JobView

DEFAULT_SIGMA = 0.05
"""The jitter of ``ats-srpt-jitter`` (log-weight standard deviation)."""


class JitteredAtsPolicy(AtsPolicy):
    """``ats-srpt`` whose job weights carry a persistent random factor (module docstring).

    Args:
        sigma: the log-weight standard deviation (>= 0; 0 is ``ats-srpt``).
        srpt_power: the prior's SRPT power (``ats-srpt``: 0.25).
        label: the policy's name in results.
        arrival_tilt: the prior's arrival tilt (``ats-srpt-fcfs``: 0.15).
        placement_aware: the prior's valuation (``ats-srpt-fcfs-place``: True).
        reclaim_horizon: the prior's reclaim rule (``ats-srpt-fcfs-place-rr``: 300 s).
        keep_warm_at: the prior's keep-warm share (``ats-srpt-fcfs-place-rr-warm``: 0.9).
        width_sigma: the log-multiplier standard deviation of each width class's random score
            (>= 0; 0: the prior's own valuation).

    Raises:
        ValueError: for a sigma or width sigma that is not a finite number >= 0.
    """

    def __init__(
        self,
        sigma: float = DEFAULT_SIGMA,
        srpt_power: float = 0.25,
        label: str | None = None,
        arrival_tilt: float = 0.0,
        placement_aware: bool = False,
        reclaim_horizon: float = 0.0,
        keep_warm_at: float = 0.0,
        width_sigma: float = 0.0,
    ) -> None:
        check_finite_nonnegative(**{"jitter sigma": sigma, "width sigma": width_sigma})
        super().__init__(
            lend=True,
            srpt_power=srpt_power,
            label=label or f"jitter:{sigma:g}",
            arrival_tilt=arrival_tilt,
            placement_aware=placement_aware,
            reclaim_horizon=reclaim_horizon,
            keep_warm_at=keep_warm_at,
        )
        self.sigma = float(sigma)
        self.width_sigma = float(width_sigma)
        self._draws: dict[int, float] = {}
        self._width_draws: dict[int, tuple[float, ...]] = {}
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int | None = None) -> None:
        """Forget the episode's draws; a new generator from ``seed`` (0 if None)."""
        self._draws = {}
        self._width_draws = {}
        self._rng = np.random.default_rng(0 if seed is None else seed)

    def decide(self, state: ClusterState) -> Allocation:
        """The prior's decision under the jittered weights, and with ``width_sigma`` each job's
        width log-multipliers ``width_sigma * z``, drawn once per job."""
        if not self.width_sigma:
            return super().decide(state)
        draws = self._width_draws
        for job in state.jobs:
            if job.id not in draws:
                draws[job.id] = tuple(self.width_sigma * float(z) for z in self._rng.standard_normal(WIDTH_CLASSES))
        return self.decide_scored(state, {}, 1.0, draws)

    def job_weights(self, jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray | None:
        """The prior's weights times ``exp(sigma * z_j)``, z_j drawn once per job."""
        weights = super().job_weights(jobs, fair, capacity)
        draws = self._draws
        for job in jobs:
            if job.id not in draws:
                draws[job.id] = float(self._rng.standard_normal())
        factors = np.exp([self.sigma * draws[job.id] for job in jobs])
        return factors if weights is None else weights * factors


def width_jittered(sizes: str) -> JitteredAtsPolicy:
    """The ``wjitter:<sigma>,<width_sigma>`` prefix: the warm prior with random per-job scores of
    those sizes (log-weight, and each width class's log-multiplier), held for each job's life.

    Raises:
        ValueError: if ``sizes`` is not two numbers >= 0 separated by a comma.
    """
    parts = sizes.split(",")
    try:
        sigma, width_sigma = (float(part) for part in parts)
    except ValueError:
        raise ValueError(f"wjitter:<sigma>,<width_sigma> needs two numbers, got {sizes!r}") from None
    label = f"wjitter:{sigma:g},{width_sigma:g}"
    return JitteredAtsPolicy(sigma, label=label, width_sigma=width_sigma, **RR, **WARM)


def jittered(sigma: str) -> JitteredAtsPolicy:
    """The ``jitter:<sigma>`` prefix.

    Raises:
        ValueError: if ``sigma`` is not a number >= 0.
    """
    try:
        value = float(sigma)
    except ValueError:
        raise ValueError(f"jitter:<sigma> needs a number, got {sigma!r}") from None
    return JitteredAtsPolicy(value)
