"""Benchmark: how well does the online demand forecast of the ``outlook`` observation predict?

    python benchmarks/bench_forecast.py [--seeds 3] [--families F ...]

Per family, on ``--seeds`` val seeds under DeepBoot-v1 with ATS: the inference demand
(:func:`deepboot_env.forecast.inference_demand`) is recorded at every decision; then the
:class:`~deepboot_env.forecast.PeriodicForecaster` replays it and, every 10 decisions, forecasts
1 h and 4 h ahead. The error is the mean absolute difference to the demand then (averaged over
+-5 decisions), against two non-clairvoyant references: persistence (demand now) and the mean
demand seen so far. Also: the fitted period against the family's true one, and the forecaster's
CPU microseconds per observation + forecast.
"""

from __future__ import annotations

import time

import numpy as np

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import EnvConfig
from deepboot_env.evaluation import run_episode
from deepboot_env.forecast import PeriodicForecaster, inference_demand
from deepboot_env.policy import BasePolicy, ClusterState, make_policy
from traces.families import FAMILIES, SPLIT_SEEDS, sample_scenario

HORIZONS_H = (1.0, 4.0)


class _Recorder(BasePolicy):
    """ATS, recording (time, inference demand) at every decision."""

    name = "ats-recorder"

    def __init__(self) -> None:
        self.inner = make_policy("ats")
        self.series: list[tuple[float, float]] = []

    def reset(self, seed: int | None = None) -> None:
        self.inner.reset(seed)
        self.series = []

    def decide(self, state: ClusterState):  # type: ignore[override]
        self.series.append((state.time, inference_demand(state)))
        return self.inner.decide(state)


def _errors(times: np.ndarray, demand: np.ndarray) -> tuple[dict[str, list[float]], float, PeriodicForecaster]:
    """Absolute errors per (method, horizon) and CPU seconds per observe + predict."""
    forecaster = PeriodicForecaster()
    errors: dict[str, list[float]] = {f"{m} {h:g}h": [] for h in HORIZONS_H for m in ("forecast", "persist", "mean")}
    cpu = 0.0
    for i, (t, d) in enumerate(zip(times, demand, strict=True)):
        start = time.process_time()
        forecaster.observe(float(t), float(d))
        ahead = forecaster.predict(t + np.asarray(HORIZONS_H) * 3600.0)
        cpu += time.process_time() - start
        if i % 10:
            continue
        for h, guess in zip(HORIZONS_H, ahead, strict=True):
            j = int(np.searchsorted(times, t + h * 3600.0))
            if j >= len(times):
                continue
            target = float(demand[max(j - 5, 0) : j + 5].mean())
            errors[f"forecast {h:g}h"].append(abs(guess - target))
            errors[f"persist {h:g}h"].append(abs(d - target))
            errors[f"mean {h:g}h"].append(abs(float(demand[: i + 1].mean()) - target))
    return errors, cpu / len(times), forecaster


def main(argv: list[str] | None = None) -> None:
    """Print the table (see the module docstring)."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="val seeds per family (default 3)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), help="families (default: all)")
    args = parser.parse_args(argv)
    columns = [f"{m} {h:g}h" for h in HORIZONS_H for m in ("forecast", "persist", "mean")]
    print(f"{'family':<16} " + " ".join(f"{c:>12}" for c in columns) + f" {'periods (true/fit)':>24} {'us/obs':>7}")
    sim = EnvConfig.from_options(dynamics="v1").sim
    for family in args.families:
        pooled: dict[str, list[float]] = {c: [] for c in columns}
        periods, costs = [], []
        for seed in SPLIT_SEEDS["val"][: args.seeds]:
            scenario = sample_scenario(family, seed)
            recorder = _Recorder()
            run_episode(recorder, scenario.workload, scenario.configure(sim))
            series = np.asarray(recorder.series)
            errors, cpu, forecaster = _errors(series[:, 0], series[:, 1])
            for key, values in errors.items():
                pooled[key] += values
            fitted = forecaster.period_h()
            periods.append(f"{dict(scenario.params)['period_hours']:.0f}/{fitted or 0:.0f}")
            costs.append(cpu * 1e6)
        row = " ".join(f"{np.mean(pooled[c]):>12.3f}" for c in columns)
        print(f"{family:<16} {row} {' '.join(periods):>24} {np.mean(costs):>7.0f}")


if __name__ == "__main__":
    main()
