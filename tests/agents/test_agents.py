"""agents/: the ppo:<path> policy adapter, hyperparameter parsing, model construction."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from builders import REPO, masked_random_action

import deepboot_env  # noqa: F401  (registers DeepBoot-v0)
from agents.errors import ConfigError
from agents.hyperparameters import DEFAULT_HYPERPARAMS, model_kwargs, parse_kv, resolve_hyperparams
from agents.models.algorithms import resolve_device
from agents.models.env_shape import env_shape_of
from agents.saved.policy_adapter import AgentPolicy, encode_observation, resolve_model_path
from agents.trainers.ppo import build_model, make_vec_env_for
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import GPU_BUCKETS
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import Policy, make_policy, validate_allocation
from deepboot_env.sim.simulator import SimConfig
from traces.generate import generate_workload

MAX_JOBS = 8
SMALL_NET = {"n_steps": 64, "batch_size": 64, "policy_kwargs": {"net_arch": [32, 32]}}


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def tiny():
    return generate_workload("tiny", 1, train={"num_jobs": 10}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0})


def _save_untrained(algo: str, workload, path: Path) -> Path:
    env = make_vec_env_for(workload, 1, 0, {"max_jobs": MAX_JOBS})
    model = build_model(algo, env, device="cpu", seed=0, hyperparams=SMALL_NET)
    model.save(path)
    env.close()
    return path


def _chosen_ok(mask: np.ndarray, action: np.ndarray, max_jobs: int) -> bool:
    nb = len(GPU_BUCKETS)
    slots = all(mask[d * nb + int(action[d])] for d in range(max_jobs))
    return slots and bool(mask[max_jobs * nb + int(action[max_jobs])])


def test_encode_observation_matches_env(tiny) -> None:
    env = DeepBootEnv(workload=tiny, max_jobs=MAX_JOBS)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        mine = encode_observation(env.sim.observe(), MAX_JOBS)
        for key in ("jobs", "cluster"):
            np.testing.assert_array_equal(mine[key], obs[key])
            assert mine[key].dtype == obs[key].dtype
        obs, _, terminated, truncated, _ = env.step(masked_random_action(env, rng))
        assert not (terminated or truncated)


def test_maskable_adapter_runs_an_episode_with_masks(tiny, tmp_path) -> None:
    path = _save_untrained("maskable_ppo", tiny, tmp_path / "maskable.zip")
    policy = make_policy(f"ppo:{path}")
    assert isinstance(policy, AgentPolicy) and isinstance(policy, Policy)
    assert policy.masked and (policy.max_jobs, policy.lend_levels) == (MAX_JOBS, 5)
    decisions, unmasked_violations = [], 0
    decide = policy.decide

    def checked(state):
        alloc = decide(state)
        validate_allocation(state, alloc)  # raises on an invalid allocation
        decisions.append(_chosen_ok(policy.last_mask, policy.last_action, MAX_JOBS))
        nonlocal unmasked_violations
        raw, _ = policy.model.predict(encode_observation(state, MAX_JOBS), deterministic=True)
        unmasked_violations += not _chosen_ok(policy.last_mask, raw, MAX_JOBS)
        return alloc

    policy.decide = checked
    # an untrained agent may starve a job forever: bound the simulated time (arrivals end by 8 h)
    metrics = run_episode(policy, tiny, SimConfig(max_time=10 * 3600.0), seed=0)
    assert len(decisions) > 100 and all(decisions)
    assert unmasked_violations > 0  # the same net without masks would pick masked-out buckets
    assert metrics.train_jobs == 10 and metrics.train_jobs_done >= 1


def test_ppo_adapter_and_run_folder(tiny, tmp_path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _save_untrained("ppo", tiny, run / "final_model.zip")
    assert resolve_model_path(run) == run / "final_model.zip"
    (run / "config.yml").write_text(yaml.safe_dump({"algo": "ppo"}))
    policy = make_policy(f"ppo:{run}")
    assert isinstance(policy, AgentPolicy) and not policy.masked
    metrics = run_episode(policy, tiny, SimConfig(max_time=9 * 3600.0), seed=0)
    assert metrics.train_jobs == 10
    with pytest.raises(FileNotFoundError, match="no saved model"):
        make_policy(f"ppo:{tmp_path / 'missing.zip'}")


def test_env_shape_from_model(tiny) -> None:
    env = make_vec_env_for(tiny, 1, 0, {"max_jobs": 4, "lend_levels": 3})
    model = build_model("maskable_ppo", env, hyperparams=SMALL_NET)
    assert env_shape_of(model) == {"max_jobs": 4, "lend_levels": 3, "action_mode": "target"}
    policy = AgentPolicy(model)
    small = DeepBootEnv(workload=tiny, max_jobs=4, lend_levels=3)
    small.reset(seed=0)
    state = small.sim.observe()
    validate_allocation(state, policy.decide(state))
    assert len(policy.last_action) == 5


def test_parse_kv_and_hyperparams() -> None:
    parsed = parse_kv(["n_steps:128", "learning_rate:lin_1e-3", "gamma:0.99", "policy_kwargs:dict(net_arch=[8])"])
    flags = parse_kv(["outlook:true", "a:False", "b:null", "c:TRUE", "d:truthy"], "--env-kwargs")
    assert flags == {"outlook": True, "a": False, "b": None, "c": True, "d": "truthy"}  # YAML spellings too
    assert parsed["n_steps"] == 128 and parsed["gamma"] == 0.99
    kwargs = model_kwargs(resolve_hyperparams("ppo", parsed))
    assert kwargs["learning_rate"](1.0) == pytest.approx(1e-3) and kwargs["learning_rate"](0.0) == 0.0
    assert kwargs["policy_kwargs"] == {"net_arch": [8]}
    assert model_kwargs({"learning_rate": "3e-4"})["learning_rate"] == pytest.approx(3e-4)
    with pytest.raises(ConfigError, match="expected key:value"):
        parse_kv(["n_steps"])
    with pytest.raises(ConfigError, match="unknown hyperparameter 'n_step'"):
        resolve_hyperparams("ppo", {"n_step": 3})
    with pytest.raises(ConfigError, match="bad value"):
        resolve_hyperparams("ppo", {"n_steps": "many"})
    with pytest.raises(ConfigError, match="lin_"):
        model_kwargs({"learning_rate": "fast"})
    with pytest.raises(ConfigError, match="unknown algo 'dqn'"):
        resolve_hyperparams("dqn")


def test_device_resolution() -> None:
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.warns(RuntimeWarning, match="CUDA is not available"):
            assert resolve_device("cuda") == "cpu"
    assert resolve_device("mps") == "mps"  # SB3's get_device: any torch device, Apple's included
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device("tpu")


def test_conf_default_preset_matches_builtin_defaults() -> None:
    conf = yaml.safe_load((REPO / "agents" / "conf" / "deepboot.yml").read_text())
    run_keys = {"n_timesteps", "n_envs", "eval_freq", "eval_episodes", "save_freq", "env_kwargs"}
    for algo, defaults in DEFAULT_HYPERPARAMS.items():
        merged = {**conf["default"]["common"], **(conf["default"].get(algo) or {})}
        assert {k: v for k, v in merged.items() if k not in run_keys} == defaults
        smoke = {**conf["smoke"]["common"], **(conf["smoke"].get(algo) or {})}
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            resolve_hyperparams(algo, {k: v for k, v in smoke.items() if k not in run_keys})


def test_compare_runs_agent_in_worker_processes(tiny, tmp_path) -> None:
    """``run_comparison`` with jobs > 1 forks workers after the parent loaded the model; with
    several torch threads used in the parent, forked workers used to deadlock."""
    import subprocess
    import sys

    from traces.generate import write_workload_csv

    model = _save_untrained("maskable_ppo", tiny, tmp_path / "agent.zip")
    csv_path = write_workload_csv(tiny, tmp_path / "tiny.csv")
    script = (
        "import torch\n"
        "torch.set_num_threads(2)\n"
        "x = torch.randn(256, 256)\n"
        "(x @ x).sum()\n"
        "from deepboot_harness.compare_grid import run_comparison\n"
        "from deepboot_env.sim.simulator import SimConfig\n"
        f"c = run_comparison(['ppo:{model}'], [r'{csv_path}'], seeds=[0, 1], jobs=2, progress=False,\n"
        "                    config=SimConfig(max_time=10 * 3600.0))\n"
        "print(sorted(c.frame['train_jct_mean'].round(3).tolist()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    values = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed list
    expected = run_episode(make_policy(f"ppo:{model}"), tiny, SimConfig(max_time=10 * 3600.0)).train_jct_mean
    assert values == [pytest.approx(expected, abs=1e-3)] * 2


class _RecordingModel:
    """Stands in for a saved model: records what it is given, answers a fixed action."""

    def __init__(self, env: DeepBootEnv) -> None:
        self.action_space, self.observation_space = env.action_space, env.observation_space
        self.seen: list[tuple[dict, np.ndarray | None]] = []

    def predict(self, obs, action_masks=None, deterministic=True):
        self.seen.append((obs, action_masks))
        return np.array([1] * MAX_JOBS + [2]), None


def test_adapter_gives_the_model_the_env_observation_and_mask(tiny) -> None:
    """The ppo:<path> adapter and the env encode a state the same way (one encoder, one mask)."""
    env = DeepBootEnv(workload=tiny, max_jobs=MAX_JOBS)
    obs, _ = env.reset(seed=1)
    model = _RecordingModel(env)
    policy = AgentPolicy(model, deterministic=False)  # sampling asks model.predict (the most likely action
    # is computed from the same observation and mask: test_most_likely_action_is_sb3_predicts_...)
    policy.masked = True  # as for a MaskablePPO
    rng = np.random.default_rng(1)
    for _ in range(40):
        state = env._state  # the state behind obs
        validate_allocation(state, policy.decide(state))
        seen_obs, seen_mask = model.seen[-1]
        assert seen_obs.keys() == obs.keys()
        for key in obs:
            assert seen_obs[key].dtype == obs[key].dtype and seen_obs[key].tobytes() == obs[key].tobytes()
        np.testing.assert_array_equal(seen_mask, env.action_masks())
        obs, _, terminated, truncated, _ = env.step(masked_random_action(env, rng))
        assert not (terminated or truncated)


@pytest.mark.parametrize(
    ("algo", "env_kwargs", "arch"),
    [
        ("ppo", {}, "mlp"),
        ("maskable_ppo", {}, "mlp"),
        ("maskable_ppo", {"action_mode": "residual"}, "mlp"),
        ("maskable_ppo", {"action_mode": "residual"}, "set"),
        ("ppo", {"action_mode": "residual"}, "set"),
    ],
)
def test_most_likely_action_is_sb3_predicts_deterministic_action(tiny, algo, env_kwargs, arch) -> None:
    from agents.hyperparameters import switch_arch

    env = make_vec_env_for(tiny, 1, 0, {"max_jobs": MAX_JOBS, **env_kwargs})
    hyperparams = resolve_hyperparams(algo, {}, SMALL_NET)
    if arch == "set":
        switch_arch(hyperparams, "set", keep_policy_kwargs=False)
        hyperparams["policy_kwargs"] = {"embed_dim": 16, "attention_heads": 2, "attention_layers": 1}
    model = build_model(algo, env, device="cpu", seed=0, hyperparams=hyperparams)
    env.close()
    with torch.no_grad():  # spread the logits: an untrained head's are near-equal in every dimension
        for param in model.policy.parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(param.numel())) * 1.0)
    policy = AgentPolicy(model, base_policy="ats")
    compared, actions, predict = [], set(), policy.predict

    def checked(state):
        action, mask = predict(state)
        obs = policy_obs(policy, state)
        kwargs = {"action_masks": mask} if policy.masked else {}
        expected, _ = model.predict(obs, deterministic=True, **kwargs)
        compared.append(np.array_equal(action, np.asarray(expected).reshape(-1)))
        actions.add(tuple(action))
        return action, mask

    policy.predict = checked
    run_episode(policy, tiny, SimConfig(max_time=10 * 3600.0), seed=0, stall_limit_s=None)
    assert len(compared) > 50 and all(compared)
    assert len(actions) > 1  # not one constant action


def policy_obs(policy: AgentPolicy, state) -> dict[str, np.ndarray]:
    """The observation ``policy`` encodes for ``state`` (its outlook encoder untouched)."""
    from deepboot_env.env.observation import agent_observation

    return agent_observation(state, policy.max_jobs, None, policy.codec.observe(state))
