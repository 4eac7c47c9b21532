"""The online inference-demand forecast (deepboot_env.forecast) and the ``outlook`` observation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from deepboot_env.config import EnvConfig, EnvConfigError
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.observation import OUTLOOK_FEATURES
from deepboot_env.forecast import PeriodicForecaster
from traces.generate import generate_workload


def _wave(t: np.ndarray, period_h: float, phase_h: float = 1.0) -> np.ndarray:
    return 0.5 + 0.3 * np.sin(2 * math.pi * (t - phase_h * 3600) / (period_h * 3600))


@pytest.mark.parametrize("period_h", [6.0, 9.5, 24.0])
def test_a_periodic_demand_is_learnt_from_its_past(period_h) -> None:
    f = PeriodicForecaster()
    times = np.arange(0, 1.2 * period_h * 3600, 60.0)
    for t, d in zip(times, _wave(times, period_h), strict=True):
        f.observe(float(t), float(d))
    assert f.period_h() == pytest.approx(period_h, abs=0.5)
    ahead = times[-1] + np.array([0.5, 1, 2, 4]) * 3600
    np.testing.assert_allclose(f.predict(ahead), _wave(ahead, period_h), atol=0.03)
    assert f.coverage() == pytest.approx(1.0)


def test_before_an_hour_the_forecast_is_the_mean_seen() -> None:
    f = PeriodicForecaster()
    assert f.period_h() is None and f.coverage() == 0.0
    f.observe(0.0, 0.4)
    assert f.predict(np.array([3600.0]))[0] == pytest.approx(0.4)  # nothing closed: the last value
    for t in range(60, 1800, 60):
        f.observe(float(t), 0.4 if t < 600 else 0.8)
    assert f.closed_bins == 2 and f.period_h() is None
    assert f.predict(np.array([7200.0]))[0] == pytest.approx(0.6)  # mean of the two closed bins


def test_reset_forgets_and_bad_arguments_are_refused() -> None:
    f = PeriodicForecaster()
    for t in range(0, 4 * 3600, 60):
        f.observe(float(t), 1.0)
    f.reset()
    assert f.closed_bins == 0 and f.period_h() is None
    with pytest.raises(ValueError, match="bin_s > 0"):
        PeriodicForecaster(bin_s=0)


def _outlook_env(workload, **options):
    return DeepBootEnv(workload, outlook=True, max_jobs=8, **options)


@pytest.fixture(scope="module")
def workload():
    return generate_workload("fc", 3, train={"num_jobs": 12}, inference={"horizon_s": 8 * 3600.0, "mean_gpus": 6.0})


def _run(env, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(decision times, outlooks) of ``steps`` decisions giving every job its largest choice."""
    obs, _ = env.reset(seed=seed)
    times, seen = [env.state.time], [obs["outlook"]]
    for _ in range(steps):
        masks = np.split(env.action_masks(), np.cumsum(env.action_space.nvec)[:-1])
        obs, _, terminated, truncated, _ = env.step(np.array([int(np.flatnonzero(m)[-1]) for m in masks]))
        if terminated or truncated:
            break
        times.append(env.state.time)
        seen.append(obs["outlook"])
    return np.array(times), np.stack(seen)


def test_the_outlook_is_bounded_and_never_reads_the_future(workload) -> None:
    env = _outlook_env(workload)
    assert env.observation_space["outlook"].shape == (len(OUTLOOK_FEATURES),)
    times, stacked = _run(env, 200)
    assert stacked.dtype == np.float32 and (stacked >= 0).all() and (stacked <= 1).all()
    assert stacked[:, 0].max() > 0  # inference demand is seen
    assert stacked[-1, OUTLOOK_FEATURES.index("forecast_coverage")] > 0  # a harmonic was fitted
    # the same workload with every inference request after 2 h removed: identical outlook until then
    cut = 2 * 3600.0
    early = dataclasses.replace(workload, requests=tuple(r for r in workload.requests if r.arrival < cut))
    other_times, other = _run(_outlook_env(early), 200)
    before = int(np.searchsorted(times, cut))
    assert before > 30 and np.array_equal(other_times[:before], times[:before])
    np.testing.assert_array_equal(other[:before], stacked[:before])
    assert not np.array_equal(other[before : before + 60], stacked[before : before + 60])


def test_outlook_is_an_option_and_off_by_default(workload) -> None:
    assert "outlook" not in DeepBootEnv(workload, max_jobs=8).observation_space.spaces
    with pytest.raises(EnvConfigError, match="outlook must be true or false"):
        EnvConfig.from_options(outlook="yes")


def test_the_agent_adapter_sees_the_env_outlook(workload, tmp_path) -> None:
    """A model trained with the outlook: saved, loaded safely, and fed by ``ppo:<path>`` exactly
    the observations the env gave it (the same forecaster state, decision by decision)."""
    from agents.saved.checkpoint import load_checkpoint
    from agents.saved.policy_adapter import AgentPolicy
    from agents.trainers.ppo import build_model, make_vec_env_for

    vec = make_vec_env_for(workload, 1, 0, {"max_jobs": 8, "outlook": True})
    model = build_model("ppo", vec, hyperparams={"policy": "SetPolicy", "policy_kwargs": {"embed_dim": 16}})
    model.save(tmp_path / "m.zip")
    loaded = load_checkpoint(tmp_path / "m.zip")
    assert "outlook" in loaded.observation_space.spaces
    agent = AgentPolicy(loaded)
    seen: list[np.ndarray] = []
    most_likely = agent.most_likely  # what the model is given (its deterministic action)
    agent.most_likely = lambda obs, mask: (seen.append(obs["outlook"].copy()), most_likely(obs, mask))[1]  # type: ignore[method-assign]
    env = _outlook_env(workload)
    obs, _ = env.reset(seed=0)
    agent.reset(0)
    expected = []
    for _ in range(120):
        expected.append(obs["outlook"])
        action, _ = agent.predict(env.state)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    np.testing.assert_array_equal(np.stack(seen), np.stack(expected))
