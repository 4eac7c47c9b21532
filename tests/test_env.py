"""DeepBoot-v0: Gymnasium and SB3 checkers, determinism, masks, repair, rewards, rendering."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

import deepboot_env  # noqa: F401  (registers DeepBoot-v0)
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.encoding import CLUSTER_FEATURES, GPU_BUCKETS, JOB_FEATURES
from traces.generate import generate_workload

SB3_ALLOWED_WARNINGS: tuple[str, ...] = ()
"""SB3 checker warnings we accept (none at present)."""


@pytest.fixture(scope="module")
def small_workload():
    return generate_workload(
        "env-small", 5, train={"num_jobs": 12}, inference={"horizon_s": 8 * 3600.0, "mean_gpus": 3.0}
    )


def masked_random_action(env: DeepBootEnv, rng: np.random.Generator) -> np.ndarray:
    mask = env.action_masks()
    nb = len(GPU_BUCKETS)
    action = [rng.choice(np.flatnonzero(mask[i * nb : (i + 1) * nb])) for i in range(env.max_jobs)]
    action.append(rng.choice(np.flatnonzero(mask[env.max_jobs * nb :])))
    return np.array(action)


def run(env: DeepBootEnv, seed: int, steps: int = 400):
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    trajectory = [obs]
    rewards = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(masked_random_action(env, rng))
        trajectory.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            return trajectory, rewards, info
    return trajectory, rewards, info


def test_registered_and_checkers_pass(small_workload) -> None:
    env = gym.make("DeepBoot-v0", workload=small_workload, max_jobs=8)
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(env.unwrapped)
    unexpected = [str(w.message) for w in caught if not str(w.message).startswith(SB3_ALLOWED_WARNINGS or ("\0",))]
    assert unexpected == []


def test_spaces_shape_and_bounds(small_workload) -> None:
    env = DeepBootEnv(workload=small_workload, max_jobs=8, lend_levels=3)
    obs, info = env.reset(seed=0)
    assert obs["jobs"].shape == (8 * len(JOB_FEATURES),)
    assert obs["cluster"].shape == (len(CLUSTER_FEATURES),)
    assert env.observation_space.contains(obs)
    assert list(env.action_space.nvec) == [len(GPU_BUCKETS)] * 8 + [3]
    assert env.action_masks().shape == (8 * len(GPU_BUCKETS) + 3,)


def test_same_seed_same_trajectory_and_episode_ends(small_workload) -> None:
    a = run(DeepBootEnv(workload=small_workload, max_jobs=8), seed=3, steps=5000)
    b = run(DeepBootEnv(workload=small_workload, max_jobs=8), seed=3, steps=5000)
    assert len(a[0]) == len(b[0])
    for x, y in zip(a[0], b[0], strict=True):
        np.testing.assert_array_equal(x["jobs"], y["jobs"])
        np.testing.assert_array_equal(x["cluster"], y["cluster"])
    assert a[1] == b[1]
    metrics = a[2]["episode_metrics"]
    assert metrics["train_jobs_done"] == 12


def test_reward_sum_tracks_mean_jct(small_workload) -> None:
    env = DeepBootEnv(workload=small_workload, max_jobs=16, jct_scale=10.0, infer_weight=0.0)
    _, rewards, info = run(env, seed=1, steps=5000)
    metrics = info["episode_metrics"]
    total_jct = metrics["train_jct_mean"] * metrics["train_jobs_done"]
    assert sum(rewards) == pytest.approx(-total_jct / (60.0 * 10.0), rel=1e-9)


def test_masks_and_repair(small_workload) -> None:
    env = DeepBootEnv(workload=small_workload, max_jobs=8)
    env.reset(seed=0)
    mask = env.action_masks()
    nb = len(GPU_BUCKETS)
    n_jobs = len(env._state.jobs)
    for slot in range(n_jobs, 8):  # empty slots may only ask for 0 GPUs
        assert mask[slot * nb] and not mask[slot * nb + 1 : (slot + 1) * nb].any()
    # Everyone asks for 32 GPUs: far over capacity, the repair trims and counts it.
    greedy = np.array([len(GPU_BUCKETS) - 1] * 8 + [0])
    _, _, _, _, info = env.step(greedy)
    assert info["repaired_gpus"] > 0
    assert int(env.sim.ledger.train.sum()) <= env.cluster.train_nodes * env.cluster.gpus_per_node


def test_lending_level_zero_keeps_training_off_inference_nodes(small_workload) -> None:
    env = DeepBootEnv(workload=small_workload, max_jobs=8, lend_levels=2)
    env.reset(seed=0)
    infer = env.sim.ledger.kinds == 1
    for _ in range(30):
        action = np.array([len(GPU_BUCKETS) - 1] * 8 + [0])
        action[:8] = np.where(env.action_masks()[: 8 * len(GPU_BUCKETS)].reshape(8, -1)[:, -1], action[:8], 1)
        _, _, terminated, _, _ = env.step(action)
        assert env.sim.ledger.train[infer].sum() == 0
        if terminated:
            break


def test_bad_arguments_and_actions(small_workload) -> None:
    with pytest.raises(ValueError, match="render_mode"):
        DeepBootEnv(workload=small_workload, render_mode="human")
    env = DeepBootEnv(workload=small_workload, max_jobs=4)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(5, dtype=int))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="entries"):
        env.step(np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="outside"):
        env.step(np.array([99, 0, 0, 0, 0]))


def test_render_modes(small_workload) -> None:
    env = DeepBootEnv(workload=small_workload, max_jobs=4, render_mode="ansi")
    env.reset(seed=0)
    env.step(np.array([1, 1, 1, 1, 4]))
    text = env.render()
    assert "workload=env-small" in text and "training GPUs=" in text
    env = DeepBootEnv(workload=small_workload, max_jobs=4, render_mode="rgb_array")
    env.reset(seed=0)
    env.step(np.array([1, 1, 1, 1, 4]))
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    assert frame.std() > 0  # not a blank image
