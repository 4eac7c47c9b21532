"""Benchmark: DeepBoot-v0 steps per second with random masked actions.

    python benchmarks/bench_env.py [--workload test/test-01] [--steps 3000] [--policy-like]

``--policy-like`` keeps each job's target for 10 steps instead of redrawing it every step (a
random action redrawn every minute resizes every job every boundary, the costliest case).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from deepboot_env.env import DeepBootEnv
from deepboot_env.env.encoding import GPU_BUCKETS


def masked_random(env: DeepBootEnv, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random valid choice in every action dimension."""
    mask = env.action_masks()
    nb = len(GPU_BUCKETS)
    slots = mask[: env.max_jobs * nb].reshape(env.max_jobs, nb)
    choice = list((rng.random(slots.shape) * slots).argmax(axis=1))
    choice.append(int(rng.choice(np.flatnonzero(mask[env.max_jobs * nb :]))))
    return np.array(choice)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="test/test-01")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--policy-like", action="store_true")
    args = parser.parse_args(argv)
    env = DeepBootEnv(workload=args.workload)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    action = masked_random(env, rng)
    episodes = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(args.steps):
        if not args.policy_like or step % 10 == 0:
            action = masked_random(env, rng)
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            episodes += 1
            env.reset()
            action = masked_random(env, rng)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(
        f"{args.steps} steps ({episodes} episodes finished) on {args.workload}: "
        f"{args.steps / wall:,.0f} steps/s wall, {args.steps / cpu:,.0f} steps/CPU-s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
