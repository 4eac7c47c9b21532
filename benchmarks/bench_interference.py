"""Benchmark: co-location interference sweep (avg training JCT per policy, slowdown and workload).

Default: the Pollux workloads 1-4 at load 1.0 (160 jobs each) on the 16x4 training cluster with
the Pollux restart model, ``interference-aware`` (ATS counts, interference-aware placement)
against ``ats`` (the same counts, interference-oblivious best-fit placement), at flat slowdowns
0, 0.25 and 0.5 (Pollux's rule, ``--interference F``). Pollux's own sweep (docs/interference.md §6)
is ``--policies pollux pollux-noavoid`` (~10-20 s CPU per episode). Usage::

    python benchmarks/bench_interference.py [--policies ats interference-aware] [--slowdowns 0 0.25 0.5]
        [--workloads 1 2 3 4] [--matrix FILE|default] [--jobs 2] [--csv out.csv]

Prints one row per (policy, slowdown) with the avg JCT of each workload and their mean.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.atomic import write_text
from deepboot_env.evaluation import run_episode
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.interference import InterferenceModel
from deepboot_env.sim.simulator import SimConfig
from traces.loaders import load_workload

POLLUX_WORKLOADS = Path("/work/shared/data/workloads/pollux/load-1.0")


def _one(task: tuple[str, str, str, str, str, int]) -> tuple[str, str, str, float, int, float]:
    policy, setting, path, cluster, restart, seed = task
    if setting.startswith("matrix:"):
        interference = InterferenceModel.from_file(setting[len("matrix:") :])
    else:
        interference = float(setting)
    config = SimConfig(cluster=ClusterConfig.parse(cluster), restart=restart, interference=interference)
    t0 = time.process_time()
    metrics = run_episode(policy, load_workload(path), config, seed=seed)
    return policy, setting, path, metrics.train_jct_mean, metrics.train_jobs_done, time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=["ats", "interference-aware"])
    parser.add_argument("--slowdowns", nargs="+", default=["0", "0.25", "0.5"])
    parser.add_argument("--matrix", help="also run the per-pair matrix model (FILE or 'default')")
    parser.add_argument("--workloads", nargs="+", default=["1", "2", "3", "4"], help="Pollux ids or CSV paths")
    parser.add_argument("--cluster", default="16x4")
    parser.add_argument("--restart", default="pollux")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--csv", help="also write the rows to this CSV")
    args = parser.parse_args(argv)
    paths = [w if w.endswith(".csv") else str(POLLUX_WORKLOADS / f"workload-{w}.csv") for w in args.workloads]
    settings = list(args.slowdowns) + ([f"matrix:{args.matrix}"] if args.matrix else [])
    tasks = [(p, s, w, args.cluster, args.restart, args.seed) for p in args.policies for s in settings for w in paths]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_one, tasks))
    else:
        results = [_one(t) for t in tasks]
    table = {(p, s, w): (jct, done, cpu) for p, s, w, jct, done, cpu in results}
    names = [Path(w).stem for w in paths]
    print(f"{'policy':<22} {'slowdown':<16} " + " ".join(f"{n:>11}" for n in names) + f" {'mean':>9} {'CPU s':>7}")
    lines = ["policy,slowdown,workload,avg_jct,jobs_done,cpu_s"]
    for p in args.policies:
        for s in settings:
            row = [table[(p, s, w)] for w in paths]
            mean = sum(r[0] for r in row) / len(row)
            cpu = sum(r[2] for r in row)
            cells = " ".join(f"{r[0]:>11,.1f}" for r in row)
            print(f"{p:<22} {s:<16} {cells} {mean:>9,.1f} {cpu:>7.1f}")
            lines += [f"{p},{s},{n},{r[0]:.4f},{r[1]},{r[2]:.2f}" for n, r in zip(names, row, strict=True)]
    if args.csv:
        write_text(args.csv, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
