"""``--vec-env ray``: :class:`agents.trainers.ray_vec_env.RayVecEnv` behaves as ``DummyVecEnv`` (seeds,
masks, auto-reset, attributes) and a MaskablePPO run on it learns the same parameters.

One local Ray instance per module (``ray_cluster`` of conftest.py). Skipped without the ``ray`` extra.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")

from stable_baselines3.common.monitor import Monitor  # noqa: E402

from agents.trainers.ppo import build_model, make_vec_env_for  # noqa: E402
from deepboot_env.sim.scenario import Scenario  # noqa: E402
from traces.generate import generate_workload  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

ENV_KWARGS = {"max_jobs": 8, "max_rounds": 6}
"""Short episodes: several auto-resets in a few steps."""


@pytest.fixture(scope="module")
def tiny() -> list[Scenario]:
    """Three tiny workloads: each reset draws one with the env's RNG, so the seeds matter."""
    inference = {"horizon_s": 4 * 3600.0, "mean_gpus": 3.0}
    return [
        Scenario(generate_workload(f"tiny-{seed}", seed, train={"num_jobs": 10}, inference=inference))
        for seed in (1, 2, 3)
    ]


def _assert_obs_equal(got: Any, want: Any) -> None:
    assert isinstance(got, dict) and got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        assert got[key].dtype == want[key].dtype, key


def test_seeds_masks_auto_reset_and_attributes_match_dummy(ray_cluster: str, tiny: list[Scenario]) -> None:
    from agents.trainers.ray_vec_env import RayVecEnv

    dummy = make_vec_env_for(tiny, 2, 5, ENV_KWARGS)
    ray_env = make_vec_env_for(tiny, 2, 5, ENV_KWARGS, vec_env="ray")
    try:
        assert isinstance(ray_env, RayVecEnv)
        assert ray_env.observation_space == dummy.observation_space and ray_env.action_space == dummy.action_space
        assert ray_env.env_is_wrapped(Monitor) == [True, True] and ray_env.has_attr("action_masks")
        assert ray_env.get_attr("max_jobs", indices=[1]) == [8]
        rng = np.random.default_rng(0)
        nvec = dummy.action_space.nvec
        resets = 0
        options: list[dict[str, Any]] = []
        for _ in range(2):  # the second round after seed(11) and set_options: passed on at the next reset
            _assert_obs_equal(ray_env.reset(), dummy.reset())
            assert ray_env.reset_infos == dummy.reset_infos
            assert not options or ray_env.reset_infos[0]["workload"] == "tiny-3"
            for _ in range(14):
                masks = ray_env.env_method("action_masks")
                assert len(masks) == 2
                np.testing.assert_array_equal(np.stack(masks), np.stack(dummy.env_method("action_masks")))
                actions = rng.integers(0, nvec, size=(2, len(nvec)))
                obs, rewards, dones, infos = ray_env.step(actions)
                want_obs, want_rewards, want_dones, want_infos = dummy.step(actions)
                _assert_obs_equal(obs, want_obs)
                np.testing.assert_array_equal(rewards, want_rewards)
                np.testing.assert_array_equal(dones, want_dones)
                assert rewards.dtype == want_rewards.dtype and dones.dtype == want_dones.dtype
                for info, want in zip(infos, want_infos, strict=True):
                    assert info.keys() == want.keys()
                    if "terminal_observation" in want:
                        resets += 1
                        _assert_obs_equal(info["terminal_observation"], want["terminal_observation"])
                        assert all(v.flags.writeable for v in info["terminal_observation"].values())
                        assert info["episode"]["r"] == want["episode"]["r"]
                        assert info["episode"]["l"] == want["episode"]["l"]
                assert ray_env.reset_infos == dummy.reset_infos
            assert ray_env.seed(11) == dummy.seed(11) == [11, 12]
            options = [{"workload": tiny[2].workload}, {}]  # used at the next reset only, as the seeds
            ray_env.set_options(options)
            dummy.set_options(options)
        assert resets >= 8  # every sub-env ended several 6-decision episodes
        ray_env.set_attr("probe", 3, indices=0)
        assert ray_env.get_attr("probe", indices=0) == [3]
        assert not ray_env.has_attr("probe")  # sub-env 1 has no such attribute
    finally:
        ray_env.close()
        dummy.close()


def _parameters(tiny: list[Scenario], vec_env: str, timesteps: int) -> dict[str, Any]:
    """A small MaskablePPO's parameters after ``timesteps`` steps of learning on ``vec_env``."""
    env = make_vec_env_for(tiny, 2, 3, ENV_KWARGS, vec_env=vec_env)
    hyperparams = {"n_steps": 32, "batch_size": 32, "n_epochs": 2, "policy_kwargs": {"net_arch": [32]}}
    model = build_model("maskable_ppo", env, seed=3, hyperparams=hyperparams, env_kwargs=ENV_KWARGS)
    if timesteps:
        model.learn(total_timesteps=timesteps)
    env.close()
    assert model.num_timesteps == timesteps
    return {k: v.detach().clone() for k, v in model.policy.state_dict().items()}


def test_a_maskable_ppo_run_on_ray_learns_what_it_learns_on_dummy(ray_cluster: str, tiny: list[Scenario]) -> None:
    import torch

    want, got = _parameters(tiny, "dummy", 128), _parameters(tiny, "ray", 128)  # 2 rollouts of 2 x 32 steps
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), key
    untrained = _parameters(tiny, "dummy", 0)
    assert any(not torch.equal(untrained[k], want[k]) for k in want)  # learning moved the parameters
