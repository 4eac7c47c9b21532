"""A simulator pickled or deep-copied mid-episode finishes the episode exactly like the original.

The :class:`~deepboot_env.sim.inference.InferencePool` holds its simulator weakly (so that a
simulator is freed by reference counting); a copy's pool must reclaim from the copy.
"""

from __future__ import annotations

import copy
import gc
import json
import pickle
import weakref

import pytest

from deepboot_env.policy import make_policy
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload


def _run(sim: Simulator, steps: int | None = None) -> None:
    policy = make_policy("ats")
    while not sim.done and (steps is None or steps > 0):
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        sim.advance()
        steps = None if steps is None else steps - 1


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda sim: pickle.loads(pickle.dumps(sim))])
def test_a_copied_simulator_finishes_like_the_original(clone) -> None:
    workload = generate_workload(
        "copy", 3, train={"num_jobs": 16}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 8.0}
    )
    sim = Simulator(workload, SimConfig(), make_policy("ats"))
    _run(sim, steps=20)
    twin = clone(sim)
    assert twin._pool._training() is twin and sim._pool._training() is sim
    reclaims = sim.reclaims
    _run(sim)
    _run(twin)
    assert sim.reclaims > reclaims  # the copy reclaimed too, from itself
    a, b = sim.metrics().deterministic_dict(), twin.metrics().deterministic_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert sim.timeline == twin.timeline


def test_a_simulator_is_freed_without_the_cycle_collector() -> None:
    workload = generate_workload("free", 4, train={"num_jobs": 4}, inference={"horizon_s": 3600.0})
    sim = Simulator(workload, SimConfig())
    _run(sim, steps=5)
    gone = weakref.ref(sim)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del sim
        assert gone() is None
    finally:
        if enabled:
            gc.enable()
