"""Benchmark: a user's own stable-baselines3 code against ``deepboot compare`` on the same episode.

Issue 30 asks that the README's plain-SB3 snippet (``agents.load_agent`` then sb3-contrib's
``evaluate_policy`` on one test-01 episode) take at most twice the time of the same episode in
``deepboot compare``. This script runs the snippet *as the README writes it* (the fenced python
block that calls ``evaluate_policy``), each time in a fresh process, timing the ``evaluate_policy``
line and the whole process; then ``deepboot compare --workloads test/test-01 --policies
ppo:deepboot-v0 --dynamics v0`` (the model's own world, so the same decisions), reading the
episode's ``wall_seconds`` from ``results.csv`` and timing the whole process too. Usage::

    python benchmarks/bench_user_sb3.py [--repeat 3] [--omp-threads N]

``--omp-threads N`` runs the snippet with ``OMP_NUM_THREADS=N``, which ``load_agent`` respects
(torch's own default is a thread per core): the cost of not setting one thread. Results, with the
machine: docs/results.md §9.
"""

from __future__ import annotations

import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

_HARNESS = """
import json, sys, time
t0 = time.perf_counter()
setup, call = sys.argv[1], sys.argv[2]
scope = {"__name__": "__main__"}
exec(compile(setup, "README.md", "exec"), scope)
t1 = time.perf_counter()
exec(compile(call, "README.md", "exec"), scope)
t2 = time.perf_counter()
import torch
print(json.dumps({"episode_s": t2 - t1, "in_process_s": t2 - t0, "threads": torch.get_num_threads(),
                  "mean_reward": float(scope.get("mean_reward", float("nan")))}))
"""


def readme_snippet() -> tuple[str, str]:
    """The README's python block that calls ``evaluate_policy``, split into (everything before the
    call, the call)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if "evaluate_policy(" in b]
    lines = block.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "evaluate_policy(" in line and not line.startswith("from ")]
    return "\n".join(lines[:at]) + "\n", "\n".join(lines[at:]) + "\n"


def time_snippet(omp_threads: int | None) -> dict[str, float]:
    """One fresh process running the README's snippet: the call's seconds, the process's seconds."""
    setup, call = readme_snippet()
    env = dict(os.environ)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _HARNESS, setup, call],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
        env=env,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def time_compare() -> dict[str, float]:
    """One ``deepboot compare`` of ppo:deepboot-v0 on test-01 (DeepBoot-v0): its episode's
    ``wall_seconds`` and the process's seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cmp"
        argv = ["--workloads", "test/test-01", "--policies", "ppo:deepboot-v0", "--dynamics", "v0"]
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "deepboot_harness.cli", "compare", *argv, "--out", str(out), "--quiet"],
            capture_output=True,
            text=True,
            check=True,
        )
        process_s = time.perf_counter() - start
        with open(out / "results.csv", encoding="utf-8") as f:
            (row,) = list(csv.DictReader(f))
    return {"episode_s": float(row["wall_seconds"]), "process_s": process_s, "jct": float(row["train_jct_mean"])}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument(
        "--omp-threads", type=int, default=None, help="run the snippet with OMP_NUM_THREADS=N (default: unset)"
    )
    args = parser.parse_args(argv)
    snippet, compare = [], []
    for _ in range(args.repeat):
        snippet.append(time_snippet(args.omp_threads))
        compare.append(time_compare())
    for name, runs in (("README snippet", snippet), ("deepboot compare", compare)):
        eps = sorted(r["episode_s"] for r in runs)
        procs = sorted(r["process_s"] for r in runs)
        print(
            f"{name:17s} episode s: {' / '.join(f'{x:.2f}' for x in eps)}   "
            f"process s: {' / '.join(f'{x:.1f}' for x in procs)}"
        )
    print(f"snippet: torch threads {snippet[0]['threads']}, mean reward {snippet[0]['mean_reward']:.4f}")
    print(f"compare: mean training JCT {compare[0]['jct']:.2f} s")
    best = min(r["episode_s"] for r in snippet) / min(r["episode_s"] for r in compare)
    median = statistics.median(r["episode_s"] for r in snippet) / statistics.median(r["episode_s"] for r in compare)
    print(f"episode time, snippet over compare: best {best:.2f}x, median {median:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
