"""Simulator snapshots, restores and forks are exact and independent (docs/simulator.md §8).

A mid-episode snapshot, restored and finished under the same decisions, ends exactly as the episode
did from the moment it was taken (every metric, every JCT, the timeline, every request record), under
every restart model, in a shared pool, with the measured truth, in Aryl mode and with interference;
the same snapshot restores any number of times; a fork and its original never see each other's
later changes.
"""

from __future__ import annotations

import copy
import pickle

import pytest
from builders import drive, episode_record

from deepboot_env.config import sim_config
from deepboot_env.policy import Allocation, make_policy
from deepboot_env.sim.fork import ForkError, SimSnapshot
from deepboot_env.sim.inference import InferencePool
from deepboot_env.sim.restart import RESTART_MODELS
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.workload import Workload
from traces.generate import generate_workload

STEPS_BEFORE = 25
"""Decisions taken before the snapshot (jobs active, pods live, lent GPUs)."""


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate_workload("snap", 5, train={"num_jobs": 16}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 8.0})


CONFIGS: dict[str, SimConfig] = {
    **{f"restart={model}": sim_config(restart=model) for model in RESTART_MODELS},
    "shared-pool": sim_config(shared_pool="16x4"),
    "measured-truth-v1": sim_config(dynamics="v1"),
    "aryl-mode": sim_config(inference_placement="aryl"),
    "interference": sim_config(interference=0.2),
    "v1-interference-stopfree": sim_config(dynamics="v1", interference=0.2, restart="stopfree"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_restored_snapshot_finishes_exactly_like_the_original(workload: Workload, name: str) -> None:
    config = CONFIGS[name]
    policy = make_policy("ats")
    sim = Simulator(workload, config, policy)
    drive(sim, policy, STEPS_BEFORE)
    assert sim.active_jobs and not sim.done
    snap = sim.snapshot()
    assert isinstance(snap, SimSnapshot) and snap.time == sim.now and not snap.done
    reclaims, events = sim.reclaims, sim.num_events
    drive(sim, policy)
    original = episode_record(sim)
    assert sim.num_events > events
    if config.cluster.infer_nodes or config.cluster.shared_pool:
        assert sim.reclaims > reclaims  # inference took lent GPUs back after the snapshot
    for _ in range(2):  # the same snapshot, twice
        sim.restore(snap)
        assert sim.now == snap.time and sim.reclaims == reclaims and not sim.done
        assert sim._pool._training() is sim
        drive(sim, policy)
        assert episode_record(sim) == original


def test_the_snapshot_equals_an_uninterrupted_run(workload: Workload) -> None:
    """Taking a snapshot (and restoring it) changes nothing: the episode ends as one never
    snapshotted."""
    policy = make_policy("ats")
    plain = Simulator(workload, sim_config(dynamics="v1"), policy)
    drive(plain, policy)
    sim = Simulator(workload, sim_config(dynamics="v1"), policy)
    drive(sim, policy, STEPS_BEFORE)
    snap = sim.snapshot()
    drive(sim, policy, 7)
    sim.restore(snap)
    drive(sim, policy)
    assert episode_record(sim) == episode_record(plain)


def test_a_stateful_policy_is_not_part_of_the_snapshot(workload: Workload) -> None:
    """``ones-lend`` keeps a population and an RNG: the caller copies it with the snapshot, and the
    restored episode with the copied policy ends exactly like the original."""
    policy = make_policy("ones-lend")
    policy.reset(3)
    sim = Simulator(workload, sim_config(), policy)
    drive(sim, policy, STEPS_BEFORE)
    snap, saved = sim.snapshot(), copy.deepcopy(policy)
    drive(sim, policy)
    original = episode_record(sim)
    sim.restore(snap)
    assert sim.policy is policy  # the reference is kept as it is, not copied
    again = copy.deepcopy(saved)
    drive(sim, again)
    assert episode_record(sim) == original
    # restoring the simulator did not touch the policy: its RNG moved on with the first run
    assert policy.rng.bit_generator.state != saved.rng.bit_generator.state


def test_a_fork_and_its_original_are_independent_both_ways(workload: Workload) -> None:
    """The original keeps ``ats``, the fork switches to ``ats-nolend``; stepped in turns, each ends
    as a simulator run alone with its own decisions."""
    config = sim_config(dynamics="v1")
    ats, nolend = make_policy("ats"), make_policy("ats-nolend")
    alone_a = Simulator(workload, config, ats)
    drive(alone_a, ats)
    alone_b = Simulator(workload, config, ats)
    drive(alone_b, ats, STEPS_BEFORE)
    drive(alone_b, nolend)
    assert episode_record(alone_a) != episode_record(alone_b)  # the two policies differ on this workload

    sim = Simulator(workload, config, ats)
    drive(sim, ats, STEPS_BEFORE)
    twin = sim.fork()
    assert type(twin) is Simulator and twin is not sim
    assert twin._pool._training() is twin and sim._pool._training() is sim
    assert twin.workload is sim.workload and twin.policy is sim.policy
    while not (sim.done and twin.done):
        drive(sim, ats, 1)
        drive(twin, nolend, 1)
    assert episode_record(sim) == episode_record(alone_a)
    assert episode_record(twin) == episode_record(alone_b)


def test_a_snapshot_of_a_finished_episode(workload: Workload) -> None:
    policy = make_policy("ats")
    sim = Simulator(workload, sim_config(), policy)
    drive(sim, policy)
    snap = sim.snapshot()
    assert snap.done
    finished = episode_record(sim)
    other = Simulator(workload, sim_config(), policy)  # restored into another simulator
    other.restore(snap)
    assert other.done and episode_record(other) == finished
    other.advance()  # nothing left to run
    assert episode_record(other) == finished
    with pytest.raises(RuntimeError, match="over"):
        other.apply(Allocation({}))
    sim.reset()  # the snapshot does not follow the simulator it came from
    other.restore(snap)
    assert other.done and episode_record(other) == finished


def test_a_pickled_snapshot_restores_exactly(workload: Workload) -> None:
    policy = make_policy("ats")
    sim = Simulator(workload, sim_config(interference=0.2), policy)
    drive(sim, policy, STEPS_BEFORE)
    snap = pickle.loads(pickle.dumps(sim.snapshot()))
    drive(sim, policy)
    original = episode_record(sim)
    sim.restore(snap)
    drive(sim, policy)
    assert episode_record(sim) == original


class _RecordingPool(InferencePool):
    """A pool with an attribute of its own that the snapshot code does not know."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.placed: list[int] = []


class _RecordingSimulator(Simulator):
    _pool_type = _RecordingPool


def test_an_unclassified_attribute_is_refused_not_shared(workload: Workload) -> None:
    sim = _RecordingSimulator(workload, sim_config())
    with pytest.raises(ForkError, match="'placed'"):
        sim.snapshot()
    with pytest.raises(ForkError, match="_RecordingPool"):
        sim.fork()
