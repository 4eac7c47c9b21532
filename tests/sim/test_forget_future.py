"""``Simulator.forget_future``: a simulator (a fork) that holds only the past and a given future.

Forgetting the future and giving back the true future requests continues exactly like a workload
that never had the later jobs; forgetting it with no requests stops every arrival; the original of
a fork is untouched; a forgotten fork snapshots and restores exactly; bad futures are refused.
"""

from __future__ import annotations

import dataclasses

import pytest
from builders import drive, episode_record

from deepboot_env.config import sim_config
from deepboot_env.policy import make_policy
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.workload import InferenceRequestSpec, Workload, WorkloadError
from traces.generate import generate_workload

STEPS = 30
"""Decisions taken before forgetting (jobs active and to come, requests to come)."""


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate_workload("forget", 5, train={"num_jobs": 12}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 8.0})


@pytest.mark.parametrize(
    "config", [sim_config(dynamics="v1"), sim_config(inference_placement="aryl")], ids=["v1", "aryl"]
)
def test_the_true_future_given_back_continues_like_a_workload_without_later_jobs(
    workload: Workload, config: SimConfig
) -> None:
    policy = make_policy("ats")
    sim = Simulator(workload, config, policy)
    drive(sim, policy, STEPS)
    now, arrived = sim.now, sim.requests_arrived
    assert sim.active_jobs and any(j.arrival > now for j in workload.jobs) and arrived < len(workload.requests)
    fork = sim.fork()
    fork.forget_future(workload.requests[arrived:])
    assert fork.workload.jobs == tuple(j for j in workload.jobs if j.arrival <= now)
    assert fork.workload.requests == workload.requests
    earlier = dataclasses.replace(workload, jobs=fork.workload.jobs)
    alone = Simulator(earlier, config, policy)
    drive(alone, policy, STEPS)
    assert alone.now == now
    drive(fork, policy)
    drive(alone, policy)
    assert episode_record(fork, events=True) == episode_record(alone, events=True)


def test_forgetting_everything_stops_arrivals_and_leaves_the_original_untouched(workload: Workload) -> None:
    config = sim_config(dynamics="v1")
    policy = make_policy("ats")
    sim = Simulator(workload, config, policy)
    drive(sim, policy, STEPS)
    before = sim.snapshot()
    admitted, arrived = sum(1 for j in workload.jobs if j.arrival <= sim.now), sim.requests_arrived
    fork = sim.fork()
    fork.forget_future()
    assert len(fork.jobs) == admitted and len(fork.requests) == arrived and fork.requests_arrived == arrived
    drive(fork, policy)
    assert fork.done and fork.metrics().train_jobs == admitted and fork.requests_arrived == arrived
    assert len(sim.jobs) == len(workload.jobs) and sim.workload is workload
    drive(sim, policy)
    twin = Simulator(workload, config, policy)
    twin.restore(before)
    drive(twin, policy)
    assert episode_record(sim, events=True) == episode_record(twin, events=True)


def test_a_forgotten_fork_snapshots_and_restores_exactly(workload: Workload) -> None:
    policy = make_policy("ats")
    sim = Simulator(workload, sim_config(dynamics="v1"), policy)
    drive(sim, policy, STEPS)
    spec = workload.requests[0]
    future = [dataclasses.replace(spec, name=f"f{k}", arrival=sim.now + 7.5 * k) for k in range(40)]
    sim.forget_future(future)
    snap = sim.snapshot()
    drive(sim, policy)
    first = episode_record(sim, events=True)
    assert sum(1 for r in sim.requests if r.finish is not None) == len(sim.requests)
    sim.restore(snap)
    drive(sim, policy)
    assert episode_record(sim, events=True) == first


def test_a_bad_future_is_refused(workload: Workload) -> None:
    policy = make_policy("ats")
    sim = Simulator(workload, sim_config(dynamics="v1"), policy)
    drive(sim, policy, 5)
    spec = InferenceRequestSpec("x", sim.now + 10.0, "infer-bert-1", "bert", 30.0)
    with pytest.raises(ValueError, match="must arrive between now"):
        sim.fork().forget_future([dataclasses.replace(spec, arrival=sim.now - 1.0)])
    with pytest.raises(ValueError, match="must arrive between now"):
        sim.fork().forget_future([dataclasses.replace(spec, arrival=sim.config.max_time + 1.0)])
    with pytest.raises(ValueError, match="sorted by arrival"):
        sim.fork().forget_future([spec, dataclasses.replace(spec, arrival=sim.now + 5.0)])
    with pytest.raises(WorkloadError, match="duration"):
        sim.fork().forget_future([dataclasses.replace(spec, duration=0.0)])
    drive(sim, policy)
    with pytest.raises(RuntimeError, match="episode is over"):
        sim.forget_future()
