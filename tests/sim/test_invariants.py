"""Property tests: random small workloads on random small clusters under a random valid policy.

After every ``apply`` and every ``advance`` the simulator must keep its books straight: no node
over capacity, the ledger equal to the jobs' allocations and the pods, RUNNING/PROTECT pods never
pre-empted, GPU-seconds by state adding up to GPUs x elapsed time; and every job and request of
the episode must finish.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deepboot_env.env.action import TargetCodec
from deepboot_env.policy import BasePolicy
from deepboot_env.sim.apps import COLD_START_DELAY_S
from deepboot_env.sim.cluster import NODE_TRAIN, ClusterConfig
from deepboot_env.sim.inference import PROTECT, RUNNING, SLEEP, InferencePool
from deepboot_env.sim.metrics import GPU_STATES
from deepboot_env.sim.reclaim import ats_i_victim
from deepboot_env.sim.restart import RESTART_MODELS
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import Allocation, ClusterState, GpuRef, validate_allocation
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload

FAST_APPS = ("ncf", "cifar10", "bert", "deepspeech2")
"""Applications short enough for hundreds of random episodes (yolov3/imagenet take 9-150 GPU-h)."""

BATCHES = {"ncf": (32768,), "cifar10": (128, 512, 2048), "bert": (12, 96, 384), "deepspeech2": (20, 160, 640)}
"""Submitted total batch sizes (used by fixed-batch policies)."""

MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


class RandomPolicy(BasePolicy):
    """A random but valid policy: keeps, drops or re-draws each job's GPUs; may lend; may pick a
    random reclaim victim or refuse to reclaim (the request then waits)."""

    name = "random"

    def __init__(self, seed: int, adaptive: bool, custom_reclaim: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.adaptive_batch = adaptive
        self.custom_reclaim = custom_reclaim

    def decide(self, state: ClusterState) -> Allocation:
        rng = self.rng
        lend = bool(rng.random() < 0.6)
        cap = state.training_capacity(lend=lend).astype(np.int64)
        out: dict[int, np.ndarray] = {}
        redraw = []
        for job in rng.permutation(len(state.jobs)):
            job = state.jobs[int(job)]
            if rng.random() < 0.7 and np.all(job.alloc <= cap):
                out[job.id] = job.alloc.copy()
                cap -= job.alloc
            else:
                redraw.append(job)
        for job in redraw:
            avail = int(cap.sum())
            hi = min(job.max_replicas, avail)
            if hi <= 0:
                continue
            lo = 1 if rng.random() < 0.9 else 0  # mostly keep jobs running so episodes end
            count = int(rng.integers(lo, hi + 1))
            alloc = np.zeros(state.num_nodes, dtype=np.int64)
            for _ in range(count):
                node = int(rng.choice(np.flatnonzero(cap > 0)))
                alloc[node] += 1
                cap[node] -= 1
            if rng.random() < 0.5 or count:
                out[job.id] = alloc
        result = Allocation(out)
        validate_allocation(state, result)  # the policy itself must be valid
        return result

    def choose_reclaim(self, state: ClusterState, request) -> GpuRef | None:  # noqa: ARG002
        if not self.custom_reclaim:
            return ats_i_victim(state)
        if self.rng.random() < 0.3:
            return None
        options = [
            GpuRef(job.id, int(node))
            for job in state.jobs
            for node in np.flatnonzero((job.alloc > 0) & (state.node_kinds != NODE_TRAIN))
        ]
        return options[int(self.rng.integers(len(options)))] if options else None


class CheckedPool(InferencePool):
    """Records every pod that leaves (and its state at that moment)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.dropped: list[tuple[int, str]] = []

    def _drop_pod(self, pod) -> None:
        self.dropped.append((pod.pid, pod.status))
        super()._drop_pod(pod)


class CheckedSimulator(Simulator):
    """A simulator whose inference pool records every pod that leaves."""

    _pool_type = CheckedPool

    @property
    def dropped(self) -> list[tuple[int, str]]:
        """(pod id, state) of every pod that left, in order."""
        return self._pool.dropped

    def gpu_seconds(self) -> dict[str, float]:
        """The counters behind ``metrics().gpu_seconds_by_state``."""
        return dict(zip(GPU_STATES, (float(v) for v in self._books.gpu_seconds), strict=True))


@st.composite
def scenarios(draw):
    shared = draw(st.sampled_from((False, True)))
    gpus = draw(st.integers(1, 4))
    if shared:
        cluster = ClusterConfig(draw(st.integers(1, 4)), 0, gpus, shared_pool=True)
    else:
        cluster = ClusterConfig(draw(st.integers(1, 3)), draw(st.integers(1, 2)), gpus)
    times = st.one_of(st.integers(0, 900).map(float), st.floats(0, 900, allow_nan=False))
    n_jobs = draw(st.integers(1, 4))
    arrivals = sorted(draw(st.lists(times, min_size=n_jobs, max_size=n_jobs)))
    jobs = []
    for i, t in enumerate(arrivals):
        app = draw(st.sampled_from(FAST_APPS))
        batch = draw(st.sampled_from(BATCHES[app]))
        # a gang policy's simulation refuses a job asking for more GPUs than the cluster holds
        replicas = min(draw(st.integers(1, 8)), cluster.total_gpus)
        jobs.append(TrainingJobSpec(f"j{i}", t, app, replicas, batch))
    n_req = draw(st.integers(0, 25))
    req_times = sorted(
        draw(st.lists(st.one_of(st.integers(0, 4000).map(float), st.floats(0, 4000)), min_size=n_req, max_size=n_req))
    )
    requests = []
    for i, t in enumerate(req_times):
        model = draw(st.sampled_from(MODELS))
        k = draw(st.integers(1, 2))
        dur = draw(st.one_of(st.integers(1, 40).map(float), st.floats(0.5, 40)))
        requests.append(InferenceRequestSpec(f"r{i}", t, f"infer-{model}-{k}", model, dur))
    config = SimConfig(
        cluster=cluster,
        restart=draw(st.sampled_from(RESTART_MODELS)),
        protect_scale=draw(st.sampled_from((0.5, 1.0, 2.0))),
        max_time=20 * 86400.0,
    )
    policy = RandomPolicy(draw(st.integers(0, 2**31)), adaptive=draw(st.booleans()), custom_reclaim=draw(st.booleans()))
    return Workload("random", tuple(jobs), tuple(requests)), config, policy


def _check(sim: CheckedSimulator, pinned_before: set[int]) -> set[int]:
    led = sim.ledger
    led.check()
    cfg = sim.config.cluster
    assert np.all(led.used() <= cfg.gpus_per_node)
    # training: the ledger is the sum of the jobs' allocations
    total = np.zeros(cfg.num_nodes, dtype=np.int64)
    for job in sim.jobs:
        assert np.all(job.alloc >= 0), job.spec.name
        assert job.replicas == int(job.alloc.sum())
        if job.done:
            assert job.replicas == 0
        total += job.alloc
    assert np.array_equal(total, led.train)
    # pods: the ledger counts them by state and node; inference never lands on training nodes
    for state, counts in ((RUNNING, led.running), (PROTECT, led.protect), (SLEEP, led.sleep)):
        mine = np.zeros(cfg.num_nodes, dtype=np.int64)
        for pod in sim.pods.values():
            if pod.status == state:
                mine[pod.node] += 1
        assert np.array_equal(mine, counts), state
    for pod in sim.pods.values():
        assert led.kinds[pod.node] != NODE_TRAIN
    # RUNNING/PROTECT pods are never pre-empted: only SLEEP pods ever leave
    assert all(status == SLEEP for _, status in sim.dropped)
    dropped = {pid for pid, _ in sim.dropped}
    for pid in pinned_before:
        assert pid in sim.pods or pid in dropped
    # GPU-seconds by state add up to all GPUs over the elapsed time (metrics() reads the same
    # counters; it is compared with them at the end of each episode, it is too slow for every step)
    gs = sim.gpu_seconds()
    assert all(v >= -1e-6 for v in gs.values()), gs
    assert sum(gs.values()) == pytest.approx(cfg.total_gpus * sim.now, rel=1e-9, abs=1e-6)
    return {pid for pid, pod in sim.pods.items() if pod.status in (RUNNING, PROTECT)}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_random_policy_keeps_invariants_and_finishes(scenario) -> None:
    workload, config, policy = scenario
    sim = CheckedSimulator(workload, config, policy)
    pinned = _check(sim, set())
    while not sim.done:
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        pinned = _check(sim, pinned)
        sim.advance()
        pinned = _check(sim, pinned)
    m = sim.metrics()
    assert m.gpu_seconds_by_state == sim.gpu_seconds()
    assert sum(m.gpu_seconds_by_state.values()) == pytest.approx(config.cluster.total_gpus * m.sim_end)
    assert not m.truncated
    assert m.train_jobs_done == len(workload.jobs)
    assert m.infer_requests_done == len(workload.requests)
    assert m.infer_cold_starts + m.infer_warm_hits == len(workload.requests)
    for spec, rec in zip(workload.requests, sim.requests, strict=True):
        assert rec.start is not None and rec.finish is not None
        assert rec.start >= spec.arrival
        assert rec.finish == rec.start + spec.duration
        if rec.cold:
            assert rec.start - spec.arrival >= COLD_START_DELAY_S[spec.app] - 1e-9
    for job in sim.jobs:
        assert job.completion >= job.spec.arrival
        assert job.epoch == job.app.max_epochs
        assert job.first_start is not None and job.first_start <= job.completion
    assert m.makespan == max(j.completion for j in sim.jobs)
    assert m.sim_end >= m.makespan
    if config.cluster.shared_pool:
        assert m.lent_gpu_seconds == 0.0  # no inference cluster to lend from


@settings(max_examples=15, deadline=None)
@given(scenario=scenarios())
def test_random_codec_actions_keep_invariants(scenario) -> None:
    """The RL path: arbitrary (unmasked) target actions, repaired by the env's codec and applied
    without a second check."""
    workload, config, policy = scenario
    sim = CheckedSimulator(workload, config, policy)
    codec = TargetCodec(6, 3)
    rng = np.random.default_rng(7)
    pinned = _check(sim, set())
    while not sim.done:
        state = sim.observe()
        if rng.random() < 0.85:  # otherwise the policy (so that jobs progress)
            counts, removed = codec.decode(rng.integers(0, codec.nvec), state)
            assert removed >= 0
            sim.apply_valid_counts(counts)
        else:
            sim.apply(policy.decide(state), state)
        pinned = _check(sim, pinned)
        sim.advance()
        pinned = _check(sim, pinned)
    assert sim.metrics().train_jobs_done == len(workload.jobs)


# ---------------------------------------------------------------------------------------------
# training progress does not depend on when the job is looked at


_TABLES: dict = {}


@settings(max_examples=150, deadline=None)
@given(
    app=st.sampled_from(MODELS),
    first=st.lists(st.integers(0, 2), min_size=3, max_size=3),
    second=st.lists(st.integers(0, 2), min_size=3, max_size=3),
    model=st.sampled_from(RESTART_MODELS),
    change_at=st.floats(1.0, 5000.0),
    cuts=st.lists(st.floats(0.0, 1.0), max_size=12),
)
# a restart stall cut at fractional times: its seconds left, added back, drifted to 25.00000000000001
@example(app="ncf", first=[0, 0, 0], second=[0, 0, 0], model="full", change_at=3.78,
         cuts=[1.0, 0.65625, 0.59375, 0.84375, 0.8946055662103725, 0.918246977414477])  # fmt: skip
def test_job_progress_independent_of_advance_pattern(app, first, second, model, change_at, cuts) -> None:
    """A job advanced at many (fractional) times reaches every epoch and completes at exactly the
    times projected when its placement last changed. (Regressions: the epoch-end rounding used to be
    redone from every advance, so an advance at a fractional time - e.g. the observe() done for a
    reclaim - moved a projected completion and the simulator raised "was projected to complete";
    then a restart stall cut at fractional times kept only its seconds left, whose sum with the time
    of the cut could round past the stall's end, and the completion moved by one ulp with it.)"""
    from deepboot_env.sim.apps import get_app
    from deepboot_env.sim.jobs import TrainingJob
    from deepboot_env.sim.rates import RateTable
    from deepboot_env.sim.restart import plan_change

    prof = get_app(app)
    a, b = np.array(first), np.array(second)
    if a.sum() == 0:
        a[0] = 1
    cap = prof.max_useful_replicas()
    a = np.minimum(a, cap)
    b = np.minimum(b, cap)
    table = _TABLES.setdefault(app, RateTable(prof, cap))  # shared: tables are pure caches
    spec = TrainingJobSpec("j", 0.0, app, 1, prof.init_batch_size)
    direct, stepped = TrainingJob(0, spec, prof, table, 3), TrainingJob(0, spec, prof, table, 3)
    for job in (direct, stepped):
        job.apply_change(a, plan_change(model, prof, np.zeros(3, dtype=int), a, False), 0.0)
    projected_first = direct.time_of_completion()
    change_at = min(change_at, projected_first - 1e-3) if projected_first > 1.0 else None
    if change_at is not None:
        for t in sorted(c * change_at for c in cuts):
            stepped.advance(t)
            assert stepped.time_of_completion() == projected_first
        for job in (direct, stepped):
            job.advance(change_at)
        assert direct.epoch == stepped.epoch
        assert stepped.progress == pytest.approx(direct.progress, rel=1e-9, abs=1e-9)
        for job in (direct, stepped):
            job.apply_change(b, plan_change(model, prof, a, b, True), change_at)
    projected = direct.time_of_completion()
    if projected is None:  # parked at zero GPUs
        assert int(b.sum()) == 0
        return
    start = change_at or 0.0
    for t in sorted(start + c * (projected - start) for c in cuts):
        stepped.advance(t)
        assert stepped.time_of_completion() == projected
        assert not stepped.done or stepped.completion == projected
    for job in (direct, stepped):
        job.advance(projected)
        assert job.done and job.completion == projected
        assert job.epoch == prof.max_epochs
