"""The views of jobs that hold no GPU (cached with their version) match the jobs at every decision."""

from __future__ import annotations

import pytest

from deepboot_env.policy import make_policy
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload


def test_every_view_reads_its_job_now_idle_or_not() -> None:
    workload = generate_workload("idle-views", 3, train={"num_jobs": 60})
    policy = make_policy("ats")
    sim = Simulator(workload, SimConfig(), policy)
    idle = busy = 0
    earlier = []
    while not sim.done:
        state = sim.observe()
        for view in state.jobs:
            job = sim.jobs[view.id]
            idle += job.replicas == 0
            busy += job.replicas > 0
            assert view.replicas == job.replicas
            assert view.age == pytest.approx(state.time - job.spec.arrival, abs=0)
            assert view.attained_service == job.attained_service
            assert view.epoch == job.epoch
            assert view.remaining_work == job.target_progress - job.progress
            assert view.stalled_seconds == job.stalled_seconds_left
            assert view.trained == (job.progress > 0.0)
        earlier.append((state, [(v.age, v.attained_service, v.epoch) for v in state.jobs]))
        sim.apply(policy.decide(state), state)
        sim.advance()
    assert idle > 0 and busy > 0
    for state, fields in earlier:  # a view handed out never changes afterwards
        assert [(v.age, v.attained_service, v.epoch) for v in state.jobs] == fields
