"""Pollux GA policy (baselines/pollux.py, pollux_ga.py): determinism, hard constraints, lending, fitness, warm start."""

from __future__ import annotations

import numpy as np
import pytest
from builders import (
    RecordingPolicy,
    check_within_capacity,
    cluster_state,
    job_view,
    run_lending_twice,
    run_recorded_twice,
    training_workload,
    warm_start_problem,
)

from baselines.pollux import PolluxPolicy
from baselines.pollux_ga import (
    PolluxProblem,
    bernoulli_positions,
    build_problem,
    power_mean,
    restart_factor,
)
from deepboot_env.policy import make_policy
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import ClusterState, validate_allocation

SMALL = {"population": 16, "generations": 6}
"""Small GA settings keep the episodes fast."""


APPS = ("cifar10", "ncf", "cifar10", "bert", "ncf", "cifar10", "deepspeech2", "ncf")
"""The applications of the tiny workloads, cycled."""


def _check_constraints(state: ClusterState, alloc: dict[int, np.ndarray], lend: bool) -> None:
    check_within_capacity(state, alloc, lend)
    distributed_per_node = np.zeros(state.num_nodes, dtype=np.int64)
    for arr in alloc.values():
        if np.count_nonzero(arr) > 1:
            distributed_per_node += arr > 0
    assert np.all(distributed_per_node <= 1), "two distributed jobs share a node"


def test_registered_names():
    assert make_policy("pollux").name == "pollux"
    lend = make_policy("pollux-lend", population=10, generations=2)
    assert lend.name == "pollux-lend" and lend.lend and lend.population == 10
    assert make_policy("pollux").adaptive_batch


def test_same_seed_same_episode_and_valid_allocations():
    rec, _ = run_recorded_twice(APPS, lambda: RecordingPolicy(PolluxPolicy(**SMALL)))
    for state, alloc in rec.decisions:
        _check_constraints(state, alloc, lend=False)
    # some job actually spans nodes at some point, so interference avoidance was exercised
    assert any(np.count_nonzero(a) > 1 for _, al in rec.decisions for a in al.values())


def test_lending_episode_with_inference_reclaims_and_stays_valid():
    rec, _ = run_lending_twice(APPS, lambda: RecordingPolicy(PolluxPolicy(lend=True, **SMALL)))
    for state, alloc in rec.decisions:
        _check_constraints(state, alloc, lend=True)


def test_decide_is_reproducible_after_reset():
    pol = PolluxPolicy(**SMALL)
    sim = Simulator(
        training_workload(APPS, 6, gap=0.0), SimConfig(cluster=ClusterConfig.parse("2x4"), restart="pollux"), pol
    )
    state = sim.observe()
    pol.reset(11)
    first = pol.decide(state).gpus
    pol.reset(11)
    again = pol.decide(state).gpus
    assert first.keys() == again.keys() and all(np.array_equal(first[k], again[k]) for k in first)


# ------------------------------------------------------------------ hand-made states


_job = job_view
_state = cluster_state


def test_lending_uses_idle_inference_node_only_when_lending():
    jobs = [_job(i, "cifar10", [0, 0], max_replicas=1) for i in range(6)]
    state = _state("1x4+1x4", jobs)
    plain = PolluxPolicy(lend=False, population=30, generations=15)
    lend = PolluxPolicy(lend=True, population=30, generations=15)
    plain.reset(0)
    lend.reset(0)
    a_plain = validate_allocation(state, plain.decide(state))
    a_lend = validate_allocation(state, lend.decide(state))
    _check_constraints(state, a_plain, lend=False)
    _check_constraints(state, a_lend, lend=True)
    assert sum(int(a[1]) for a in a_plain.values()) == 0
    assert sum(int(a[0]) for a in a_plain.values()) == 4
    assert sum(int(a[1]) for a in a_lend.values()) > 0
    assert sum(int(a.sum()) for a in a_lend.values()) == 6


def test_busy_inference_gpus_are_not_lent():
    jobs = [_job(i, "cifar10", [0, 0], max_replicas=1) for i in range(6)]
    state = _state("1x4+1x4", jobs, running=[0, 3])
    pol = PolluxPolicy(lend=True, population=30, generations=15)
    pol.reset(0)
    alloc = validate_allocation(state, pol.decide(state))
    assert sum(int(a[1]) for a in alloc.values()) <= 1
    _check_constraints(state, alloc, lend=True)


def test_pollux_respects_caps_on_a_crowded_cluster():
    jobs = [
        _job(0, "cifar10", [2, 2, 0, 0], max_replicas=8, service=0),
        _job(1, "bert", [0, 0, 2, 2], max_replicas=8, service=10),
        _job(2, "imagenet", [2, 2, 2, 2], max_replicas=16, service=20),
        _job(3, "ncf", [0, 0, 0, 0], max_replicas=1, service=30),
        _job(4, "deepspeech2", [0, 0, 0, 0], max_replicas=2, service=40),
    ]
    state = _state("4x4", jobs)
    for seed in range(3):
        pol = PolluxPolicy(population=40, generations=20)
        pol.reset(seed)
        alloc = validate_allocation(state, pol.decide(state))
        _check_constraints(state, alloc, lend=False)


# ------------------------------------------------------------------ GA pieces


def _toy_problem() -> PolluxProblem:
    single = [0.0, 0.5, 1.0, 1.5, 2.0]
    multi = [0.0, 0.4, 0.8, 1.2, 1.6]
    table = np.array([[single, multi], [single, multi]])
    return PolluxProblem(
        job_ids=np.array([7, 9]),
        nodes=np.array([0, 1]),
        cap=np.array([4, 4]),
        base=np.array([[2, 0], [0, 0]]),
        max_replicas=np.array([4, 4]),
        speedup=table.reshape(-1),
        kdim=5,
        scale=0.25,
        phi=np.array([0.5, 1.0]),
    )


def test_fitness_golden_values():
    prob = _toy_problem()
    pop = np.array(
        [
            [[2, 0], [0, 1]],  # job 7 unchanged (S = 1), job 9 started on 1 GPU (S = 0.5, phi = 1)
            [[1, 1], [0, 0]],  # job 7 moved to 2 nodes (S = 0.8, phi = 0.5), job 9 idle
            [[2, 0], [0, 0]],  # the current allocation
        ],
        dtype=float,
    )
    fit, util = prob.evaluate(pop)
    expect0 = 2.0 / (1.0 / (0.25 + 1e-3) + 1.0 / (0.125 + 1e-3))
    expect1 = 2.0 / (1.0 / (0.8 * 0.25 * 0.5 + 1e-3) + 1.0 / 1e-3)
    expect2 = 2.0 / (1.0 / (0.25 + 1e-3) + 1.0 / 1e-3)
    assert fit == pytest.approx([expect0, expect1, expect2], rel=1e-12)
    assert fit[0] == pytest.approx(0.1677771883, rel=1e-9)  # 2 / (1/0.251 + 1/0.126)
    # utility: sum of unscaled speedups / GPUs of the nodes in use
    assert util == pytest.approx([1.5 / 8, 0.8 / 8, 1.0 / 4], rel=1e-12)


def test_restart_factor_and_power_mean():
    assert restart_factor(90.0, 1) == pytest.approx(0.5)
    assert restart_factor(0.0, 0) == 0.0
    assert restart_factor(20.0, 3) == 0.0
    assert power_mean(np.array([1.0, 4.0]), -1) == pytest.approx(1.6)
    assert power_mean(np.array([1.0, 4.0]), 0) == pytest.approx(2.0)
    assert power_mean(np.array([1.0, 3.0]), 1) == pytest.approx(2.0)


def test_build_problem_fair_share_and_scale():
    jobs = [_job(0, "cifar10", [1, 0, 0, 0], max_replicas=2, age=90.0, restarts=1), _job(1, "bert", [0] * 4, 1)]
    state = _state("4x4", jobs)
    prob = build_problem(state, lend=False)
    assert prob.scale == pytest.approx(4 / 16)
    assert list(prob.job_ids) == [0, 1]
    assert prob.phi[0] == pytest.approx(0.5)
    fair = 8  # ceil(16 GPUs / 2 jobs), on one node
    rates = jobs[0].rate_table()
    expect = rates[0, 1] / rates[0, fair]
    assert prob.speedup[prob.offsets[0] + 1] == pytest.approx(expect)
    # evaluating the current allocation uses no restart factor for the unchanged job
    fit, _ = prob.evaluate(prob.base[None])
    s0 = expect * 0.25
    assert fit[0] == pytest.approx(2.0 / (1.0 / (s0 + 1e-3) + 1.0 / 1e-3))


def test_repair_enforces_every_constraint_in_priority_order():
    rng = np.random.default_rng(0)
    j, n = 6, 5
    prob = PolluxProblem(
        job_ids=np.arange(j),
        nodes=np.arange(n),
        cap=np.array([4, 4, 3, 0, 4]),
        base=np.zeros((j, n)),
        max_replicas=np.array([8, 3, 1, 16, 2, 5]),
        speedup=np.zeros(j * 2 * 17),
        kdim=17,
        scale=0.25,
        phi=np.ones(j),
    )
    pop = rng.integers(0, 6, size=(300, j, n)).astype(float)
    fixed = prob.repair(pop.copy(), rng)
    assert np.all(fixed >= 0) and np.all(fixed <= pop)
    assert np.all(fixed.sum(axis=2) <= prob.max_replicas)
    assert np.all(fixed.sum(axis=1) <= prob.cap)
    distributed = np.count_nonzero(fixed, axis=2) > 1
    assert np.all(((fixed > 0) & distributed[:, :, None]).sum(axis=1) <= 1)
    # interference: job 0 and job 1 both distributed and sharing node 0 -> job 1 loses node 0
    one = np.zeros((1, j, n))
    one[0, 0, :2] = 1
    one[0, 1, :2] = 1
    one[0, 2, 0] = 1  # single-node job may share with the distributed one
    out = prob.repair(one.copy(), rng)[0]
    assert out[0].tolist() == [1, 1, 0, 0, 0]
    assert out[1].tolist() == [0, 0, 0, 0, 0]
    assert out[2].tolist() == [1, 0, 0, 0, 0]
    # capacity in priority order: the earlier job keeps its GPUs
    two = np.zeros((1, j, n))
    two[0, 0, 2] = 2
    two[0, 1, 2] = 3
    out = prob.repair(two.copy(), rng)[0]
    assert out[0, 2] == 2 and out[1, 2] == 1


def test_mutation_and_crossover_shapes_and_bounds():
    rng = np.random.default_rng(1)
    prob = _toy_problem()
    parents = prob.repair(rng.integers(0, 3, size=(20, 2, 2)).astype(float), rng)
    w1, w2 = np.arange(10), np.arange(10, 20)
    kids = prob.crossover(parents, w1, w2, rng)
    assert kids.shape == (20, 2, 2)
    for i, child in enumerate(kids):  # each row comes from the same row of one of its two parents
        pa, pb = parents[w1[i % 10]], parents[w2[i % 10]]
        assert all(np.array_equal(child[r], pa[r]) or np.array_equal(child[r], pb[r]) for r in range(2))
    # a cut at c gives child 1 = rows < c of parent 2 + rows >= c of parent 1, child 2 the mirror
    pop = np.arange(2 * 3 * 1, dtype=float).reshape(2, 3, 1)
    three = PolluxProblem(
        job_ids=np.arange(3),
        nodes=np.array([0]),
        cap=np.array([9]),
        base=np.zeros((3, 1)),
        max_replicas=np.full(3, 9),
        speedup=np.zeros(3 * 2 * 10),
        kdim=10,
        scale=1.0,
        phi=np.ones(3),
    )
    seen = set()
    for _ in range(200):
        c1, c2 = three.crossover(pop, np.array([0]), np.array([1]), rng)
        np.testing.assert_array_equal(c1 + c2, pop[0] + pop[1])
        cut = int(np.sum(c1[:, 0] == pop[1][:, 0]))
        np.testing.assert_array_equal(c1[:, 0], np.r_[pop[1][:cut, 0], pop[0][cut:, 0]])
        seen.add(cut)
    assert seen == {0, 1, 2}  # the cut never takes every row from parent 2
    mutated = prob.mutate(kids.copy(), rng)
    assert np.all(mutated >= 0) and np.all(mutated <= np.maximum(prob.cap, kids.max()))
    assert np.all(mutated == np.round(mutated))


def test_bernoulli_positions_rate():
    rng = np.random.default_rng(2)
    hits = bernoulli_positions(rng, 200_000, 0.05)
    assert np.all(np.diff(hits) > 0) and hits.min() >= 0 and hits.max() < 200_000
    assert abs(len(hits) / 200_000 - 0.05) < 0.003
    assert bernoulli_positions(rng, 5, 1.0).tolist() == [0, 1, 2, 3, 4]
    assert len(bernoulli_positions(rng, 0, 0.5)) == 0


def test_warm_start_carries_rows_of_surviving_jobs():
    pol = PolluxPolicy(population=20, generations=5)
    # job 0 finished, job 5 arrived; job 2 now has the least attained service
    prev, prev_ids, prob = warm_start_problem(pol, build_problem)
    assert prev_ids == [0, 1, 2]
    assert list(prob.job_ids) == [2, 1, 5]
    init = pol.initial_population(prob)
    assert init.shape == (len(prev), 3, 4)
    np.testing.assert_array_equal(init[:, 0], prev[:, 2])
    np.testing.assert_array_equal(init[:, 1], prev[:, 1])
    assert not init[:, 2].any()
    # a fresh policy starts from the current allocation alone
    fresh = PolluxPolicy(population=20, generations=5)
    np.testing.assert_array_equal(fresh.initial_population(prob), prob.base[None])


def test_no_jobs_or_no_capacity_gives_empty_allocation():
    pol = PolluxPolicy(**SMALL)
    assert dict(pol.decide(_state("2x4", [])).gpus) == {}
    jobs = [_job(0, "cifar10", [0, 0], max_replicas=2)]
    assert dict(pol.decide(_state("2x4", jobs, running=[4, 4])).gpus) == {}


def test_early_stop_truncates_the_full_search_after_the_patience():
    """A round with patience runs the full GA's generations and stops once the best fitness has
    not improved for ``patience + patience_per_job * J`` of them."""
    jobs = [_job(i, "cifar10", [0, 0, 0, 0], max_replicas=8, service=i) for i in range(3)]
    state = _state("4x4", jobs)
    early = PolluxPolicy(population=20, generations=200, patience=2, patience_per_job=1.0)
    early.reset(7)
    picked = early.decide(state).gpus
    stop = early.last_generations
    limit = 2 + 1 * len(jobs)
    assert limit <= stop < 200
    full = PolluxPolicy(population=20, generations=stop, patience=None)
    full.reset(7)
    assert full.decide(state).gpus.keys() == picked.keys()
    assert full.last_fitness == early.last_fitness and full.last_generations == stop
    np.testing.assert_array_equal(full._pop, early._pop)
    # the best fitness was already reached `limit` generations before the stop
    before = PolluxPolicy(population=20, generations=stop - limit, patience=None)
    before.reset(7)
    before.decide(state)
    assert before.last_fitness == early.last_fitness
    # and no earlier stop: `limit + 1` generations before, it was still improving
    if stop - limit - 1 >= 0:
        earlier = PolluxPolicy(population=20, generations=stop - limit - 1, patience=None)
        earlier.reset(7)
        earlier.decide(state)
        assert earlier.last_fitness < early.last_fitness


def test_default_early_stop_and_none_runs_every_generation():
    pol = PolluxPolicy()
    assert (pol.patience, pol.patience_per_job) == (10, 2.0)
    jobs = [_job(i, "cifar10", [0, 0], max_replicas=4, service=i) for i in range(2)]
    full = PolluxPolicy(population=10, generations=30, patience=None)
    full.reset(0)
    full.decide(_state("2x4", jobs))
    assert full.last_generations == 30


def test_bad_settings_rejected():
    with pytest.raises(ValueError):
        PolluxPolicy(population=1)
    with pytest.raises(ValueError):
        PolluxPolicy(generations=-1)
    with pytest.raises(ValueError):
        PolluxPolicy(patience=0)
    with pytest.raises(ValueError):
        PolluxPolicy(patience_per_job=-1.0)
