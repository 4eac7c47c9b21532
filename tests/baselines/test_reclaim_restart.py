"""The restart-aware reclaim (``AtsPolicy(reclaim_horizon=...)``, ``ats-srpt-fcfs-place-rr``;
docs/policies.md §8.9): the lent GPU whose loss costs the fewest speedup-seconds, restart included."""

from __future__ import annotations

import itertools
import math

import pytest
from builders import cluster_state, job_view

from baselines.ats import AtsPolicy
from deepboot_env.policy import make_policy
from deepboot_env.sim.reclaim import (
    RestartAwareRule,
    ats_i_victim,
    is_ats_i_rule,
    least_loss_horizon,
    restart_aware_victim,
)

APPS = ("cifar10", "ncf", "yolov3", "imagenet", "deepspeech2", "bert")


def _expected_costs(state, horizon: float) -> dict[tuple[int, int], float]:
    """Every candidate's cost as docs/policies.md §8.9 states it (afe: a shrink stalls for the
    application's fast restart), written apart from the implementation."""
    pods = int(state.running.sum() + state.protect.sum() + state.sleeping.sum())
    fair = math.ceil(state.config.total_gpus / max(len(state.jobs) + pods, 1))
    costs = {}
    for job in state.jobs:
        counts = job.alloc.tolist()
        held, nodes_held = sum(counts), sum(c > 0 for c in counts)
        base = job.rates.rate(job.epoch, False, max(1, min(fair, job.rates.max_replicas)))
        before = job.rates.rate(job.epoch, nodes_held > 1, held)
        app = job.rates.app
        for node, count in enumerate(counts):
            if count == 0 or state.node_kinds[node] == 0:
                continue
            if held == 1:
                costs[job.id, node] = before * (horizon + app.full_restart_delay) / base
                continue
            after = job.rates.rate(job.epoch, (nodes_held - (count == 1)) > 1, held - 1)
            extra = max(app.fast_restart_delay - job.stalled_seconds, 0.0)
            costs[job.id, node] = ((before - after) * horizon + after * extra) / base
    return costs


def _states():
    """Two jobs on the lent node of a 1x4+1x4 cluster: every pair of applications and splits."""
    for a, b in itertools.product(APPS, repeat=2):
        for held_a, held_b in ((1, 3), (2, 2), (3, 1), (1, 2)):
            jobs = [job_view(0, a, [0, held_a], 8), job_view(1, b, [0, held_b], 8)]
            yield cluster_state("1x4+1x4", jobs, restart="afe")


@pytest.mark.parametrize("horizon", [10.0, 300.0, 3000.0])
def test_the_victim_has_the_least_documented_cost(horizon: float) -> None:
    changed = 0
    for state in _states():
        costs = _expected_costs(state, horizon)
        victim = restart_aware_victim(state, horizon)
        assert victim is not None
        least = min(costs.values())
        assert costs[victim.job_id, victim.node] <= least + 1e-9 * abs(least)
        changed += victim != ats_i_victim(state)
    if horizon == 10.0:  # at a short horizon the restart term decides some choices
        assert changed > 0


def test_a_very_long_horizon_is_ats_i() -> None:
    for state in _states():
        assert restart_aware_victim(state, 1e9) == ats_i_victim(state)


def test_a_job_already_restarting_gives_its_gpu_first() -> None:
    """Two equal jobs: ATS-I takes from the first in its order; the restart-aware rule from the
    one whose restart is under way (the shrink adds no stall to it)."""
    first = job_view(0, "cifar10", [0, 2], 8)
    restarting = job_view(1, "cifar10", [0, 2], 8, stalled=120.0)
    state = cluster_state("1x4+1x4", [first, restarting], restart="afe")
    assert ats_i_victim(state).job_id == 0
    assert restart_aware_victim(state, 300.0).job_id == 1


def test_nothing_lent_means_no_victim() -> None:
    state = cluster_state("1x4+1x4", [job_view(0, "cifar10", [2, 0], 8)], restart="afe")
    assert restart_aware_victim(state, 300.0) is None


@pytest.mark.parametrize("horizon", [0, -1.0, math.inf, math.nan, True, "300"])
def test_bad_horizons_are_one_line_errors(horizon) -> None:
    state = cluster_state("1x4+1x4", [job_view(0, "cifar10", [0, 2], 8)], restart="afe")
    with pytest.raises(ValueError, match="reclaim horizon") as info:
        restart_aware_victim(state, horizon)
    assert "\n" not in str(info.value)
    if horizon not in (0, True, "300"):
        with pytest.raises(ValueError, match="reclaim_horizon"):
            AtsPolicy(reclaim_horizon=horizon)


def test_only_a_horizon_replaces_the_marked_ats_i_hook() -> None:
    """Without a horizon the hook keeps ATS-I's mark; the simulator computes either rule from its
    books, and any other hook gets the whole state."""
    assert is_ats_i_rule(AtsPolicy().choose_reclaim)
    assert least_loss_horizon(make_policy("ats-srpt-fcfs-place").choose_reclaim) == 0.0
    rr = make_policy("ats-srpt-fcfs-place-rr")
    assert not is_ats_i_rule(rr.choose_reclaim) and rr.reclaim_horizon == 300.0
    assert least_loss_horizon(rr.choose_reclaim) == 300.0
    assert least_loss_horizon(lambda state, request: None) is None
    with pytest.raises(ValueError, match="reclaim horizon"):
        RestartAwareRule(0.0)


def test_golden_crowded_episode() -> None:
    """The crowded v0 episode of test_ats_place: the reclaims change the schedule; pinned."""
    from deepboot_env.evaluation import run_episode
    from deepboot_env.sim.cluster import ClusterConfig
    from deepboot_env.sim.simulator import SimConfig
    from traces.generate import generate_workload

    workload = generate_workload(
        "crowded", 17, train={"num_jobs": 60}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )
    config = SimConfig(cluster=ClusterConfig.parse("4x4+4x4"))
    rr = run_episode("ats-srpt-fcfs-place-rr", workload, config, seed=1)
    assert rr.train_jct_mean == 2223.6666666666665
    assert (rr.restarts, rr.reclaims) == (510, 206)
