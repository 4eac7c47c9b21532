"""Benchmark: the cost of a mid-episode simulator snapshot, restore and fork, against a deep copy.

    python benchmarks/bench_snapshot.py [--workload test/test-01] [--policy ats] [--decisions 200]
                                        [--dynamics v1] [--repeat 200] [--cluster 8x4+8x4 | --shared-pool 16x4]

Runs ``--decisions`` decisions of ``--policy`` on ``--workload``, then times, each ``--repeat``
times (``--repeat / 10`` for the deep copy), ``sim.snapshot()``, ``sim.restore(snapshot)``,
``sim.fork()`` and ``copy.deepcopy(sim)`` (what a copy cost before snapshots existed), and reports
milliseconds per call (the median of 5 timed batches: a shared machine's noise is 10-30 %) and
bytes: the memory one snapshot holds (``tracemalloc``: what the call allocated and the copy keeps)
and the pickled size of the snapshot and of the whole simulator. A snapshot shares the workload,
settings, rate tables and policy with the simulator (docs/simulator.md §8), so pickling it
still writes them: its pickled size is that of the simulator.
"""

from __future__ import annotations

import copy
import pickle
import statistics
import time
import tracemalloc
from collections.abc import Callable

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import sim_config
from deepboot_env.policy import make_policy
from deepboot_env.sim.simulator import Simulator
from traces.loaders import load_workload


def per_call_ms(action: Callable[[], object], repeat: int, batches: int = 5) -> float:
    """Median over ``batches`` batches of the milliseconds per call of ``action`` (``repeat``
    calls per batch)."""
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(repeat):
            action()
        times.append((time.perf_counter() - t0) / repeat * 1000.0)
    return statistics.median(times)


def held_bytes(action: Callable[[], object]) -> int:
    """Bytes allocated by ``action`` that its result still holds (``tracemalloc``)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = action()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del result
    return after - before


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="test/test-01")
    parser.add_argument("--policy", default="ats")
    parser.add_argument("--decisions", type=int, default=200, help="decisions before the snapshot")
    parser.add_argument("--dynamics", choices=("v0", "v1"), default="v1")
    parser.add_argument("--cluster", default=None, help="default 8x4+8x4")
    parser.add_argument("--shared-pool", default=None)
    parser.add_argument("--repeat", type=int, default=200, help="calls per timed batch")
    args = parser.parse_args(argv)
    workload = load_workload(args.workload)
    config = sim_config(cluster=args.cluster, shared_pool=args.shared_pool, dynamics=args.dynamics)
    policy = make_policy(args.policy)
    policy.reset(0)
    sim = Simulator(workload, config, policy)
    for _ in range(args.decisions):
        if sim.done:
            break
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        sim.advance()
    snap = sim.snapshot()
    target = sim.fork()
    repeat = max(args.repeat, 1)
    deep_repeat = max(repeat // 10, 1)
    print(
        f"{workload.name} ({len(workload.jobs)} jobs, {len(workload.requests):,} requests), "
        f"{config.cluster.describe()}, dynamics {args.dynamics}, after {args.decisions} {args.policy} decisions "
        f"(t = {sim.now:,.0f} s, {len(sim.active_jobs)} active jobs, {len(sim.timeline)} timeline rows)"
    )
    rows = [
        ("snapshot", per_call_ms(sim.snapshot, repeat), held_bytes(sim.snapshot)),
        ("restore", per_call_ms(lambda: target.restore(snap), repeat), None),
        ("fork", per_call_ms(sim.fork, repeat), held_bytes(sim.fork)),
        (
            "copy.deepcopy (before)",
            per_call_ms(lambda: copy.deepcopy(sim), deep_repeat),
            held_bytes(lambda: copy.deepcopy(sim)),
        ),
    ]
    for label, ms, held in rows:
        memory = "" if held is None else f", holds {held / 1e3:,.0f} kB"
        print(f"  {label:<24} {ms:8.3f} ms{memory}")
    print(
        f"  pickled: snapshot {len(pickle.dumps(snap)) / 1e6:.2f} MB, simulator {len(pickle.dumps(sim)) / 1e6:.2f} MB "
        "(both include the shared workload and rate tables)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
