"""Benchmark: the env step's cost in each action mode, measured in lockstep.

    python benchmarks/bench_modes.py [--modes target score residual] [--workload train]
                                     [--envs 4] [--steps 4000] [--warmup 1000] [--seed 0]
                                     [--score-prior ats-srpt] [--residual-base ats]

``--envs`` envs per action mode (env i first reset with seed + i, as ``train_policy.py``'s
vectorised envs are), on the same workload and seeds, each driven by the actions of an
untrained policy: uniform choices in every dimension of a MultiDiscrete mode (what an untrained
``ppo`` samples; no masks) and standard normal scores (an untrained Gaussian policy, clipped to
[-1, 1] by the env) in the score mode. The envs step in turns, one step each per round, so that a
shared machine's drift (10-40 % between minutes here) weighs on every mode alike; a mode's time is
the CPU time (``time.process_time``) of its ``env.step`` calls alone, the observation included and
the sampling of the action excluded. ``--warmup`` rounds run first, untimed: the rate tables and
ATS's speedup rows are process-wide caches that the first episodes fill. The objects alive after
them (those caches, the envs) are then frozen out of the garbage collector's passes
(:func:`gc.freeze`): a pass that visits them is long, and it lands in whichever call happens to
cross the collector's threshold. Unfrozen, two versions of the code that decide bit for bit alike
read 1.35-1.38x and 1.43-1.46x same-dynamics ratios, run after run; frozen, both read 1.36-1.37x,
as both do with the collector off (session 40).

Reported: microseconds per env step for each mode and its ratio to the target mode (the issue's
"score mode within 1.3x of target mode"). That ratio mixes two things: what the action costs to
decode and observe, and what the simulation costs under the schedules each mode's actions make
(an untrained score policy lends every idle inference GPU as its prior does, so inference reclaims
GPUs far more often than under uniform lending levels). So a score-mode env also times, at every
state it visits, a target codec's decoding of a uniform action and its observation, without
applying them, and reports the score mode at **the same dynamics**: its step time over the same
step with the score codec's decoding and observation swapped for the target codec's. The target
codec is timed on a copy of the state as the simulator built it (:func:`as_built`): the score
codec's observation leaves on the state what it computed (its capacity, the GPUs pods do not pin),
which a target codec in its own mode computes itself (timed on the state as it is, the target
codec reads 6-8 us less per step and the ratio 0.01-0.02 more: session 44).
``benchmarks/bench_learner.py`` reports the first ratio inside a learner, where it swings with
the order the configurations run in.
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any

import numpy as np

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.action import make_codec
from deepboot_env.sim.state import ClusterState

MODES = ("target", "residual", "score")

STATE_MEMOS = (
    *(name for name, attr in vars(ClusterState).items() if isinstance(attr, cached_property) and name != "node_counts"),
    "_capacity_memo",
)
"""What a :class:`ClusterState` computes on first use and keeps (``node_counts``: filled in by
the simulator)."""


def as_built(state: ClusterState) -> ClusterState:
    """A copy of ``state`` without what it computed since it was built (:data:`STATE_MEMOS`).

    The score codec observes each state first, and the state keeps what that computed (the
    GPUs per node that pods do not pin, the capacity at the full lending share); a target codec
    timed on the same object would find them made, where in the target mode its own decoding
    makes them. Timed on the state as built, it pays what it pays in its own mode."""
    fresh = copy.copy(state)
    for name in STATE_MEMOS:
        fresh.__dict__.pop(name, None)
    return fresh


def make_env(mode: str, workload: str, score_prior: str, residual_base: str) -> DeepBootEnv:
    """The env of ``mode`` (the score mode over ``score_prior``, the residual over ``residual_base``)."""
    if mode == "target":
        return DeepBootEnv(workload=workload, action_mode=mode)
    base = score_prior if mode == "score" else residual_base
    return DeepBootEnv(workload=workload, action_mode=mode, base_policy=base)


class Driver:
    """One env stepped by an untrained policy's actions, its step's CPU time accumulated."""

    def __init__(self, env: DeepBootEnv, seed: int) -> None:
        self.env = env
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.episodes = 0
        self.seconds = 0.0
        self.steps = 0
        self.codec_seconds = 0.0
        """CPU seconds of the timed steps in the codec's decoding and observation."""
        self.shadow_seconds = 0.0
        """CPU seconds of a target codec's decoding and observation on the same states (score mode)."""
        self.shadow = make_codec("target", env.max_jobs, env.lend_levels) if env.codec.mode == "score" else None
        self._timing = False
        self._depth = 0
        for name in ("decode", "decode_on_arrays", "observe", "observe_on_arrays"):
            setattr(env.codec, name, self._timed(getattr(env.codec, name)))
        env.action_space.seed(seed)
        env.reset(seed=seed)

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method``, its CPU time added to :attr:`codec_seconds` while a step is timed."""

        def timed(*args: Any) -> Any:
            self._depth += 1  # a timed method calling another (observe_on_arrays -> observe) counts once
            start = time.process_time()
            try:
                return method(*args)
            finally:
                self._depth -= 1
                if self._timing and not self._depth:
                    self.codec_seconds += time.process_time() - start

        return timed

    def _shadow_step(self) -> None:
        """The target codec's decoding of a uniform action and its observation of this state,
        as the simulator built it (:func:`as_built`)."""
        assert self.shadow is not None
        state = as_built(self.env.state)
        action = np.array([int(self.rng.integers(n)) for n in self.shadow.nvec])
        start = time.process_time()
        self.shadow.decode(action, state)
        self.shadow.observe(state)
        self.shadow_seconds += time.process_time() - start

    def action(self) -> np.ndarray:
        """A standard normal score per entry (Box) or a uniform choice per dimension."""
        space = self.env.action_space
        if self.env.codec.mode == "score":
            return self.rng.standard_normal(space.shape).astype(np.float32)
        return np.asarray(space.sample())

    def step(self, timed: bool) -> None:
        """One step (a reset after an episode's end, untimed)."""
        action = self.action()
        if timed and self.shadow is not None:
            self._shadow_step()
        self._timing = timed
        start = time.process_time()
        _, _, terminated, truncated, _ = self.env.step(action)
        if timed:
            self.seconds += time.process_time() - start
            self.steps += 1
        self._timing = False
        if terminated or truncated:
            self.episodes += 1
            self.env.reset(seed=self.seed + self.episodes)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=["target", "score"])
    parser.add_argument("--workload", default="train")
    parser.add_argument("--envs", type=int, default=4, help="envs per mode")
    parser.add_argument("--steps", type=int, default=4000, help="timed steps per env")
    parser.add_argument("--warmup", type=int, default=1000, help="untimed steps per env first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--score-prior", default="ats-srpt", help="the score mode's prior")
    parser.add_argument("--residual-base", default="ats", help="the residual mode's base policy")
    args = parser.parse_args(argv)
    drivers = {
        mode: [
            Driver(make_env(mode, args.workload, args.score_prior, args.residual_base), args.seed + i)
            for i in range(args.envs)
        ]
        for mode in args.modes
    }
    for round_ in range(args.warmup + args.steps):
        if round_ == args.warmup:  # the warm-up's survivors out of the collector's passes (docstring)
            gc.collect()
            gc.freeze()
        for envs in drivers.values():
            for driver in envs:
                driver.step(timed=round_ >= args.warmup)
    print(
        f"env step per action mode, lockstep on {args.workload!r}, {args.envs} envs x {args.steps} timed steps "
        "per mode (CPU us per step)"
    )
    seconds = {mode: sum(d.seconds for d in envs) for mode, envs in drivers.items()}
    for mode, envs in drivers.items():
        us = seconds[mode] / sum(d.steps for d in envs) * 1e6
        ratio = f"  {seconds[mode] / seconds['target']:.2f}x target" if seconds.get("target") else ""
        print(f"{mode:<9}{us:>8.0f} us{ratio}  ({sum(d.episodes for d in envs)} episodes ended)")
        if mode == "score":
            codec = sum(d.codec_seconds for d in envs)
            shadow = sum(d.shadow_seconds for d in envs)
            same = seconds[mode] / (seconds[mode] - codec + shadow)
            steps = sum(d.steps for d in envs)
            print(
                f"  same dynamics: {same:.2f}x target (score codec {codec / steps * 1e6:.0f} us per step, "
                f"target codec {shadow / steps * 1e6:.0f} us on the same states)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
