"""``ats-srpt-fcfs-place``: a knapsack that values a job split across nodes at its multi-node
speedup (docs/policies.md §8.8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from builders import check_best_allocation, cluster_state, job_view

from baselines.ats import AtsPolicy, Options, job_priority_key, placement_aware_options, speedup_values
from deepboot_env.policy import make_policy


def _rows(options: Options, caps: list[int]) -> list[np.ndarray]:
    starts = options.offsets.tolist()
    return [options.speedups[start : start + cap + 1] for start, cap in zip(starts, caps, strict=True)]


def _aware_rows(state, jobs, caps, fair, linear_untrained=False) -> tuple[list[np.ndarray], list[np.ndarray]]:
    plain = Options.of(jobs, fair, state.gpus_per_node, caps, linear_untrained)
    aware = placement_aware_options(plain, jobs, caps, fair, state, True, linear_untrained)
    return _rows(plain, caps), _rows(aware, caps)


def test_options_beyond_every_nodes_room_read_the_multi_node_rate() -> None:
    """2 nodes of 4 GPUs, another job holding 2 on each: the most one node can give the new
    yolov3 job is 2, so its 3- and 4-GPU options are worth its split rate; the rest are ATS's."""
    new = job_view(0, "yolov3", [0, 0], 8)
    other = job_view(1, "cifar10", [2, 2], 4)
    state = cluster_state("2x4", [new, other])
    plain, aware = _aware_rows(state, [new, other], [8, 4], 4)
    table = new.rate_table()
    one_node = speedup_values(table, 4, 4, 8)
    np.testing.assert_array_equal(plain[0], one_node)
    np.testing.assert_array_equal(aware[0][:3], one_node[:3])
    np.testing.assert_array_equal(aware[0][3:5], table[1, 3:5] / table[0, 4])
    np.testing.assert_array_equal(aware[0][5:], one_node[5:])  # beyond one node: split anyway
    assert (aware[0][3:5] < one_node[3:5]).all()  # yolov3 loses when split
    np.testing.assert_array_equal(aware[1], plain[1])  # the other job has its 4 GPUs' room: its own 2 + 2 free


def test_a_jobs_own_gpus_count_as_room_and_an_empty_cluster_changes_nothing() -> None:
    held = job_view(0, "yolov3", [2, 0], 8)
    other = job_view(1, "cifar10", [0, 2], 4)
    state = cluster_state("2x4", [held, other])
    plain, aware = _aware_rows(state, [held, other], [8, 4], 4)
    for before, after in zip(plain, aware, strict=True):
        np.testing.assert_array_equal(before, after)
    empty = cluster_state("2x4", [job_view(2, "yolov3", [0, 0], 8)])
    plain, aware = _aware_rows(empty, list(empty.jobs), [8], 8)
    np.testing.assert_array_equal(plain[0], aware[0])


def test_untrained_jobs_valued_linearly_keep_their_rows_and_the_memo_is_not_written() -> None:
    import dataclasses

    new = dataclasses.replace(job_view(0, "yolov3", [0, 0], 8), trained=False)
    other = job_view(1, "cifar10", [2, 2], 4)
    state = cluster_state("2x4", [new, other])
    plain, aware = _aware_rows(state, [new, other], [8, 4], 4, linear_untrained=True)
    np.testing.assert_array_equal(aware[0], np.arange(9) / 4)
    before = Options.of([new], 4, 4, [8], False)
    memo = before.speedups[before.offsets[0] : before.offsets[0] + 9].copy()
    placement_aware_options(before, [new], [8], 4, state, True)
    after = Options.of([new], 4, 4, [8], False)
    np.testing.assert_array_equal(after.speedups[after.offsets[0] : after.offsets[0] + 9], memo)


def test_split_rows_are_memoised_beside_the_one_node_rows_and_serve_narrower_caps(monkeypatch) -> None:
    """The split row of a job is computed once per (rates, epoch, fair share, room, top width)
    and stored in ATS's row arena: a second decision on the same room reads the same offset, a
    narrower cap with the same top width reuses it, the one-node row is never written, and the
    values are those written out by hand; options not from the latest ``Options.of`` are refused."""
    import baselines.ats as ats

    monkeypatch.setattr(ats, "_ARENA", ats._RowArena())
    new = job_view(0, "yolov3", [0, 0], 8)
    other = job_view(1, "cifar10", [2, 2], 4)
    state = cluster_state("2x4", [new, other])
    table = new.rate_table()
    first = placement_aware_options(Options.of([new], 4, 4, [8], False), [new], [8], 4, state, True)
    rows = len(ats._ARENA.rows)
    again = placement_aware_options(Options.of([new], 4, 4, [6], False), [new], [6], 4, state, True)
    assert again.offsets.tolist() == first.offsets.tolist() and len(ats._ARENA.rows) == rows == 2
    split = again.speedups[again.offsets[0] : again.offsets[0] + 7]
    one_node = speedup_values(table, 4, 4, 8)
    np.testing.assert_array_equal(split[3:5], table[1, 3:5] / table[0, 4])
    np.testing.assert_array_equal(np.delete(split, [3, 4]), np.delete(one_node[:7], [3, 4]))
    plain = Options.of([new], 4, 4, [8], False)
    np.testing.assert_array_equal(plain.speedups[plain.offsets[0] : plain.offsets[0] + 9], one_node)
    foreign = Options.of_arrays(one_node.copy(), [0], [8], [0], [1.0], [1.0])
    with pytest.raises(ValueError, match="latest Options.of"):
        placement_aware_options(foreign, [new], [8], 4, state, True)


def _expected_value(job, w: int, fair: int, room: int, gpus_per_node: int, weight: float) -> float:
    """The option value of §8.8 written out: the rate of w GPUs, multi-node when w spans nodes or
    exceeds the room, over the one-node rate at the fair share, weighted, restart-discounted."""
    if w == 0:
        return 0.0
    table = job.rate_table()
    k_max = table.shape[1] - 1
    split = w > gpus_per_node or (w >= 2 and w > room)
    value = table[int(split), min(w, k_max)] / table[0, max(1, min(fair, k_max))] * weight
    if w != job.replicas:
        value *= max(job.age - 10.0 * job.num_restarts, 0.0) / (job.age + 10.0)
    return value


@pytest.mark.parametrize("seed", range(6))
def test_the_placement_aware_knapsack_attains_the_best_sum_of_its_values(seed: int) -> None:
    """Against exhaustive search over every allocation of three jobs on 2 nodes of 4 GPUs, with
    the values written out independently (:func:`_expected_value`)."""
    rng = np.random.default_rng(seed)
    apps = ["cifar10", "bert", "ncf", "deepspeech2", "imagenet", "yolov3"]
    jobs = [
        job_view(i, apps[int(rng.integers(len(apps)))], [int(rng.integers(0, 3)), int(rng.integers(0, 2))], 6)
        for i in range(3)
    ]
    state = cluster_state("2x4", jobs)
    policy = make_policy("ats-srpt-fcfs-place")
    assert isinstance(policy, AtsPolicy)
    counts = policy.propose_counts(state)
    ordered = sorted(state.jobs, key=job_priority_key)
    capacity = int(state.training_capacity().sum())
    fair = math.ceil(capacity / len(ordered))
    caps = policy.job_caps(ordered, capacity, fair)
    weights = policy.job_weights(ordered, fair, capacity)
    assert weights is not None
    free = np.maximum(state.training_capacity() - state.train_used, 0)
    rooms = [int((free + job.alloc).max()) for job in ordered]
    values = [
        [_expected_value(job, w, fair, room, 4, weight) for w in range(cap + 1)]
        for job, cap, room, weight in zip(ordered, caps, rooms, weights, strict=True)
    ]
    check_best_allocation(values, caps, capacity, [counts[job.id] for job in ordered])


def test_a_job_that_would_be_split_is_given_the_width_one_node_holds() -> None:
    """Nodes with 3 and 1 free GPUs: ats-srpt-fcfs gives the new yolov3 job 4 GPUs, split across
    both nodes at a rate its one-node valuation overstates; placement-aware, it takes the 3 that
    one node holds."""
    new = job_view(0, "yolov3", [0, 0], 8, epoch=5)
    other = job_view(1, "cifar10", [1, 3], 4, epoch=5)
    state = cluster_state("2x4", [new, other])
    plain = make_policy("ats-srpt-fcfs").decide(state)
    aware = make_policy("ats-srpt-fcfs-place").decide(state)
    assert plain.gpus[0].tolist() == [3, 1]
    assert aware.gpus[0].tolist() == [3, 0]
    assert aware.gpus[1].tolist() == plain.gpus[1].tolist() == [1, 3]


def test_the_option_is_off_by_default_and_named_in_the_registry() -> None:
    assert AtsPolicy().placement_aware is False
    policy = make_policy("ats-srpt-fcfs-place")
    assert isinstance(policy, AtsPolicy) and policy.placement_aware
    assert (policy.srpt_power, policy.arrival_tilt, policy.name) == (0.25, 0.15, "ats-srpt-fcfs-place")


def test_golden_crowded_episode_differs_from_the_prior() -> None:
    """A crowded v0 episode (the shipped-model test's): the valuation changes the schedule, to
    fewer restarts; the mean JCT is pinned."""
    from deepboot_env.evaluation import run_episode
    from deepboot_env.sim.cluster import ClusterConfig
    from deepboot_env.sim.simulator import SimConfig
    from traces.generate import generate_workload

    workload = generate_workload(
        "crowded", 17, train={"num_jobs": 60}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )
    config = SimConfig(cluster=ClusterConfig.parse("4x4+4x4"))
    place = run_episode("ats-srpt-fcfs-place", workload, config, seed=1)
    prior = run_episode("ats-srpt-fcfs", workload, config, seed=1)
    assert place.train_jct_mean == 2223.6833333333334
    assert prior.train_jct_mean == 2223.0
    assert place.restarts < prior.restarts
