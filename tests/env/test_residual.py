"""Residual actions over a base policy (env action_mode="residual", agents in residual mode)."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest
import yaml
from builders import REPO

from agents.models.env_shape import env_shape_of
from agents.saved.checkpoint import load_checkpoint
from agents.saved.export import export_model
from agents.saved.policy_adapter import AgentPolicy, load_agent_policy
from agents.trainers.imitation import collect_demonstrations, init_residual_policy
from agents.trainers.ppo import build_model, make_vec_env_for
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import NEUTRAL, RESIDUAL_DELTAS, ResidualCodec
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.sim.state import validate_allocation
from traces.generate import generate_workload, write_workload_csv

sys.path.insert(0, str(REPO))

import train_policy  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

MAX_JOBS = 8
SMALL_NET = {"n_steps": 64, "batch_size": 64, "policy_kwargs": {"net_arch": {"pi": [16], "vf": [16]}}}


@pytest.fixture(scope="module")
def tiny():
    return generate_workload("tiny", 3, train={"num_jobs": 10}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0})


def _residual_env(workload, **kwargs) -> DeepBootEnv:
    return DeepBootEnv(workload=workload, max_jobs=MAX_JOBS, action_mode="residual", **kwargs)


def _episode(env: DeepBootEnv, choose) -> dict:
    env.reset(seed=0)
    while True:
        _, _, terminated, truncated, info = env.step(choose(env))
        if terminated or truncated:
            return info["episode_metrics"]


def test_neutral_actions_reproduce_the_base_policy(tiny) -> None:
    env = _residual_env(tiny)
    assert env.action_space.nvec.tolist() == [len(RESIDUAL_DELTAS)] * MAX_JOBS + [env.lend_levels]
    assert env.observation_space["base"].shape == (MAX_JOBS,)
    neutral = _episode(env, lambda e: e.neutral_action())
    ats = run_episode(make_policy("ats"), tiny, env.sim_config, seed=0)
    assert neutral["train_jct_mean"] == ats.train_jct_mean
    assert neutral["restarts"] == ats.restarts and neutral["lent_gpu_seconds"] == ats.lent_gpu_seconds


def test_a_base_policy_that_looks_into_the_simulator_is_bound_to_the_envs(tiny) -> None:
    """``mpc`` forks the simulator it runs in (its ``bind_simulator`` hook): as a residual base,
    the env binds it to the episode's simulator after resetting it, so the neutral action plays
    ``mpc``'s episode (before, its reset came last and forgot the binding)."""
    env = _residual_env(tiny, base_policy="mpc")
    neutral = _episode(env, lambda e: e.neutral_action())
    mpc = run_episode(make_policy("mpc"), tiny, env.sim_config, seed=0)
    assert (neutral["train_jct_mean"], neutral["restarts"]) == (mpc.train_jct_mean, mpc.restarts)


def test_random_masked_corrections_are_valid_and_change_the_outcome(tiny) -> None:
    env = _residual_env(tiny)
    rng = np.random.default_rng(1)
    nd = len(RESIDUAL_DELTAS)
    seen_repairs = []

    def choose(e: DeepBootEnv) -> np.ndarray:
        mask = e.action_masks()
        slots = mask[: MAX_JOBS * nd].reshape(MAX_JOBS, nd)
        base = e.observation_space["base"]
        assert base.contains(e._observe()["base"])
        # exactly the corrections that keep a job's base count within [0, max_replicas] are valid
        for job, row in zip(e._state.jobs[:MAX_JOBS], slots, strict=False):
            base_count = e.codec._counts.get(job.id, 0)
            expected = [0 <= base_count + delta <= job.max_replicas for delta in RESIDUAL_DELTAS]
            assert row.tolist() == expected
        assert mask[MAX_JOBS * nd :].all()
        assert slots[len(e._state.jobs) :].sum() == MAX_JOBS - min(len(e._state.jobs), MAX_JOBS)
        action = np.array([rng.choice(np.flatnonzero(row)) for row in slots] + [rng.integers(e.lend_levels)])
        alloc, repaired = e.codec.decode_allocation(action, e._state)
        validate_allocation(e._state, alloc)  # raises on any over-allocation
        seen_repairs.append(repaired)
        return action

    metrics = _episode(env, choose)
    ats = run_episode(make_policy("ats"), tiny, env.sim_config, seed=0)
    assert metrics["train_jobs_done"] == metrics["train_jobs"]
    assert metrics["train_jct_mean"] != ats.train_jct_mean
    assert all(r >= 0 for r in seen_repairs)


def test_decode_rejects_bad_actions_and_needs_a_proposal(tiny) -> None:
    codec = ResidualCodec(MAX_JOBS, 5, "ats")
    env = _residual_env(tiny)
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match="observe"):
        codec.decode(env.neutral_action(), env._state)
    codec.observe(env._state)
    with pytest.raises(ValueError, match="must have shape"):
        codec.decode(np.zeros(3, dtype=int), env._state)
    bad = env.neutral_action()
    bad[0] = len(RESIDUAL_DELTAS)
    with pytest.raises(ValueError, match="outside the action space"):
        codec.decode(bad, env._state)
    with pytest.raises(ValueError, match="action_mode"):
        DeepBootEnv(workload=tiny, action_mode="bogus")


def test_demonstrations_in_residual_mode_are_neutral(tiny) -> None:
    demos = collect_demonstrations("ats", [tiny], env_kwargs={"max_jobs": MAX_JOBS, "action_mode": "residual"})
    assert np.all(demos.actions[:, :-1] == NEUTRAL) and np.all(demos.actions[:, -1] == 4)
    assert "base" in demos.obs
    with pytest.raises(ValueError, match="base policy"):
        collect_demonstrations("fifo", [tiny], env_kwargs={"max_jobs": MAX_JOBS, "action_mode": "residual"})


def test_initialised_residual_agent_is_the_base_policy_and_exports_its_base(tiny, tmp_path) -> None:
    vec = make_vec_env_for(tiny, 1, 0, {"max_jobs": MAX_JOBS, "action_mode": "residual"})
    model = build_model("maskable_ppo", vec, device="cpu", seed=0, hyperparams=SMALL_NET)
    vec.close()
    assert env_shape_of(model)["action_mode"] == "residual"
    init_residual_policy(model, _residual_env(tiny).neutral_action(), 0.9)
    config = _residual_env(tiny).sim_config
    agent = run_episode(AgentPolicy(model), tiny, config, seed=0)
    ats = run_episode(make_policy("ats"), tiny, config, seed=0)
    assert agent.train_jct_mean == ats.train_jct_mean
    with pytest.raises(ValueError, match="neutral_prob"):
        init_residual_policy(model, _residual_env(tiny).neutral_action(), 1.0)

    run = tmp_path / "run"
    run.mkdir()
    model.save(run / "best_model.zip")
    (run / "config.yml").write_text(yaml.safe_dump({"algo": "maskable_ppo", "env_kwargs": {"base_policy": "fifo"}}))
    assert load_agent_policy(run).codec.base_name == "fifo"
    out = export_model(run, tmp_path / "exported.zip")
    assert load_checkpoint(out).policy.env_kwargs["base_policy"] == "fifo"  # the zip alone says it
    assert load_agent_policy(out).codec.base_name == "fifo"


def test_train_policy_residual_starts_at_the_base_policy(tiny, tmp_path) -> None:
    csv_path = write_workload_csv(tiny, tmp_path / "tiny.csv")
    argv = [
        "--algo", "maskable_ppo", "--preset", "smoke", "--n-timesteps", "256", "--n-envs", "1",
        "--workload", str(csv_path), "--eval-workload", str(csv_path), "--eval-freq", "1024",
        "--env-kwargs", "action_mode:residual", "--residual-neutral-prob", "0.8",
        "--log-folder", str(tmp_path / "runs"), "--no-progress", "--verbose", "0",
    ]  # fmt: skip
    run = train_policy.run(argv)
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["residual_neutral_prob"] == 0.8
    with open(run / "evaluations.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert config["env_kwargs"]["dynamics"] == "v1"  # the front ends' default world
    ats = run_episode(make_policy("ats"), tiny, _residual_env(tiny, dynamics="v1").sim_config, seed=0)
    assert int(rows[0]["timesteps"]) == 0
    assert float(rows[0]["train_jct_mean"]) == pytest.approx(ats.train_jct_mean)


def test_shipped_checkpoint_is_a_small_residual_agent_that_beats_fifo_and_nolend() -> None:
    path = REPO / "agents" / "pretrained" / "deepboot-v0.zip"
    assert path.stat().st_size < 5e6
    agent = make_policy(f"ppo:{path}")
    assert agent.action_mode == "residual" and agent.codec.base_name == "ats"
    from traces.loaders import load_workload

    workload = load_workload("test/test-03")
    config = DeepBootEnv(workload=workload).sim_config
    ppo = run_episode(agent, workload, config, seed=0)
    nolend = run_episode(make_policy("ats-nolend"), workload, config, seed=0)
    fifo = run_episode(make_policy("fifo"), workload, config, seed=0)
    assert ppo.train_jobs_done == ppo.train_jobs
    assert ppo.train_jct_mean < nolend.train_jct_mean < fifo.train_jct_mean
    assert ppo.infer_latency_p99 <= 8.0
