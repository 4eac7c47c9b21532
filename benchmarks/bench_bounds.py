"""Benchmark: the cost of the JCT lower bounds (docs/bounds.md §8): CPU seconds per scenario of
the combinatorial bounds (what ``deepboot benchmark`` computes), and the time-indexed program's
size, solve time and value; optionally the Philly-scale replay.

    python benchmarks/bench_bounds.py [--families philly-periodic mixed] [--seeds 2] [--lp]
        [--philly ../shared/data/philly/philly.csv --philly-jobs 1000 10000 all]

Prints one Markdown row per scenario. CPU seconds are the process's (``time.process_time``), with
the rate tables already warm for the first row's applications only.
"""

from __future__ import annotations

import time

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import sim_config
from deepboot_env.sim.bounds import jct_bounds
from deepboot_env.sim.scenario import Scenario
from traces.families import FAMILIES, sample_scenario, split_seeds


def row(label: str, scenario: Scenario, lp: bool) -> str:
    """One table row: jobs, requests, the bounds, their CPU seconds and the program's size."""
    config = scenario.configure(sim_config(dynamics="v1"))
    start = time.process_time()
    bounds = jct_bounds(scenario.workload, config, lp=lp)
    cpu = time.process_time() - start
    cells = [
        label,
        f"{len(scenario.workload.jobs):,}",
        f"{len(scenario.workload.requests):,}",
        f"{bounds.alone:,.0f}",
        f"{bounds.pooled:,.0f}",
        f"{bounds.pooled_speed:,.0f}",
    ]
    result = bounds.lp_result
    if lp and result is not None and bounds.lp is not None:
        cells += [
            f"{bounds.lp:,.0f}",
            f"{result.variables:,} x {result.constraints:,} ({result.nonzeros:,} nz)",
            f"{result.solve_seconds:.1f}",
        ]
    else:
        cells += ["", "", ""]
    cells.append(f"{cpu:.2f}")
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), help="workload families")
    parser.add_argument("--seeds", type=int, default=2, help="first test seeds per family")
    parser.add_argument("--lp", action="store_true", help="also solve the time-indexed program (slow)")
    parser.add_argument("--philly", default=None, help="the raw Philly trace (philly.csv) for the replay rows")
    parser.add_argument("--philly-jobs", nargs="+", default=["1000", "10000", "all"], help="replay sizes, or 'all'")
    args = parser.parse_args(argv)
    print(
        "| scenario | jobs | requests | alone s | pooled s | pooled, speed s | LP s | LP size (vars x rows) |"
        " LP solve CPU s | bounds CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for family in args.families:
        for seed in split_seeds("test")[: args.seeds]:
            print(row(f"{family} {seed}", sample_scenario(family, seed), args.lp), flush=True)
    if args.philly:
        from traces.loaders import load_philly
        from traces.philly_replay import philly_replay

        trace = load_philly(args.philly)
        for size in args.philly_jobs:
            replay = philly_replay(trace, None if size == "all" else int(size))
            scenario = Scenario(workload=replay.workload, cluster=replay.cluster)
            print(row(f"philly replay {size}", scenario, False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
