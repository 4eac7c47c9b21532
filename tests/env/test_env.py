"""DeepBoot-v0: Gymnasium and SB3 checkers, determinism, masks, repair, rewards, rendering."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from builders import assert_runs_without_gym, masked_random_action

import deepboot_env  # noqa: F401  (registers DeepBoot-v0)
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import GPU_BUCKETS
from deepboot_env.env.observation import _LOG_AGE, _LOG_SERVICE, CLUSTER_FEATURES, JOB_FEATURES, SPEEDUP_POINTS
from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.sim.cluster import NODE_INFER
from traces.generate import generate_workload

SB3_ALLOWED_WARNINGS: tuple[str, ...] = ()
"""SB3 checker warnings we accept (none at present)."""


@pytest.fixture(scope="module")
def small_workload():
    return generate_workload(
        "env-small", 5, train={"num_jobs": 12}, inference={"horizon_s": 8 * 3600.0, "mean_gpus": 3.0}
    )


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


@pytest.mark.parametrize("action_mode", ["target", "residual", "score"])
def test_registered_and_checkers_pass(small_workload, action_mode) -> None:
    env = gym.make("DeepBoot-v0", workload=small_workload, max_jobs=8, action_mode=action_mode)
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
    with pytest.raises(ValueError, match="must have shape"):
        env.step(np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="outside"):
        env.step(np.array([99, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="must hold integers"):
        env.step(np.array([1.7, 0, 0, 0, 4]))  # refused, not truncated
    with pytest.raises(ValueError, match=r"must have shape \(5,\), got \(5, 1\)"):
        env.step(np.zeros((5, 1), dtype=int))  # refused, not flattened
    env.step(np.array([1, 0, 0, 0, 4], dtype=np.int32))  # any integer dtype


def test_bad_output_paths_and_strict_json(small_workload, tmp_path, capsys) -> None:
    import json

    from deepboot_harness.cli import main
    from traces.generate import write_workload_csv

    csv = write_workload_csv(small_workload, tmp_path / "w.csv")
    assert main(["simulate", "--workload", str(csv), "--policy", "fifo", "--json", str(tmp_path), "--quiet"]) == 2
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["compare", "--workloads", str(csv), "--policies", "fifo", "--out", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err
    # no job completes within max_time: the mean JCT is NaN in Python and null in the JSON (a job
    # arriving after max_time would be an error: the first job, moved to t = 0)
    from dataclasses import replace

    from deepboot_env.evaluation import run_episode
    from deepboot_env.sim.simulator import SimConfig
    from deepboot_env.sim.workload import Workload

    early = Workload("early", (replace(small_workload.jobs[0], arrival=0.0),))
    metrics = run_episode("fifo", early, SimConfig(max_time=60.0))
    assert metrics.train_jobs_done == 0 and json.loads(metrics.to_json())["train_jct_mean"] is None


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


# ------------------------------------------------------------- fast paths = reference encodings


def _reference_cluster(state, max_jobs: int) -> np.ndarray:
    """The cluster features as first written (numpy, node by node)."""
    import math

    from deepboot_env.sim.cluster import NODE_INFER

    out = np.zeros(len(CLUSTER_FEATURES), dtype=np.float32)
    infer = state.node_kinds == NODE_INFER
    g = state.gpus_per_node
    train_total = max(int((~infer).sum()) * g, 1)
    infer_total = max(int(infer.sum()) * g, 1)
    free = g - state.train_used - (state.running + state.protect + state.sleeping)
    out[0] = free[~infer].sum() / train_total
    out[1] = free[infer].sum() / infer_total if infer.any() else 0.0
    all_gpus = state.config.total_gpus
    out[2] = state.sleeping.sum() / all_gpus
    out[3] = state.protect.sum() / all_gpus
    out[4] = state.running.sum() / all_gpus
    out[5] = state.train_used[infer].sum() / infer_total if infer.any() else 0.0
    out[6] = min(state.waiting_requests / all_gpus, 1.0)
    recent = state.recent_arrivals
    out[7] = min(recent[-1] / 60.0, 1.0) if recent else 0.0
    out[8] = min(float(np.mean(recent)) / 60.0, 1.0) if recent else 0.0
    phase = 2 * math.pi * (state.time % 86400.0) / 86400.0
    out[9] = 0.5 + 0.5 * math.sin(phase)
    out[10] = 0.5 + 0.5 * math.cos(phase)
    out[11] = min(len(state.jobs) / max_jobs, 1.0)
    out[12] = min(max(len(state.jobs) - max_jobs, 0) / max_jobs, 1.0)
    return out


def _reference_job_row(job, state, out: np.ndarray) -> None:
    """The job features of one slot, written element by element into ``out`` (the reference of
    encode_observation's one-pass rows)."""
    total = state.config.total_gpus
    out[0] = 1.0
    out[1 : 1 + len(APP_NAMES)] = 0.0
    out[1 + APP_NAMES.index(job.app)] = 1.0
    i = 1 + len(APP_NAMES)
    replicas = job.replicas
    out[i] = min(replicas / total, 1.0)
    out[i + 1] = min(job.max_replicas / total, 1.0)
    out[i + 2] = min(math.log1p(max(job.age, 0.0)) / _LOG_AGE, 1.0)
    out[i + 3] = min(math.log1p(job.attained_service) / _LOG_SERVICE, 1.0)
    out[i + 4] = min(job.num_restarts / 20.0, 1.0)
    out[i + 5] = job.progress_fraction
    out[i + 6 : i + 6 + len(SPEEDUP_POINTS)] = job.rates.speedup_curve(job.epoch, SPEEDUP_POINTS, state.gpus_per_node)
    j = i + 6 + len(SPEEDUP_POINTS)
    lent = int(job.alloc[state.node_kinds == NODE_INFER].sum())
    out[j] = lent / replicas if replicas else 0.0
    out[j + 1] = min(job.stalled_seconds / 120.0, 1.0)


@pytest.mark.parametrize("cluster", ["8x4+8x4", "shared:8x4"])
def test_observation_equals_the_per_job_reference(small_workload, cluster) -> None:
    """encode_observation (all slots in one pass) == encode_job slot by slot + the numpy cluster
    features, bit for bit, and the env returns exactly encode_observation of its state."""
    from dataclasses import fields

    from deepboot_env.env.observation import encode_observation
    from deepboot_env.sim.state import JobView

    kwargs = {"shared_pool": "8x4"} if cluster.startswith("shared") else {"cluster": cluster}
    env = DeepBootEnv(workload=small_workload, max_jobs=4, **kwargs)
    rng = np.random.default_rng(3)
    obs, _ = env.reset(seed=3)
    for _ in range(150):
        state = env._state
        jobs = np.zeros((4, len(JOB_FEATURES)), dtype=np.float32)
        for slot, job in enumerate(state.jobs[:4]):
            _reference_job_row(job, state, jobs[slot])
        mine = encode_observation(state, 4)
        assert mine["jobs"].tobytes() == jobs.reshape(-1).tobytes() == obs["jobs"].tobytes()
        assert mine["cluster"].tobytes() == _reference_cluster(state, 4).tobytes() == obs["cluster"].tobytes()
        assert state.node_counts == tuple(
            a.tolist() for a in (state.train_used, state.running, state.protect, state.sleeping)
        )
        for view in state.jobs:  # the simulator builds views without JobView.__init__
            rebuilt = JobView(**{f.name: getattr(view, f.name) for f in fields(JobView)})
            assert view == rebuilt and set(vars(rebuilt)) <= set(vars(view))
            assert view.replicas == int(view.alloc.sum()) and view.nodes == int(np.count_nonzero(view.alloc))
        obs, _, terminated, truncated, _ = env.step(masked_random_action(env, rng))
        if terminated or truncated:
            break


def test_encoding_works_without_gymnasium() -> None:
    """encode_observation and the target codec need only the simulator (the policy adapter
    runs a saved model through them); importing them does not import gymnasium."""
    assert_runs_without_gym(
        "import numpy as np\n"
        "from deepboot_env.env.action import TargetCodec\n"
        "from deepboot_env.env.observation import JOB_FEATURES, encode_observation\n"
        "sim = Simulator(one_ncf_job, one_gpu)\n"
        "state = sim.observe()\n"
        "obs = encode_observation(state, 2)\n"
        "assert obs['jobs'].shape == (2 * len(JOB_FEATURES),) and obs['jobs'][0] == 1.0\n"
        "assert obs['cluster'].shape == (13,) and 'gymnasium' not in [m for m in sys.modules if sys.modules[m]]\n"
        "codec = TargetCodec(2, 3)\n"
        "assert codec.mask(state).sum() == 2 + 1 + 1\n"
        "alloc, repaired = codec.decode_allocation(np.array([1, 0, 0]), state)\n"
        "assert alloc.gpus[0].tolist() == [1] and repaired == 0\n"
    )


def _trim_one_gpu_at_a_time(targets: dict[int, int], jobs: dict, excess: int) -> None:
    """The documented repair rule, literally: one GPU at a time from the largest target (ties:
    most attained service, then latest arrival)."""
    order = sorted(targets, key=lambda j: (-targets[j], -jobs[j].attained_service, -jobs[j].arrival))
    for _ in range(excess):
        j = order[0]
        targets[j] -= 1
        order.sort(key=lambda j: (-targets[j], -jobs[j].attained_service, -jobs[j].arrival))


def test_trim_to_capacity_equals_the_gpu_by_gpu_rule() -> None:
    import random
    from types import SimpleNamespace

    from deepboot_env.env.action import trim_to_capacity

    rng = random.Random(0)
    for _ in range(3000):
        ids = rng.sample(range(100), rng.randint(1, 15))
        # equal services are common (0 before a first start); equal (service, arrival) pairs are
        # left out: the rule does not order them
        pairs = rng.sample([(service, arrival) for service in (0.0, 60.0, 120.0) for arrival in range(5)], len(ids))
        jobs = {j: SimpleNamespace(attained_service=s, arrival=float(a)) for j, (s, a) in zip(ids, pairs, strict=True)}
        targets = {j: rng.choice([0, 1, 2, 3, 4, 8, 16, 32]) for j in ids}
        if not sum(targets.values()):
            continue
        excess = rng.randint(1, sum(targets.values()))
        fast, slow = dict(targets), dict(targets)
        trim_to_capacity(fast, jobs, excess)
        _trim_one_gpu_at_a_time(slow, jobs, excess)
        assert fast == slow
        assert sum(fast.values()) == sum(targets.values()) - excess


def test_registered_time_limit_is_the_envs_own_cap(small_workload) -> None:
    from deepboot_env.config import EnvConfig

    for version in ("v0", "v1"):
        assert gym.spec(f"DeepBoot-{version}").max_episode_steps == EnvConfig().max_rounds == 3000
    cap = 25  # made with a matching max_episode_steps, the TimeLimit and the env end the episode together
    wrapped = gym.make("DeepBoot-v0", workload=small_workload, max_jobs=8, max_rounds=cap, max_episode_steps=cap)
    plain = DeepBootEnv(workload=small_workload, max_jobs=8, max_rounds=cap, dynamics="v0")
    obs_w, _ = wrapped.reset(seed=1)
    obs_p, _ = plain.reset(seed=1)
    rng = np.random.default_rng(1)
    steps = 0
    while steps < cap + 1:
        steps += 1
        action = masked_random_action(plain, rng)
        obs_w, reward_w, term_w, trunc_w, info_w = wrapped.step(action)
        obs_p, reward_p, term_p, trunc_p, info_p = plain.step(action)
        assert reward_w == reward_p and (term_w, trunc_w) == (term_p, trunc_p)
        assert all(np.array_equal(obs_w[k], obs_p[k]) for k in obs_p)
        if term_p or trunc_p:
            break
    assert steps == cap and trunc_w and trunc_p and not term_p
    for info in (info_w, info_p):
        info["episode_metrics"].pop("wall_seconds")
    assert repr(info_w["episode_metrics"]) == repr(info_p["episode_metrics"])  # NaN where no job finished
