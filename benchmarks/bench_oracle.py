"""Benchmark: CPU seconds per episode and average JCT of ``oracle-lookahead`` (a clairvoyant upper
reference, not a deployable policy), against its candidates run alone.

    python benchmarks/bench_oracle.py [--workload test-01 [test-02 ...]] [--dynamics v1]
                                      [--every 5] [--horizon 1800] [--candidates ats ones-lend ...]
                                      [--infer-weight 1.0] [--terminal-weight 0] [--baselines ats ...]
                                      [--seed 0]

For each workload: one episode of every ``--baselines`` policy (default: ``ats`` and
``ones-lend``) and one of ``oracle-lookahead`` with the given settings (default: its defaults), each
with its CPU time (``time.process_time``), average training JCT, mean inference latency and
restarts; for the oracle also its choice points and how often it followed each candidate, and its
JCT relative to ``ats``.
"""

from __future__ import annotations

from baselines.oracle_lookahead import OracleLookaheadPolicy
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import sim_config
from deepboot_env.policy import Policy, make_policy
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_harness.lookahead_bench import (
    add_switching_arguments,
    followed_and_ties,
    report_row,
    switching_settings,
    timed_episode,
)
from traces.loaders import load_workload

LABEL_WIDTH = 18
"""Width of the policy column of the report (``oracle-lookahead`` fits)."""


def timed(policy: Policy, workload_name: str, dynamics: str, seed: int) -> tuple[EpisodeMetrics, float]:
    """One episode's metrics and CPU seconds."""
    return timed_episode(policy, load_workload(workload_name), sim_config(dynamics=dynamics), seed)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", nargs="+", default=["test-01"])
    parser.add_argument("--dynamics", choices=("v0", "v1"), default="v1")
    add_switching_arguments(parser)
    parser.add_argument("--terminal-weight", type=float, default=0.0)
    parser.add_argument("--baselines", nargs="*", default=["ats", "ones-lend"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"oracle-lookahead (CLAIRVOYANT upper reference): every {args.every} boundaries, horizon {args.horizon:g} s, "
        f"candidates {', '.join(args.candidates)}, infer_weight {args.infer_weight:g}, "
        f"terminal_weight {args.terminal_weight:g}; dynamics {args.dynamics}, seed {args.seed}"
    )
    settings = switching_settings(args)
    for name in args.workload:
        print(f"{name}:")
        reference: float | None = None
        for baseline in args.baselines:
            metrics, cpu = timed(make_policy(baseline), name, args.dynamics, args.seed)
            print(report_row(baseline, metrics, cpu, width=LABEL_WIDTH))
            if baseline == "ats":
                reference = metrics.train_jct_mean
        oracle = OracleLookaheadPolicy(settings, terminal_weight=args.terminal_weight)
        metrics, cpu = timed(oracle, name, args.dynamics, args.seed)
        gain = "" if reference is None else f"  ({metrics.train_jct_mean / reference - 1:+.1%} vs ats)"
        print(report_row("oracle-lookahead", metrics, cpu, gain, width=LABEL_WIDTH))
        followed, ties = followed_and_ties(oracle)
        print(
            f"    {len(oracle.choices)} choice points ({ties} ties, to the earlier candidate); followed: "
            + ", ".join(f"{label} {followed[label]}" for label in args.candidates)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
