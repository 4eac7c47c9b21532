"""Environment versions (issue 19 item 6): ``DeepBoot-v0`` keeps the fitted dynamics of the shipped
checkpoint, ``DeepBoot-v1`` advances jobs at the measured step times with the originals'
exploration cap; ``dynamics`` selects either in every front end (env, CLI, training options)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from builders import masked_random_action

import deepboot_env  # noqa: F401  (registers the ids)
from deepboot_env.config import DYNAMICS, EnvConfig, EnvConfigError, dynamics_notes, sim_config
from deepboot_harness.cli import main


def _make(env_id: str, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # gymnasium: "v0 is out of date"
        return gym.make(env_id, workload="test/test-01", **options).unwrapped


def test_both_versions_are_registered_with_their_dynamics() -> None:
    v0, v1 = _make("DeepBoot-v0").config.sim, _make("DeepBoot-v1").config.sim
    assert (v0.truth, v0.batch_stats, v0.cap_growth) == ("fitted", "m0", "allocated")
    assert (v1.truth, v1.batch_stats, v1.cap_growth) == ("measured", "m0", "trained")
    assert DYNAMICS["v1"] == {"truth": "measured", "batch_stats": "m0", "cap_growth": "trained"}


def test_explicit_options_override_the_version() -> None:
    sim = _make("DeepBoot-v1", truth="fitted", trace_set="deepboot").config.sim
    assert (sim.truth, sim.trace_set, sim.cap_growth) == ("fitted", "deepboot", "trained")


def _rollout(env, steps: int = 150) -> list[float]:
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    rewards = []
    for _ in range(steps):
        _, reward, terminated, truncated, _ = env.step(masked_random_action(env, rng))
        rewards.append(float(reward))
        if terminated or truncated:
            break
    return rewards


def test_the_versions_differ_and_each_is_deterministic() -> None:
    v0, v1 = _rollout(_make("DeepBoot-v0")), _rollout(_make("DeepBoot-v1"))
    assert v1 != v0
    assert _rollout(_make("DeepBoot-v1")) == v1


def test_v1_is_the_default_of_every_front_end() -> None:
    assert sim_config() == sim_config(dynamics="v1") != sim_config(dynamics="v0")
    assert EnvConfig.from_options().sim == EnvConfig.from_options(dynamics="v1").sim


def test_unknown_dynamics_is_a_one_line_error(capsys) -> None:
    with pytest.raises(EnvConfigError, match="unknown dynamics 'v9'; expected one of v0, v1"):
        EnvConfig.from_options(dynamics="v9")
    with pytest.raises(SystemExit):
        main(["simulate", "--dynamics", "v9", "--quiet"])
    assert "invalid choice" in capsys.readouterr().err


def test_cli_dynamics_v1_is_the_default_and_equals_its_explicit_options(tmp_path: Path) -> None:
    runs = {
        "default": [],
        "preset": ["--dynamics", "v1"],
        "explicit": ["--dynamics", "v0", "--truth", "measured", "--cap-growth", "trained"],
        "v0": ["--dynamics", "v0"],
    }
    out, named = {}, {}
    for name, flags in runs.items():
        path = tmp_path / f"{name}.json"
        assert main(["simulate", "--policy", "ats", "--quiet", "--json", str(path), *flags]) == 0
        doc = json.loads(path.read_text())
        out[name], named[name] = doc["jcts"], doc["dynamics"]
    assert out["default"] == out["preset"] == out["explicit"] != out["v0"]
    assert named == {"default": "v1", "preset": "v1", "explicit": "v1", "v0": "v0"}  # the JSON names its world


def test_runs_are_labelled_with_the_dynamics_options_off_their_defaults() -> None:
    assert dynamics_notes(sim_config(dynamics="v0")) == {}  # notes are what differs from v0
    assert dynamics_notes(sim_config(dynamics="v1", trace_set="deepboot")) == {
        "truth": "measured (deepboot traces)",
        "cap_growth": "trained",
    }
    notes = dynamics_notes(sim_config(dynamics="v0", batch_stats="at_batch", inference_placement="aryl"))
    assert notes == {"batch_stats": "at_batch", "inference_placement": "aryl"}
