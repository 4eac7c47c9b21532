"""Behaviour-cloning warm start (agents.trainers.imitation) and train_policy.py --pretrain-expert."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest
import torch
import yaml
from builders import REPO

from agents.trainers.imitation import (
    collect_demonstrations,
    discounted_returns,
    perturb,
    pretrain,
)
from agents.trainers.ppo import build_model, make_vec_env_for
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import GPU_BUCKETS
from deepboot_env.env.observation import JOB_FEATURES
from deepboot_env.policy import make_policy
from traces.generate import generate_workload, write_workload_csv

sys.path.insert(0, str(REPO))

import train_policy  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny():
    return generate_workload("tiny", 2, train={"num_jobs": 8}, inference={"horizon_s": 3 * 3600.0, "mean_gpus": 3.0})


def _env_mid_episode(tiny, steps: int = 30) -> DeepBootEnv:
    env = DeepBootEnv(workload=[tiny], max_jobs=8)
    env.reset(seed=0)
    ats = make_policy("ats")
    for _ in range(steps):
        env.step(env.codec.expert_action("ats", ats, env.state))
    return env


def test_expert_action_rounds_down_and_decodes_back(tiny) -> None:
    env = _env_mid_episode(tiny)
    state = env.state
    alloc = make_policy("ats").decide(state)
    action = env.codec.expert_action("ats", make_policy("ats"), state)
    assert action.shape == (env.max_jobs + 1,)
    for slot, job in enumerate(state.jobs[: env.max_jobs]):
        want = alloc.replicas(job.id)
        got = GPU_BUCKETS[action[slot]]
        assert got <= want and (action[slot] == len(GPU_BUCKETS) - 1 or GPU_BUCKETS[action[slot] + 1] > want)
    decoded, repaired = env.codec.decode_allocation(action, state)
    assert repaired == 0  # rounding down never asks for more than the expert held
    for slot, job in enumerate(state.jobs[: env.max_jobs]):
        assert decoded.replicas(job.id) == GPU_BUCKETS[action[slot]]


def test_discounted_returns_by_hand() -> None:
    np.testing.assert_allclose(discounted_returns([-1.0, -2.0, -3.0], 0.5), [-1 - 1 - 0.75, -2 - 1.5, -3.0])


def test_perturb_keeps_masked_choices() -> None:
    nvec = np.array([7, 7, 5])
    mask = np.zeros(nvec.sum(), dtype=bool)
    mask[[0, 1, 2]] = True  # slot 0: buckets 0..2
    mask[7] = True  # slot 1: empty, only 0
    mask[14:] = True
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(200):
        out = perturb(np.array([1, 0, 2]), mask, nvec, 0.9, rng)
        assert out[0] in (0, 1, 2) and out[1] == 0 and 0 <= out[2] < 5
        seen.add(int(out[0]))
    assert seen == {0, 1, 2}


def test_collect_demonstrations_labels_are_valid(tiny) -> None:
    demos = collect_demonstrations("ats", [tiny], env_kwargs={"max_jobs": 8}, noise=(0.0, 0.1))
    n = len(demos)
    assert n > 20 and demos.obs["jobs"].shape == (n, 8 * len(JOB_FEATURES)) and demos.masks.shape[0] == n
    assert demos.returns.shape == (n,) and np.all(demos.returns <= 0)
    offsets = np.concatenate([[0], np.cumsum([7] * 8 + [5])])
    for action, mask in zip(demos.actions, demos.masks, strict=True):
        for d, choice in enumerate(action):
            assert mask[offsets[d] + choice], "expert label outside the action mask"
    assert len(demos.episode_jct) == 2 and all(j > 0 for j in demos.episode_jct)
    with pytest.raises(ValueError, match="noise"):
        collect_demonstrations("ats", [tiny], noise=(1.5,))


def test_pretrain_fits_the_expert_and_keeps_value_units(tiny) -> None:
    demos = collect_demonstrations("ats", [tiny], env_kwargs={"max_jobs": 8})
    venv = make_vec_env_for([tiny], 1, 0, {"max_jobs": 8})
    model = build_model(
        "maskable_ppo", venv, hyperparams={"policy_kwargs": {"net_arch": {"pi": [64, 64], "vf": [64, 64]}}}
    )
    history = pretrain(model, demos, epochs=25, batch_size=64, learning_rate=3e-3)
    assert history[-1]["bc_loss"] < 0.5 * history[0]["bc_loss"]
    assert history[-1]["mean_prob"] > 0.8
    obs = {k: torch.as_tensor(v) for k, v in demos.obs.items()}
    with torch.no_grad():
        values = model.policy.predict_values(obs).numpy().ravel()
    # the value head predicts returns in reward units (the scaling used while cloning is undone)
    assert np.corrcoef(values, demos.returns)[0, 1] > 0.5
    assert abs(np.mean(values) - np.mean(demos.returns)) < 0.5 * abs(np.mean(demos.returns))
    with pytest.raises(ValueError):
        pretrain(model, demos, epochs=-1)


def test_train_policy_pretrain_smoke(tiny, tmp_path) -> None:
    csv_path = write_workload_csv(tiny, tmp_path / "tiny.csv")
    argv = [
        "--algo", "maskable_ppo", "--preset", "smoke", "--n-timesteps", "256", "--n-envs", "1",
        "--workload", str(csv_path), "--eval-workload", str(csv_path), "--eval-freq", "1024",
        "--pretrain-expert", "ats", "--pretrain-epochs", "2", "--pretrain-noise", "0",
        "--log-folder", str(tmp_path / "runs"), "--no-progress", "--verbose", "0",
    ]  # fmt: skip
    run = train_policy.run(argv)
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["pretrain"]["expert"] == "ats" and config["pretrain"]["epochs"] == 2
    assert config["pretrain"]["transitions"] > 0
    with open(run / "evaluations.csv", encoding="utf-8") as fh:
        steps = [int(r["timesteps"]) for r in csv.DictReader(fh)]
    assert steps[0] == 0  # the clone is evaluated before the first PPO update
    with pytest.raises(SystemExit):
        train_policy.main(argv[:-8] + ["--pretrain-expert", "no-such-policy", "--log-folder", str(tmp_path / "r2")])


def test_learning_curve_png_from_evaluations(tmp_path) -> None:
    from deepboot_harness.curves import chained_curve, evaluation_curve, main

    run = tmp_path / "run"
    run.mkdir()
    (run / "evaluations.csv").write_text(
        "timesteps,workload,train_jct_mean\n0,a,100\n0,b,300\n50,a,90\n50,b,210\n", encoding="utf-8"
    )
    assert evaluation_curve(run) == [(0.0, 200.0), (50.0, 150.0)]
    out = tmp_path / "curve.png"
    assert main([str(run), "--reference", "ats=120", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(FileNotFoundError, match="evaluations.csv"):
        evaluation_curve(tmp_path / "missing")
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "evaluations.csv").write_text("timesteps,workload,train_jct_mean\n50,a,150\n80,a,70\n", encoding="utf-8")
    assert chained_curve(f"{run},{resumed}") == [(0.0, 200.0), (50.0, 150.0), (80.0, 70.0)]
    ratios = tmp_path / "ratios"
    ratios.mkdir()
    (ratios / "evaluations.csv").write_text(
        "timesteps,workload,train_jct_mean,jct_ratio\n0,a,100,1.0\n0,b,300,0.8\n50,a,90,\n", encoding="utf-8"
    )
    assert evaluation_curve(ratios, "jct_ratio") == [(0.0, 0.9)]  # empty cells skipped
    assert main([str(ratios), "--ratio", "ats", "--reference", "ones-lend=0.93", "--out", str(out)]) == 0
    with pytest.raises(SystemExit):  # a run evaluated without a reference has no ratios
        main([str(run), "--ratio", "ats", "--out", str(out)])


def test_a_run_s_curve_shows_its_ratio_to_the_reference_and_to_its_prior(tmp_path) -> None:
    from deepboot_harness.curves import CURVE_FILE, run_curves, write_run_curve

    run = tmp_path / "ppo_1"
    run.mkdir()
    rows = "timesteps,workload,jct_ratio,prior_ratio\n0,a,0.9,1.0\n0,b,0.8,1.0\n64,a,0.85,0.98\n64,b,0.75,0.96\n"
    (run / "evaluations.csv").write_text(rows, encoding="utf-8")
    curves = run_curves(run, "ats")
    assert curves == {
        "ppo_1 / ats": [(0.0, pytest.approx(0.85)), (64.0, pytest.approx(0.8))],
        "ppo_1 / its prior": [(0.0, 1.0), (64.0, pytest.approx(0.97))],
    }
    assert write_run_curve(run, "ats") == run / CURVE_FILE and (run / CURVE_FILE).read_bytes()[:4] == b"\x89PNG"
    (run / "evaluations.csv").write_text("timesteps,workload,jct_ratio\n0,a,0.9\n", encoding="utf-8")
    assert list(run_curves(run, "ats")) == ["ppo_1 / ats"]  # a run from before the prior's column
    assert write_run_curve(run, None) is None
