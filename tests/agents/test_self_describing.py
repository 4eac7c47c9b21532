"""Self-describing checkpoints: the policy keeps its env arguments, ``agents.load_agent``
returns the model with its env, plain SB3 on another env fails with one line naming the env, and
the shipped checkpoint's README snippets run as written."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from builders import REPO
from stable_baselines3 import PPO

import agents
from agents.models.algorithms import policy_class
from agents.models.described_policy import (
    EnvMismatchError,
    MaskableDescribedMultiInputPolicy,
    env_call,
    observation_mismatch,
)
from agents.saved.checkpoint import CheckpointError, load_checkpoint
from agents.saved.export import export_model
from agents.trainers.ppo import build_model, make_vec_env_for
from traces.generate import generate_workload

SHIPPED = REPO / "agents" / "pretrained" / "deepboot-v0.zip"
README = REPO / "agents" / "pretrained" / "README.md"
SMALL = {"n_steps": 16, "batch_size": 16, "policy_kwargs": {"net_arch": [8]}}

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny():
    return generate_workload("tiny", 3, train={"num_jobs": 4})


def _readme_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_shipped_checkpoint_keeps_its_env_arguments_in_plain_text() -> None:
    with zipfile.ZipFile(SHIPPED) as zf:
        data = json.loads(zf.read("data"))
    expected = {"action_mode": "residual", "base_policy": "ats", "lend_levels": 5, "max_jobs": 32}
    assert data["policy_class"]["__module__"] == "agents.described_policy"  # saved before the rooms
    assert data["policy_kwargs"]["env_kwargs"] == expected  # plain JSON
    model = load_checkpoint(SHIPPED)  # pickle-free
    assert isinstance(model.policy, MaskableDescribedMultiInputPolicy)
    assert model.policy.env_kwargs == expected


def test_load_agent_returns_the_model_and_its_env() -> None:
    model, make_env = agents.load_agent(SHIPPED)
    assert make_env.args == ("DeepBoot-v0",)
    assert make_env.keywords == {"action_mode": "residual", "base_policy": "ats", "lend_levels": 5, "max_jobs": 32}
    env = make_env(workload="test/test-03")
    obs, _ = env.reset(seed=0)
    assert observation_mismatch(obs, model.observation_space) is None
    action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=True)
    assert env.action_space.contains(action)


def test_plain_sb3_on_the_wrong_env_fails_with_the_readme_line() -> None:
    from sb3_contrib import MaskablePPO

    model = MaskablePPO.load(SHIPPED, device="cpu")  # plain SB3 (the project's own file)
    obs, _ = gym.make("DeepBoot-v0", workload="test/test-03").reset(seed=0)
    with pytest.raises(EnvMismatchError) as exc:
        model.predict(obs, deterministic=True)
    message = str(exc.value)
    assert "\n" not in message
    shown = _readme_blocks("text")[0].strip()
    assert shown == f"agents.models.described_policy.EnvMismatchError: {message}"
    assert "gym.make('DeepBoot-v0', action_mode='residual', base_policy='ats', lend_levels=5, max_jobs=32)" in message
    # a batch from a VecEnv with other slots
    batch = {k: np.zeros((2, *v.shape), np.float32) for k, v in model.observation_space.spaces.items()}
    batch["jobs"] = np.zeros((2, 16 * 21), np.float32)
    with pytest.raises(EnvMismatchError, match=r"entry 'jobs' has shape \(2, 336\), the model's \(672,\)"):
        model.predict(batch)


@pytest.mark.slow
def test_readme_snippets_run_as_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # the shipped models' names work from any folder
    blocks = _readme_blocks("python")
    assert len(blocks) == 3 and "load_agent" in blocks[0] and "MaskablePPO.load" in blocks[1]
    scopes: list[dict[str, object]] = []
    for code in blocks:
        scopes.append({})
        exec(compile(code, str(README), "exec"), scopes[-1])  # noqa: S102 - the README's own code
    rewards = [scope["mean_reward"] for scope in scopes[:2]]
    assert rewards[0] == rewards[1] and np.isfinite(rewards[0]) and rewards[0] < 0
    from agents.models.priority import PriorityPolicy

    assert isinstance(scopes[2]["policy"], PriorityPolicy)  # the learned priority's snippet


def test_training_builds_a_described_policy_and_v1_maps_to_its_id(tiny, tmp_path: Path) -> None:
    kwargs = {"max_jobs": 8, "dynamics": "v1", "action_mode": "residual", "base_policy": "fifo"}
    vec = make_vec_env_for(tiny, 1, 0, kwargs)
    model = build_model("maskable_ppo", vec, seed=0, hyperparams=SMALL, env_kwargs=kwargs)
    vec.close()
    assert model.policy.env_kwargs == kwargs
    model.save(tmp_path / "m.zip")
    loaded, make_env = agents.load_agent(tmp_path / "m.zip")
    assert loaded.policy.env_kwargs == kwargs
    assert make_env.args == ("DeepBoot-v1",)
    assert make_env.keywords == {"max_jobs": 8, "action_mode": "residual", "base_policy": "fifo", "lend_levels": 5}
    assert env_call(kwargs) == "gym.make('DeepBoot-v1', action_mode='residual', base_policy='fifo', max_jobs=8)"


@pytest.mark.parametrize("arch", ["mlp", "set"])
def test_policies_step_adam_fused_unless_told_other_optimizer_arguments(tiny, tmp_path: Path, arch: str) -> None:
    """A policy whose ``policy_kwargs`` name no optimizer arguments runs SB3's Adam (eps 1e-5) in
    torch's fused kernel, also once saved and loaded; arguments given are kept as given."""
    kwargs = {"max_jobs": 8, "action_mode": "score", "base_policy": "ats-srpt"}
    vec = make_vec_env_for(tiny, 1, 0, kwargs)
    policy = {
        "mlp": {"policy": "MultiInputPolicy", "policy_kwargs": {"net_arch": [8]}},
        "set": {"policy": "SetPolicy", "policy_kwargs": {"embed_dim": 8}},
    }[arch]
    model = build_model("ppo", vec, seed=0, hyperparams={"n_steps": 16, "batch_size": 16, **policy}, env_kwargs=kwargs)
    group = model.policy.optimizer.param_groups[0]
    assert (group["fused"], group["eps"]) == (True, 1e-5)
    model.learn(16)
    model.save(tmp_path / "m.zip")
    loaded = load_checkpoint(tmp_path / "m.zip", "ppo", device="cpu")
    assert loaded.policy.optimizer.param_groups[0]["fused"] is True
    told = {**policy["policy_kwargs"], "optimizer_kwargs": {"eps": 1e-7}}
    other = PPO(policy_class("ppo", arch), vec, n_steps=16, batch_size=16, policy_kwargs=told)
    vec.close()
    group = other.policy.optimizer.param_groups[0]
    assert (group["fused"], group["eps"]) == (None, 1e-7)


@pytest.mark.parametrize("arch", ["mlp", "set"])
def test_export_of_a_plain_sb3_model_keeps_weights_and_actions(tiny, tmp_path: Path, arch: str) -> None:
    from sb3_contrib import MaskablePPO

    env_kwargs = {"max_jobs": 8, "action_mode": "residual"}
    vec = make_vec_env_for(tiny, 1, 0, env_kwargs)
    if arch == "mlp":  # a checkpoint of SB3's own policy class (older runs)
        model = MaskablePPO("MultiInputPolicy", vec, seed=0, policy_kwargs={"net_arch": [8]}, device="cpu")
    else:
        hyper = {**SMALL, "policy": "SetPolicy", "policy_kwargs": {"embed_dim": 8}}
        model = build_model("maskable_ppo", vec, seed=0, hyperparams=hyper)
    model.save(tmp_path / "plain.zip")
    out = export_model(tmp_path / "plain.zip", tmp_path / "exported.zip")
    before, after = load_checkpoint(tmp_path / "plain.zip"), load_checkpoint(out)
    assert type(after.policy).__module__ in ("agents.models.described_policy", "agents.models.set_policy")
    assert after.policy.env_kwargs == {"max_jobs": 8, "lend_levels": 5, "action_mode": "residual"}
    state = before.policy.state_dict()
    assert all(torch.equal(state[k], v) for k, v in after.policy.state_dict().items())
    obs = vec.reset()
    vec.close()
    np.testing.assert_array_equal(before.predict(obs, deterministic=True)[0], after.predict(obs, deterministic=True)[0])
    with pytest.raises(EnvMismatchError, match="action_mode='residual'"):
        after.predict({k: v for k, v in obs.items() if k != "base"})


@pytest.mark.parametrize("pickled", [False, True])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("__import__('os').system('touch PWNED')", "not a dict of env options"),
        ("['max_jobs', 8]", "not a dict of env options"),
        ({"action_mode": "bogus"}, "action_mode"),
        ({"no_such_option": 1}, "no_such_option"),
    ],
)
def test_env_arguments_in_a_checkpoint_are_checked_not_evaluated(
    tmp_path: Path, value: object, message: str, pickled: bool
) -> None:
    """As plain JSON (SB3 stores policy_kwargs so when it can) or as the text beside a pickle
    (the loader never unpickles it: the pickle here is junk)."""
    out = tmp_path / "crafted.zip"
    with zipfile.ZipFile(SHIPPED) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.namelist():
            content = src.read(item)
            if item == "data":
                data = json.loads(content)
                kwargs = data["policy_kwargs"]
                kwargs["env_kwargs"] = value
                if pickled:
                    kwargs = {k: v if isinstance(v, str) else repr(v) for k, v in kwargs.items()}
                    kwargs.update({":type:": "<class 'dict'>", ":serialized:": "bm90IGEgcGlja2xl"})
                data["policy_kwargs"] = kwargs
                content = json.dumps(data).encode()
            dst.writestr(item, content)
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_checkpoint(out)
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()
