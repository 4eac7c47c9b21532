"""``ats-srpt-warm``: ATS-SRPT that lends no SLEEP pod's GPU while inference is busy
(``AtsPolicy(keep_warm_at=...)``, docs/policies.md §8.10)."""

from __future__ import annotations

import numpy as np
import pytest

from baselines.ats import AtsPolicy
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.sim.cluster import node_layout
from deepboot_env.sim.state import Allocation, ClusterState
from traces.families import cached_scenario

OVERLOADED = ("heavy-inference", 1_000_012)
"""A val scenario whose inference outgrows its GPUs for hours (docs/history.md#p99-overload)."""


class _Recorded(AtsPolicy):
    """``ats-srpt-warm`` that keeps every state it decides on and its allocation."""

    def __init__(self) -> None:
        super().__init__(srpt_power=0.25, keep_warm_at=0.9, label="recorded")
        self.decisions: list[tuple[ClusterState, Allocation]] = []

    def decide(self, state: ClusterState) -> Allocation:
        alloc = super().decide(state)
        self.decisions.append((state, alloc))
        return alloc


def _episode(policy, scenario=OVERLOADED):
    family, seed = scenario
    sc = cached_scenario(family, seed)
    return run_episode(policy, sc.workload, sc.configure(sim_config(dynamics="v1")))


def _busy(state: ClusterState) -> bool:
    return state.waiting_requests > 0 or state.inference_load() >= 0.9


def test_while_inference_is_busy_no_warm_pod_is_lent_and_otherwise_it_is_ats_srpt() -> None:
    policy = _Recorded()
    _episode(policy)
    srpt = AtsPolicy(srpt_power=0.25)
    busy_with_sleepers = 0
    for state, alloc in policy.decisions:
        if not _busy(state):
            expected = srpt.decide(state)
            assert alloc.gpus.keys() == expected.gpus.keys()
            assert all(np.array_equal(alloc.gpus[j], expected.gpus[j]) for j in alloc.gpus)
            continue
        g = state.gpus_per_node
        training = sum(alloc.gpus.values(), np.zeros(state.num_nodes, dtype=np.int64))
        for node in node_layout(state.node_kinds).lendable:
            assert training[node] <= g - state.running[node] - state.protect[node] - state.sleeping[node]
        busy_with_sleepers += bool(state.sleeping.any())
    assert busy_with_sleepers > 0  # the rule had sleeping pods to keep


def test_the_overloaded_scenario_keeps_its_tail_golden() -> None:
    """docs/history.md#warm: p99 999 s under ``ats-srpt``, 851.28 s with warm pods kept (``ats``
    728 s), at a shorter mean JCT; 999 s and 788.84 s under v4's prior without and with the rule."""
    srpt, warm = _episode(make_policy("ats-srpt")), _episode(make_policy("ats-srpt-warm"))
    assert srpt.infer_latency_p99 == pytest.approx(999.0)
    assert warm.infer_latency_p99 == pytest.approx(851.28)
    assert warm.train_jct_mean == pytest.approx(3167.0516, abs=1e-3)
    assert warm.train_jct_mean < srpt.train_jct_mean
    # v4's prior and the same prior keeping warm pods (ats-srpt-fcfs-place-rr-warm)
    rr, rr_warm = _episode(make_policy("ats-srpt-fcfs-place-rr")), _episode(make_policy("ats-srpt-fcfs-place-rr-warm"))
    assert (rr.infer_latency_p99, rr_warm.infer_latency_p99) == pytest.approx((999.0, 788.84))


def test_keeping_warm_pods_counts_them_as_protected() -> None:
    policy = _Recorded()
    _episode(policy)
    state = next(s for s, _ in policy.decisions if s.sleeping.any())
    kept = state.keeping_warm_pods()
    assert kept is not state and kept.jobs is state.jobs and kept.time == state.time
    assert not kept.sleeping.any() and np.array_equal(kept.protect, state.protect + state.sleeping)
    lendable = node_layout(state.node_kinds).lendable
    freed = sum(state.training_capacity_list()) - sum(kept.training_capacity_list())
    assert freed == int(state.sleeping[list(lendable)].sum()) > 0
    assert kept.keeping_warm_pods() is kept  # nothing left asleep: the same state
    assert kept.inference_load() >= state.inference_load()


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.9"])
def test_a_bad_share_is_one_clear_error(bad) -> None:
    with pytest.raises(ValueError, match="keep_warm_at must be a share in"):
        AtsPolicy(keep_warm_at=bad)
