"""Benchmark: average training JCT and CPU seconds per episode of ``mpc`` (the non-clairvoyant
lookahead, docs/policies.md §16) against ``ats`` and ``ones-lend``, on workload-family scenarios.

    python benchmarks/bench_mpc.py [--families philly-periodic heavy-inference mixed] [--seeds 3]
                                   [--every 5] [--horizon 1800] [--candidates ats ones-lend ...]
                                   [--baselines ats ones-lend] [--policy-seed 0] [--oracle]

For each family, on its first ``--seeds`` val seeds (never test seeds) under DeepBoot-v1's dynamics
(``EnvConfig.from_options(dynamics="v1").sim``, configured by the scenario): one episode of every
``--baselines`` policy and one of ``mpc`` with the given settings, each with its CPU time
(``time.process_time``), average training JCT, mean inference latency and restarts; for ``mpc`` also
its choice points, how often it followed each candidate, the synthetic requests drawn per choice
point, and its JCT relative to ``ats``. With ``--oracle``, also the clairvoyant ``oracle-lookahead``'s
switching with the same settings (``hindsight=False``: the same lookahead on the true future, the
price of not knowing it). A summary per policy ends the report (mean JCT relative to
``ats`` over all scenarios, mean CPU per episode).
"""

from __future__ import annotations

import collections

import numpy as np

from baselines.mpc import MpcPolicy
from baselines.oracle_lookahead import OracleLookaheadPolicy
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import EnvConfig
from deepboot_env.policy import Policy, make_policy
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.scenario import Scenario
from deepboot_harness.lookahead_bench import (
    add_switching_arguments,
    followed_and_ties,
    report_row,
    switching_settings,
    timed_episode,
)
from traces.families import SPLIT_SEEDS, sample_scenario

DEFAULT_FAMILIES = ("philly-periodic", "heavy-inference", "mixed")


def timed(policy: Policy, scenario: Scenario, seed: int) -> tuple[EpisodeMetrics, float]:
    """One episode's metrics and CPU seconds."""
    config = scenario.configure(EnvConfig.from_options(dynamics="v1").sim)
    return timed_episode(policy, scenario.workload, config, seed)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(DEFAULT_FAMILIES))
    parser.add_argument("--seeds", type=int, default=3, help="val seeds per family (default 3)")
    add_switching_arguments(parser)
    parser.add_argument("--baselines", nargs="*", default=["ats", "ones-lend"])
    parser.add_argument("--policy-seed", type=int, default=0)
    parser.add_argument("--oracle", action="store_true", help="also the clairvoyant switching (hindsight=False)")
    args = parser.parse_args(argv)
    print(
        f"mpc: every {args.every} boundaries, horizon {args.horizon:g} s, candidates {', '.join(args.candidates)}, "
        f"infer_weight {args.infer_weight:g}; dynamics v1, policy seed {args.policy_seed}"
    )
    settings = switching_settings(args)
    ratios: dict[str, list[float]] = collections.defaultdict(list)
    cpus: dict[str, list[float]] = collections.defaultdict(list)
    for family in args.families:
        for scenario_seed in SPLIT_SEEDS["val"][: args.seeds]:
            scenario = sample_scenario(family, scenario_seed)
            print(f"{family} {scenario_seed} ({len(scenario.workload.jobs)} jobs):", flush=True)
            results: dict[str, EpisodeMetrics] = {}
            for baseline in args.baselines:
                metrics, cpu = timed(make_policy(baseline), scenario, args.policy_seed)
                print(report_row(baseline, metrics, cpu), flush=True)
                results[baseline], cpus[baseline] = metrics, [*cpus[baseline], cpu]
            mpc = MpcPolicy(settings)
            metrics, cpu = timed(mpc, scenario, args.policy_seed)
            results["mpc"], cpus["mpc"] = metrics, [*cpus["mpc"], cpu]
            reference = results.get("ats")
            ratio = None if reference is None else metrics.train_jct_mean / reference.train_jct_mean
            gain = "" if ratio is None else f"  ({ratio - 1:+.1%} vs ats)"
            print(report_row("mpc", metrics, cpu, gain))
            followed, ties = followed_and_ties(mpc)
            print(
                f"    {len(mpc.choices)} choice points ({ties} ties), {np.mean(mpc.drawn or [0]):.0f} synthetic "
                "requests per choice point; followed: " + ", ".join(f"{k} {followed[k]}" for k in args.candidates),
                flush=True,
            )
            if args.oracle:
                oracle = OracleLookaheadPolicy(settings, hindsight=False)
                metrics, cpu = timed(oracle, scenario, args.policy_seed)
                results["oracle"], cpus["oracle"] = metrics, [*cpus["oracle"], cpu]
                print(
                    report_row("oracle", metrics, cpu, "  (CLAIRVOYANT: the same switching on the true future)"),
                    flush=True,
                )
            if reference is not None:
                for label, result in results.items():
                    ratios[label].append(result.train_jct_mean / reference.train_jct_mean)
    print("summary (mean over scenarios):")
    for label, values in cpus.items():
        ratio = f"JCT {np.mean(ratios[label]):.3f} x ats" if ratios[label] else ""
        print(f"  {label:<12} {ratio}  CPU {np.mean(values):6.1f} s/episode")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
