"""Benchmark: one episode's process CPU time per policy, best of N after a warm-up; optionally the
same measured on another checkout of the project by the same interpreter, and the ratio.

    python benchmarks/bench_episode.py [--workload test/test-01] [--policies ats ats-srpt-fcfs-place-rr-warm]
        [--repeat 3] [--against DIR] [--arrays] [--modes target score residual]

Each policy plays ``--workload`` once untimed (the warm-up: the process-wide rate tables, ATS's
speedup rows and numba's compiled knapsack), then ``--repeat`` timed episodes; the best one is
reported (a shared machine's noise is 10-30 % per run, and only ever adds time), with its events
per CPU-second, the mean training JCT (what a faster version must reproduce to the last digit)
and the process's peak RSS. The simulation options are ``deepboot simulate``'s (default: DeepBoot-v1
dynamics, the ``afe`` restart model, the workload's cluster).

``--against DIR`` runs this same measurement in a child process of this interpreter with DIR (a
checkout of another version, e.g. ``git worktree add /tmp/old 5bb71a8``) first on its import path,
one policy at a time and alternating with this checkout's, then prints each policy's speed-up: the
issue's "at least 3x faster than commit 5bb71a8, best of 3 after a warm-up, both timed by one
interpreter". Both runs must report the same mean JCT; a difference is an error.

``--arrays`` also times this checkout's episodes played on the compiled loop's arrays
(:class:`~deepboot_env.sim.array_episode.ArrayEpisode`, ``evaluation.ARRAY_EPISODES``; where they
apply, e.g. with ``--truth fitted``), after a warm-up that compiles or loads the loops, and checks
that they give the same mean JCT.

``--modes`` also times the env step per action mode: ``benchmarks/bench_modes.py`` with its
defaults (lockstep envs, the same dynamics), whose table follows.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deepboot_env.argparsing import ArgumentParser

DEFAULT_POLICIES = ("ats", "ats-srpt-fcfs-place-rr-warm")


def time_episodes(
    workload_name: str, policy_name: str, repeat: int, sim_argv: list[str], arrays: bool = False
) -> dict[str, Any]:
    """One untimed episode of ``policy_name`` on ``workload_name``, then ``repeat`` timed ones
    (``arrays``: played on the compiled loop's arrays where they apply): the best process CPU
    seconds, the events and the mean training JCT of the last one."""
    from deepboot_env import evaluation
    from deepboot_env.evaluation import run_episode

    evaluation.ARRAY_EPISODES = arrays
    from deepboot_env.policy import make_policy
    from deepboot_harness.cli import add_sim_arguments, sim_config_from_args
    from traces.loaders import load_workload

    parser = ArgumentParser()
    add_sim_arguments(parser)
    config = sim_config_from_args(parser.parse_args(sim_argv))
    workload = load_workload(workload_name)
    run_episode(make_policy(policy_name), workload, config, seed=0)
    best = float("inf")
    for _ in range(repeat):
        policy = make_policy(policy_name)
        start = time.process_time()
        metrics = run_episode(policy, workload, config, seed=0)
        best = min(best, time.process_time() - start)
    return {
        "policy": policy_name,
        "cpu_s": best,
        "events": metrics.sim_events,
        "train_jct_mean": metrics.train_jct_mean,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def time_in_child(
    checkout: Path | None, workload: str, policy: str, repeat: int, sim_argv: list[str], arrays: bool = False
) -> dict[str, Any]:
    """:func:`time_episodes` in a fresh child process of this interpreter, with ``checkout`` (None:
    this one) first on its import path; its result."""
    root = checkout if checkout is not None else Path(__file__).resolve().parents[1]
    code = (
        "import json, sys; from bench_episode import time_episodes;"
        "print(json.dumps(time_episodes(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5:], sys.argv[4] == '1')))"
    )
    # the checkout first on the import path, then this script's folder (for bench_episode itself)
    path = os.pathsep.join([str(root), str(Path(__file__).resolve().parent)])
    argv = [sys.executable, "-c", code, workload, policy, str(repeat), str(int(arrays)), *sim_argv]
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": path}, check=False
    )
    if done.returncode:
        last = (done.stderr.strip().splitlines() or [f"status {done.returncode}"])[-1]
        raise SystemExit(f"timing {policy} in {root} failed: {last}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def print_row(label: str, row: dict[str, Any]) -> None:
    """One timed policy's line."""
    print(
        f"  {label:<9} best CPU {row['cpu_s']:.3f} s, {row['events']:,} events "
        f"({row['events'] / row['cpu_s']:,.0f} events/CPU-s), train JCT mean {row['train_jct_mean']!r} s, "
        f"peak RSS {row['rss_mb']:.0f} MB"
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    from deepboot_harness.cli import add_sim_arguments

    parser = ArgumentParser(description=__doc__.splitlines()[0], epilog="Other options: deepboot simulate's.")
    parser.add_argument("--workload", default="test/test-01")
    parser.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES))
    parser.add_argument("--repeat", type=int, default=3, help="timed episodes per policy (default 3)")
    parser.add_argument("--against", type=Path, help="another checkout to time by this interpreter")
    parser.add_argument("--arrays", action="store_true", help="also time episodes on the compiled loop's arrays")
    parser.add_argument("--modes", nargs="*", help="also time the env step in these action modes")
    args, sim_argv = parser.parse_known_args(argv)
    sim_parser = ArgumentParser(prog=f"{parser.prog} (simulation options)")
    add_sim_arguments(sim_parser)
    sim_parser.parse_args(sim_argv)  # a bad option fails here, in one line, before any child runs
    if args.against is not None and not (args.against / "deepboot_env" / "sim").is_dir():
        print(f"--against {args.against}: not a checkout of this project (no deepboot_env/sim)", file=sys.stderr)
        return 2
    print(f"one episode of {args.workload}, best of {args.repeat} after a warm-up (process CPU)")
    for policy in args.policies:
        print(policy)
        mine = time_in_child(None, args.workload, policy, args.repeat, sim_argv)
        print_row("this", mine)
        if args.arrays:
            arrays = time_in_child(None, args.workload, policy, args.repeat, sim_argv, arrays=True)
            print_row("arrays", arrays)
            if arrays["train_jct_mean"] != mine["train_jct_mean"]:
                print(f"  the arrays differ: mean JCT {arrays['train_jct_mean']!r} against {mine['train_jct_mean']!r}")
                return 1
            print(f"  arrays speed-up {mine['cpu_s'] / arrays['cpu_s']:.2f}x")
        if args.against is None:
            continue
        other = time_in_child(args.against, args.workload, policy, args.repeat, sim_argv)
        print_row("against", other)
        if other["train_jct_mean"] != mine["train_jct_mean"]:
            print(f"  the two versions differ: mean JCT {other['train_jct_mean']!r} against {mine['train_jct_mean']!r}")
            return 1
        print(f"  speed-up {other['cpu_s'] / mine['cpu_s']:.2f}x")
    if args.modes:
        from bench_modes import main as bench_modes

        return bench_modes(["--modes", *args.modes])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
