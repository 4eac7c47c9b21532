"""The score action mode: per-job scores over a prior's knapsack weights (env action_mode="score"),
its relative reward and held decisions, and the set policy that acts in it."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest
import torch as th
import yaml
from builders import REPO
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agents.models.env_shape import env_shape_of
from agents.saved.checkpoint import load_checkpoint
from agents.saved.policy_adapter import AgentPolicy, load_agent_policy
from agents.trainers.ppo import build_model, make_vec_env_for
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import ScoreCodec
from deepboot_env.env.reference import JobSecondsCurve, simulate_reference
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import WIDTH_CLASSES, make_policy
from deepboot_env.sim.reclaim import is_ats_i_rule
from traces.generate import generate_workload, write_workload_csv

sys.path.insert(0, str(REPO))

import train_policy  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

PRIORITY_MODEL = REPO / "agents" / "pretrained" / "deepboot-priority-v1.json"
MAX_JOBS = 8
SMALL_SET = {
    "policy": "SetPolicy",
    "n_steps": 64,
    "batch_size": 64,
    "n_epochs": 2,
    "gamma": 1.0,
    "policy_kwargs": {"embed_dim": 16, "attention_heads": 2, "attention_layers": 1, "log_std_init": -2.0},
}


@pytest.fixture(scope="module")
def tiny():
    return generate_workload("tiny", 3, train={"num_jobs": 12}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0})


@pytest.fixture(scope="module")
def busy():
    """Twelve jobs in half an hour: several in the system at once."""
    return generate_workload(
        "busy", 4, train={"num_jobs": 12, "window_hours": 0.5}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0}
    )


def _score_env(workload, **kwargs) -> DeepBootEnv:
    """A score-mode env on DeepBoot-v0's dynamics (these tests' world) unless ``kwargs`` say otherwise."""
    return DeepBootEnv(workload=workload, max_jobs=MAX_JOBS, action_mode="score", **{"dynamics": "v0", **kwargs})


def _episode(env: DeepBootEnv, choose, seed: int = 0) -> tuple[dict, float, int]:
    env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        _, reward, terminated, truncated, info = env.step(choose(env))
        total += reward
        steps += 1
        if terminated or truncated:
            return info["episode_metrics"], total, steps


def _same_episode(metrics: dict, reference) -> None:
    expected = reference.to_dict(include_jcts=False)
    for key in ("train_jct_mean", "makespan", "restarts", "lent_gpu_seconds", "reclaims", "infer_latency_mean"):
        assert metrics[key] == expected[key], key


@pytest.mark.parametrize("prior", ["ats", "ats-srpt", "ats-srpt-fcfs", f"priority:{PRIORITY_MODEL}"])
def test_zero_action_is_the_prior_bit_for_bit(tiny, prior: str) -> None:
    env = _score_env(tiny, base_policy=prior)
    assert env.action_space.shape == (MAX_JOBS + 1,) and env.action_space.dtype == np.float32
    assert env.observation_space["prior"].shape == (MAX_JOBS,)
    assert env.observation_space["noise"].shape == (MAX_JOBS + 1,)
    metrics, _, _ = _episode(env, lambda e: e.neutral_action())
    _same_episode(metrics, run_episode(make_policy(prior), tiny, env.sim_config, seed=0))


def test_held_zero_action_is_the_prior_with_fewer_decisions(tiny) -> None:
    every, _, steps_every = _episode(_score_env(tiny, base_policy="ats-srpt"), lambda e: e.neutral_action())
    held, _, steps_held = _episode(_score_env(tiny, base_policy="ats-srpt", hold=6), lambda e: e.neutral_action())
    held.pop("wall_seconds"), every.pop("wall_seconds")
    assert held == every
    assert steps_held < steps_every / 2


def test_held_scores_apply_until_the_jobs_change(tiny) -> None:
    env = _score_env(tiny, base_policy="ats-srpt", hold=50)
    env.reset(seed=0)
    action = np.full(MAX_JOBS + 1, 0.7, dtype=np.float32)
    ids = [job.id for job in env.state.jobs]
    env.step(action)
    assert env.codec.held == {job_id: pytest.approx(0.7) for job_id in ids[:MAX_JOBS]}
    # the env came back because the set of jobs changed (or the episode ended), not after 50 boundaries
    assert env.rounds < 50 or env.sim.done or [job.id for job in env.state.jobs] != ids


def test_scores_move_the_schedule_and_lending_share_limits_borrowing(busy) -> None:
    def env() -> DeepBootEnv:  # a small cluster, where jobs contend for GPUs
        return _score_env(busy, base_policy="ats-srpt", cluster="2x4+2x4")

    base, _, _ = _episode(env(), lambda e: e.neutral_action())

    def no_lending(env: DeepBootEnv) -> np.ndarray:
        action = env.neutral_action()
        action[-1] = -1.0
        return action

    closed, _, _ = _episode(env(), no_lending)
    assert base["lent_gpu_seconds"] > 0 and closed["lent_gpu_seconds"] == 0

    def favour_last(env: DeepBootEnv) -> np.ndarray:
        action = env.neutral_action()
        action[: len(env.state.jobs)] = np.linspace(-1.0, 1.0, MAX_JOBS)[: len(env.state.jobs)]
        return action

    moved, _, _ = _episode(env(), favour_last)
    assert moved["train_jct_mean"] != base["train_jct_mean"]


def test_relative_reward_is_zero_for_the_prior_and_the_jct_difference_otherwise(tiny) -> None:
    kwargs = {"base_policy": "ats-srpt", "relative_reward": True, "infer_weight": 0.0, "jct_scale": 1.0}
    _, total, _ = _episode(_score_env(tiny, **kwargs), lambda e: e.neutral_action())
    assert total == pytest.approx(0.0, abs=1e-9)
    rng = np.random.default_rng(5)
    metrics, total, _ = _episode(_score_env(tiny, **kwargs), lambda e: rng.uniform(-1, 1, MAX_JOBS + 1))
    prior = run_episode(make_policy("ats-srpt"), tiny, _score_env(tiny).sim_config)
    n = len(tiny.jobs)
    interval = 60.0
    assert total == pytest.approx(-(metrics["train_jct_mean"] - prior.train_jct_mean) * n / interval, rel=1e-9)
    _, with_infer, _ = _episode(
        _score_env(tiny, base_policy="ats-srpt", relative_reward=True), lambda e: e.neutral_action()
    )
    assert with_infer == pytest.approx(0.0, abs=1e-9)


def test_job_seconds_curve_integrates_jobs_in_the_system(tiny) -> None:
    env = _score_env(tiny)
    episode = simulate_reference("ats", tiny, env.sim_config)
    curve = episode.jobs
    assert curve.total == pytest.approx(sum(run_episode("ats", tiny, env.sim_config).jcts.values()))
    arrivals, completions = np.array(curve.arrivals), np.array(curve.completions)
    for t0, t1 in [(0.0, 100.0), (50.0, 5000.0), (1e3, 1e9)]:
        grid = np.linspace(t0, min(t1, completions.max() + 1), 200_001)
        inside = ((arrivals[None, :] < grid[:, None]) & (completions[None, :] > grid[:, None])).sum(axis=1)
        assert curve.between(t0, t1) == pytest.approx(np.trapezoid(inside, grid), rel=1e-3, abs=1.0)
    assert isinstance(curve, JobSecondsCurve) and episode.times == sorted(episode.times)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (np.full(MAX_JOBS + 1, np.nan, dtype=np.float32), "finite"),
        (np.full(MAX_JOBS + 1, np.inf), "finite"),
        (np.eye(1, MAX_JOBS + 1, 3, dtype=np.float32).ravel() * np.float32(np.inf), "finite"),  # one entry
        (np.r_[np.inf, -np.inf, np.zeros(MAX_JOBS - 1)], "finite"),  # their sum is NaN, not inf
        (np.zeros(MAX_JOBS, dtype=np.float32), "shape"),
        (np.zeros((MAX_JOBS + 1, 1), dtype=np.float32), "shape"),
        (np.array(["a"] * (MAX_JOBS + 1)), "finite"),
    ],
)
def test_bad_scores_are_one_line_errors(tiny, action: np.ndarray, message: str) -> None:
    env = _score_env(tiny, base_policy="ats-srpt")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message) as info:
        env.step(action)
    assert "\n" not in str(info.value)


def test_huge_finite_scores_are_clipped_not_refused(tiny) -> None:
    """Entries whose sum overflows are still finite: clipped to 1, as the all-ones action."""
    huge, ones = _score_env(tiny, base_policy="ats-srpt"), _score_env(tiny, base_policy="ats-srpt")
    huge.reset(seed=0), ones.reset(seed=0)
    for _ in range(3):
        assert huge.step(np.full(MAX_JOBS + 1, 1e308))[1] == ones.step(np.ones(MAX_JOBS + 1))[1]
    assert {j.id: j.replicas for j in huge.state.jobs} == {j.id: j.replicas for j in ones.state.jobs}


def test_score_mode_refuses_priors_without_scores_and_bad_settings() -> None:
    with pytest.raises(ValueError, match="prior that takes per-job scores"):
        ScoreCodec(MAX_JOBS, 5, "fifo")
    with pytest.raises(ValueError, match="score_scale"):
        DeepBootEnv(workload="test/test-01", action_mode="score", score_scale=0.0)
    with pytest.raises(ValueError, match="hold > 1 needs action_mode 'score'"):
        DeepBootEnv(workload="test/test-01", action_mode="residual", hold=3)
    with pytest.raises(ValueError, match="relative_reward needs a base policy"):
        DeepBootEnv(workload="test/test-01", relative_reward=True)


def test_noise_codes_are_held_per_job_and_seeded(tiny) -> None:
    env = _score_env(tiny, base_policy="ats-srpt")
    obs, _ = env.reset(seed=3)
    first = {job.id: obs["noise"][i] for i, job in enumerate(env.state.jobs[:MAX_JOBS])}
    for _ in range(5):
        obs, *_ = env.step(env.neutral_action())
        for i, job in enumerate(env.state.jobs[:MAX_JOBS]):
            if job.id in first:
                assert obs["noise"][i] == first[job.id]
    again, _ = _score_env(tiny, base_policy="ats-srpt").reset(seed=3)
    assert np.array_equal(again["noise"][:-1], _score_env(tiny, base_policy="ats-srpt").reset(seed=3)[0]["noise"][:-1])
    assert 0.0 < obs["noise"].min() and obs["noise"].max() < 1.0


def _score_model(tiny, **env_kwargs):
    kwargs = {"max_jobs": MAX_JOBS, "action_mode": "score", "base_policy": "ats-srpt", **env_kwargs}
    env = make_vec_env_for(tiny, n_envs=1, seed=0, env_kwargs=kwargs)
    return build_model("ppo", env, hyperparams=SMALL_SET, env_kwargs=kwargs), env


def test_set_policy_starts_at_the_prior_and_is_permutation_equivariant(busy) -> None:
    model, env = _score_model(busy, cluster="2x4+2x4")
    obs = env.reset()
    policy = model.policy
    with th.no_grad():
        mean = policy.forward(policy.obs_to_tensor(obs)[0], deterministic=True)[0]
    assert th.count_nonzero(mean) == 0  # zero means: the deterministic policy is the prior itself
    # train a little so that the network is not trivial, then permute the slots
    model.learn(128)
    batch = env.reset()
    for _ in range(2000):  # on to a state with several jobs
        if (batch["jobs"].reshape(1, MAX_JOBS, -1)[0, :, 0] > 0.5).sum() >= 3:
            break
        batch = env.step(np.zeros((1, MAX_JOBS + 1), dtype=np.float32))[0]
    jobs = batch["jobs"].reshape(1, MAX_JOBS, -1)
    present = int((jobs[0, :, 0] > 0.5).sum())
    assert present >= 3
    order = np.arange(MAX_JOBS)
    order[:present] = order[:present][::-1]
    permuted = dict(batch)
    permuted["jobs"] = jobs[:, order].reshape(1, -1)
    permuted["prior"] = batch["prior"][:, order]
    permuted["noise"] = np.concatenate([batch["noise"][:, order], batch["noise"][:, -1:]], axis=1)
    with th.no_grad():
        a, v, logp = policy.forward(policy.obs_to_tensor(batch)[0], deterministic=False)
        pa, pv, plogp = policy.forward(policy.obs_to_tensor(permuted)[0], deterministic=False)
    assert th.allclose(pa[0, :MAX_JOBS][order], a[0, :MAX_JOBS], atol=1e-5)
    assert th.allclose(pa[0, -1], a[0, -1], atol=1e-5)
    assert th.allclose(pv, v, atol=1e-5) and th.allclose(plogp, logp, atol=1e-4)


def test_sampled_actions_use_the_held_noise(tiny) -> None:
    model, env = _score_model(tiny)
    obs = env.reset()
    policy = model.policy
    tensor = policy.obs_to_tensor(obs)[0]
    with th.no_grad():
        first = policy.forward(tensor, deterministic=False)[0]
        second = policy.forward(tensor, deterministic=False)[0]
        values, logp, entropy = policy.evaluate_actions(tensor, first)
    assert th.equal(first, second)  # the noise is the observation's, not drawn anew
    std = float(th.exp(policy.score_log_std[0].detach()))
    z = th.special.ndtri(tensor["noise"].clamp(1e-6, 1 - 1e-6))
    assert th.allclose(first, std * z, atol=1e-6)  # zero means at the start
    assert logp.shape == (1,) and entropy is not None and entropy.shape == (1,)


def test_score_checkpoint_loads_safely_and_runs_as_a_policy(tiny, tmp_path: Path) -> None:
    model, _ = _score_model(tiny, hold=3, relative_reward=True)
    path = tmp_path / "score.zip"
    model.save(path)
    loaded = load_checkpoint(path)
    assert env_shape_of(loaded)["action_mode"] == "score"
    policy = load_agent_policy(path)
    assert isinstance(policy, AgentPolicy) and policy.hold == 3 and policy.codec.base_name == "ats-srpt"
    env = _score_env(tiny, base_policy="ats-srpt")
    metrics = run_episode(policy, tiny, env.sim_config)
    _same_episode(metrics.to_dict(include_jcts=False), run_episode(make_policy("ats-srpt"), tiny, env.sim_config))
    assert policy.last_action is not None and not policy.last_action.any()


def test_the_env_and_a_score_model_reclaim_by_their_priors_rule(busy) -> None:
    """Over a prior with its own reclaim rule (``-rr``: restart-aware, which changes this
    episode), the env's zero action and an untrained model run by ``ppo:`` are that prior bit for
    bit: both reclaim by the prior's rule, not ATS-I."""
    prior_name = "ats-srpt-fcfs-place-rr"
    env = _score_env(busy, base_policy=prior_name)
    prior = run_episode(make_policy(prior_name), busy, env.sim_config, seed=0)
    atsi = run_episode(make_policy("ats-srpt-fcfs-place"), busy, env.sim_config, seed=0)
    assert prior.train_jct_mean != atsi.train_jct_mean and prior.reclaims > 0
    _same_episode(_episode(env, lambda e: e.neutral_action())[0], prior)
    model, _ = _score_model(busy, base_policy=prior_name)
    policy = AgentPolicy(model, base_policy=prior_name)
    assert not is_ats_i_rule(policy.choose_reclaim)
    assert policy.choose_reclaim is policy.codec.prior.choose_reclaim
    _same_episode(run_episode(policy, busy, env.sim_config, seed=0).to_dict(include_jcts=False), prior)
    assert is_ats_i_rule(AgentPolicy(model, base_policy="ats-srpt").choose_reclaim)  # the simulator's own ATS-I


def test_score_checkpoint_runs_through_deepboot_simulate(tiny, tmp_path: Path) -> None:
    from deepboot_harness.cli import main

    model, _ = _score_model(tiny, dynamics="v1")
    model.save(tmp_path / "score.zip")
    csv_path = write_workload_csv(tiny, tmp_path / "tiny.csv")
    out = tmp_path / "metrics.json"
    argv = ["simulate", "--workload", str(csv_path), "--policy", f"ppo:{tmp_path / 'score.zip'}", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    prior_argv = ["simulate", "--workload", str(csv_path), "--policy", "ats-srpt", "--quiet"]
    assert main([*prior_argv, "--json", str(tmp_path / "p.json")]) == 0
    ran, prior = (yaml.safe_load(f.read_text()) for f in (out, tmp_path / "p.json"))
    assert ran["train_jct_mean"] == prior["train_jct_mean"]  # an untrained score model is its prior


@pytest.mark.skipif(not th.cuda.is_available(), reason="no CUDA device")
def test_score_policy_runs_on_cuda(tiny) -> None:
    kwargs = {"max_jobs": MAX_JOBS, "action_mode": "score", "base_policy": "ats-srpt"}
    env = make_vec_env_for(tiny, n_envs=2, seed=0, env_kwargs=kwargs)
    model = build_model("ppo", env, device="cuda", hyperparams=SMALL_SET, env_kwargs=kwargs)
    assert model.policy.device.type == "cuda"
    model.learn(128)
    obs = env.reset()
    action, _ = model.predict(obs, deterministic=False)
    assert action.shape == (2, MAX_JOBS + 1) and np.isfinite(action).all()


def test_jitter_control_is_ats_srpt_at_zero_and_persistent_per_job(busy) -> None:
    config = _score_env(busy, cluster="2x4+2x4").sim_config
    srpt = run_episode(make_policy("ats-srpt"), busy, config, seed=0)
    _same_episode(run_episode(make_policy("jitter:0"), busy, config, seed=0).to_dict(include_jcts=False), srpt)
    assert make_policy("ats-srpt-jitter").name == "ats-srpt-jitter"
    for prior in ("ats-srpt-fcfs", "ats-srpt-fcfs-place", "ats-srpt-fcfs-place-rr", "ats-srpt-fcfs-place-rr-warm"):
        control = make_policy(f"{prior}-jitter", sigma=0.0)
        expected = run_episode(make_policy(prior), busy, config, seed=0)
        _same_episode(run_episode(control, busy, config, seed=0).to_dict(include_jcts=False), expected)
    assert make_policy("ats-srpt-fcfs-place-rr-jitter").reclaim_horizon == 300.0
    assert make_policy("ats-srpt-fcfs-place-rr-warm-jitter").keep_warm_at == 0.9
    jitter = make_policy("jitter:0.5")
    first = run_episode(jitter, busy, config, seed=1)
    assert first.train_jct_mean != srpt.train_jct_mean
    assert run_episode(jitter, busy, config, seed=1).jcts == first.jcts  # seeded
    draws = dict(jitter._draws)
    assert len(draws) == len(busy.jobs)  # one draw per job, kept for its life
    with pytest.raises(ValueError, match="jitter sigma"):
        make_policy("jitter:-1")
    with pytest.raises(ValueError, match="needs a number"):
        make_policy("jitter:abc")


def test_width_jitter_draws_a_width_table_per_job_and_is_the_prior_at_zero(busy) -> None:
    config = _score_env(busy, cluster="2x4+2x4").sim_config
    prior = run_episode(make_policy("ats-srpt-fcfs-place-rr-warm"), busy, config, seed=0)
    zero = make_policy("ats-srpt-fcfs-place-rr-warm-wjitter", sigma=0.0, width_sigma=0.0)
    _same_episode(run_episode(zero, busy, config, seed=0).to_dict(include_jcts=False), prior)
    # widths alone move the schedule: the weights keep the prior's, the option values do not
    widths = make_policy("ats-srpt-fcfs-place-rr-warm-wjitter", sigma=0.0, width_sigma=0.5)
    first = run_episode(widths, busy, config, seed=3)
    assert first.jcts != prior.jcts
    assert run_episode(widths, busy, config, seed=3).jcts == first.jcts  # seeded
    draws = dict(widths._width_draws)
    assert len(draws) == len(busy.jobs)  # one table per job, kept for its life
    assert all(len(table) == WIDTH_CLASSES for table in draws.values())
    assert make_policy("ats-srpt-fcfs-place-rr-warm-wjitter").width_sigma == 0.05
    v6_size = make_policy("ats-srpt-fcfs-place-rr-warm-wjitter-v6")  # deepboot-score-v6's own size
    assert (v6_size.sigma, v6_size.width_sigma, v6_size.keep_warm_at) == (0.13, 0.14, 0.9)
    with pytest.raises(ValueError, match="width sigma must be a finite number >= 0, got -0.1"):
        make_policy("ats-srpt-fcfs-place-rr-warm-wjitter", width_sigma=-0.1)


def test_the_wjitter_prefix_is_the_own_size_control_at_any_size(busy) -> None:
    """``wjitter:<sigma>,<width_sigma>`` plays as the registered control of those sizes, draw for
    draw; bad sizes are one-line errors."""
    config = _score_env(busy, cluster="2x4+2x4").sim_config
    prefixed = make_policy("wjitter:0.13,0.14")
    assert prefixed.name == "wjitter:0.13,0.14"
    registered = run_episode(make_policy("ats-srpt-fcfs-place-rr-warm-wjitter-v6"), busy, config, seed=2)
    assert run_episode(prefixed, busy, config, seed=2).jcts == registered.jcts
    prior = run_episode(make_policy("ats-srpt-fcfs-place-rr-warm"), busy, config, seed=2)
    assert registered.jcts != prior.jcts
    _same_episode(run_episode(make_policy("wjitter:0,0"), busy, config, seed=2).to_dict(include_jcts=False), prior)
    for bad, message in (("0.1", "needs two numbers, got '0.1'"), ("a,b", "needs two numbers"),
                         ("0.1,-1", "width sigma must be a finite number >= 0")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            make_policy(f"wjitter:{bad}")


def test_train_policy_score_preset_starts_at_the_prior(tiny, tmp_path: Path) -> None:
    csv_path = write_workload_csv(tiny, tmp_path / "tiny.csv")
    argv = [
        "--preset", "score", "--n-timesteps", "128", "--n-envs", "1", "--group-size", "1", "--eval-jobs", "1",
        "--workload", str(csv_path), "--eval-workload", str(csv_path), "--eval-freq", "64",
        "--env-kwargs", f"max_jobs:{MAX_JOBS}",
        "--hyperparams", "n_steps:64", "batch_size:64", "n_epochs:1",
        "policy_kwargs:dict(embed_dim=16,attention_heads=2,attention_layers=1,log_std_init=-2.3)",
        "--log-folder", str(tmp_path / "runs"), "--no-progress", "--verbose", "0",
    ]  # fmt: skip
    run = train_policy.run(argv)
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["env_kwargs"]["action_mode"] == "score" and config["env_kwargs"]["relative_reward"] is True
    with open(run / "evaluations.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    prior = run_episode(make_policy("ats-srpt-fcfs"), tiny, _score_env(tiny, dynamics="v1").sim_config, seed=0)
    assert int(rows[0]["timesteps"]) == 0
    assert float(rows[0]["train_jct_mean"]) == pytest.approx(prior.train_jct_mean)
    assert (run / "final_model.zip").is_file()
    assert load_agent_policy(run / "final_model.zip").action_mode == "score"
    # TensorBoard answers "better than ATS yet?" from the first training episodes on
    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    assert {"sched/jct_ratio_ats", "sched/jct_ratio_base"} <= set(events.Tags()["scalars"])
    assert 0 < events.Scalars("sched/episodes")[0].value <= 10
    ats = run_episode(make_policy("ats"), tiny, _score_env(tiny, dynamics="v1").sim_config).train_jct_mean
    ratios = [e.value for e in events.Scalars("sched/jct_ratio_ats")]
    # the sampled policy stays near ats-srpt: its ratio to ATS is near ats-srpt's, far from 1 if that is
    assert ratios[0] == pytest.approx(prior.train_jct_mean / ats, rel=0.1)


def test_a_resumed_score_model_keeps_the_prior_it_goes_on_training_over(tiny, tmp_path: Path) -> None:
    """Resuming with ``--env-kwargs base_policy:<another prior>`` trains over that prior, and the
    saved model runs over it: ``ppo:<path>`` reads the env arguments the policy was saved with."""
    csv_path = write_workload_csv(tiny, tmp_path / "tiny.csv")
    common = [
        "-n", "64", "--workload", str(csv_path), "--eval-freq", "0", "--n-envs", "1", "--group-size", "1",
        "--log-folder", str(tmp_path / "runs"), "--no-progress", "--verbose", "0",
    ]  # fmt: skip
    sizes = "policy_kwargs:dict(embed_dim=16,attention_heads=2,attention_layers=1,log_std_init=-2.3)"
    first = train_policy.run(
        ["--preset", "score", "--env-kwargs", f"max_jobs:{MAX_JOBS}", *common,
         "--hyperparams", "n_steps:64", "batch_size:64", "n_epochs:1", sizes]
    )  # fmt: skip
    assert load_agent_policy(first / "final_model.zip").codec.base_name == "ats-srpt-fcfs"
    resumed = train_policy.run(
        ["-i", str(first / "final_model.zip"), "--env-kwargs", "base_policy:ats-srpt-fcfs-place", *common]
    )
    config = yaml.safe_load((resumed / "config.yml").read_text())
    assert config["env_kwargs"]["base_policy"] == "ats-srpt-fcfs-place"
    assert load_agent_policy(resumed / "final_model.zip").codec.base_name == "ats-srpt-fcfs-place"
    assert load_checkpoint(resumed / "final_model.zip").policy.env_kwargs["base_policy"] == "ats-srpt-fcfs-place"


def test_env_groups_play_the_same_scenarios_with_their_own_noise() -> None:
    kwargs = {"action_mode": "score", "base_policy": "ats-srpt"}
    vec = make_vec_env_for("family:mixed", n_envs=4, seed=3, env_kwargs=kwargs, group_size=2)
    vec.reset()
    first = [vec.envs[i].unwrapped.scenario.seed for i in range(4)]
    assert first[0] == first[1] and first[2] == first[3] and first[0] != first[2]
    noise = [vec.envs[i].unwrapped.codec.observe(vec.envs[i].unwrapped.state)["noise"] for i in range(2)]
    assert not np.array_equal(noise[0], noise[1])
    for i in (0, 1, 2, 3):  # the next scenario of each env, whenever it resets
        vec.envs[i].reset()
    second = [vec.envs[i].unwrapped.scenario.seed for i in range(4)]
    assert second[0] == second[1] and second[2] == second[3] and second != first
    with pytest.raises(ValueError, match="group_size"):
        make_vec_env_for("family:mixed", n_envs=4, seed=3, env_kwargs=kwargs, group_size=3)
