"""Width scores in the score action (``width_classes=3``): per slot, log-multipliers of a job's
option values by width class, decoded by the prior's knapsack (``baselines.ats.width_scored_options``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch as th

from agents.models.env_shape import spaces_env_shape
from agents.saved.policy_adapter import AgentPolicy, load_agent_policy
from agents.trainers.ppo import build_model, make_vec_env_for
from baselines.ats import AtsPolicy, Options, job_rooms, width_class, width_factors
from deepboot_env.config import EnvConfigError
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import ScoreCodec, make_codec
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import WIDTH_CLASSES, make_policy
from deepboot_env.sim.state import ClusterState
from traces.generate import generate_workload

pytestmark = pytest.mark.usefixtures("torch_one_thread")

MAX_JOBS = 8
PRIOR = "ats-srpt-fcfs-place-rr"


@pytest.fixture(scope="module")
def busy():
    """Twelve jobs in half an hour on a small cluster: jobs contend for GPUs and get split."""
    return generate_workload(
        "busy", 4, train={"num_jobs": 12, "window_hours": 0.5}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0}
    )


def _env(workload, **kwargs) -> DeepBootEnv:
    options = {"max_jobs": MAX_JOBS, "action_mode": "score", "base_policy": PRIOR, "cluster": "2x4+2x4"}
    return DeepBootEnv(workload=workload, **{**options, **kwargs})


def _episode(env: DeepBootEnv, choose) -> dict:
    env.reset(seed=0)
    while True:
        _, _, terminated, truncated, info = env.step(choose(env))
        if terminated or truncated:
            metrics = dict(info["episode_metrics"])
            metrics.pop("wall_seconds")
            return metrics


def _width_class(w: int, per_node: int, room: int) -> int:
    """The documented classes, written apart from the code: 1 GPU; 2 on one node; 3..G on one
    node; split (more than a node, or more than the job's room)."""
    if w == 1:
        return 0
    if w > per_node or w > room:
        return 3
    return 1 if w == 2 else 2


def test_the_action_grows_by_three_scores_per_slot_and_zero_is_the_prior(busy) -> None:
    env = _env(busy, width_classes=WIDTH_CLASSES, hold=4)
    assert env.action_space.shape == (MAX_JOBS * (1 + WIDTH_CLASSES) + 1,)
    assert env.observation_space["prior"].shape == (MAX_JOBS,)
    zero = _episode(env, lambda e: e.neutral_action())
    assert zero == _episode(_env(busy, hold=4), lambda e: e.neutral_action())
    prior = run_episode(make_policy(PRIOR), busy, env.sim_config, seed=0)
    assert zero["train_jct_mean"] == prior.train_jct_mean and zero["restarts"] == prior.restarts


def test_width_scores_move_the_schedule_and_only_through_their_slots(busy) -> None:
    env = _env(busy, width_classes=WIDTH_CLASSES)
    zero = _episode(env, lambda e: e.neutral_action())

    def against_splits(e: DeepBootEnv) -> np.ndarray:
        action = e.neutral_action()
        widths = action[MAX_JOBS:-1].reshape(MAX_JOBS, WIDTH_CLASSES)
        widths[:, 2] = -1.0  # every slot: split options worth less
        widths[:, 1] = 0.5
        return action

    moved = _episode(env, against_splits)
    assert moved["train_jct_mean"] != zero["train_jct_mean"]
    env.reset(seed=0)
    slot_ids = [job.id for job in env.state.jobs][:MAX_JOBS]
    action = env.neutral_action()
    action[MAX_JOBS:-1] = 0.3
    env.step(action)
    held = env.codec.held_widths
    assert slot_ids and set(held) == set(slot_ids) and env.codec.held == {}
    assert all(v == pytest.approx((0.3,) * WIDTH_CLASSES) for v in held.values())


def _some_state(workload) -> ClusterState:
    """A state with several jobs, some holding GPUs (the prior's own episode, a few decisions in)."""
    env = _env(workload)
    env.reset(seed=0)
    for _ in range(40):
        env.step(env.neutral_action())
        if len(env.state.jobs) >= 4 and any(job.replicas for job in env.state.jobs):
            break
    return env.state


def test_option_values_are_reshaped_by_the_documented_factors(busy) -> None:
    state = _some_state(busy)
    policy = AtsPolicy(srpt_power=0.25, placement_aware=True)
    jobs = list(state.jobs)
    capacity = int(state.training_capacity(lend=True).sum())
    fair = math.ceil(capacity / len(jobs))
    caps = policy.job_caps(jobs, capacity, fair)
    weights = policy.job_weights(jobs, fair, capacity)
    plain = policy.job_options(state, jobs, caps, fair, True, weights)
    rng = np.random.default_rng(3)
    scores = {job.id: tuple(rng.normal(0, 0.5, WIDTH_CLASSES).tolist()) for job in jobs[::2]}
    shaped = policy.job_options(state, jobs, caps, fair, True, weights, width_scores=scores)
    assert isinstance(shaped, Options)
    per_node = state.gpus_per_node
    free = np.maximum(state.training_capacity(lend=True) - state.train_used, 0)
    checked = 0
    for i, job in enumerate(jobs):
        row = slice(plain.offsets[i], plain.offsets[i] + caps[i] + 1)
        before, after = plain.speedups[row], shaped.speedups[shaped.offsets[i] : shaped.offsets[i] + caps[i] + 1]
        if job.id not in scores or caps[i] < 1:
            assert np.array_equal(before, after)
            continue
        v = (0.0, *scores[job.id])
        room = max(int((free + job.alloc).max()), 1)
        f = max(1, min(fair, job.rates.max_replicas))
        ref = v[_width_class(f, per_node, per_node)]
        for w in range(1, caps[i] + 1):
            assert after[w] == pytest.approx(before[w] * math.exp(v[_width_class(w, per_node, room)] - ref), rel=1e-12)
            checked += 1
        assert after[0] == before[0]
    assert checked > 0
    assert plain.speedups is not shaped.speedups  # the memoised rows are copied, never written


@pytest.mark.parametrize("per_node", [1, 2, 4, 8])
def test_width_factors_built_by_class_are_the_per_width_floats(per_node: int) -> None:
    """The run-by-run factors are exactly (==) the width-by-width exponentials, for every cap,
    room and fair-share class, and leave the classes a row does not hold unevaluated."""
    logs = (0.0, 0.31, -0.77, 1.9)
    for fair_class in range(WIDTH_CLASSES + 1):
        base = logs[fair_class]
        for room in range(1, 2 * per_node + 2):
            for cap in range(1, 3 * per_node + 3):
                by_width = [1.0] + [math.exp(logs[width_class(w, per_node, room)] - base) for w in range(1, cap + 1)]
                assert width_factors(logs, fair_class, cap, per_node, room) == by_width
    # only the classes present are exponentiated: a huge unused class raises nothing
    assert width_factors((0.0, 0.0, 0.0, 1e6), 0, 2, 4, 4) == [1.0, 1.0, 1.0]


def test_job_rooms_are_each_jobs_free_gpus_plus_its_own_on_its_best_node(busy) -> None:
    state = _some_state(busy)
    jobs = list(state.jobs)
    assert any(job.replicas for job in jobs) and any(not job.replicas for job in jobs)
    for lend in (True, 0.5, False):
        free = np.maximum(state.training_capacity(lend=lend) - state.train_used, 0)
        assert job_rooms(jobs, state, lend) == [int((free + job.alloc).max()) for job in jobs]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"width_classes": 2}, "width_classes must be 0 or 3"),
        ({"width_classes": True}, "width_classes must be 0 or 3"),
        ({"width_classes": 3, "action_mode": "target"}, "width_classes needs action_mode 'score'"),
    ],
)
def test_bad_width_settings_are_one_line_errors(options: dict, message: str) -> None:
    kwargs = {"workload": "test/test-01", "action_mode": "score", "base_policy": "ats-srpt", **options}
    with pytest.raises(EnvConfigError, match=message) as info:
        DeepBootEnv(**kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="width_classes"):
        make_codec("residual", MAX_JOBS, 5, "ats", 1.0, WIDTH_CLASSES)
    with pytest.raises(ValueError, match="width_classes must be 0 or 3"):
        ScoreCodec(MAX_JOBS, 5, "ats-srpt", 1.0, 4)


def test_bad_width_scores_are_one_line_errors(busy) -> None:
    env = _env(busy, width_classes=WIDTH_CLASSES)
    env.reset(seed=0)
    for bad, message in (
        (np.zeros(MAX_JOBS + 1, dtype=np.float32), "shape"),
        (np.full(env.action_space.shape, np.nan, dtype=np.float32), "finite"),
    ):
        with pytest.raises(ValueError, match=message) as info:
            env.step(bad)
        assert "\n" not in str(info.value)
    state = _some_state(busy)
    policy = AtsPolicy(srpt_power=0.25)
    job = state.jobs[0]
    for scores in ((0.1, 0.2), (0.1, float("nan"), 0.0)):
        with pytest.raises(ValueError, match=f"job {job.id}: width scores must be 3 finite numbers"):
            policy.decide_scored(state, {}, 1.0, {job.id: scores})


SMALL_SET = {
    "policy": "SetPolicy",
    "n_steps": 64,
    "batch_size": 64,
    "n_epochs": 2,
    "policy_kwargs": {"embed_dim": 16, "attention_heads": 2, "attention_layers": 1, "log_std_init": -2.0},
}


def _vec_env(workload):
    kwargs = {"max_jobs": MAX_JOBS, "action_mode": "score", "base_policy": PRIOR, "width_classes": WIDTH_CLASSES}
    kwargs["cluster"] = "2x4+2x4"
    return make_vec_env_for(workload, n_envs=1, seed=0, env_kwargs=kwargs), kwargs


def test_a_set_model_with_width_scores_starts_at_the_prior_and_runs_as_ppo(busy, tmp_path: Path) -> None:
    env, kwargs = _vec_env(busy)
    shape = spaces_env_shape(env.observation_space, env.action_space)
    assert shape["width_classes"] == WIDTH_CLASSES and shape["max_jobs"] == MAX_JOBS
    assert env.observation_space["noise"].shape == (MAX_JOBS * (1 + WIDTH_CLASSES) + 1,)
    model = build_model("ppo", env, hyperparams=SMALL_SET, env_kwargs=kwargs)
    assert tuple(model.policy.score_log_std.shape) == (3,)  # score, lending share, width scores
    model.save(tmp_path / "widths.zip")
    policy = load_agent_policy(tmp_path / "widths.zip")
    assert isinstance(policy, AgentPolicy) and isinstance(policy.codec, ScoreCodec)
    assert policy.codec.width_classes == WIDTH_CLASSES
    config = _env(busy).sim_config
    prior = run_episode(make_policy(PRIOR), busy, config, seed=0)
    played = run_episode(policy, busy, config, seed=0)
    assert played.train_jct_mean == prior.train_jct_mean and played.restarts == prior.restarts
    assert policy.last_action is not None and policy.last_action.shape == (MAX_JOBS * (1 + WIDTH_CLASSES) + 1,)
    assert not policy.last_action.any()
    model.learn(128)  # the update runs over every acting entry, width scores included
    mlp = {"policy": "MultiInputPolicy", "n_steps": 64, "batch_size": 64}
    build_model("ppo", env, hyperparams=mlp, env_kwargs=kwargs).save(tmp_path / "mlp.zip")
    assert load_agent_policy(tmp_path / "mlp.zip").codec.width_classes == WIDTH_CLASSES


def test_the_set_network_lays_out_scores_then_width_scores_then_lending(busy) -> None:
    env, kwargs = _vec_env(busy)
    hyper = {**SMALL_SET, "policy_kwargs": {**SMALL_SET["policy_kwargs"], "application_scores": 1}}
    policy = build_model("ppo", env, hyperparams=hyper, env_kwargs=kwargs).policy
    table = policy.mlp_extractor.application_table
    with th.no_grad():
        table.weight.zero_()
        table.bias.copy_(th.tensor([1.0, 2.0, 3.0, 4.0]))  # every slot: score 1, width scores 2, 3, 4
    obs = policy.obs_to_tensor(env.reset())[0]
    with th.no_grad():
        mean = policy.forward(obs, deterministic=True)[0][0].numpy()
    assert np.array_equal(mean[:MAX_JOBS], np.ones(MAX_JOBS))
    assert np.array_equal(mean[MAX_JOBS:-1], np.tile([2.0, 3.0, 4.0], MAX_JOBS))
    stds = policy.score_log_std
    with th.no_grad():
        stds.copy_(th.tensor([0.0, 1.0, 2.0]))
        _, std, acting = policy._score_gaussian(obs, policy.mlp_extractor.forward_actor(policy.extract_features(obs)))
    logs = th.log(std[0]).numpy()
    assert np.allclose(logs[:MAX_JOBS], 0.0) and np.allclose(logs[MAX_JOBS:-1], 2.0) and logs[-1] == pytest.approx(1.0)
    present = obs["jobs"].reshape(MAX_JOBS, -1)[:, 0].numpy() > 0.5
    expected = np.concatenate([present, np.repeat(present, WIDTH_CLASSES), [True]]).astype(float)
    assert np.array_equal(acting[0].numpy(), expected)


def test_width_codes_are_held_per_job(busy) -> None:
    env = _env(busy, width_classes=WIDTH_CLASSES)
    obs, _ = env.reset(seed=5)
    ids = [job.id for job in env.state.jobs][:MAX_JOBS]
    first = obs["noise"][MAX_JOBS:-1].reshape(MAX_JOBS, WIDTH_CLASSES)
    assert len(set(first[: len(ids)].ravel().tolist())) == len(ids) * WIDTH_CLASSES  # drawn, not constant
    for _ in range(20):
        obs, *_ = env.step(env.neutral_action())
        now = [job.id for job in env.state.jobs][:MAX_JOBS]
        codes = obs["noise"][MAX_JOBS:-1].reshape(MAX_JOBS, WIDTH_CLASSES)
        for i, job_id in enumerate(now):
            if job_id in ids:
                assert np.array_equal(codes[i], first[ids.index(job_id)])
