"""Benchmark: CPU seconds and mean training JCT of one Pollux episode on each reference workload.

The five workloads of issue 17 (item 4): Pollux workloads 1-4 at load 1.0 (160 jobs each) on the
16x4 training cluster with the Pollux restart model (flat 30 s), and DeepBoot's ``small.csv``
(the same kind of 160 training jobs plus inference) under the CLI's defaults (8x4+8x4, restart
afe). ``--dynamics v1`` runs them under DeepBoot-v1's measured step times, the setting of the
Pollux anchors (``benchmarks/bench_anchors.py``). Policy seed 0; one episode at a time, CPU
measured with ``time.process_time``. Usage::

    python benchmarks/bench_pollux.py [--policy pollux|pollux-lend|pollux-noavoid]
        [--only workload-1 ...] [--generations N] [--patience K | none] [--patience-per-job C]
        [--seed 0] [--dynamics v0|v1] [--against-full]

``--against-full`` also runs the full GA (``patience=None``) on each workload and prints the
relative change of the mean JCT.

Measured on the project's 2-core development machine (shared, ``nice``), ``pollux``, seed 0,
CPU s / mean JCT s; "full GA" is ``--patience none`` (every round 100 generations, the default
before issue 17), "default" the early stop after 10 + 2 J generations without improvement
(docs/policies.md §9.3):

==========  ================  ================  ========
workload    full GA           default           JCT
==========  ================  ================  ========
workload-1  29.1 / 1,975.3    8.3 / 1,986.2     +0.55 %
workload-2  35.9 / 3,054.4    16.5 / 3,077.0    +0.74 %
workload-3  23.4 / 2,092.7    10.3 / 2,104.1    +0.54 %
workload-4  31.5 / 2,529.6    9.8 / 2,525.8     -0.15 %
small       44.6 / 3,885.4    14.2 / 3,874.9    -0.27 %
==========  ================  ================  ========

With ``--dynamics v1`` workload-2, the costliest, takes 38.4 s / 3,337.9 -> 19.1 s / 3,339.5.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from baselines.pollux import PolluxPolicy
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import DYNAMICS, sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.sim.simulator import SimConfig
from traces.loaders import load_workload

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "workloads"
WORKLOADS: dict[str, tuple[Path, dict[str, str]]] = {
    **{
        f"workload-{i}": (DATA / "pollux" / "load-1.0" / f"workload-{i}.csv", {"cluster": "16x4", "restart": "pollux"})
        for i in range(1, 5)
    },
    "small": (DATA / "deepboot" / "small.csv", {}),
}
"""Workload name -> (file, :func:`~deepboot_env.config.sim_config` options)."""
VARIANTS = {"pollux": {}, "pollux-lend": {"lend": True}, "pollux-noavoid": {"avoid_interference": False}}
"""Registered Pollux names -> constructor options."""


def _patience(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def time_episode(policy: PolluxPolicy, path: Path, config: SimConfig, seed: int = 0) -> tuple[float, float]:
    """(CPU seconds, mean training JCT) of one episode of ``policy`` on the workload at ``path``."""
    workload = load_workload(path)
    cpu0 = time.process_time()
    metrics = run_episode(policy, workload, config, seed=seed)
    return time.process_time() - cpu0, metrics.train_jct_mean


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=sorted(VARIANTS), default="pollux")
    parser.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), default=sorted(WORKLOADS))
    parser.add_argument("--generations", type=int, default=argparse.SUPPRESS)
    parser.add_argument("--patience", type=_patience, default=argparse.SUPPRESS, help="none: the full GA")
    parser.add_argument("--patience-per-job", type=float, default=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dynamics", choices=sorted(DYNAMICS), default="v0")
    parser.add_argument("--against-full", action="store_true", help="also run the full GA and compare")
    args = parser.parse_args(argv)
    options = {**VARIANTS[args.policy]}
    options.update({k: getattr(args, k) for k in ("generations", "patience", "patience_per_job") if hasattr(args, k)})
    missing = [name for name in args.only if not WORKLOADS[name][0].exists()]
    if missing:
        print(f"reference workloads not found: {', '.join(missing)} (looked in {DATA})", file=sys.stderr)
        return 2
    print(f"{args.policy} {options or '(defaults)'}, seed {args.seed}, dynamics {args.dynamics}")
    header = f"{'workload':<12} {'CPU s':>8} {'mean JCT s':>12}"
    print(header + (f" {'full CPU s':>11} {'full JCT s':>11} {'change':>8}" if args.against_full else ""))
    for name in args.only:
        path, sim_options = WORKLOADS[name]
        config = sim_config(**sim_options, dynamics=args.dynamics)
        cpu, jct = time_episode(PolluxPolicy(**options), path, config, args.seed)
        line = f"{name:<12} {cpu:>8.1f} {jct:>12.1f}"
        if args.against_full:
            full = {**options, "patience": None}
            full_cpu, full_jct = time_episode(PolluxPolicy(**full), path, config, args.seed)
            line += f" {full_cpu:>11.1f} {full_jct:>11.1f} {100 * (jct / full_jct - 1):>+7.2f}%"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
