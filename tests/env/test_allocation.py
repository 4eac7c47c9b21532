"""The action codec's repair (the RL path) and the best-fit placement helper."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepboot_env.env.action import GPU_BUCKETS, TargetCodec
from deepboot_env.placement import best_fit
from deepboot_env.sim.apps import get_app
from deepboot_env.sim.cluster import NODE_TRAIN, ClusterConfig
from deepboot_env.sim.rates import RateTable
from deepboot_env.sim.state import (
    Allocation,
    AllocationError,
    ClusterState,
    JobView,
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


# ---------------------------------------------------------------------------------------------
# the codec's repair (the one repair rule) turns any action into a valid allocation


@st.composite
def states_and_actions(draw):
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
    max_jobs = draw(st.integers(1, 4))
    lend_levels = draw(st.integers(1, 4))
    action = draw(st.lists(st.integers(0, len(GPU_BUCKETS) - 1), min_size=max_jobs, max_size=max_jobs))
    action.append(draw(st.integers(0, lend_levels - 1)))
    return state, TargetCodec(max_jobs, lend_levels), np.array(action)


@settings(max_examples=300, deadline=None)
@given(case=states_and_actions())
def test_codec_repair_is_deterministic_valid_and_counts_what_it_removes(case) -> None:
    """Any action, masked or not, decodes to a valid allocation: targets capped at the job's limit
    and trimmed to the lending level's capacity, the GPUs removed counted exactly."""
    state, codec, action = case
    counts, repaired = codec.decode(action, state)
    again, repaired_again = codec.decode(action, state)
    assert (counts, repaired) == (again, repaired_again)
    alloc = Allocation({job_id: np.array(row, dtype=np.int64) for job_id, row in counts.items()})
    assert validate_allocation(state, alloc).keys() == counts.keys()
    slots = state.jobs[: codec.max_jobs]
    wanted = sum(GPU_BUCKETS[int(choice)] for choice in action[: len(slots)])
    placed = sum(sum(row) for row in counts.values())
    assert repaired >= 0 and placed == wanted - repaired
    cap = state.training_capacity(action[-1] / (codec.lend_levels - 1) if codec.lend_levels > 1 else 0.0)
    assert placed <= cap.sum()
    for job in slots:
        assert sum(counts.get(job.id, [0])) <= min(GPU_BUCKETS[int(action[slots.index(job)])], job.max_replicas)


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


# ---------------------------------------------------------------------------------------------
# validation's fast path (one matrix) and the per-state memos it reads


def _two_jobs_state() -> ClusterState:
    return make_state(ClusterConfig(train_nodes=2, infer_nodes=2), [make_job(0, 4), make_job(3, 2)])


def test_validation_normalises_lists_numpy_keys_and_whole_floats_alike() -> None:
    """Arrays, lists of ints, numpy integer ids and whole floats give the same int64 rows, under
    the ids of the state's jobs; the fast path and the job-by-job checks agree."""
    state = _two_jobs_state()
    expected = {0: [2, 1, 0, 1], 3: [0, 0, 2, 0]}
    for gpus in (
        {0: np.array([2, 1, 0, 1]), 3: np.array([0, 0, 2, 0])},
        {0: [2, 1, 0, 1], 3: [0, 0, 2, 0]},
        {np.int64(0): np.array([2, 1, 0, 1]), np.int32(3): [0, 0, 2, 0]},
        {0: np.array([2.0, 1.0, 0.0, 1.0]), 3: [0, 0, 2, 0]},  # not int64: the job-by-job path
    ):
        out = validate_allocation(state, Allocation(gpus))
        assert {k: v.tolist() for k, v in out.items()} == expected
        assert all(type(k) is int for k in out) and all(v.dtype == np.int64 for v in out.values())


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        ({5: [1, 0, 0, 0]}, "job id 5: not an active training job"),
        ({0: [1, 0, 0]}, "expected GPUs for each of 4 nodes"),
        ({0: [1, 0, 0, 0], 3: [1, 0]}, "expected GPUs for each of 4 nodes"),  # ragged
        ({0: [0.5, 0, 0, 0]}, "must be whole numbers"),
        ({3: [0, -1, 0, 0]}, "negative GPU count -1 on node 1"),
        ({3: [3, 0, 0, 0]}, "3 GPUs exceed its limit of 2"),
        ({0: [4, 0, 0, 0], 3: [1, 0, 0, 0]}, "node 0: training wants 5 GPUs"),
    ],
)
def test_validation_names_the_fault_whatever_the_value_types(gpus: dict, message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        validate_allocation(_two_jobs_state(), Allocation(gpus))


def test_state_memos_hand_out_fresh_or_read_only_values() -> None:
    """The training capacity is computed once per state and lend fraction, and every call
    returns a new list; the jobs by id cannot be changed through the state."""
    state = make_state(ClusterConfig(train_nodes=1, infer_nodes=2), [make_job(0, 4)], running=[0, 1, 3])
    first = state.training_capacity_list(lend=0.5)
    first[0] = -99
    assert state.training_capacity_list(lend=0.5) == [4, 2, 0]
    assert state.training_capacity_list(lend=True) == [4, 3, 1] == state.training_capacity(1.0).tolist()
    assert (state.training_capacity_total(0.5), state.training_capacity_total(True)) == (6, 8)
    # the shares of a state share its unpinned GPUs: a list handed out for one does not alias them
    fresh = make_state(ClusterConfig(train_nodes=1, infer_nodes=2), [make_job(0, 4)], running=[0, 1, 3])
    whole = fresh.training_capacity_list(lend=1.0)
    whole[1] = -99
    assert fresh.training_capacity_list(lend=0.5) == [4, 2, 0]
    assert fresh.training_capacity_list(lend=1.0) == [4, 3, 1] and fresh.training_capacity_total(0.0) == 4
    with pytest.raises(TypeError):
        state.job_by_id[1] = state.jobs[0]  # type: ignore[index]
    assert state.job_by_id[0] is state.jobs[0]
