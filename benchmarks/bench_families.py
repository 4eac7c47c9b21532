"""Benchmark: is drawing a scenario from a workload family ever the bottleneck?

    python benchmarks/bench_families.py [--seeds 10] [--families F ...]

Per family, over ``--seeds`` train seeds: CPU milliseconds to draw a scenario
(:func:`traces.families.sample_scenario`: parameters, training jobs, inference requests and the
workload's validation), the scenario's size, and the CPU seconds of one DeepBoot-v1 env episode on
it with the neutral residual action (ATS's allocation at every step, so the episode has the length
a good policy gives it). The last column is the sampling's share of that episode.
"""

from __future__ import annotations

import time

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.env import DeepBootEnv
from traces.families import FAMILIES, SPLIT_SEEDS, sample_scenario


def main(argv: list[str] | None = None) -> None:
    """Print the table (see the module docstring)."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="train seeds per family (default 10)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), help="families (default: all)")
    args = parser.parse_args(argv)
    print(f"{'family':<16} {'draw ms':>8} {'jobs':>6} {'requests':>9} {'episode s':>10} {'steps':>6} {'share':>6}")
    for family in args.families:
        seeds = list(SPLIT_SEEDS["train"][: args.seeds])
        start = time.process_time()
        scenarios = [sample_scenario(family, seed) for seed in seeds]
        draw = (time.process_time() - start) / len(seeds)
        env = DeepBootEnv(workload=f"family:{family}", dynamics="v1", action_mode="residual")
        episode, steps = 0.0, 0
        for seed in seeds[:3]:
            start = time.process_time()
            env.reset(options={"scenario_seed": seed})
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(env.neutral_action())
                done = terminated or truncated
                steps += 1
            episode += time.process_time() - start
        episode /= min(3, len(seeds))
        jobs = sum(len(s.workload.jobs) for s in scenarios) / len(scenarios)
        requests = sum(len(s.workload.requests) for s in scenarios) / len(scenarios)
        print(
            f"{family:<16} {draw * 1000:>8.1f} {jobs:>6.0f} {requests:>9,.0f} {episode:>10.2f} "
            f"{steps / min(3, len(seeds)):>6.0f} {draw / episode:>6.1%}"
        )


if __name__ == "__main__":
    main()
