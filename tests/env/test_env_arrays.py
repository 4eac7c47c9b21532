"""The env played on the compiled loop's arrays is the env played on the simulator.

Where its episode may go on the arrays (:func:`deepboot_env.evaluation.episode_driver`), a score
mode env plays there, its prior deciding compiled (``decode_on_arrays``) and its log-weights read
compiled (``observe_on_arrays``). Each case steps two envs with the same actions, one on the
arrays and one on the simulator, and compares every observation, reward and info to the last bit,
the final metrics with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from baselines.ats import AtsPolicy
from deepboot_env import evaluation
from deepboot_env.config import sim_config
from deepboot_env.env import DeepBootEnv
from deepboot_env.policy import make_policy
from deepboot_env.sim.array_episode import ArrayEpisode
from deepboot_env.sim.simulator import Simulator
from traces.generate import generate_workload


def _workload(seed: int = 3):
    return generate_workload(
        "env-arrays", seed, train={"num_jobs": 12}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 10.0}
    )


def _played(arrays: bool, steps: int, seed: int = 0, **options: Any) -> tuple[list[tuple], list[str]]:
    """``steps`` steps of an env (resets included) under seeded random actions (in residual mode
    every other one neutral): each step's (reward, observation bytes, info, metrics without wall
    time, terminated, truncated), and what each step played on."""
    evaluation_arrays = evaluation.ARRAY_EPISODES
    evaluation.ARRAY_EPISODES = arrays
    try:
        env = DeepBootEnv(_workload(), **options)
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)
        nvec = None if env.codec.continuous else env.action_space.nvec
        record, drivers = [], []
        for step in range(steps):
            drivers.append(type(env._driver).__name__)
            if env.codec.mode == "score":
                action = np.clip(rng.standard_normal(env.action_space.shape), -1.5, 1.5).astype(np.float32)
            elif step % 2:
                action = env.neutral_action()
            else:  # a correction of -1, 0 or +1 choice per slot within the mask, a random lending level
                action, masks, starts = env.neutral_action(), env.action_masks(), np.cumsum([0, *nvec[:-1]])
                for i in range(env.max_jobs):
                    choice = action[i] + rng.integers(-1, 2)
                    action[i] = choice if masks[starts[i] + choice] else action[i]
                action[-1] = rng.integers(nvec[-1])
            obs, reward, terminated, truncated, info = env.step(action)
            metrics = info.pop("episode_metrics", None)
            if metrics is not None:
                metrics.pop("wall_seconds")
            record.append((reward, {k: v.tobytes() for k, v in obs.items()}, info, metrics, terminated, truncated))
            if terminated or truncated:
                env.reset()
        return record, drivers
    finally:
        evaluation.ARRAY_EPISODES = evaluation_arrays


@pytest.mark.parametrize(
    "options",
    [
        {"action_mode": "score", "base_policy": "ats-srpt"},
        {"action_mode": "score", "base_policy": "ats-srpt-fcfs-place-rr-warm", "width_classes": 3, "hold": 3},
        {"action_mode": "score", "base_policy": "ats", "relative_reward": True, "max_rounds": 150},
        {"action_mode": "residual", "base_policy": "ats"},
        {"action_mode": "residual", "base_policy": "ats-srpt-fcfs-place-rr-warm"},
    ],
    ids=["ats-srpt", "prior-widths-hold", "ats-relative-truncated", "residual-ats", "residual-prior"],
)
def test_env_on_the_arrays_is_the_simulators(options: dict) -> None:
    ours, drivers = _played(True, 900, **options)
    reference, reference_drivers = _played(False, 900, **options)
    assert set(reference_drivers) == {"Simulator"} and "ArrayEpisode" in drivers
    assert sum(step[-2] or step[-1] for step in reference) >= 1  # an episode ended, and was compared whole
    assert ours == reference


def test_compiled_log_weights_are_the_priors() -> None:
    """At every decision of an episode, the prior's compiled log-weights are its Python ones."""
    workload = _workload(5)
    for prior in ("ats-srpt", "ats-srpt-fcfs-place-rr-warm"):
        policy = make_policy(prior)
        assert isinstance(policy, AtsPolicy)
        sim = Simulator(workload, sim_config(), policy)
        episode = ArrayEpisode(sim)
        decisions = 0
        while not episode.done:
            state = episode.observe()
            compiled = policy.log_weights_on_arrays(episode)
            assert compiled is not None
            python = policy.log_weights(state)
            assert {j: compiled[j] for j in python} == python
            episode.apply(policy.decide(state), state)
            episode.advance()
            decisions += 1
        assert decisions > 50


def test_asking_for_the_simulator_mid_episode_hands_it_over() -> None:
    """``env.sim`` mid-episode writes the arrays back and the episode goes on on the simulator,
    the same episode as one played on the simulator throughout."""
    evaluation_arrays = evaluation.ARRAY_EPISODES
    evaluation.ARRAY_EPISODES = True
    try:
        env = DeepBootEnv(_workload(), action_mode="score", base_policy="ats-srpt")
        env.reset(seed=1)
        assert isinstance(env._driver, ArrayEpisode)
        action = env.neutral_action()
        for _ in range(30):
            env.step(action)
        sim = env.sim
        assert isinstance(env._driver, Simulator) and sim is env._driver and not sim.done
        now, handed_over = sim.now, {name: list(row) for name, row in sim.ledger.counts.items()}
        done = False
        while not done:
            _, _, done, _, info = env.step(action)
        evaluation.ARRAY_EPISODES = False
        reference = DeepBootEnv(_workload(), action_mode="score", base_policy="ats-srpt")
        reference.reset(seed=1)
        for _ in range(30):
            reference.step(action)
        assert reference.sim is not None and reference.sim.now == now
        assert reference.sim.ledger.counts == handed_over  # the training GPUs per node written back too
        done = False
        while not done:
            _, _, done, _, reference_info = reference.step(action)
        for record in (info, reference_info):
            record["episode_metrics"].pop("wall_seconds")
        assert info == reference_info
    finally:
        evaluation.ARRAY_EPISODES = evaluation_arrays


def test_only_codecs_that_decode_compiled_go_on_the_arrays_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluation, "ARRAY_EPISODES", None)
    monkeypatch.setattr(evaluation, "loops_cached", lambda: True)
    score = DeepBootEnv(_workload(), action_mode="score", base_policy="ats-srpt")
    target = DeepBootEnv(_workload())
    rendered = DeepBootEnv(_workload(), action_mode="score", base_policy="ats-srpt", render_mode="ansi")
    for env in (score, target, rendered):
        env.reset(seed=0)
    assert isinstance(score._driver, ArrayEpisode)
    assert isinstance(target._driver, Simulator) and isinstance(rendered._driver, Simulator)
