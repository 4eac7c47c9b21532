"""The jitter control: ``ats-srpt`` (or ``ats-srpt-fcfs``) with a random per-job factor on its
knapsack weights.

Each job's weight is multiplied by ``exp(sigma * z_j)``, ``z_j`` one standard normal drawn when
the job is first seen and kept for its life (from a generator seeded by :meth:`reset`). It learns
nothing: a learned priority or score policy whose gain over its prior is no larger than this
control's has not shown that it learned anything (docs/results.md: persistent random jitter of
sigma 0.05 alone scores below ``ats-srpt`` on the families). ``jitter:<sigma>`` builds one over
``ats-srpt``; ``ats-srpt-fcfs-jitter`` is the control of the ``ats-srpt-fcfs`` prior and
``ats-srpt-fcfs-place-jitter`` that of ``ats-srpt-fcfs-place``, ``ats-srpt-fcfs-place-rr-jitter`` that
of ``ats-srpt-fcfs-place-rr``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from baselines.ats import AtsPolicy
from deepboot_env.policy import JobView

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

    Raises:
        ValueError: for a sigma that is not a finite number >= 0.
    """

    def __init__(
        self,
        sigma: float = DEFAULT_SIGMA,
        srpt_power: float = 0.25,
        label: str | None = None,
        arrival_tilt: float = 0.0,
        placement_aware: bool = False,
        reclaim_horizon: float = 0.0,
    ) -> None:
        if isinstance(sigma, bool) or not (isinstance(sigma, int | float) and 0.0 <= sigma < math.inf):
            raise ValueError(f"jitter sigma must be a finite number >= 0, got {sigma!r}")
        super().__init__(
            lend=True,
            srpt_power=srpt_power,
            label=label or f"jitter:{sigma:g}",
            arrival_tilt=arrival_tilt,
            placement_aware=placement_aware,
            reclaim_horizon=reclaim_horizon,
        )
        self.sigma = float(sigma)
        self._draws: dict[int, float] = {}
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int | None = None) -> None:
        """Forget the episode's draws; a new generator from ``seed`` (0 if None)."""
        self._draws = {}
        self._rng = np.random.default_rng(0 if seed is None else seed)

    def job_weights(self, jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray | None:
        """The prior's weights times ``exp(sigma * z_j)``, z_j drawn once per job."""
        weights = super().job_weights(jobs, fair, capacity)
        draws = self._draws
        for job in jobs:
            if job.id not in draws:
                draws[job.id] = float(self._rng.standard_normal())
        factors = np.exp([self.sigma * draws[job.id] for job in jobs])
        return factors if weights is None else weights * factors


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
