"""Benchmark: a user's own stable-baselines3 training code on the env, score mode against target.

    python benchmarks/bench_plain_sb3.py [--workload train] [--steps 6144] [--threads 1]
                                         [--modes score target residual] [--envs 1]

Each mode is trained as plain SB3 user code would train it, with the library's defaults and
nothing of this project's learner: ``PPO("MultiInputPolicy", gym.make("DeepBoot-v1",
action_mode="score"))`` (SB3's diagonal Gaussian) and ``MaskablePPO("MultiInputPolicy",
gym.make("DeepBoot-v1"))`` (sb3-contrib's masked categoricals), one env, ``n_steps`` 2048,
batch 64, 10 epochs, the ``[64, 64]`` networks; ``residual`` is the target's MaskablePPO on
``action_mode="residual"``. ``--envs N`` trains on N envs (``DummyVecEnv``, SB3's default
vectorisation: a rollout of 2048 steps per env, the forward passes batched over the envs; issue
70 asks for 4 envs: >= 1,000 steps per CPU-second in target mode, >= 800 in residual mode).
After one untimed rollout and update, ``--steps`` more env steps are timed; reported: env steps
per CPU-second of this process (``time.process_time``, torch on ``--threads`` threads; 0 leaves
torch's default, a thread per core) and per second of wall time, and the score mode's rate over
the target mode's (issue 31: the score mode at least twice MaskablePPO's target mode, 385 steps per
CPU-second when the issue was filed). Results, with the machine: docs/results.md §7.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from deepboot_env.argparsing import ArgumentParser

ROLLOUT = 2048
"""SB3's default ``n_steps`` (one env): the untimed first rollout."""


def rates(mode: str, workload: str, steps: int, envs: int = 1) -> tuple[float, float]:
    """(env steps per CPU-second, per wall second) of plain SB3 training in ``mode`` on ``envs`` envs."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    import deepboot_env  # noqa: F401 - registers DeepBoot-v1

    def make() -> gym.Env:
        return gym.make("DeepBoot-v1", workload=workload, action_mode=mode)

    env = make() if envs == 1 else DummyVecEnv([make] * envs)
    model: Any
    if mode == "score":
        from stable_baselines3 import PPO

        model = PPO("MultiInputPolicy", env, seed=0)
    else:
        from sb3_contrib import MaskablePPO

        model = MaskablePPO("MultiInputPolicy", env, seed=0)
    model.learn(ROLLOUT * envs)
    cpu, wall = time.process_time(), time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    return steps / (time.process_time() - cpu), steps / (time.perf_counter() - wall)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="train")
    parser.add_argument("--steps", type=int, default=3 * ROLLOUT, help="timed env steps per mode")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--modes", nargs="+", choices=("score", "target", "residual"), default=["score", "target"])
    parser.add_argument("--envs", type=int, default=1, help="envs (DummyVecEnv; default 1)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.threads < 0 or args.envs < 1:
        parser.error("--steps and --envs must be >= 1 and --threads >= 0")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"plain SB3 on {args.workload!r}, {args.envs} env(s), {args.steps} timed steps per mode, "
        f"{torch.get_num_threads()} torch thread(s): env steps per CPU-second (per wall second)"
    )
    measured = {}
    for mode in args.modes:
        per_cpu, per_wall = measured[mode] = rates(mode, args.workload, args.steps, args.envs)
        algo = "PPO, score mode" if mode == "score" else f"MaskablePPO, {mode} mode"
        print(f"{algo:<26}{per_cpu:>8,.0f}  ({per_wall:,.0f})")
    if {"score", "target"} <= set(measured):
        print(f"  score / target: {measured['score'][0] / measured['target'][0]:.2f}x per CPU-second")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
