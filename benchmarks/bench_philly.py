"""Benchmark: the Philly-scale replay (docs/workloads.md §9) at 1k, 10k and all jobs under fifo,
tiresias and ats; prints a scaling table (jobs, GPUs, policy, CPU s, peak RSS, simulated days, JCT).

Each run is ``deepboot simulate`` in a fresh process (loading the CSV included), so its CPU time
and peak resident memory are its own (``os.wait4``). Usage::

    python benchmarks/bench_philly.py --philly ../shared/data/philly/philly.csv \\
        [--jobs 1000 10000 all] [--policies fifo tiresias ats] [--out DIR]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser
from traces.generate import write_workload_csv
from traces.loaders import load_philly
from traces.philly_replay import philly_replay


def run_deepboot(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Run ``deepboot <command>`` in a child process of this interpreter (environment ``env``,
    None: this one's); its (CPU seconds, peak RSS in MB, wall seconds)."""
    cmd = [sys.executable, "-m", "deepboot_harness.cli", *command]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed with status {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, wall


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--philly", required=True, help="the raw Philly trace (philly.csv)")
    parser.add_argument("--jobs", nargs="+", default=["1000", "10000", "all"], help="prefix sizes, or 'all'")
    parser.add_argument("--policies", nargs="+", default=["fifo", "tiresias", "ats"])
    parser.add_argument("--out", default=None, help="folder for the workloads and metrics (default: a temporary one)")
    args = parser.parse_args(argv)
    trace = load_philly(args.philly)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-philly-"))
    out.mkdir(parents=True, exist_ok=True)
    print("| jobs | requests | GPUs | policy | CPU s | peak RSS MB | simulated days | JCT mean s |")
    print("|---:|---:|---|---|---:|---:|---:|---:|")
    for size in args.jobs:
        replay = philly_replay(trace, None if size == "all" else int(size))
        workload = write_workload_csv(replay.workload, out / f"{replay.workload.name}.csv")
        cluster = replay.cluster
        gpus = cluster.num_nodes * cluster.gpus_per_node
        for policy in args.policies:
            metrics = out / f"{replay.workload.name}-{policy}.json"
            flags = ["--workload", str(workload), "--cluster", cluster.describe(), "--max-days", str(replay.max_days)]
            cpu, rss, _ = run_deepboot(["simulate", *flags, "--policy", policy, "--quiet", "--json", str(metrics)])
            m = json.loads(metrics.read_text())
            print(
                f"| {len(replay.workload.jobs):,} | {len(replay.workload.requests):,} | {gpus:,} "
                f"({cluster.describe()}) | {policy} | {cpu:.1f} | {rss:,.0f} | {m['sim_end'] / 86400:.1f} | "
                f"{m['train_jct_mean']:,.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
