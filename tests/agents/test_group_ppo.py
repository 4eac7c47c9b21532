"""Group advantages over antithetic pairs (agents.models.group_ppo) and the env's paired noise codes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch as th

from agents.errors import ConfigError
from agents.models.group_ppo import Episode, GroupPPO, group_advantages, per_job_surrogate
from agents.saved.checkpoint import load_checkpoint
from agents.saved.policy_adapter import load_agent_policy
from agents.trainers.ppo import build_model, make_vec_env_for
from deepboot_env.env import DeepBootEnv

pytestmark = pytest.mark.usefixtures("torch_one_thread")

MAX_JOBS = 8
SCORE_ENV = {"max_jobs": MAX_JOBS, "action_mode": "score", "base_policy": "ats-srpt", "relative_reward": True}
SMALL_SET = {
    "policy": "SetPolicy",
    "batch_size": 64,
    "n_epochs": 1,
    "gamma": 1.0,
    "group_advantage": True,
    "policy_kwargs": {"embed_dim": 16, "attention_heads": 2, "attention_layers": 1, "log_std_init": -2.0},
}


def test_episode_returns_to_go() -> None:
    episode = Episode(rewards=[1.0, -2.0, 4.0])
    assert episode.returns(1.0).tolist() == [3.0, 2.0, 4.0]
    assert episode.returns(0.5).tolist() == pytest.approx([1.0 - 1.0 + 1.0, -2.0 + 2.0, 4.0])


def test_group_advantages_are_time_aligned_differences() -> None:
    # member a decides at t = 0, 60, 120; member b at 0, 120 (it held its first action)
    returns = [np.array([-6.0, -4.0, -1.0]), np.array([-2.0, -1.0])]
    times = [np.array([0.0, 60.0, 120.0]), np.array([0.0, 120.0])]
    a, b = group_advantages(returns, times)
    # at t=0 both start: +-half the difference of the episodes' returns
    assert a[0] == pytest.approx((-6.0 - -2.0) / 2) and b[0] == pytest.approx(-a[0])
    # a's decision at t=60 against b's return from its next decision (t=120)
    assert a[1] == pytest.approx((-4.0 - -1.0) / 2)
    assert a[2] == pytest.approx(0.0) and b[1] == pytest.approx(0.0)
    # a member that has ended contributes 0 from then on
    ((late,),) = [group_advantages([np.array([-3.0]), np.array([-5.0])], [np.array([500.0]), np.array([0.0])])[0]]
    assert late == pytest.approx((-3.0 - 0.0) / 2)
    # a group of one has no baseline but itself
    assert group_advantages([returns[0]], [times[0]])[0].tolist() == [0.0, 0.0, 0.0]


def test_antithetic_envs_share_scenarios_and_mirror_noise() -> None:
    kwargs = {"workload": "family:mixed", **SCORE_ENV, "relative_reward": False}
    first = DeepBootEnv(scenario_stream=5, noise_stream=7, **kwargs)
    second = DeepBootEnv(scenario_stream=5, noise_stream=7, antithetic=True, **kwargs)
    for _ in range(2):  # the pairing holds episode after episode
        obs_a, info_a = first.reset()
        obs_b, info_b = second.reset(seed=123)  # reset seeds do not matter
        assert info_a["scenario_seed"] == info_b["scenario_seed"]
        jobs = obs_a["noise"][:-1] != 0.5
        assert jobs.any()
        np.testing.assert_allclose(obs_a["noise"][:-1][jobs] + obs_b["noise"][:-1][jobs], 1.0, atol=1e-6)
        np.testing.assert_allclose(obs_a["noise"][-1] + obs_b["noise"][-1], 1.0, atol=1e-6)
    # a code is the job's for life: stepping keeps it
    zero = np.zeros(first.action_space.shape, dtype=np.float32)
    before = obs_a["noise"][0]
    after, *_ = first.step(zero)
    assert after["noise"][0] == before
    with pytest.raises(ValueError, match="noise_stream needs action_mode 'score'"):
        DeepBootEnv(workload="family:mixed", noise_stream=1)


def test_group_ppo_plays_whole_episodes_and_centres_each_pair(tmp_path: Path) -> None:
    env_kwargs = {**SCORE_ENV, "max_rounds": 12}
    vec = make_vec_env_for("family:mixed", 4, 0, env_kwargs, group_size=2, antithetic=True)
    model = build_model("ppo", vec, hyperparams=SMALL_SET, env_kwargs=env_kwargs, group_size=2)
    assert isinstance(model, GroupPPO)
    model.learn(1)  # one iteration: one whole (cut) episode per env
    buffer = model.rollout_buffer
    starts = np.flatnonzero(buffer.episode_starts[:, 0])
    assert len(starts) == 4 and buffer.buffer_size == model.num_timesteps
    advantages = buffer.advantages[:, 0]
    # the pair's first decisions are taken at the same time: opposite advantages
    assert advantages[starts[0]] == pytest.approx(-advantages[starts[1]], abs=1e-5)
    assert advantages[starts[2]] == pytest.approx(-advantages[starts[3]], abs=1e-5)
    # returns-to-go are what the value head learns
    first_episode = buffer.rewards[starts[0] : starts[1], 0]
    assert buffer.returns[starts[0], 0] == pytest.approx(first_episode.sum(), rel=1e-5)
    path = tmp_path / "group.zip"
    model.save(path)
    assert load_agent_policy(path).action_mode == "score"  # a plain PPO policy to load
    loaded = load_checkpoint(path)  # the trainer it names comes back (issue 68)
    assert isinstance(loaded, GroupPPO) and loaded.group_size == 2 and not loaded.per_job_ratio


def test_the_progress_bar_counts_env_steps() -> None:
    """GroupPPO steps only the envs whose episode goes on: the bar adds what the model counts."""
    from agents.runs.callbacks import EnvStepProgressBar

    env_kwargs = {**SCORE_ENV, "max_rounds": 12}
    vec = make_vec_env_for("family:mixed", 4, 0, env_kwargs, group_size=2, antithetic=True)
    model = build_model("ppo", vec, hyperparams=SMALL_SET, env_kwargs=env_kwargs, group_size=2)
    bar = EnvStepProgressBar()
    model.learn(1, callback=bar)
    assert bar.pbar.n == model.num_timesteps > 0


def test_group_advantage_needs_ppo_and_pairs() -> None:
    vec = make_vec_env_for("family:mixed", 2, 0, SCORE_ENV, group_size=1)
    with pytest.raises(ConfigError, match="group_advantage needs --algo ppo and --group-size >= 2"):
        build_model("ppo", vec, hyperparams=SMALL_SET, env_kwargs=SCORE_ENV, group_size=1)
    with pytest.raises(ValueError, match="group_size must be an integer >= 2"):
        GroupPPO("MultiInputPolicy", vec, group_size=1)


def test_per_job_surrogate_clips_each_job_and_ignores_empty_slots() -> None:
    old = th.zeros(2, 3)
    # decision 0: job 0 moved far (ratio e), job 1 not at all; slot 2 is empty in both decisions
    new = th.tensor([[1.0, 0.0, 5.0], [0.1, -0.1, -5.0]])
    acting = th.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    advantages = th.tensor([1.0, -1.0])
    loss, kl, clipped = per_job_surrogate(new, old, acting, advantages, clip=0.2)
    ratios = np.exp([[1.0, 0.0], [0.1, -0.1]])
    # per entry: min(r A, clip(r) A); job 0 of decision 0 is clipped at 1.2 alone
    expected = -np.mean([min(ratios[0, 0], 1.2), ratios[0, 1], -ratios[1, 0], -max(ratios[1, 1], 0.8)])
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(clipped) == pytest.approx(0.25)  # one of four acting entries
    assert float(kl) == pytest.approx(np.mean([(r - 1) - np.log(r) for r in ratios.ravel()]), rel=1e-5)
    # the joint ratio of decision 0 (e) would clip the whole decision; per job, job 1 still learns
    new.requires_grad_(True)
    per_job_surrogate(new, old, acting, advantages, clip=0.2)[0].backward()
    assert new.grad is not None and new.grad[0, 1] != 0 and new.grad[0, 0] == 0 and (new.grad[:, 2] == 0).all()


def test_group_ppo_per_job_ratio_updates_the_score_policy() -> None:
    env_kwargs = {**SCORE_ENV, "max_rounds": 40}
    vec = make_vec_env_for("family:mixed", 2, 0, env_kwargs, group_size=2, antithetic=True)
    wide = {**SMALL_SET["policy_kwargs"], "log_std_init": 0.0}  # scores that change the schedule
    hyperparams = {**SMALL_SET, "per_job_ratio": True, "learning_rate": 1e-2, "policy_kwargs": wide}
    model = build_model("ppo", vec, hyperparams=hyperparams, env_kwargs=env_kwargs, group_size=2)
    assert isinstance(model, GroupPPO) and model.per_job_ratio
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(1)
    assert np.abs(model.rollout_buffer.advantages).max() > 0  # the pair's episodes differ
    moved = [not th.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True)]
    assert any(moved)
    logged = model.logger.name_to_value  # TensorBoard's training curves for the score presets (issue 68)
    for key in ("policy_gradient_loss", "entropy_loss", "std", "explained_variance", "approx_kl", "learning_rate"):
        assert np.isfinite(logged[f"train/{key}"]), key
    assert "per_job_ratio" not in model.get_parameters()  # a plain PPO policy to load
    with pytest.raises(ConfigError, match="per_job_ratio needs group_advantage"):
        build_model("ppo", vec, hyperparams={**SMALL_SET, "group_advantage": False, "per_job_ratio": True})
    target_env = {"max_jobs": MAX_JOBS, "action_mode": "target"}
    targets = make_vec_env_for("family:mixed", 2, 0, target_env, group_size=2)
    with pytest.raises(ValueError, match="per_job_ratio needs the set policy in score mode.*MultiDiscrete"):
        hyperparams = {**SMALL_SET, "per_job_ratio": True}
        build_model("ppo", targets, hyperparams=hyperparams, env_kwargs=target_env, group_size=2)
