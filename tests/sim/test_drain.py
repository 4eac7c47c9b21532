"""The compiled inference drain (:mod:`deepboot_env.sim.drain`) leaves the simulator exactly as the
Python reference loop (``Simulator.drain_compiled = False``) does: request records, pods, the
waiting queue, the ledger, the live events, the GPU-seconds, the timeline and the counters, bit
for bit, under overload (requests waiting, SLEEP pods evicted, warm pods served out of FIFO
order), on a shared pool, at other protect scales and intervals, cut by ``max_time`` mid-drain,
through the loop's hand-over of a full row buffer, and in forks played to the end. Where its
preconditions fail (Aryl mode, a cut mid-training) and at a process's first drain the Python
loop runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from builders import drive, episode_record

import deepboot_env.sim.drain as drain
import deepboot_env.sim.simulator as simulator_module
from deepboot_env.policy import make_policy
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload


@pytest.fixture(autouse=True)
def compile_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every drain of these tests may run compiled (a process's first one runs in Python)."""
    monkeypatch.setattr(drain, "PYTHON_DRAINS_FIRST", 0)


def _workload(seed: int, mean_gpus: float, horizon_s: float = 2 * 86400.0):
    return generate_workload(
        f"drain-{seed}",
        seed,
        train={"num_jobs": 8},
        inference={"horizon_s": horizon_s, "mean_gpus": mean_gpus, "instances_per_app": 2, "bursts": 4},
    )


def _state(sim: Simulator) -> dict[str, object]:
    """Everything the drain changes, comparable with ==."""
    pool, books, ledger = sim._pool, sim._books, sim.ledger
    live_events = sorted(
        entry
        for entry in sim.events.heap
        if entry[1] != 2 and entry[3] in pool.pods and pool.pods[entry[3]].version == entry[4]
    )
    return {
        "clock": (sim.now, sim.done, sim.truncated, sim.num_events, sim._next_request, sim._arrived_before),
        "recent": list(sim._recent),
        "books": (books.gpu_seconds, books.waiting_seconds, books._t, books._sample_from, books.timeline),
        "records": list(pool.requests),
        "pods": {pid: vars(pod) for pid, pod in pool.pods.items()},
        "pod_order": list(pool.pods),
        "by_instance": pool._pods_by_instance,
        "waiting": list(pool.waiting.items()),
        "waiting_of": {name: list(queue) for name, queue in pool._waiting_of.items() if queue},
        "counters": (pool._tickets, pool._pod_seq, pool.reclaims, sim.events._seq),
        "ledger": (ledger.counts, ledger.by_state),
        "events": live_events,
        "record": episode_record(sim, events=True),
        "drain_from": max((job.completion for job in sim.jobs if job.completion is not None), default=0.0),
    }


def _played(workload, config: SimConfig, compiled: bool, policy: str = "ats") -> tuple[dict[str, object], int]:
    """The end state of an episode of ``policy`` with the drain compiled or not, and how many
    drains ran compiled."""
    calls = []
    original = drain.compiled_drain

    def counted(*args):
        calls.append(1)
        return original(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulator, "drain_compiled", compiled)
        patch.setattr(simulator_module, "compiled_drain", counted)
        agent = make_policy(policy)
        agent.reset(0)
        sim = Simulator(workload, config, agent)
        drive(sim, agent)
    return _state(sim), len(calls)


CASES = {
    "overload": (0, 40.0, SimConfig()),
    "calm": (1, 12.0, SimConfig()),
    "protect-2-interval-300": (2, 40.0, SimConfig(protect_scale=2.0, interval=300.0)),
    "shared-pool": (3, 20.0, SimConfig(cluster=ClusterConfig(train_nodes=8, infer_nodes=0, shared_pool=True))),
    "cut-mid-drain": (0, 40.0, SimConfig(max_time=2 * 86400.0)),  # the last requests arrive just before
}


@pytest.mark.parametrize("case", CASES)
def test_compiled_drain_is_the_python_drain(case: str) -> None:
    seed, mean_gpus, config = CASES[case]
    workload = _workload(seed, mean_gpus)
    reference, python_calls = _played(workload, config, compiled=False)
    ours, compiled_calls = _played(workload, config, compiled=True)
    assert (python_calls, compiled_calls) == (0, 1)
    assert ours == reference
    if case == "overload":  # requests waited during the drain (after the last job's completion)
        assert any(row[0] > reference["drain_from"] and row[-2] > 0 for row in reference["books"][4])
    if case == "cut-mid-drain":
        assert reference["clock"][2] and reference["events"]


def test_a_process_drains_in_python_first_then_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A single episode (``deepboot simulate``) does not pay the loop's compilation: a process's
    first drain runs in Python, the later ones compiled, to the same end."""
    monkeypatch.setattr(drain, "PYTHON_DRAINS_FIRST", 1)
    monkeypatch.setattr(drain, "_drains_seen", 0)
    seed, mean_gpus, config = CASES["calm"]
    workload = _workload(seed, mean_gpus)
    first, first_calls = _played(workload, config, compiled=True)
    second, second_calls = _played(workload, config, compiled=True)
    assert (first_calls, second_calls) == (0, 1) and first == second


def test_a_full_row_buffer_is_handed_over_and_the_loop_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    seed, mean_gpus, config = CASES["overload"]
    workload = _workload(seed, mean_gpus)
    reference, _ = _played(workload, config, compiled=False)
    monkeypatch.setattr(drain, "ROW_BUFFER", 3)
    ours, calls = _played(workload, config, compiled=True)
    assert calls == 1 and ours == reference
    assert len(reference["books"][4]) > 3 * 10  # the loop handed rows over more than ten times


def test_forks_played_to_the_end_drain_alike() -> None:
    """Forks from mid-episode (the hindsight search's and the teacher's rollouts) each drain
    compiled, as the Python loop does, and the original is untouched by them."""
    workload = _workload(4, 40.0)
    agent = make_policy("ats-srpt-fcfs-place-rr-warm")
    agent.reset(0)
    sim = Simulator(workload, SimConfig(), agent)
    drive(sim, agent, steps=40)
    before = _state(sim)
    ends = []
    for compiled in (False, True):
        fork = sim.fork()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Simulator, "drain_compiled", compiled)
            drive(fork, agent)
        ends.append(_state(fork))
    assert ends[0] == ends[1]
    assert _state(sim) == before


def test_the_python_loop_runs_where_the_compiled_one_does_not_apply() -> None:
    """Aryl mode's pool (a subclass) reclaims whole servers: its drain is the Python loop's, and
    so is a drain with training GPUs still held (an episode cut by ``max_time`` mid-training)."""
    workload = _workload(5, 20.0)
    aryl = SimConfig(inference_placement="aryl")
    reference, _ = _played(workload, aryl, compiled=False)
    ours, calls = _played(workload, aryl, compiled=True)
    assert calls == 0 and ours == reference
    workload = _workload(5, 20.0, horizon_s=3600.0)
    cut = SimConfig(max_time=workload.jobs[-1].arrival + 300.0)  # the last job still trains then
    reference, _ = _played(workload, cut, compiled=False)
    ours, calls = _played(workload, cut, compiled=True)
    assert calls == 0 and ours == reference and reference["clock"][2]


def test_the_kernel_literals_are_the_simulator_codes() -> None:
    """The compiled loop's event kinds and pod states are literals (numba caches a kernel by its own
    module's source); they are the simulator's."""
    from deepboot_env.sim import drain_loops as k
    from deepboot_env.sim.events import EventKind
    from deepboot_env.sim.inference import PROTECT, RUNNING, SLEEP

    assert (k.REQUEST_DONE, k.POD_SLEEP, k.TRAIN_DONE, k.REQUEST_ARRIVAL) == (
        EventKind.REQUEST_DONE,
        EventKind.POD_SLEEP,
        EventKind.TRAIN_DONE,
        EventKind.REQUEST_ARRIVAL,
    )
    assert drain._STATUS_CODES == {RUNNING: k.RUNNING, PROTECT: k.PROTECT, SLEEP: k.SLEEP}
    assert [drain._STATUS_CODES[name] for name in drain._STATUS_NAMES] == [0, 1, 2]
    assert drain._RECLAIMABLE_KEYS[None] == 2  # the key _cold_gpu_possible reads as "always"


def test_the_loops_name_the_progress_kernels_they_compile_in() -> None:
    """The loops compile the job kernels of progress_loops.py into their own machine code, which
    numba caches by drain_loops.py's source alone: drain_loops.py names the digest of the source
    it was compiled with, so that changing progress_loops.py means changing drain_loops.py too
    (and its cache is compiled again)."""
    import hashlib

    from deepboot_env.sim import drain_loops, progress_loops

    source = Path(progress_loops.__file__).read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    assert drain_loops.PROGRESS_LOOPS_DIGEST == digest, f"set PROGRESS_LOOPS_DIGEST in drain_loops.py to {digest!r}"


def test_request_columns_hold_each_instance_and_cold_start() -> None:
    workload = _workload(6, 12.0)
    columns = drain.RequestColumns.of(workload.requests)
    for spec, (inst, app), (duration, delay) in zip(workload.requests, columns.ids, columns.times, strict=True):
        assert columns.instances[inst] == spec.instance and columns.apps[app] == spec.app
        assert duration == spec.duration and delay > 0 and not math.isnan(delay)
    assert len(columns.instances) == 12  # two instances of each of the six applications
    assert drain.RequestColumns.of(workload.requests) is columns  # made once per request list
    assert drain.RequestColumns.of(list(workload.requests)) is not columns
