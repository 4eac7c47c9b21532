"""Whole episodes played on the compiled loop's arrays (:class:`ArrayEpisode`) are the simulator's.

Each episode is played twice from the same workload: by the simulator's own loop, and from its
first decision on the arrays (the events between decisions and every allocation compiled, the
policy's state built from the job rows, everything written back at the end). The episode records
(metrics with every JCT, the timeline, every request's record, reclaims, restarts, events) and the
final jobs are the same, to the last bit.
"""

from __future__ import annotations

import pytest
from builders import episode_record

from baselines.ats import AtsPolicy
from deepboot_env import evaluation
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.sim.array_episode import ArrayEpisode, array_episode_applies
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload


def played(workload, config: SimConfig, policy, arrays: bool) -> Simulator:
    """``workload`` played to the end by ``policy`` (a fresh copy by name), on the arrays or not."""
    policy = make_policy(policy) if isinstance(policy, str) else policy
    sim = Simulator(workload, config, policy)
    driver = ArrayEpisode(sim) if arrays else sim
    while not driver.done:
        state = driver.observe()
        driver.apply(policy.decide(state), state)
        driver.advance()
    return sim


def job_record(sim: Simulator) -> list[tuple]:
    return [
        (j.epoch, j.progress, j.attained_service, j.completion, j.first_start, j.num_restarts, j.version, j.counts)
        for j in sim.jobs
    ]


@pytest.mark.parametrize(
    "policy, config",
    [
        ("ats", SimConfig()),
        ("ats-srpt-fcfs-place-rr-warm", SimConfig(cap_growth="trained")),  # v1's caps, the fitted truth
        ("ats-srpt", SimConfig(restart="pollux")),
        ("fifo", SimConfig(restart="full", cluster=ClusterConfig.parse_shared("8x4"))),
        ("ats", SimConfig(max_time=8 * 3600.0)),  # the last job arrives at 7.6 h: cut mid-training
        ("ats", sim_config()),  # DeepBoot-v1: the measured truth, caps grown once trained
        ("ats-srpt-fcfs-place-rr-warm", sim_config()),
    ],
    ids=["ats", "prior", "ats-srpt-pollux", "fifo-shared-full", "ats-cut", "ats-v1", "prior-v1"],
)
def test_array_episode_is_the_simulators(policy: str, config: SimConfig) -> None:
    horizon = min(10 * 3600.0, config.max_time - 3600.0)  # every request arrives before the end
    workload = generate_workload(
        "array-episodes", 9, train={"num_jobs": 30}, inference={"horizon_s": horizon, "mean_gpus": 10.0}
    )
    reference = played(workload, config, policy, arrays=False)
    ours = played(workload, config, policy, arrays=True)
    assert array_episode_applies(Simulator(workload, config, make_policy(policy)))
    assert episode_record(ours, events=True) == episode_record(reference, events=True)
    assert job_record(ours) == job_record(reference)
    assert (ours.done, ours.truncated, ours.now) == (reference.done, reference.truncated, reference.now)


def test_run_episode_plays_on_the_arrays_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    workload = generate_workload("array-episodes", 4, train={"num_jobs": 12}, inference={"horizon_s": 4 * 3600.0})
    reference = run_episode("ats", workload, SimConfig())
    made = []
    start = ArrayEpisode.__init__
    monkeypatch.setattr(evaluation, "ARRAY_EPISODES", True)
    monkeypatch.setattr(ArrayEpisode, "__init__", lambda self, sim, *rest: made.append(sim) or start(self, sim, *rest))
    assert run_episode("ats", workload, SimConfig()).deterministic_dict() == reference.deterministic_dict()
    cut = run_episode("ats", workload, SimConfig(), max_decisions=40).deterministic_dict()
    monkeypatch.setattr(evaluation, "ARRAY_EPISODES", False)
    assert cut == run_episode("ats", workload, SimConfig(), max_decisions=40).deterministic_dict()
    assert len(made) == 2 and cut["truncated"]


@pytest.mark.parametrize(
    "change",
    [
        {"config": SimConfig(interference=0.3)},
        {"config": SimConfig(restart="stopfree")},
        {"policy": AtsPolicy(relist_restarts=True)},
        {"policy": "oracle-lookahead"},
    ],
    ids=["interference", "stopfree", "relist", "binds-simulator"],
)
def test_array_episodes_apply_only_where_they_are_the_same(change: dict) -> None:
    workload = generate_workload("array-episodes", 4, train={"num_jobs": 4}, inference={"horizon_s": 600.0})
    policy = change.get("policy", "ats")
    sim = Simulator(
        workload, change.get("config", SimConfig()), make_policy(policy) if isinstance(policy, str) else policy
    )
    assert not array_episode_applies(sim)


def test_episodes_go_on_the_arrays_once_compiling_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default (``ARRAY_EPISODES`` None) a process plays a policy that decides compiled on the
    arrays where the loops are on disk already, without compiling a policy's decision that is
    not; and from its ``ARRAY_EPISODES_AFTER``-th applicable episode on, compiling what it needs."""
    from deepboot_env.sim import array_episode

    workload = generate_workload("array-episodes", 4, train={"num_jobs": 6}, inference={"horizon_s": 3600.0})
    monkeypatch.setattr(evaluation, "ARRAY_EPISODES", None)
    monkeypatch.setattr(evaluation, "_applicable_episodes", 0)
    monkeypatch.setattr(evaluation, "ARRAY_EPISODES_AFTER", 3)
    monkeypatch.setattr(evaluation, "loops_cached", lambda: False)
    drivers = [evaluation.episode_driver(Simulator(workload, SimConfig(), make_policy("ats"))) for _ in range(4)]
    assert [type(d).__name__ for d in drivers] == ["Simulator", "Simulator", "ArrayEpisode", "ArrayEpisode"]
    assert all(d.may_compile for d in drivers[2:])
    monkeypatch.setattr(evaluation, "_applicable_episodes", 0)
    monkeypatch.setattr(evaluation, "loops_cached", lambda: True)
    cached = evaluation.episode_driver(Simulator(workload, SimConfig(), make_policy("ats")))
    assert isinstance(cached, ArrayEpisode) and not cached.may_compile
    # a policy that decides in Python stays on the simulator (no faster on the rows, and larger)
    assert isinstance(evaluation.episode_driver(Simulator(workload, SimConfig(), make_policy("fifo"))), Simulator)
    monkeypatch.setattr(evaluation, "ARRAY_EPISODES", False)
    assert isinstance(evaluation.episode_driver(Simulator(workload, SimConfig(), make_policy("ats"))), Simulator)
    assert not array_episode.cached_on_disk(len)  # the probe reads anything else as not cached
