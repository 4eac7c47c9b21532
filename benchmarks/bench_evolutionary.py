"""Benchmark: one full episode of an evolutionary policy (Pollux's GA or ONES); prints wall and
CPU time, generations per round and avg JCT.

Default: Pollux workload-1 at load 1.0 (160 jobs) on the 16x4 training cluster with the Pollux
restart model (flat 30 s), the setting of docs/references.md §4.1 (reference avg JCT: Pollux 2,089 s,
Tiresias 2,474 s). Target: <= 20 s CPU per episode with each policy's default settings (issue 17;
``benchmarks/bench_pollux.py`` times Pollux on all five reference workloads). Usage::

    python benchmarks/bench_evolutionary.py [--policy pollux|ones] [--workload W] [--cluster 16x4]
        [--restart pollux] [--lend] [--population N] [--generations N] [--patience K | none] [--seed 0]

Defaults per policy (each policy's own): pollux population 100, 100 generations, patience 10 plus
2 per active job (``--patience none``: the full GA); ones population 64, 40 generations, patience 10.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

from baselines.ones import OnesPolicy
from baselines.pollux import PolluxPolicy
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.evaluation import run_episode
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.simulator import SimConfig
from traces.loaders import load_workload

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REFERENCE = SHARED / "data" / "workloads" / "pollux" / "load-1.0" / "workload-1.csv"


POLICIES = {
    "pollux": (PolluxPolicy, {"population": 100, "generations": 100, "patience": 10}),
    "ones": (OnesPolicy, {"population": 64, "generations": 40, "patience": 10}),
}
"""Policy class and default search settings per ``--policy``."""


def _patience(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default=str(REFERENCE))
    parser.add_argument("--cluster", default="16x4", help="e.g. 16x4 (training only) or 8x4+8x4")
    parser.add_argument("--restart", default="pollux")
    parser.add_argument("--policy", choices=sorted(POLICIES), default="pollux")
    parser.add_argument("--lend", action="store_true", help="the lending variant (pollux-lend, ones-lend)")
    parser.add_argument("--population", type=int, default=argparse.SUPPRESS)
    parser.add_argument("--generations", type=int, default=argparse.SUPPRESS)
    parser.add_argument(
        "--patience", type=_patience, default=argparse.SUPPRESS, help="generations without improvement (none: off)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.workload == str(REFERENCE) and not REFERENCE.exists():
        print(f"reference workload {REFERENCE} not found; pass --workload", file=sys.stderr)
        return 2
    workload = load_workload(args.workload)
    config = SimConfig(cluster=ClusterConfig.parse(args.cluster), restart=args.restart)
    cls, defaults = POLICIES[args.policy]
    for key, value in defaults.items():
        if not hasattr(args, key):  # not given: the policy's default
            setattr(args, key, value)
    policy = cls(lend=args.lend, population=args.population, generations=args.generations, patience=args.patience)
    generations: list[int] = []
    jobs: list[int] = []
    decide = policy.decide

    def counted(state):
        out = decide(state)
        generations.append(policy.last_generations)
        jobs.append(len(state.jobs))
        return out

    policy.decide = counted  # type: ignore[method-assign]
    print(
        f"{policy.name} on {workload.name} ({config.cluster.describe()}, restart={config.restart}), "
        f"population {args.population}, generations {args.generations}, patience {args.patience}"
    )
    wall0, cpu0 = time.perf_counter(), time.process_time()
    metrics = run_episode(policy, workload, config, seed=args.seed)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    gens = np.array(generations)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"wall {wall:.1f} s, CPU {cpu:.1f} s, {len(gens)} rounds ({1e3 * cpu / max(len(gens), 1):.1f} ms CPU each), "
        f"mean {gens.mean():.1f} generations/round, mean {np.mean(jobs):.1f} active jobs (max {max(jobs)})"
    )
    print(
        f"train JCT mean {metrics.train_jct_mean:,.1f} s (p50 {metrics.train_jct_p50:,.0f} s), "
        f"{metrics.train_jobs_done}/{metrics.train_jobs} jobs done, makespan {metrics.makespan:,.0f} s, "
        f"{metrics.restarts} restarts; peak RSS {rss_mb:.0f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
