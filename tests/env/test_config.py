"""EnvConfig: the one place the env's settings are defined, checked and defaulted; the codecs."""

from __future__ import annotations

import numpy as np
import pytest

from deepboot_env.config import EnvConfig, EnvConfigError, sim_config
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import CODECS, ResidualCodec, TargetCodec, make_codec, mode_of_nvec
from deepboot_env.sim.cluster import ClusterConfig
from traces.generate import generate_workload


@pytest.fixture(scope="module")
def tiny():
    return generate_workload("tiny", 2, train={"num_jobs": 6}, inference={"horizon_s": 3 * 3600.0, "mean_gpus": 3.0})


def test_defaults_and_flat_options_round_trip() -> None:
    cfg = EnvConfig.from_options()
    assert cfg == EnvConfig()
    assert cfg.sim.cluster == ClusterConfig.parse("8x4+8x4") and cfg.sim.restart == "afe" and cfg.sim.interval == 60.0
    cfg = EnvConfig.from_options(shared_pool="16x4", restart="full", interval=30, interference=0.25, max_jobs=8)
    assert cfg.sim.cluster.shared_pool and cfg.sim.cluster.num_nodes == 16
    assert cfg.sim.interval == 30.0 and cfg.sim.interference is not None and cfg.max_jobs == 8
    assert set(EnvConfig.defaults()) | {"cluster", "shared_pool", "restart", "protect_scale"} <= set(
        EnvConfig.option_names()
    )
    assert sim_config(cluster="2x4+1x4").cluster == ClusterConfig.parse("2x4+1x4")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_job": 3}, "unknown env option"),
        ({"max_jobs": 0}, "max_jobs"),
        ({"max_jobs": 2.5}, "max_jobs"),
        ({"jct_scale": 0}, "jct_scale"),
        ({"jct_scale": -1.0}, "jct_scale"),
        ({"infer_weight": float("nan")}, "infer_weight"),
        ({"action_mode": "bogus"}, "action_mode"),
        ({"interval": 0}, "interval"),
        ({"cluster": "8x4+8x4", "shared_pool": "16x4"}, "not both"),
        ({"cluster": "8by4"}, "NxG"),
    ],
)
def test_bad_options_fail_at_construction_with_the_option_named(options, message) -> None:
    with pytest.raises(EnvConfigError, match=message):
        EnvConfig.from_options(**options)


def test_env_takes_a_config_or_options_not_both(tiny) -> None:
    cfg = EnvConfig.from_options(max_jobs=4, restart="full")
    env = DeepBootEnv(workload=tiny, config=cfg)
    assert env.config is cfg and env.max_jobs == 4 and env.sim_config.restart == "full"
    with pytest.raises(ValueError, match="not both"):
        DeepBootEnv(workload=tiny, config=cfg, max_jobs=4)
    env = DeepBootEnv(workload=tiny, interval=120.0, max_jobs=4)
    env.reset(seed=0)
    env.step(env.action_space.sample(mask=None) * 0)
    assert env.sim.now % 120.0 == 0.0


def test_fractional_lending_at_zero_and_one_is_lending_off_and_on(tiny) -> None:
    env = DeepBootEnv(workload=tiny, max_jobs=4)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        state = env.state
        cap_on, cap_off = state.training_capacity(1.0), state.training_capacity(0.0)
        assert cap_on.tolist() == state.training_capacity(True).tolist()
        assert cap_off.tolist() == state.training_capacity(False).tolist()
        pinned = state.running + state.protect
        assert cap_on.tolist() == (state.gpus_per_node - pinned).tolist()
        assert cap_off[state.inference_nodes()].sum() == 0
        half = state.training_capacity(0.5)
        assert (cap_off <= half).all() and (half <= cap_on).all()
        _, _, done, _, _ = env.step(np.array([rng.integers(0, 4) for _ in range(4)] + [rng.integers(0, 5)]))
        if done:
            break


def test_codecs_by_mode_and_action_space() -> None:
    assert set(CODECS) == {"target", "residual", "score"}
    target, residual = make_codec("target", 4, 5), make_codec("residual", 4, 5, "fifo")
    assert isinstance(target, TargetCodec) and isinstance(residual, ResidualCodec) and residual.base_name == "fifo"
    assert mode_of_nvec(np.array(target.nvec)) == "target" and mode_of_nvec(np.array(residual.nvec)) == "residual"
    assert target.neutral_action() is None and residual.neutral_action().tolist() == [4, 4, 4, 4, 4]
    assert target.extra_observation() == {} and residual.extra_observation() == {"base": 4}
    with pytest.raises(ValueError, match="action_mode"):
        make_codec("bogus", 4, 5)
    with pytest.raises(ValueError, match="not those of a DeepBoot action codec"):
        mode_of_nvec(np.array([3, 3, 5]))
