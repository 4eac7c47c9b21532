"""``ats-srpt``: ATS whose option values are weighted by the jobs' remaining time (docs/policies.md §8.6)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from builders import check_best_allocation, cluster_state, job_view

from baselines.ats import AtsPolicy, epochs_left_work, job_priority_key, option_matrix
from deepboot_env.policy import make_policy
from deepboot_env.sim.apps import get_app
from deepboot_env.sim.reclaim import fair_share_base


def _job(job_id: int, epoch: int, alloc=(0, 0), app: str = "cifar10", max_replicas: int = 4):
    """A job at the start of ``epoch``; its ``remaining_work`` oracle says nothing (1e6)."""
    return job_view(job_id, app, list(alloc), max_replicas, epoch=epoch)


def test_the_work_left_is_that_of_the_epochs_not_completed() -> None:
    """Read from the application's profile and the job's epoch, never from the oracle."""
    cifar = get_app("cifar10")
    assert epochs_left_work(_job(0, 0)) == cifar.target_progress
    assert epochs_left_work(_job(0, 99)) == pytest.approx(cifar.target_progress / 100, rel=0.02)
    assert epochs_left_work(_job(0, 100)) == 0.0
    oracle = dataclasses.replace(_job(0, 40), remaining_work=1.0)
    assert epochs_left_work(oracle) == epochs_left_work(_job(0, 40))


def test_weights_are_the_remaining_time_at_the_fair_share_to_the_minus_power() -> None:
    jobs = [_job(0, 99), _job(1, 0), _job(2, 100)]
    weights = AtsPolicy(srpt_power=0.25).job_weights(jobs, 2, 8)
    assert weights is not None
    expected = [max(epochs_left_work(job) / fair_share_base(job, 2), 1.0) ** -0.25 for job in jobs]
    np.testing.assert_array_equal(weights, expected)
    assert weights[0] > 2 * weights[1] and weights[2] == 1.0  # the job near its end weighs more; floored at 1 s
    assert AtsPolicy().job_weights(jobs, 2, 8) is None  # ATS: no weights at all


def test_the_job_closer_to_its_end_gets_more_of_scarce_gpus() -> None:
    """Two cifar10 jobs on 4 GPUs: ATS shares them by speedup alone; ats-srpt gives the job with
    1 % of the other's work left more of them, and every GPU is still used."""
    state = cluster_state("1x4", [_job(0, 0, (0,)), _job(1, 99, (0,))])
    ats = make_policy("ats").propose_counts(state)
    srpt = make_policy("ats-srpt").propose_counts(state)
    assert srpt[1] > ats[1] and srpt[0] < ats[0]
    assert sum(srpt.values()) == sum(ats.values()) == 4


@pytest.mark.parametrize("seed", range(6))
def test_the_weighted_knapsack_attains_the_best_weighted_sum(seed: int) -> None:
    """Against exhaustive search over every allocation of three jobs: the compiled knapsack's
    counts reach the largest sum of weighted, restart-discounted option values."""
    rng = np.random.default_rng(seed)
    apps = ["cifar10", "bert", "ncf", "deepspeech2", "imagenet", "yolov3"]
    jobs = [
        dataclasses.replace(
            job_view(i, apps[int(rng.integers(len(apps)))], [int(rng.integers(0, 3)), 0], 4, restarts=int(i == 1)),
            epoch=int(rng.integers(0, 2)),
        )
        for i in range(3)
    ]
    state = cluster_state("2x4", jobs)
    policy = AtsPolicy(srpt_power=0.5)
    counts = policy.propose_counts(state)
    ordered = sorted(state.jobs, key=job_priority_key)
    capacity = int(state.training_capacity().sum())
    fair = math.ceil(capacity / len(ordered))
    caps = policy.job_caps(ordered, capacity, fair)
    values = option_matrix(ordered, fair, 4, caps, weights=policy.job_weights(ordered, fair, capacity))
    check_best_allocation(values, caps, capacity, [counts[job.id] for job in ordered])


@pytest.mark.parametrize("bad", [-0.25, math.nan, math.inf, "0.25", True])
def test_the_power_is_checked(bad) -> None:
    with pytest.raises(ValueError, match="srpt_power must be a finite number >= 0"):
        AtsPolicy(srpt_power=bad)


def test_arrival_tilt_favours_the_earliest_of_equal_jobs() -> None:
    """``ats-srpt-fcfs``: weights times exp(0.15 u), u from +1 (earliest arrival) to -1 (latest)."""
    jobs = [dataclasses.replace(_job(i, 10), arrival=float(a)) for i, a in enumerate([300.0, 100.0, 200.0])]
    srpt = AtsPolicy(srpt_power=0.25).job_weights(jobs, 2, 8)
    tilted = make_policy("ats-srpt-fcfs").job_weights(jobs, 2, 8)
    assert srpt is not None and tilted is not None
    np.testing.assert_allclose(tilted / srpt, np.exp(0.15 * np.array([-1.0, 1.0, 0.0])))
    only = AtsPolicy(arrival_tilt=0.3).job_weights(jobs, 2, 8)  # a tilt alone, on ATS
    assert only is not None and only[1] > only[2] > only[0]
    assert AtsPolicy(srpt_power=0.25, arrival_tilt=0.3).job_weights(jobs[:1], 2, 8) == pytest.approx(srpt[:1])
    with pytest.raises(ValueError, match="arrival_tilt"):
        AtsPolicy(arrival_tilt=-0.1)


def test_two_equal_jobs_on_scarce_gpus_are_served_first_come_first_served() -> None:
    """Two identical cifar10 jobs contend for 4 GPUs: ats-srpt splits them evenly, the arrival
    tilt gives the earlier job more."""
    early = dataclasses.replace(_job(0, 10, (0,)), arrival=0.0)
    late = dataclasses.replace(_job(1, 10, (0,)), arrival=500.0)
    state = cluster_state("1x4", [early, late])
    even = make_policy("ats-srpt").propose_counts(state)
    fcfs = make_policy("ats-srpt-fcfs").propose_counts(state)
    assert even[0] == even[1] and fcfs[0] > fcfs[1] and sum(fcfs.values()) == 4
