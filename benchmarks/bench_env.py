"""Benchmark: DeepBoot-v0 steps per second with random masked actions.

    python benchmarks/bench_env.py [--workload test/test-01] [--cluster 8x4+8x4] [--steps 3000]
                                   [--policy-like] [--warmup 0] [--repeat 1]
                                   [--truth fitted|measured] [--trace-set pollux|deepboot]

Each step samples a uniformly random valid choice in every action dimension from
``env.action_masks()`` (the random masked actions of the acceptance criterion: the argmax of
uniform draws times the mask) and calls ``env.step``. ``--policy-like`` keeps each job's target
for 10 steps instead of redrawing it every step (a random action redrawn every minute resizes every
job every boundary, the costliest case). ``--warmup N`` runs N untimed steps first (the
per-application rate tables are process-wide caches, so a training run only pays for them in its
first episode). ``--repeat N`` times the same steps N times (a shared machine's noise is 10-30 %
per run) and reports the best and the median.

Reported: steps/s over the whole loop (wall clock and CPU time: ``time.process_time``, steadier on
a shared machine) and steps per CPU-second spent inside the env alone (``env.step`` plus
``env.action_masks``, without the sampling of the random action). The action sequence depends only
on ``--seed``, so runs of different code versions replay the same actions.
"""

from __future__ import annotations

import time

import numpy as np

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import GPU_BUCKETS
from deepboot_env.sim.measured import TRACE_SETS, TRUTHS


def masked_random(env: DeepBootEnv, rng: np.random.Generator, mask: np.ndarray | None = None) -> np.ndarray:
    """A uniformly random valid choice in every action dimension (``mask``: ``env.action_masks()``)."""
    if mask is None:
        mask = env.action_masks()
    slot_dims = env.max_jobs * len(GPU_BUCKETS)
    slots = mask[:slot_dims].reshape(env.max_jobs, len(GPU_BUCKETS))
    action = np.empty(env.max_jobs + 1, dtype=np.int64)
    # a uniform draw scaled by the mask: its argmax is uniform over the valid choices
    action[:-1] = (rng.random(slots.shape) * slots).argmax(axis=1)
    action[-1] = (rng.random(len(mask) - slot_dims) * mask[slot_dims:]).argmax()
    return action


def run(env: DeepBootEnv, steps: int, policy_like: bool, rng: np.random.Generator) -> dict[str, float]:
    """``steps`` steps (resetting at episode ends); wall, CPU and in-env CPU seconds."""
    clock = time.process_time
    in_env = 0.0
    episodes = 0
    t0 = clock()
    mask = env.action_masks()
    in_env += clock() - t0
    action = masked_random(env, rng, mask)
    wall0, cpu0 = time.perf_counter(), clock()
    for step in range(steps):
        if not policy_like or step % 10 == 0:
            t0 = clock()
            mask = env.action_masks()
            in_env += clock() - t0
            action = masked_random(env, rng, mask)
        t0 = clock()
        _, _, terminated, truncated, _ = env.step(action)
        in_env += clock() - t0
        if terminated or truncated:
            episodes += 1
            t0 = clock()
            env.reset()
            mask = env.action_masks()
            in_env += clock() - t0
            action = masked_random(env, rng, mask)
    return {
        "wall": time.perf_counter() - wall0,
        "cpu": clock() - cpu0,
        "in_env": in_env,
        "episodes": episodes,
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="test/test-01")
    parser.add_argument("--cluster", default="8x4+8x4", help="the default cluster is 8x4+8x4")
    parser.add_argument("--max-jobs", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=0, help="untimed steps first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy-like", action="store_true")
    parser.add_argument(
        "--repeat", type=int, default=1, help="timed repeats of the same steps; the best and the median are reported"
    )
    parser.add_argument("--truth", choices=TRUTHS, default="fitted", help="what jobs progress at (default fitted)")
    parser.add_argument("--trace-set", choices=TRACE_SETS, default="pollux", help="traces of --truth measured")
    args = parser.parse_args(argv)
    env = DeepBootEnv(
        workload=args.workload,
        cluster=args.cluster,
        max_jobs=args.max_jobs,
        truth=args.truth,
        trace_set=args.trace_set,
    )
    if args.warmup:
        env.reset(seed=args.seed)
        run(env, args.warmup, args.policy_like, np.random.default_rng(args.seed))
    results = []
    for _ in range(max(args.repeat, 1)):
        env.reset(seed=args.seed)
        results.append(run(env, args.steps, args.policy_like, np.random.default_rng(args.seed)))
    kind = "policy-like actions (kept 10 steps)" if args.policy_like else "random masked actions"
    truth = "" if args.truth == "fitted" else f", truth {args.truth} ({args.trace_set} traces)"
    print(
        f"DeepBoot-v0, {kind}, workload {args.workload}, cluster {args.cluster}, max_jobs {args.max_jobs}{truth}: "
        f"{args.steps} steps ({results[0]['episodes']} episodes finished, warm-up {args.warmup})"
    )
    for label, r in _best_and_median(results):
        print(
            f"  {label}{args.steps / r['wall']:,.0f} steps/s wall, {args.steps / r['cpu']:,.0f} steps/CPU-s "
            f"(env alone: {args.steps / r['in_env']:,.0f} steps/CPU-s)"
        )
    return 0


def _best_and_median(results: list[dict[str, float]]) -> list[tuple[str, dict[str, float]]]:
    """The run itself, or (of several repeats, ranked by in-env CPU time) the best and the median."""
    if len(results) == 1:
        return [("", results[0])]
    ranked = sorted(results, key=lambda r: r["in_env"])
    return [(f"best of {len(results)}: ", ranked[0]), ("median:     ", ranked[len(ranked) // 2])]


if __name__ == "__main__":
    raise SystemExit(main())
