"""run_episode's ``max_decisions``: the env's ``max_episode_steps`` cut for evaluation episodes."""

from __future__ import annotations

import pytest

from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import BasePolicy, make_policy
from deepboot_env.sim.simulator import Simulator
from traces.loaders import load_workload


class _Counting(BasePolicy):
    """Wraps a policy and counts its decisions."""

    def __init__(self, name: str) -> None:
        self.inner = make_policy(name)
        self.name = self.inner.name
        self.adaptive_batch = self.inner.adaptive_batch
        self.decisions = 0

    def reset(self, seed=None) -> None:
        self.inner.reset(seed)
        self.decisions = 0

    def decide(self, state):
        self.decisions += 1
        return self.inner.decide(state)

    def choose_reclaim(self, state, request):
        return self.inner.choose_reclaim(state, request)


def _by_hand(workload, decisions: int, until: float = float("inf")) -> tuple[Simulator, int]:
    """The simulator after ``decisions`` ATS decisions stepped by hand, and the first decision
    count at which its clock reached ``until``."""
    policy = make_policy("ats")
    sim = Simulator(workload, sim_config(), policy)  # what run_episode runs by default
    reached = 0
    for n in range(1, decisions + 1):
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        sim.advance()
        if not reached and sim.now >= until:
            reached = n
    return sim, reached


def test_cut_after_max_decisions_once_every_job_arrived() -> None:
    workload = load_workload("val/val-01")
    last_arrival = max(job.arrival for job in workload.jobs)
    full = _Counting("ats")
    complete = run_episode(full, workload)
    assert not complete.truncated
    # a cap the episode never reaches changes nothing
    capped = run_episode("ats", workload, max_decisions=full.decisions)
    assert capped.deterministic_dict() == complete.deterministic_dict()
    # a cap after the last arrival: exactly that many decisions, the state reached by hand, truncated
    _, arrived = _by_hand(workload, full.decisions, until=last_arrival)
    cap = (arrived + full.decisions) // 2
    counted = _Counting("ats")
    cut = run_episode(counted, workload, max_decisions=cap)
    sim, _ = _by_hand(workload, cap)
    assert counted.decisions == cap and cut.truncated and cut.sim_end == sim.now < complete.sim_end
    assert cut.jcts == sim.metrics().jcts and len(cut.jcts) < len(complete.jcts)
    # a cap before the last arrival: the episode goes on to the first decision after it
    early = _Counting("ats")
    cut = run_episode(early, workload, max_decisions=3)
    assert early.decisions == arrived and cut.truncated and cut.sim_end >= last_arrival


def test_max_decisions_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_decisions must be >= 1"):
        run_episode("fifo", load_workload("val/val-01"), max_decisions=0)
