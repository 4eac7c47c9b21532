"""Allocation repair (the RL path) and the best-fit placement helper."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepboot_env.placement import best_fit
from deepboot_env.sim.apps import get_app
from deepboot_env.sim.cluster import NODE_TRAIN, ClusterConfig
from deepboot_env.sim.goodput import RateTable
from deepboot_env.sim.state import (
    Allocation,
    AllocationError,
    ClusterState,
    JobView,
    repair_allocation,
    validate_allocation,
)

_RATES = RateTable(get_app("cifar10"), 16)


def make_job(job_id: int, max_replicas: int, attained: float = 0.0, arrival: float = 0.0, nodes: int = 4) -> JobView:
    return JobView(
        id=job_id,
        name=f"j{job_id}",
        app="cifar10",
        arrival=arrival,
        age=1000.0 - arrival,
        attained_service=attained,
        num_restarts=0,
        alloc=np.zeros(nodes, dtype=np.int64),
        epoch=0,
        progress_fraction=0.0,
        max_replicas=max_replicas,
        requested_replicas=1,
        requested_batch=128,
        stalled_seconds=0.0,
        remaining_work=1000.0,
        rates=_RATES,
    )


def make_state(config: ClusterConfig, jobs, running=None, protect=None, sleeping=None) -> ClusterState:
    n = config.num_nodes
    zeros = np.zeros(n, dtype=np.int64)
    return ClusterState(
        time=1000.0,
        interval=60.0,
        config=config,
        node_kinds=config.node_kinds(),
        train_used=zeros.copy(),
        running=zeros.copy() if running is None else np.asarray(running, dtype=np.int64),
        protect=zeros.copy() if protect is None else np.asarray(protect, dtype=np.int64),
        sleeping=zeros.copy() if sleeping is None else np.asarray(sleeping, dtype=np.int64),
        jobs=tuple(jobs),
        waiting_requests=0,
        recent_arrivals=(0,) * 10,
        restart_model="afe",
    )


TWO_BY_TWO = ClusterConfig(train_nodes=2, infer_nodes=2, gpus_per_node=4)


# ---------------------------------------------------------------------------------------------
# repair_allocation golden cases


def test_repair_keeps_a_valid_allocation() -> None:
    state = make_state(TWO_BY_TWO, [make_job(0, 8), make_job(1, 4)], running=[0, 0, 1, 0])
    alloc = Allocation({0: np.array([4, 2, 1, 1]), 1: np.array([0, 2, 2, 0])})
    out, removed = repair_allocation(state, alloc)
    assert removed == 0
    assert {k: v.tolist() for k, v in out.items()} == {0: [4, 2, 1, 1], 1: [0, 2, 2, 0]}
    checked = validate_allocation(state, alloc)
    assert {k: v.tolist() for k, v in checked.items()} == {k: v.tolist() for k, v in out.items()}


def test_repair_over_max_replicas_trims_least_populated_nodes_first() -> None:
    state = make_state(TWO_BY_TWO, [make_job(0, 3)])
    out, removed = repair_allocation(state, Allocation({0: np.array([2, 1, 2, 0])}))
    # node 1 (1 GPU) first, then the tie between nodes 0 and 2 (2 GPUs) goes to the higher index
    assert out[0].tolist() == [2, 0, 1, 0] and removed == 2
    out, removed = repair_allocation(state, Allocation({0: np.array([4, 4, 0, 0])}))
    assert out[0].tolist() == [3, 0, 0, 0] and removed == 5  # node 1 (tie: higher index) emptied, then node 0


def test_repair_overcommitted_node_takes_from_most_attained_service_first() -> None:
    jobs = [
        make_job(0, 8, attained=500.0, arrival=10.0),
        make_job(1, 8, attained=100.0),
        make_job(2, 8, attained=500.0, arrival=20.0),
    ]
    state = make_state(TWO_BY_TWO, jobs, running=[0, 0, 2, 0], protect=[0, 0, 1, 0], sleeping=[0, 0, 0, 4])
    alloc = Allocation({0: np.array([2, 0, 1, 4]), 1: np.array([2, 0, 1, 0]), 2: np.array([1, 0, 0, 0])})
    out, removed = repair_allocation(state, alloc)
    # node 0: 5 wanted, 4 fit: job 2 (most service, later arrival) loses first
    # node 2: 2 wanted, 1 fits (2 RUNNING + 1 PROTECT pinned): job 0 loses (more service than job 1)
    # node 3: SLEEP pods do not count, all 4 may be lent
    assert out[0].tolist() == [2, 0, 0, 4]
    assert out[1].tolist() == [2, 0, 1, 0]
    assert out[2].tolist() == [0, 0, 0, 0]
    assert removed == 2
    validate_allocation(state, Allocation(out))


def test_repair_drops_unknown_jobs_and_counts_their_gpus() -> None:
    state = make_state(TWO_BY_TWO, [make_job(0, 4)])
    out, removed = repair_allocation(state, Allocation({0: np.array([1, 0, 0, 0]), 9: np.array([2, 1, 0, 0])}))
    assert list(out) == [0] and removed == 3


def test_repair_floors_negative_fractional_and_non_finite_counts_without_counting() -> None:
    state = make_state(TWO_BY_TWO, [make_job(0, 8)])
    out, removed = repair_allocation(state, Allocation({0: np.array([1.7, -1.0, np.nan, np.inf])}))
    assert out[0].tolist() == [1, 0, 0, 0] and out[0].dtype == np.int64
    assert removed == 0


def test_repair_rejects_wrong_shapes() -> None:
    state = make_state(TWO_BY_TWO, [make_job(0, 8)])
    with pytest.raises(AllocationError, match=r"job id 0: expected GPUs for each of 4 nodes, got shape \(2,\)"):
        repair_allocation(state, Allocation({0: np.array([1, 1])}))


def test_simulator_apply_with_repair_counts_removed_gpus() -> None:
    from deepboot_env.sim.simulator import SimConfig, Simulator
    from deepboot_env.sim.workload import TrainingJobSpec, Workload

    sim = Simulator(Workload("w", (TrainingJobSpec("a", 0.0, "bert", 1, 12),)), SimConfig(cluster=TWO_BY_TWO))
    removed = sim.apply(Allocation({0: np.array([3, 0, 0, 0])}), repair=True)  # max_replicas is 1
    assert removed == 2 and sim.repaired_gpus == 2
    assert sim.jobs[0].alloc.tolist() == [1, 0, 0, 0]


# ---------------------------------------------------------------------------------------------
# repair_allocation properties


@st.composite
def states_and_allocations(draw):
    gpus = draw(st.integers(1, 4))
    if draw(st.booleans()):
        config = ClusterConfig(draw(st.integers(1, 4)), 0, gpus, shared_pool=True)
    else:
        config = ClusterConfig(draw(st.integers(1, 3)), draw(st.integers(0, 2)), gpus)
    n = config.num_nodes
    kinds = config.node_kinds()
    pods = {key: np.zeros(n, dtype=np.int64) for key in ("running", "protect", "sleeping")}
    for node in range(n):
        if kinds[node] == NODE_TRAIN:
            continue
        free = gpus
        for key in pods:
            c = draw(st.integers(0, free))
            pods[key][node] = c
            free -= c
    n_jobs = draw(st.integers(1, 4))
    jobs = [
        make_job(
            i, draw(st.integers(1, 8)), draw(st.sampled_from([0.0, 50.0, 100.0])), draw(st.sampled_from([0.0, 5.0])), n
        )
        for i in range(n_jobs)
    ]
    state = make_state(config, jobs, **pods)
    counts = st.one_of(
        st.integers(-2, gpus + 2).map(float),
        st.floats(-2.0, gpus + 2.0),
        st.sampled_from([np.nan, np.inf, -np.inf]),
    )
    ids = draw(st.lists(st.integers(0, n_jobs + 1), unique=True, max_size=n_jobs + 2))
    gpus_by_job = {i: np.array(draw(st.lists(counts, min_size=n, max_size=n))) for i in ids}
    return state, Allocation(gpus_by_job)


def _clean(value: np.ndarray) -> np.ndarray:
    arr = np.where(np.isfinite(value), value, 0.0)
    return np.maximum(np.floor(arr), 0).astype(np.int64)


@settings(max_examples=300, deadline=None)
@given(case=states_and_allocations())
def test_repair_is_deterministic_valid_and_counts_what_it_removes(case) -> None:
    state, alloc = case
    out, removed = repair_allocation(state, alloc)
    again, removed_again = repair_allocation(state, alloc)
    assert removed == removed_again
    assert {k: v.tolist() for k, v in out.items()} == {k: v.tolist() for k, v in again.items()}
    # the result is valid
    assert validate_allocation(state, Allocation(out)).keys() == out.keys()
    # it only removes, and counts exactly what it removed (beyond flooring)
    active = {j.id for j in state.jobs}
    clean_total = 0
    for job_id, value in alloc.gpus.items():
        clean = _clean(value)
        clean_total += int(clean.sum())
        if job_id in active:
            assert np.all(out[job_id] <= clean)
        else:
            assert job_id not in out
    assert removed == clean_total - sum(int(v.sum()) for v in out.values())
    assert all(v.dtype == np.int64 and np.all(v >= 0) for v in out.values())
    # an allocation that was valid already (after flooring, unknown jobs aside) is left alone
    known = Allocation({k: _clean(v) for k, v in alloc.gpus.items() if k in active})
    unknown_gpus = sum(int(_clean(v).sum()) for k, v in alloc.gpus.items() if k not in active)
    try:
        valid = validate_allocation(state, known)
    except AllocationError:
        assert removed > unknown_gpus
    else:
        assert removed == unknown_gpus
        assert {k: v.tolist() for k, v in valid.items()} == {k: v.tolist() for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# best_fit


@pytest.mark.parametrize(
    ("need", "free", "expected"),
    [
        (0, [4, 4, 4], [0, 0, 0]),
        (2, [4, 4, 4], [2, 0, 0]),  # first node on ties
        (2, [4, 2, 3], [0, 2, 0]),  # the tightest node that fits
        (3, [4, 2, 3], [0, 0, 3]),
        (4, [4, 2, 3], [4, 0, 0]),
        (5, [1, 2, 3], [0, 2, 3]),  # more than any node: fill the largest, then best-fit the rest
        (7, [3, 3, 1], [3, 3, 1]),
        (6, [4, 4, 4, 2], [4, 0, 0, 2]),
        (9, [4, 4, 4, 2], [4, 4, 0, 1]),  # the last GPU goes to the tightest node
        (1, [0, 3, 1, 2], [0, 0, 1, 0]),
        (2, [-1, 2], [0, 2]),  # negative free counts are treated as 0
    ],
)
def test_best_fit_golden(need: int, free: list[int], expected: list[int]) -> None:
    arr = np.array(free)
    out = best_fit(need, arr)
    assert out is not None and out.tolist() == expected
    assert arr.tolist() == free  # input untouched


@pytest.mark.parametrize(("need", "free"), [(5, [2, 2]), (1, [0, 0]), (3, [-4, 2])])
def test_best_fit_returns_none_when_not_enough(need: int, free: list[int]) -> None:
    assert best_fit(need, np.array(free)) is None


def test_best_fit_respects_allowed_mask() -> None:
    free = np.array([4, 4, 2])
    assert best_fit(3, free, allowed=np.array([False, True, True])).tolist() == [0, 3, 0]
    assert best_fit(2, free, allowed=np.array([False, True, True])).tolist() == [0, 0, 2]
    assert best_fit(7, free, allowed=np.array([False, True, True])) is None
    assert best_fit(0, free, allowed=np.array([False, False, False])).tolist() == [0, 0, 0]


@settings(max_examples=300, deadline=None)
@given(free=st.lists(st.integers(-1, 6), min_size=1, max_size=8), need=st.integers(0, 30), data=st.data())
def test_best_fit_properties(free: list[int], need: int, data: st.DataObject) -> None:
    allowed = np.array(data.draw(st.lists(st.booleans(), min_size=len(free), max_size=len(free))))
    arr = np.array(free)
    avail = np.maximum(np.where(allowed, arr, 0), 0)
    out = best_fit(need, arr, allowed)
    if avail.sum() < need:
        assert out is None
        return
    assert out is not None
    assert int(out.sum()) == need
    assert np.all(out >= 0) and np.all(out <= avail)
    # packs on as few nodes as possible
    fewest = int(np.searchsorted(np.cumsum(np.sort(avail)[::-1]), need) + 1) if need else 0
    assert int(np.count_nonzero(out)) == fewest
    assert best_fit(need, arr, allowed).tolist() == out.tolist()  # deterministic
