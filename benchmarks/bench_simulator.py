"""Benchmark: one full episode of a workload under a policy; prints wall and CPU time and events/s.

Default: the DeepBoot reference workload ``small.csv`` (160 training jobs, 3,200 inference requests)
with ``fifo`` on the shared-pool 16x4 cluster (target <= 3 s CPU). Usage::

    python benchmarks/bench_simulator.py [--workload W] [--policy P [P ...]] [--shared-pool 16x4 | --cluster 8x4+8x4]
        [--restart afe] [--repeat 3]

``--policy all`` times every registered policy once each (one small.csv episode per policy).
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import available_policies, make_policy
from deepboot_harness.cli import add_sim_arguments, sim_config_from_args
from traces.loaders import load_workload

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "workloads" / "deepboot" / "small.csv"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default=str(REFERENCE))
    parser.add_argument("--policy", nargs="+", default=["fifo"])
    parser.add_argument("--repeat", type=int, default=3)
    add_sim_arguments(parser)
    args = parser.parse_args(argv)
    if not args.cluster and not args.shared_pool:
        args.shared_pool = "16x4"
    if args.workload == str(REFERENCE) and not REFERENCE.exists():
        print(f"reference workload {REFERENCE} not found; pass --workload", file=sys.stderr)
        return 2
    workload = load_workload(args.workload)
    config = sim_config_from_args(args)
    policies = available_policies() if args.policy == ["all"] else args.policy
    for name in policies:
        print(f"{name} on {workload.name} ({config.cluster.describe()}, restart={config.restart})")
        best_cpu = float("inf")
        for i in range(args.repeat):
            policy = make_policy(name)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            metrics = run_episode(policy, workload, config, seed=args.seed)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            best_cpu = min(best_cpu, cpu)
            print(
                f"  run {i + 1}: wall {wall:.2f} s, CPU {cpu:.2f} s, {metrics.sim_events:,} events "
                f"({metrics.sim_events / cpu:,.0f} events/CPU-s), train JCT mean {metrics.train_jct_mean:,.1f} s"
            )
        print(f"  best CPU {best_cpu:.2f} s")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
