"""ONES policy (baselines/ones.py): valid batch sizes and GPU counts, determinism, evolution, lending."""

from __future__ import annotations

import numpy as np
import pytest
from builders import (
    RecordingPolicy,
    check_within_capacity,
    cluster_state,
    job_view,
    lending_workload,
    recorded_episode,
    run_lending_twice,
    run_recorded_twice,
    training_workload,
    warm_start_problem,
)

from baselines.ats import knapsack
from baselines.ones import (
    OnesPolicy,
    OnesProblem,
    RestartCosts,
    build_problem,
    per_gpu_batch,
    remaining_work_estimate,
)
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.sim.apps import FAST_RESTART_DELAY_S, FULL_RESTART_DELAY_S, get_app
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.state import ClusterState, validate_allocation

SMALL = {"population": 16, "generations": 8, "patience": 4}
"""Small evolution settings keep the episodes fast."""


APPS = ("cifar10", "ncf", "cifar10", "bert", "ncf", "cifar10", "deepspeech2", "yolov3")
"""The applications of the tiny workloads, cycled."""


def _chosen(policy: OnesPolicy) -> tuple[OnesProblem | None, np.ndarray | None]:
    """What an ONES decision chose: its problem and best candidate (None without a problem)."""
    pop = policy.last_population
    return policy.last_problem, None if pop is None or policy.last_problem is None else pop[0].copy()


def _recording(policy: OnesPolicy) -> RecordingPolicy:
    """``policy`` recording every state, validated allocation, problem and chosen candidate."""
    return RecordingPolicy(policy, _chosen)


def _check_decision(state, alloc, prob, best, lend: bool) -> None:
    check_within_capacity(state, alloc, lend)
    if prob is None:
        assert not alloc
        return
    # the applied GPU counts are the best candidate's, and its batch sizes are valid
    assert {j: int(a.sum()) for j, a in alloc.items()} == {
        int(j): int(k) for j, k in zip(prob.job_ids, best, strict=True) if k > 0
    }
    assert best.sum() <= prob.capacity
    batches = prob.batch_sizes(best)
    for jid, k, b in zip(prob.job_ids, best, batches, strict=True):
        job = state.job(int(jid))
        app = get_app(job.app)
        assert 0 <= k <= job.max_replicas
        if k > 0:
            assert app.init_batch_size <= b <= app.max_batch_size
            assert app.min_local_bsz <= b / k <= app.max_local_bsz


def test_registered_names():
    plain = make_policy("ones")
    assert plain.name == "ones" and not plain.lend and plain.adaptive_batch
    lend = make_policy("ones-lend", population=10, generations=2)
    assert lend.name == "ones-lend" and lend.lend and lend.population == 10 and lend.generations == 2


def test_episode_completes_is_deterministic_and_valid():
    rec, _ = run_recorded_twice(APPS, lambda: _recording(OnesPolicy(**SMALL)))
    for state, alloc, prob, best in rec.decisions:
        _check_decision(state, alloc, prob, best, lend=False)
    # elastic: some job ran on more than one GPU
    assert any(a.sum() > 1 for _, al, _, _ in rec.decisions for a in al.values())
    # a different seed is a different (still valid, still complete) run of the same search
    _, m3 = recorded_episode(_recording(OnesPolicy(**SMALL)), APPS, seed=4)
    assert m3.train_jobs_done == 8


def test_tiny_workload_golden_ish_against_tiresias():
    """ONES completes the tiny trace and beats gang-scheduled Tiresias on it."""
    _, ones = recorded_episode(_recording(OnesPolicy(**SMALL)), APPS)
    tiresias = run_episode(
        "tiresias", training_workload(APPS, 8), SimConfig(cluster=ClusterConfig.parse("2x4"), restart="pollux"), seed=3
    )
    assert ones.train_jobs_done == tiresias.train_jobs_done == 8
    assert ones.train_jct_mean < tiresias.train_jct_mean
    assert ones.train_jct_mean >= ones.jct_lower_bound_mean


def test_lending_episode_with_inference_reclaims_and_stays_valid():
    rec, _ = run_lending_twice(APPS, lambda: _recording(OnesPolicy(lend=True, **SMALL)))
    for state, alloc, prob, best in rec.decisions:
        _check_decision(state, alloc, prob, best, lend=True)
    plain = _recording(OnesPolicy(lend=False, **SMALL))
    cfg = SimConfig(cluster=ClusterConfig.parse("1x4+1x4"), restart="afe")
    assert run_episode(plain, lending_workload(APPS), cfg, seed=5).lent_gpu_seconds == 0
    for state, alloc, prob, best in plain.decisions:
        _check_decision(state, alloc, prob, best, lend=False)


# ------------------------------------------------------------------ hand-made states


_job = job_view


def _state(cluster: str, jobs, running=None, restart: str = "afe") -> ClusterState:
    return cluster_state(cluster, jobs, running, restart)


def _crowded() -> ClusterState:
    return _state(
        "4x4",
        [
            _job(0, "cifar10", [2, 2, 0, 0], max_replicas=8, epoch=60, service=0),
            _job(1, "bert", [0, 0, 2, 2], max_replicas=8, epoch=1, service=10, req=(8, 384)),
            _job(2, "imagenet", [0, 0, 0, 0], max_replicas=16, service=20, req=(24, 3200)),
            _job(3, "ncf", [0, 0, 0, 0], max_replicas=1, service=30, req=(1, 32768)),
            _job(4, "deepspeech2", [0, 0, 0, 0], max_replicas=8, epoch=40, service=40, req=(8, 320)),
            _job(5, "yolov3", [0, 0, 0, 0], max_replicas=4, service=50, req=(4, 64)),
        ],
    )


def test_batch_size_genes_and_gpu_limits():
    state = _crowded()
    prob = build_problem(state, lend=False)
    assert list(prob.job_ids) == [0, 1, 2, 3, 4, 5] and prob.capacity == 16
    # per-GPU batch: the submitted one clipped to [max(M0, mmin), mmax]
    assert prob.per_gpu.tolist() == [512 // 4, 12, 200, 32768, 40, 8]
    # largest K: min(Mmax // b, max_replicas, capacity)
    assert prob.k_hi.tolist() == [8, 8, 16, 1, 8, 4]
    assert prob.current.tolist() == [4, 4, 0, 0, 0, 0]
    huge = np.full((50, prob.num_jobs), 99, dtype=np.int64)
    rng = np.random.default_rng(0)
    fixed = prob.repair(prob.clip(huge), rng)
    assert np.all(fixed.sum(axis=1) <= prob.capacity) and np.all(fixed <= prob.k_hi)
    for k_row, b_row in zip(fixed, prob.batch_sizes(fixed), strict=True):
        for job, k, b in zip(state.jobs, k_row, b_row, strict=True):
            app = get_app(job.app)
            assert k == 0 or app.init_batch_size <= b <= app.max_batch_size
    # values: 0 GPUs is worth nothing, an invalid K is worth nothing, more GPUs never cost work
    assert np.all(prob.values[:, 0] == 0)
    assert np.all(prob.values[3, 2:] == 0)  # ncf: fixed batch, one GPU at most


def test_per_gpu_batch_and_remaining_work():
    cifar = get_app("cifar10")
    assert per_gpu_batch(_job(0, "cifar10", [0], 4, req=(8, 2048)), cifar) == 256
    assert per_gpu_batch(_job(0, "cifar10", [0], 4, req=(64, 2048)), cifar) == cifar.init_batch_size  # at least M0
    assert per_gpu_batch(_job(0, "cifar10", [0], 4, req=(1, 10**6)), cifar) == cifar.max_local_bsz
    assert per_gpu_batch(_job(0, "cifar10", [0], 4, req=(0, 0)), cifar) == cifar.init_batch_size
    assert remaining_work_estimate(_job(0, "cifar10", [0], 4, epoch=0), cifar) == pytest.approx(cifar.target_progress)
    later = remaining_work_estimate(_job(0, "cifar10", [0], 4, epoch=50), cifar)
    assert later == pytest.approx(cifar.target_progress - cifar.epoch_progress[49])


def test_restart_costs_follow_the_restart_model():
    costs = RestartCosts()
    app = get_app("bert")
    rates = np.array([0.0, 1.0, 1.8, 2.5, 3.0])
    full, fast = FULL_RESTART_DELAY_S["bert"], FAST_RESTART_DELAY_S["bert"]
    assert costs.lost_seconds("pollux", app, 2, rates).tolist() == [0, 30, 30, 30, 30]
    assert costs.lost_seconds("full", app, 2, rates).tolist() == [0, full, full, full, full]
    assert costs.lost_seconds("afe", app, 0, rates).tolist() == [0, full, full, full, full]
    afe = costs.lost_seconds("afe", app, 2, rates)
    assert afe[1] == fast and afe[2] == full  # same count elsewhere = full restart
    assert afe[4] == fast + np.floor((full - fast) * 2 / 4)
    stop = costs.lost_seconds("stopfree", app, 2, rates)
    assert stop[1] == fast  # scale-in: only the sync pause
    # scale-out: kept workers train on during the start-up, losing 1 - r(2)/r(4) of it
    assert stop[4] == pytest.approx(full * (1 - 1.8 / 3.0) + fast)


def test_urgent_job_gets_the_only_gpu():
    """Shortest-remaining-time urgency: the job near its end wins over a fresh one."""
    fresh = _job(0, "cifar10", [0], max_replicas=1, epoch=0, service=0)
    almost = _job(1, "cifar10", [0], max_replicas=1, epoch=98, service=1000)
    pol = OnesPolicy(population=8, generations=5)
    pol.reset(0)
    alloc = validate_allocation(_state("1x1", [fresh, almost]), pol.decide(_state("1x1", [fresh, almost])))
    assert set(alloc) == {1}


def test_restart_penalty_keeps_a_job_near_completion_in_place():
    """Growing a job that is about to finish is not worth a 30 s restart."""
    job = _job(0, "cifar10", [2, 0], max_replicas=4, epoch=99, service=0)
    state = _state("2x4", [job], restart="pollux")
    prob = build_problem(state, lend=False)
    assert prob.values[0].argmax() == 2
    pol = OnesPolicy(population=8, generations=10)
    pol.reset(1)
    alloc = validate_allocation(state, pol.decide(state))
    assert alloc[0].tolist() == [2, 0]


@pytest.mark.parametrize("seed", [0, 1])
def test_evolution_is_monotone_and_reaches_the_knapsack_optimum(seed):
    state = _crowded()
    pol = OnesPolicy(population=48, generations=60, patience=None)
    pol.reset(seed)
    pol.decide(state)
    hist = np.array(pol.last_history)
    assert len(hist) == 61 and np.all(np.diff(hist) >= 0)
    assert hist[-1] > hist[0]  # the search improved on the first population
    # fitness is separable: the exact optimum is a group knapsack over the per-job values
    prob = pol.last_problem
    vals = [prob.values[j, : prob.k_hi[j] + 1] for j in range(prob.num_jobs)]
    best = sum(v[c] for v, c in zip(vals, knapsack(vals, prob.capacity), strict=True))
    assert pol.last_fitness == pytest.approx(best, rel=1e-9)
    assert pol.last_fitness == pytest.approx(prob.evaluate(pol.last_population[:1])[0])


def test_same_seed_same_decision_after_reset():
    state = _crowded()
    pol = OnesPolicy(population=20, generations=5, patience=None)
    pol.reset(11)
    first = pol.decide(state).gpus
    hist = list(pol.last_history)
    pol.reset(11)
    again = pol.decide(state).gpus
    assert first.keys() == again.keys() and all(np.array_equal(first[k], again[k]) for k in first)
    assert pol.last_history == hist


def test_population_persists_across_rounds():
    pol = OnesPolicy(population=20, generations=5)
    # job 0 finished, job 5 arrived (with room for only one GPU); job 2 now first in order
    prev, prev_ids, prob = warm_start_problem(pol, build_problem, _state)
    assert prev_ids == [0, 1, 2]
    assert list(prob.job_ids) == [2, 1, 5]
    init = pol.initial_population(prob)
    assert init.shape == (len(prev) + 1, 3)
    np.testing.assert_array_equal(init[0], prob.current)  # the current allocation is a candidate
    np.testing.assert_array_equal(init[1:, 0], prev[:, 2])  # surviving rows carried (they fit)
    np.testing.assert_array_equal(init[1:, 1], prev[:, 1])
    assert set(np.unique(init[1:, 2])) <= {0, 1}  # the new job enters with 0 or 1 GPU


def test_operators_keep_genes_valid():
    rng = np.random.default_rng(2)
    prob = build_problem(_crowded(), lend=False)
    pop = prob.repair(prob.clip(rng.integers(0, 17, size=(40, prob.num_jobs))), rng)
    kids = prob.crossover(pop, np.arange(20), np.arange(20, 40), rng)
    assert kids.shape == pop.shape
    for i, child in enumerate(kids):  # every gene comes from one of the two parents
        pa, pb = pop[i % 20], pop[20 + i % 20]
        assert np.all((child == pa) | (child == pb))
    mutated = prob.mutate(kids.copy(), rng, rate=1.0)
    assert np.all(mutated >= 0) and np.all(mutated <= prob.k_hi)
    assert (mutated != kids).any()
    fixed = prob.repair(mutated.copy(), rng)
    assert np.all(fixed <= mutated) and np.all(fixed.sum(axis=1) <= prob.capacity)
    under = mutated.sum(axis=1) <= prob.capacity
    np.testing.assert_array_equal(fixed[under], mutated[under])


def test_no_jobs_or_no_capacity_gives_empty_allocation():
    pol = OnesPolicy(**SMALL)
    assert dict(pol.decide(_state("2x4", [])).gpus) == {}
    jobs = [_job(0, "cifar10", [0, 0], max_replicas=2)]
    assert dict(pol.decide(_state("2x4", jobs, running=[4, 4])).gpus) == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"population": 0},
        {"population": 1},
        {"population": 2.5},
        {"generations": -1},
        {"patience": 0},
        {"mutation_rate": 0.0},
        {"mutation_rate": 1.5},
    ],
)
def test_bad_settings_rejected(kwargs):
    with pytest.raises(ValueError, match="ONES"):
        OnesPolicy(**kwargs)
    with pytest.raises(ValueError, match="ONES"):
        make_policy("ones", **kwargs)
