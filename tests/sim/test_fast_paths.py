"""The simulator's and the env's fast paths give exactly what the checked / eager paths give.

* ``DeepBootEnv.step`` applies the codec's allocation with ``Simulator.apply_valid_counts`` (no
  second validation): every decoded allocation passes ``validate_allocation`` unchanged, and a
  twin driven through the validating ``Simulator.apply`` stays identical.
* A job's progress (:func:`deepboot_env.sim.jobs._run`) is its reference loop,
  :func:`~deepboot_env.sim.jobs._reference_run` epoch by epoch: each of the four fast paths, on
  the states of real episodes (restart stalls, stop-free phases, interference) and random
  horizons where its precondition holds, gives the loop's result bit for bit; so does skipping
  whole epochs at their cached durations (a projection then keeps only its completion time).
* TRAIN_DONE events are projected lazily (``CompletionSchedule.schedule``, deferred until the
  horizon reaches ``TrainingJob.completion_lower_bound``, then ``completion_bound_from``): an
  episode with every projection made eagerly (no lower bound) is the same episode.
* ``Simulator.job_seconds`` sums only the jobs that can count: it equals the array formula.
* The residual codec asks a count-proposing base (ATS) for counts only and places them when the
  neutral action needs them: observations, masks and decoded allocations (order included) equal
  those of the codec that asks the base for its whole allocation at every decision.
* ATS's group knapsack (one compiled loop) chooses exactly what the
  element-by-element dynamic programme chooses, ties and flat (restart factor 0) values included.
* The score codec decodes with its prior's ``scored_placement`` (lists, unchecked): the same
  allocation, in the same order, as ``decide_scored`` checked by ``validate_allocation``; the job
  weights memoised from the observation to the decoding, the speedup rows that serve narrower
  widths and the memoised fair-share seconds equal those computed afresh.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from builders import RunCase, check_completion_bounds, masked_random_action, recorded_run_cases

from baselines.ats import knapsack
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import RESIDUAL_DELTAS, ResidualCodec, TargetCodec
from deepboot_env.env.observation import encode_observation
from deepboot_env.evaluation import run_episode
from deepboot_env.sim import jobs as jobs_module
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.jobs import ProjectionState, RunResult, TrainingJob
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import validate_allocation
from traces.generate import generate_workload


@pytest.fixture(scope="module")
def workload():
    return generate_workload(
        "fast-paths", 11, train={"num_jobs": 14}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )


@pytest.mark.parametrize("restart, shared", [("afe", None), ("stopfree", None), ("full", "8x4")])
def test_step_without_revalidation_equals_validating_apply(workload, restart: str, shared: str | None) -> None:
    kwargs = {"workload": workload, "restart": restart, "max_jobs": 8, "shared_pool": shared}
    fast, checked = DeepBootEnv(**kwargs), DeepBootEnv(**kwargs)
    fast.reset(seed=2)
    checked.reset(seed=2)
    rng = np.random.default_rng(2)
    for _ in range(600):
        action = masked_random_action(fast, rng)
        state = checked._state
        alloc, _ = checked.codec.decode_allocation(action, state)
        validated = validate_allocation(state, alloc)  # raises if the decoded allocation were invalid
        assert validated.keys() == alloc.gpus.keys()
        assert all(np.array_equal(validated[j], alloc.gpus[j]) for j in validated)
        checked.sim.apply(alloc, state)
        checked.sim.advance()
        obs, _, terminated, _, _ = fast.step(action)
        sim, twin = fast.sim, checked.sim
        assert (sim.now, sim.restarts, sim.reclaims, sim.num_events) == (
            twin.now,
            twin.restarts,
            twin.reclaims,
            twin.num_events,
        )
        assert sim._books.gpu_seconds == twin._books.gpu_seconds and sim.waiting_seconds == twin.waiting_seconds
        assert np.array_equal(sim.ledger.train, twin.ledger.train) and sim.ledger.totals == twin.ledger.totals
        sim.ledger.check()
        if terminated:
            assert twin.done
            break
        checked._state = twin.observe()
        expected = encode_observation(checked._state, checked.max_jobs)
        assert all(np.array_equal(obs[k], expected[k]) for k in obs)


@pytest.fixture(scope="module")
def run_cases(workload) -> list[RunCase]:
    """Calls of ``_run`` in real episodes and random horizons (:func:`builders.recorded_run_cases`)."""
    return recorded_run_cases(workload)


def run_record(result: RunResult) -> str:
    """A run's result with every float exact (``repr``), phases as a tuple."""
    epoch, progress, phases, anchor, completion = result
    return repr((epoch, progress, tuple(phases), anchor, completion))


def reference(job: TrainingJob, t1: float, start: ProjectionState) -> str:
    """The plain reference loop's result (no epoch skipped); a projection's completion time only."""
    result = jobs_module._reference_run(job, t1, start, jump=False)
    return repr(result[4]) if t1 == math.inf else run_record(result)


@pytest.mark.parametrize(
    "fast_path, least",
    [
        (jobs_module._within_stall, 200),
        (jobs_module._project_after_stall, 100),
        (jobs_module._advance_after_stall, 200),
        (jobs_module._advance_within_epoch, 1000),
    ],
    ids=["within_stall", "project_after_stall", "advance_after_stall", "advance_within_epoch"],
)
def test_each_fast_path_is_the_reference_loop(run_cases: list[RunCase], fast_path, least: int) -> None:
    """Where a fast path's precondition holds (it returns a result), the result is the
    reference loop's, bit for bit; the cases cover each path at least ``least`` times."""
    taken = 0
    for job, t1, start in run_cases:
        result = fast_path(job, t1, start)
        if result is None:
            continue
        taken += 1
        assert (repr(result[4]) if t1 == math.inf else run_record(result)) == reference(job, t1, start)
        assert run_record(result) == run_record(jobs_module._reference_run(job, t1, start))
    assert taken >= least


def test_run_and_its_epoch_jumps_are_the_reference_loop(run_cases: list[RunCase], monkeypatch) -> None:
    """``_run`` (fast paths, then the loop skipping whole epochs) gives the plain loop's result on
    every case; the skips happen often."""
    skips = []
    real_whole_epochs = jobs_module._whole_epochs

    def counting(*args):
        skipped = real_whole_epochs(*args)
        skips.append(skipped is not None)
        return skipped

    monkeypatch.setattr(jobs_module, "_whole_epochs", counting)
    for job, t1, start in run_cases:
        result = jobs_module._run(job, t1, start)
        assert (repr(result[4]) if t1 == math.inf else run_record(result)) == reference(job, t1, start)
    assert len(run_cases) > 5000 and sum(skips) > 100


@pytest.mark.parametrize("policy", ["ats", "optimus"])
@pytest.mark.parametrize(
    "config",
    [
        SimConfig(),
        SimConfig(restart="stopfree"),
        SimConfig(restart="full", interference=0.3),
        SimConfig(cluster=ClusterConfig.parse_shared("8x4"), restart="pollux"),
    ],
)
def test_lazy_completion_projection_equals_eager(workload, policy: str, config: SimConfig, monkeypatch) -> None:
    lazy = run_episode(policy, workload, config)
    monkeypatch.setattr(TrainingJob, "completion_lower_bound", lambda self: -np.inf)  # project at once
    eager = run_episode(policy, workload, config)
    assert json.dumps(lazy.deterministic_dict(), sort_keys=True) == json.dumps(
        eager.deterministic_dict(), sort_keys=True
    )
    assert lazy.timeline == eager.timeline


@pytest.mark.parametrize("restart", ["afe", "full", "stopfree", "pollux"])
def test_completion_lower_bound_never_exceeds_the_projection(workload, restart: str) -> None:
    env = DeepBootEnv(workload=workload, restart=restart, max_jobs=8)
    env.reset(seed=4)
    assert check_completion_bounds(env, 400) > 100


def test_job_seconds_equals_the_array_formula(workload) -> None:
    sim = Simulator(workload, SimConfig(restart="full"))

    def reference(t0: float, t1: float) -> float:
        lo = np.maximum(sim._books.job_arrivals, t0)
        hi = np.minimum(sim._books.job_completions, t1)
        return float(np.maximum(hi - lo, 0.0).sum())

    rng = np.random.default_rng(0)
    windows = 0
    while not sim.done:
        state = sim.observe()
        sim.apply(
            TargetCodec(8, 5).decode_allocation(np.array([rng.integers(0, 4) for _ in range(8)] + [4]), state)[0],
            state,
        )
        t_prev = sim.now
        sim.advance()
        for t0, t1 in [
            (t_prev, sim.now),
            (0.0, sim.now),
            (rng.uniform(0, sim.now), rng.uniform(0, 2 * sim.now + 1)),  # fractional: the numpy path
            (float(rng.integers(0, sim.now + 1)), float(rng.integers(0, sim.now + 600))),
        ]:
            assert sim.job_seconds(t0, t1) == reference(t0, t1)
            windows += 1
    assert windows > 100


def reference_knapsack(values: list[np.ndarray], capacity: int) -> list[int]:
    """The group knapsack written out one option at a time (the definition ATS's docstring gives)."""
    n = len(values)
    dp = np.zeros((n + 1, capacity + 1))
    for i, v in enumerate(values):
        for c in range(capacity + 1):
            dp[i + 1][c] = max([dp[i][c]] + [dp[i][c - w] + v[w] for w in range(1, min(len(v) - 1, c) + 1)])
    choice, c = [0] * n, capacity
    for i in range(n - 1, -1, -1):
        target = dp[i + 1][c]
        tol = 1e-12 * max(1.0, abs(target))
        for w in range(1, min(len(values[i]) - 1, c) + 1):
            if abs(dp[i][c - w] + values[i][w] - target) <= tol:
                choice[i], c = w, c - w
                break
    return choice


@pytest.mark.parametrize("seed", range(40))
def test_knapsack_equals_the_element_by_element_programme(seed: int) -> None:
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(0, 40))
    values = []
    for _ in range(int(rng.integers(0, 9))):
        width = int(rng.integers(0, 50))
        kind = rng.integers(4)
        if kind == 0:  # concave speedups with a held option and a restart factor
            v = np.concatenate(([0.0], np.sqrt(np.arange(1, width + 1)) * rng.uniform(0.2, 1.0)))
        elif kind == 1:  # flat: restart factor 0, every option worth nothing (ties everywhere)
            v = np.zeros(width + 1)
        elif kind == 2:  # coarse values: many exact ties between items
            v = np.concatenate(([0.0], rng.integers(0, 4, width).astype(float)))
        else:  # plateau past a node boundary
            v = np.concatenate(([0.0], np.minimum(np.arange(1, width + 1), 4) / 4.0))
        values.append(v)
    assert knapsack(values, capacity) == reference_knapsack(values, capacity)


@pytest.mark.parametrize("base", ["ats", "ats-nolend", "ats-deepboot"])
def test_residual_codec_with_lazy_placement_equals_the_allocating_one(workload, base: str) -> None:
    env = DeepBootEnv(workload=workload, max_jobs=8, action_mode="residual", base_policy=base)
    eager = ResidualCodec(8, env.lend_levels, base)
    eager._proposer = None  # ask the base for decide() at every observation
    assert env.codec._proposer is not None
    env.reset(seed=3)
    eager.reset(3)
    rng = np.random.default_rng(3)
    neutral_steps = 0
    for step in range(400):
        state = env.state
        expected = eager.observe(state)
        assert np.array_equal(env.codec.observe(state)["base"], expected["base"])
        assert list(env.codec._counts.items()) == list(eager._counts.items())
        assert np.array_equal(env.codec.mask(state), eager.mask(state))
        action = env.neutral_action()
        valid = env.codec.mask(state)[: 8 * len(RESIDUAL_DELTAS)].reshape(8, -1)
        for slot in range(min(len(state.jobs), 8)):
            if step % 3 and rng.random() < 0.3:  # every third step neutral, else some corrections
                action[slot] = rng.choice(np.flatnonzero(valid[slot]))
        ours, theirs = env.codec.decode(action, state), eager.decode(action, state)
        assert list(ours[0].items()) == list(theirs[0].items()) and ours[1] == theirs[1]
        neutral_steps += ours[1] == 0 and (action == env.neutral_action()).all()
        env.codec.observe(state)  # decode again from a fresh observation: the env's own step
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    assert neutral_steps > 50


def test_knapsack_compiles_where_numba_cannot_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no cache location can be written (numba refuses ``cache=True``), the knapsack is
    compiled without its cache and chooses the same."""
    from numba.core import caching

    import baselines.ats as ats

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])  # no writable location anywhere
    compiled = ats._compiled_knapsack.__wrapped__()
    values = [np.array([0.0, 1.0, 1.5]), np.array([0.0, 2.0]), np.zeros(3)]
    options = ats.Options.of_arrays(np.concatenate(values), [0, 3, 5], [2, 1, 2], [-1] * 3, np.ones(3), np.ones(3))
    chosen = compiled(options.speedups, options.table, 3)
    assert chosen.tolist() == reference_knapsack(values, 3) == knapsack(values, 3)


def test_speedup_rows_stay_valid_as_the_arena_grows_and_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    """ATS's memoised speedup rows are stored back to back in one array; rows and :class:`Options`
    handed out earlier keep their values when the array grows or the memo starts afresh, and a
    row read back equals :func:`speedup_values` of the job's table."""
    import baselines.ats as ats
    from baselines.ats import Options, job_speedups, speedup_values

    arena = ats._RowArena()
    monkeypatch.setattr(ats, "_ARENA", arena)
    sim = Simulator(generate_workload("arena", 3, train={"num_jobs": 12}), SimConfig())
    while len(sim.observe().jobs) < 4:
        sim.advance()
    jobs = list(sim.observe().jobs)
    kept = [(job, fair, job_speedups(job, fair, 4, 12)) for fair in (1, 2, 3) for job in jobs[:2]]
    early = Options.of(jobs[:2], 1, 4, [12, 12], False)
    before = [early.speedups[start : start + 13].copy() for start in early.offsets]
    for fair in range(4, 40):  # 36 x 4 rows of 61 values: past the first 4,096 values
        Options.of(jobs, fair, 4, [60] * len(jobs), False)
    assert len(arena.values) > 4096 and arena.values is not early.speedups
    monkeypatch.setattr(ats, "_ROWS_LIMIT", 5)
    Options.of(jobs, 1, 4, [3] * len(jobs), False)  # the memo is full: it starts afresh
    assert len(arena.rows) == len({id(job.rates) for job in jobs}) <= len(jobs)
    for start, row in zip(early.offsets, before, strict=True):
        np.testing.assert_array_equal(early.speedups[start : start + 13], row)
    for job, fair, row in kept:
        np.testing.assert_array_equal(row, speedup_values(job.rate_table(), fair, 4, 12))
        assert not row.flags.writeable


@pytest.mark.parametrize("prior", ["ats-srpt", "ats-srpt-fcfs", "jitter:0.1"])
def test_score_codec_placement_equals_decide_scored(workload, prior: str) -> None:
    """The score codec's decoding (``scored_placement``: lists, unchecked) is the prior's
    ``decide_scored`` checked by ``validate_allocation``, job by job in the same order, for random
    scores and lending shares on the states of an episode; and the weights memoised between the
    observation and the decoding are those a fresh policy computes on the same state."""
    from deepboot_env.policy import make_policy

    env = DeepBootEnv(workload=workload, action_mode="score", base_policy=prior, max_jobs=8)
    env.reset(seed=4)
    twin = make_policy(prior)
    twin.reset(4)  # as the env's reset reseeds its prior (the jitter's draws)
    rng = np.random.default_rng(4)
    shares, compared = set(), 0
    for _ in range(300):
        state, codec = env.state, env.codec
        action = rng.normal(0.0, 0.5, env.action_space.shape).astype(np.float32)
        scores, widths, lend = codec.scores_of(action, state)
        expected = validate_allocation(state, codec.prior.decide_scored(state, scores, lend, widths or None))
        placed = codec.prior.scored_placement(state, scores, lend, widths or None)
        assert list(placed) == list(expected)
        assert all(placed[job_id] == row.tolist() for job_id, row in expected.items())
        if state.jobs:
            assert codec.prior.log_weights(state) == twin.log_weights(state)
            compared += 1
        shares.add(round(lend, 2))
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    assert compared > 50 and len(shares) > 10


def test_speedup_rows_serve_narrower_widths_and_fair_seconds_are_memoised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A speedup row is computed at least as wide as its job can use (its rate table's
    ``max_replicas``) whatever width is asked, so that it serves every narrower width (its first values are the
    narrower row's); a wider one is computed anew, and ``fair_share_seconds`` memoised equals
    the work left over the fair-share rate computed afresh."""
    import baselines.ats as ats
    from baselines.ats import Options, epochs_left_work, fair_share_seconds, speedup_values
    from deepboot_env.sim.reclaim import fair_share_base

    arena = ats._RowArena()
    monkeypatch.setattr(ats, "_ARENA", arena)
    monkeypatch.setattr(ats, "_FAIR_SECONDS", {})
    sim = Simulator(generate_workload("arena", 5, train={"num_jobs": 12}), SimConfig())
    while len(sim.observe().jobs) < 3:
        sim.advance()
    jobs = list(sim.observe().jobs)
    wide = Options.of(jobs, 2, 4, [20] * len(jobs), False)
    narrow = Options.of(jobs, 2, 4, [5] * len(jobs), False)
    assert narrow.offsets.tolist() == wide.offsets.tolist() and len(arena.rows) == len({id(j.rates) for j in jobs})
    for job, start in zip(jobs, narrow.offsets.tolist(), strict=True):
        np.testing.assert_array_equal(narrow.speedups[start : start + 6], speedup_values(job.rate_table(), 2, 4, 5))
    rows = [arena.rows[(id(job.rates), job.epoch, 2, 4)] for job in jobs]
    assert [width for _, _, width in rows] == [max(20, job.rates.max_replicas) for job in jobs]
    usable = Options.of(jobs, 2, 4, [job.rates.max_replicas for job in jobs], False)
    assert usable.offsets.tolist() == wide.offsets.tolist()  # as wide as the jobs can use: no new row
    caps = [max(20, job.rates.max_replicas) + 6 for job in jobs]
    wider = Options.of(jobs, 2, 4, caps, False)
    assert all(a != b for a, b in zip(wider.offsets.tolist(), wide.offsets.tolist(), strict=True))
    for job, start, cap in zip(jobs, wider.offsets.tolist(), caps, strict=True):
        np.testing.assert_array_equal(
            wider.speedups[start : start + cap + 1], speedup_values(job.rate_table(), 2, 4, cap)
        )
    monkeypatch.setattr(ats, "_SRPT_WEIGHTS", {})
    for fair in (1, 3, 1):
        fresh = [epochs_left_work(job) / fair_share_base(job, fair) for job in jobs]
        assert fair_share_seconds(jobs, fair).tolist() == fresh
        for power in (1.0, 0.5, 1.0):  # the second pass of each reads the memo; half of the jobs first
            expected = (np.maximum(np.array(fresh), 1.0) ** -power).tolist()
            assert ats.srpt_weights(jobs[::2], fair, power).tolist() == expected[::2]
            assert ats.srpt_weights(jobs, fair, power).tolist() == expected


def test_node_layout_serves_arrays_in_turn_and_a_new_array_afresh() -> None:
    """Several simulators' node-kinds arrays, asked for in turn (vectorised envs), each get their
    own layout, and a new array with other kinds (the same id may come back once the old one is
    gone) gets its own, not a cached one."""
    from deepboot_env.sim.cluster import NODE_INFER, NODE_TRAIN, node_layout

    first = np.array([NODE_TRAIN, NODE_INFER, NODE_INFER])
    second = np.array([NODE_INFER, NODE_TRAIN, NODE_TRAIN, NODE_TRAIN])
    for _ in range(3):
        assert node_layout(first).inference == (1, 2) and node_layout(first).own == (True, False, False)
        assert node_layout(second).inference == (0,) and node_layout(second).lendable == (0,)
    for kinds in ([NODE_TRAIN] * 2, [NODE_INFER] * 2):  # made and dropped in turn
        assert node_layout(np.array(kinds)).inference == tuple(i for i, k in enumerate(kinds) if k == NODE_INFER)
