"""``mpc``: model-predictive control over the expert policies, on a forecast future (docs/policies.md §16).

The deployable counterpart of the clairvoyant ``oracle-lookahead`` (§15): the same switching
(:class:`~baselines.lookahead.LookaheadSwitcher`: every ``every`` boundaries [5], each candidate
expert is played ``horizon_s`` [1,800 s] ahead on a fork of the simulator and the policy follows the
one whose future scores lowest, ``job_seconds + infer_weight * waiting seconds``), but the fork is
stripped of the future first (:meth:`Simulator.forget_future
<deepboot_env.sim.simulator.Simulator.forget_future>`) and given a forecast of it instead:

* **training jobs**: only the jobs already admitted; none arrives during the lookahead;
* **inference requests**: those that have arrived stay as they are; the future ones are a
  synthetic stream (:class:`ArrivalForecast`): Poisson arrivals, per interval of the horizon, at
  the rate a :class:`~deepboot_env.forecast.PeriodicForecaster` extrapolates from the arrivals
  seen so far (counted per 10-minute bin: one harmonic of the best period in 4-24 h plus the last
  bin's residual decaying over an hour), each a copy (instance, model, duration) of a request
  drawn uniformly from those that have arrived. The draw is seeded by the episode's seed and the
  time of the choice point: the same past gives the same stream.

What it still knows that a real scheduler might not, as the project's observation does
(docs/policies.md §1): each admitted job's progress and true remaining work, as the simulator has
them (the observation exposes the epoch fraction, epochs done over the application's epochs), and
its true speed on each placement (the rate tables every policy reads); the true durations of the
inference requests already running or waiting (the simulator fixed them when they arrived). The
candidate ``afs-lend`` reads ``JobView.remaining_work``, an oracle field, as it does on its own
(AFS-L assumes known lengths). Nothing of what arrives after now is read: the decisions before a
time T are the same for any two workloads that agree up to T (tested).

No hindsight mode (it would need the true future). Cost: per choice point, two forks, the forecast
(a few hundred requests) and ``horizon_s / interval`` decisions per candidate, like the oracle's
switching (measured in docs/policies.md §16, ``benchmarks/bench_mpc.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from baselines.lookahead import DEFAULT_SETTINGS, LookaheadSettings, LookaheadSwitcher, is_real
from deepboot_env.forecast import PeriodicForecaster
from deepboot_env.policy import BasePolicy
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.workload import InferenceRequestSpec

__all__ = ["DEFAULT_BIN_S", "ArrivalForecast", "MpcPolicy"]

DEFAULT_BIN_S = 600.0
"""Seconds per bin of the arrival history the rate is fitted on."""


class ArrivalForecast:
    """The inference arrival rate learnt online from the arrivals seen, and synthetic future
    requests drawn at that rate.

    Arrivals are counted per bin of ``bin_s`` seconds; each bin, once over, is fed to a
    :class:`~deepboot_env.forecast.PeriodicForecaster` as a rate (arrivals per second, not capped)
    at its middle. The forecaster fits closed bins only, so the last bin over enters the fit when
    the next one is fed: the forecast of "now" lags by one to two bins.

    Args:
        bin_s: seconds per history bin (> 0).
    """

    def __init__(self, bin_s: float = DEFAULT_BIN_S) -> None:
        if not (is_real(bin_s) and math.isfinite(bin_s) and bin_s > 0):
            raise ValueError(f"bin_s must be a finite number > 0, got {bin_s!r}")
        self.bin_s = float(bin_s)
        self.reset()

    def reset(self) -> None:
        """Forget the history (a new episode)."""
        self.rate = PeriodicForecaster(bin_s=self.bin_s, cap=math.inf)
        self.seen = 0
        """Requests of the past counted so far (the first ones of the workload)."""
        self._next_bin = 0
        """Index of the first bin not fed to the forecaster yet."""
        self._pending: dict[int, int] = {}
        """Arrivals counted in the bins not fed yet, by bin index."""

    def observe(self, requests: Sequence[InferenceRequestSpec], arrived: int, now: float) -> None:
        """Count the requests ``requests[seen:arrived]`` (arrived since the last call, at or
        before ``now``) and feed every bin over by ``now`` to the forecaster; O(new requests +
        bins over)."""
        new = np.fromiter((r.arrival for r in requests[self.seen : arrived]), dtype=float, count=arrived - self.seen)
        self.seen = arrived
        if len(new):
            bins, counts = np.unique((new // self.bin_s).astype(np.int64), return_counts=True)
            for b, c in zip(bins.tolist(), counts.tolist(), strict=True):
                self._pending[b] = self._pending.get(b, 0) + c
        current = int(now // self.bin_s)
        for b in range(self._next_bin, current):
            self.rate.observe((b + 0.5) * self.bin_s, self._pending.pop(b, 0) / self.bin_s)
        self._next_bin = max(self._next_bin, current)

    def synthesize(
        self,
        requests: Sequence[InferenceRequestSpec],
        arrived: int,
        start: float,
        end: float,
        step: float,
        rng: np.random.Generator,
    ) -> tuple[InferenceRequestSpec, ...]:
        """Synthetic requests arriving in ``[start, end)``, sorted: per ``step`` of it, a Poisson
        number at the forecast rate (at the step's middle), uniform in the step; each copies the
        instance, model and duration of one of ``requests[:arrived]`` drawn uniformly (none if
        nothing has arrived). Named ``forecast-<k>``."""
        if arrived <= 0 or not end > start:
            return ()
        edges = np.arange(start, end, step)
        widths = np.minimum(edges + step, end) - edges
        counts = rng.poisson(self.rate.predict(edges + widths / 2) * widths)
        total = int(counts.sum())
        if total == 0:
            return ()
        times = np.sort(np.repeat(edges, counts) + rng.random(total) * np.repeat(widths, counts))
        picks = rng.integers(0, arrived, size=total)
        out = []
        for k, (t, i) in enumerate(zip(times.tolist(), picks.tolist(), strict=True)):
            src = requests[i]
            out.append(InferenceRequestSpec(f"forecast-{k}", t, src.instance, src.app, src.duration))
        return tuple(out)


class MpcPolicy(LookaheadSwitcher):
    """Non-clairvoyant lookahead: follows, every ``every`` boundaries, the candidate expert whose
    simulated *forecast* future scores best (see the module docstring).

    Args:
        settings: the lookahead's candidates (each must decide from the state alone), choice
            points, horizon and score weight (:class:`~baselines.lookahead.LookaheadSettings`).
        bin_s: seconds per bin of the arrival history the forecast is fitted on (> 0).

    Attributes:
        choices: every choice point of the episode so far, in order.
        forecast: the arrival forecast of the episode.
        drawn: per choice point, the synthetic requests its future was given.
    """

    name = "mpc"

    def __init__(self, settings: LookaheadSettings = DEFAULT_SETTINGS, bin_s: float = DEFAULT_BIN_S) -> None:
        self.forecast = ArrivalForecast(bin_s)
        super().__init__(settings)
        for cand, live in zip(self.candidates, self._live, strict=True):
            if type(live).bind_simulator is not BasePolicy.bind_simulator:
                raise ValueError(
                    f"mpc candidate {cand.label!r} looks into the simulator (bind_simulator); candidates must decide "
                    "from the state alone"
                )

    def _start_episode(self) -> None:
        """Forget the episode's choices and its arrival history."""
        super()._start_episode()
        self.forecast.reset()
        self.drawn: list[int] = []

    def lookahead_root(self, sim: Simulator) -> Simulator:
        """A fork of ``sim`` holding only the past and the present, its future arrivals replaced
        by :meth:`forecast_requests` (``sim`` is not changed)."""
        root = sim.fork()
        future = self.forecast_requests(sim)
        root.forget_future(future)
        self.drawn.append(len(future))
        return root

    def forecast_requests(self, sim: Simulator) -> tuple[InferenceRequestSpec, ...]:
        """The synthetic inference requests of the horizon from ``sim``'s now, drawn from what has
        arrived so far only (:class:`ArrivalForecast`), with a generator seeded by the episode's
        seed (0 if None) and the time."""
        requests, arrived, now = sim.workload.requests, sim.requests_arrived, sim.now
        self.forecast.observe(requests, arrived, now)
        seed = 0 if self._seed is None else int(self._seed)
        rng = np.random.default_rng([seed % (1 << 63), int(round(now * 1000.0))])
        end = min(now + self.settings.horizon_s, sim.config.max_time)
        return self.forecast.synthesize(requests, arrived, now, end, sim.config.interval, rng)
