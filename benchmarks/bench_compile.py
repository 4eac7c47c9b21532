"""Benchmark: what the first run after an install pays for numba's compilation (issue 70: at most
5 s more than the second run).

    python benchmarks/bench_compile.py [--workload test/test-01] [--policies ats ats-srpt] [--repeat 2]

Runs each of two commands twice in fresh processes of this interpreter, both with
``NUMBA_CACHE_DIR`` set to one new empty folder: the first run compiles every kernel it reaches
and caches the machine code there, as the first run after an install does; the second loads it,
as every later run does. The commands: ``deepboot simulate --workload W --policy P`` (one episode
of the first policy: ATS's knapsack; its one drain runs in Python, docs/simulator.md §9), and
``deepboot compare --workloads W --policies P... --jobs 1`` (one process playing an episode per
policy: from its second drain on, the compiled inference drain too). Reported: each run's wall
time and CPU time (the child's, user + system) and the first's excess over the second, for
``--repeat`` new folders (the median excess at the end). The caches next to the package are left
as they are.
"""

from __future__ import annotations

import os
import statistics
import tempfile

from deepboot_env.argparsing import ArgumentParser


def timed_run(command: list[str], cache_dir: str) -> tuple[float, float]:
    """Wall and CPU seconds of one ``deepboot`` ``command`` in a fresh process caching in ``cache_dir``."""
    from bench_philly import run_deepboot  # this script's folder: the one child-process timer

    cpu, _, wall = run_deepboot(command, {**os.environ, "NUMBA_CACHE_DIR": cache_dir})
    return wall, cpu


def _with_out(command: list[str], out: str, name: str) -> list[str]:
    """``command`` with a fresh ``--out`` folder under ``out`` where it writes one."""
    return [*command, "--out", os.path.join(out, name)] if command[0] == "compare" else command


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="test/test-01")
    parser.add_argument("--policies", nargs="+", default=["ats", "ats-srpt"])
    parser.add_argument("--repeat", type=int, default=2, help="new cache folders (default 2)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as out:
        commands = [
            ["simulate", "--workload", args.workload, "--policy", args.policies[0]],
            ["compare", "--workloads", args.workload, "--policies", *args.policies, "--jobs", "1", "--quiet"],
        ]
        for command in commands:
            print(f"deepboot {' '.join(command)}: a fresh cache, then the same cache")
            excess = []
            for i in range(args.repeat):
                with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache_dir:
                    first, second = (timed_run(_with_out(command, out, f"{i}-{k}"), cache_dir) for k in range(2))
                excess.append(first[0] - second[0])
                print(
                    f"  first {first[0]:.2f} s wall ({first[1]:.2f} CPU-s), second {second[0]:.2f} s wall "
                    f"({second[1]:.2f} CPU-s): the first run pays {first[0] - second[0]:.2f} s more"
                )
            print(f"  median excess of the first run: {statistics.median(excess):.2f} s (issue 70: at most 5 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
