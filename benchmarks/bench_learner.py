"""Benchmark: learner throughput, env steps per CPU-second, rollout collection and update apart.

    python benchmarks/bench_learner.py [--algos maskable_ppo ppo] [--modes target residual score]
                                       [--archs mlp set] [--n-envs 4] [--n-steps 256]
                                       [--rollouts 4] [--repeat 1] [--workload train] [--threads 1]
                                       [--device cpu|cuda] [--preset P] [--replay]
                                       [-params KEY:VALUE ...]

For every (algorithm, action mode, policy architecture) it builds the model exactly as
``train_policy.py`` does with the default hyperparameters (``agents.trainers.ppo.build_model``: MLP
256x256 or the set network, ``n_steps`` 256 per env, batch 256, 10 epochs) on ``--n-envs``
``DummyVecEnv`` copies of ``DeepBoot-v0`` (torch.distributions argument validation off, as
``train_policy.py`` runs); with ``--preset P``, the one model that ``train_policy.py --preset P
--workload W`` trains (say ``--preset score-app --workload family:mixed``, the README's first
training command: its envs, env arguments, group size and hyperparameters). It runs one
untimed rollout and update (rate tables and torch warm up), then ``--rollouts`` timed ones, and
reports, per CPU-second of this process (``time.process_time``; torch runs ``--threads``
threads):

* ``rollout``: env steps collected per CPU-second of ``collect_rollouts``;
* ``update``: env steps per CPU-second of ``train`` (the PPO epochs over the rollout);
* ``overall``: env steps per CPU-second of both;
* where a collected step's time goes, in microseconds per env step: ``env`` (``DeepBootEnv.step``
  without its observation), ``reset`` (``DeepBootEnv.reset`` without its observation: a new
  scenario and, under ``relative_reward``, the prior's reference episode), ``obs`` (building
  the observation, base policy proposal included in residual mode), ``mask``
  (``action_masks``), ``forward`` (the policy's forward pass and action sampling), ``buffer``
  (``RolloutBuffer.add``) and ``other`` (SB3's tensor conversions, the VecEnv and Monitor
  wrappers, callbacks, a group learner's own buffer);
* ``env step residual/target`` (and ``score/target``): the ratio of that mode's env step (env +
  obs + mask) to the target mode's, per algorithm and architecture;
* ``wall``: env steps per second of wall-clock time, rollouts and updates together (what counts
  with ``--device cuda``, whose kernels run outside this process's CPU time).

``--hyperparams`` (``-params``) changes the default preset's hyperparameters as
``train_policy.py`` takes them (``n_epochs:4``; ``'policy_kwargs:dict(attention_layers=1,pool_layers=0)'``:
the attention block in place of the default pooled-context one).

``--replay`` measures the learner alone, its **ceiling**: after the warm-up, the ``--rollouts``
rollouts run once untimed on the real envs, each env's steps, resets and action masks recorded;
the timed ones then get them back from every env, in the same order (the same states, with their
real numbers of jobs, the same rewards, episode ends, infos and masks), so that the simulator,
the codec, the observation, the masks and the resets cost nothing. What is left is the policy's
forward pass, SB3's loop and buffer, and the update: the most env steps per CPU-second that any
faster simulator could give this learner.

``--repeat N`` measures every configuration N times, round robin, and reports for each the pass
with the cheapest env step (replayed: the cheapest learner). The rate tables are process-wide
caches that the first rollouts fill for every configuration after them, so a single pass favours
whichever runs later (the score mode measured 1.5x the target mode run first and 0.9x run
second, in one session); the first pass of ``--repeat 2`` warms them for all.

The score mode (continuous actions over ``ats-srpt``'s knapsack) runs with ``ppo`` only
(MaskablePPO needs discrete actions).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from agents.errors import ConfigError
from agents.hyperparameters import ALGOS, POLICY_ARCHS, parse_kv, policy_arch, resolve_hyperparams, switch_arch
from agents.runs.run_config import TrainSettings
from agents.trainers.ppo import build_model, make_vec_env_for
from agents.trainers.training_run import build_env, new_model, plan_run
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.env import DeepBootEnv

PARTS = ("env", "reset", "obs", "mask", "forward", "buffer", "other")
"""Where a collected step's CPU time goes (see the module docstring)."""


class _Timers:
    """CPU seconds accumulated per part while patched methods run (nested parts are subtracted:
    ``env`` is ``DeepBootEnv.step`` minus the observation it builds)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []

    def wrap(self, owner: Any, attr: str, part: str) -> Callable[[], None]:
        """Time ``owner.attr`` as ``part``; returns the function that restores it."""
        original = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            frame = [time.process_time(), 0.0]  # start, CPU of nested parts
            self._stack.append(frame)
            try:
                return original(*args, **kwargs)
            finally:
                self._stack.pop()
                spent = time.process_time() - frame[0]
                self.seconds[part] += spent - frame[1]
                if self._stack:
                    self._stack[-1][1] += spent

        setattr(owner, attr, timed)
        return lambda: setattr(owner, attr, original)


@contextmanager
def _timed_parts(model: Any, timers: _Timers) -> Iterator[None]:
    restore = [
        timers.wrap(DeepBootEnv, "step", "env"),
        timers.wrap(DeepBootEnv, "reset", "reset"),
        timers.wrap(DeepBootEnv, "_observe", "obs"),
        timers.wrap(DeepBootEnv, "action_masks", "mask"),
        timers.wrap(model.policy, "forward", "forward"),
        timers.wrap(model.rollout_buffer, "add", "buffer"),
    ]
    try:
        yield
    finally:
        for undo in reversed(restore):
            undo()


def _cpu_timed(fn: Callable[..., Any], cpu: dict[str, float], key: str) -> Callable[..., Any]:
    """``fn`` adding its CPU seconds to ``cpu[key]``."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            cpu[key] += time.process_time() - t0

    return timed


class Learner(NamedTuple):
    """A model to time and its env."""

    model: Any
    env: Any
    rollout_steps: int
    """Env steps of one rollout (envs times ``n_steps``)."""


Config = tuple[str, str, str]
"""(algo, arch, mode) of a measured learner."""


def default_learner(algo: str, arch: str, mode: str, args: argparse.Namespace) -> tuple[Learner, Config]:
    """The default preset's model for (``algo``, ``arch``, ``mode``) on ``--n-envs`` envs of
    ``--workload`` (the score mode over ``ats-srpt``), ``args.overrides`` (the parsed
    ``--hyperparams``) applied last.

    Raises:
        ConfigError: a bad hyperparameter value.
    """
    overrides = args.overrides
    hyperparams = resolve_hyperparams(algo, {"n_steps": args.n_steps, "batch_size": args.n_steps}, overrides)
    switch_arch(hyperparams, arch, keep_policy_kwargs="policy_kwargs" in overrides)
    env_kwargs = {"action_mode": mode, **({"base_policy": "ats-srpt"} if mode == "score" else {})}
    env = make_vec_env_for(args.workload, n_envs=args.n_envs, seed=args.seed, env_kwargs=env_kwargs)
    model = build_model(algo, env, device=args.device, seed=args.seed, hyperparams=hyperparams)
    return Learner(model, env, args.n_envs * args.n_steps), (algo, arch, mode)


def preset_learner(args: argparse.Namespace) -> tuple[Learner, Config]:
    """The model ``train_policy.py --preset P --workload W`` trains: its plan and env as
    :func:`agents.trainers.training_run.plan_run` and :func:`~agents.trainers.training_run.build_env` make them
    (no evaluations), the model as :func:`~agents.trainers.training_run.new_model` builds it for a new run.

    Raises:
        ConfigError: a bad preset, workload or env argument.
    """
    settings = TrainSettings(
        preset=args.preset,
        workload=[args.workload],
        seed=args.seed,
        device=args.device,
        num_threads=args.threads,
        eval_freq=0,
    )
    plan = plan_run(settings)
    resolved = plan.resolved
    env = build_env(plan).vec_env
    model = new_model(plan, env)
    mode = resolved["env_kwargs"].get("action_mode", "target")
    config = (plan.algo, policy_arch(resolved["hyperparams"]["policy"]), mode)
    return Learner(model, env, resolved["n_envs"] * resolved["hyperparams"]["n_steps"]), config


REPLAYED = ("step", "reset", "action_masks")
"""The env methods ``--replay`` records and gives back."""


def _copied(value: Any) -> Any:
    """``value`` with its arrays copied (through tuples and dicts): what an env returned, kept."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_copied(item) for item in value)
    return value


class _Replay:
    """What each sub-env's :data:`REPLAYED` methods return while :meth:`recording`, then given
    back in the same order (``--replay``: the learner without the env's cost)."""

    def __init__(self, vec_env: Any) -> None:
        self.envs: list[DeepBootEnv] = [monitor.unwrapped for monitor in vec_env.envs]
        self.seen: list[dict[str, list[Any]]] = [{name: [] for name in REPLAYED} for _ in self.envs]

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Keep a copy of what the envs' methods return (instance attributes shadow the class's
        methods; removed on exit)."""
        for env, seen in zip(self.envs, self.seen, strict=True):
            for name in REPLAYED:
                setattr(env, name, partial(self._recorded, getattr(env, name), seen[name]))
        try:
            yield
        finally:
            for env in self.envs:
                for name in REPLAYED:
                    delattr(env, name)

    @staticmethod
    def _recorded(method: Callable[..., Any], seen: list[Any], *args: Any, **kwargs: Any) -> Any:
        out = method(*args, **kwargs)
        seen.append(_copied(out))
        return out

    def replay(self) -> None:
        """From now on, each env's methods return what they returned while recording, in turn
        (the same observations, rewards, episode ends, infos and masks)."""
        for env, seen in zip(self.envs, self.seen, strict=True):
            steps = seen["step"]
            if not steps:
                raise ValueError("--replay: the recorded rollouts hold no step")
            seen["reset"] = seen["reset"] or [(steps[-1][0], {})]  # no episode ended: any state will do
            for name, returned in seen.items():
                if returned:  # masks only where the learner asked for them
                    setattr(env, name, partial(self._replayed, itertools.cycle(returned)))

    @staticmethod
    def _replayed(turn: Iterator[Any], *_args: Any, **_kwargs: Any) -> Any:
        return next(turn)


def measure(learner: Learner, args: argparse.Namespace) -> dict[str, float]:
    """One configuration's figures (see the module docstring)."""
    model, env = learner.model, learner.env
    model.learn(total_timesteps=learner.rollout_steps)  # warm-up: rate tables, torch kernels
    steps = args.rollouts * learner.rollout_steps
    if args.replay:  # the timed rollouts' states, recorded first (untimed), then replayed
        replay = _Replay(env)
        with replay.recording():
            model.learn(total_timesteps=steps, reset_num_timesteps=False)
        replay.replay()
    cpu: dict[str, float] = defaultdict(float)
    model.collect_rollouts = _cpu_timed(model.collect_rollouts, cpu, "collect")
    model.train = _cpu_timed(model.train, cpu, "update")
    timers = _Timers()
    wall = time.perf_counter()
    with _timed_parts(model, timers):
        model.learn(total_timesteps=steps, reset_num_timesteps=False)
    wall = time.perf_counter() - wall
    env.close()
    parts = {p: timers.seconds[p] / steps * 1e6 for p in PARTS if p != "other"}
    parts["other"] = cpu["collect"] / steps * 1e6 - sum(parts.values())
    return {
        "rollout": steps / cpu["collect"],
        "update": steps / cpu["update"],
        "overall": steps / (cpu["collect"] + cpu["update"]),
        "wall": steps / wall,
        **parts,
    }


def _env_step(figures: dict[str, float]) -> float:
    """Microseconds of a collected step spent in the env: its step, observation and masks."""
    return figures["env"] + figures["obs"] + figures["mask"]


def _cost(figures: dict[str, float], replay: bool) -> float:
    """What ``--repeat`` keeps the cheapest pass of: the env step, or replayed (an env step of
    nothing) the learner's CPU time per env step."""
    return 1.0 / figures["overall"] if replay else _env_step(figures)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=["maskable_ppo"])
    parser.add_argument("--modes", nargs="+", choices=("target", "residual", "score"), default=["target", "residual"])
    parser.add_argument("--archs", nargs="+", choices=tuple(POLICY_ARCHS), default=["mlp", "set"])
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--n-steps", type=int, default=256, help="per env and rollout (the default preset's)")
    parser.add_argument("--rollouts", type=int, default=4, help="timed rollouts (each followed by its update)")
    parser.add_argument("--repeat", type=int, default=1, help="round-robin passes (the cheapest env step kept)")
    parser.add_argument("--workload", default="train")
    parser.add_argument(
        "--preset",
        help="time the model that train_policy.py --preset P --workload W trains instead (its algorithm, action "
        "mode, architecture, envs, env arguments and hyperparameters; --algos, --modes, --archs, --n-envs and "
        "--n-steps do not apply)",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="the learner alone: the timed rollouts' steps, resets and masks, recorded on the real envs first, "
        "given back in the same order (module docstring)",
    )
    parser.add_argument(
        "-params",
        "--hyperparams",
        nargs="+",
        metavar="KEY:VALUE",
        help="hyperparameters over the default preset's, as train_policy.py takes them (say n_epochs:4 or "
        "'policy_kwargs:dict(attention_layers=0)'; not with --preset)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the fastest on 2 cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the networks run")
    args = parser.parse_args(argv)
    if args.rollouts < 1 or args.repeat < 1:
        parser.error(f"--rollouts and --repeat must be >= 1, got {args.rollouts} and {args.repeat}")
    if args.preset and args.hyperparams:
        parser.error("--hyperparams applies to the default preset's learners, not with --preset")
    try:
        args.overrides = parse_kv(args.hyperparams)
    except ConfigError as exc:  # an item without KEY:
        parser.error(str(exc))

    import torch

    from agents.models.distributions import distribution_checks

    torch.set_num_threads(args.threads)
    with distribution_checks(False):  # as train_policy.py trains
        setup = f"preset {args.preset!r}" if args.preset else f"{args.n_envs} DummyVecEnv envs, n_steps {args.n_steps}"
        print(
            f"learner benchmark: {setup} on {args.workload!r}{' replayed' if args.replay else ''}, {args.rollouts} "
            f"timed rollouts, {args.threads} "
            f"torch thread(s), networks on {args.device}; env steps per CPU-second (wall: per second)"
        )
        header = f"{'algo':<13}{'mode':<9}{'arch':<5}{'rollout':>9}{'update':>8}{'overall':>9}{'wall':>8}  " + "".join(
            f"{p:>8}" for p in PARTS
        )
        print(header + "   (us per collected step)")
        configs = [
            (algo, arch, mode)
            for algo in args.algos
            for arch in args.archs
            for mode in args.modes
            if mode != "score" or algo == "ppo"
        ]
        builders: list[Callable[[], tuple[Learner, Config]]] = (
            [partial(preset_learner, args)]
            if args.preset
            else [partial(default_learner, *config, args) for config in configs]
        )
        best: dict[Config, dict[str, float]] = {}
        for _ in range(args.repeat):  # round robin: no configuration always runs on the coldest caches
            for build in builders:
                try:
                    learner, config = build()
                except ConfigError as exc:  # a bad --preset, --workload or --hyperparams
                    parser.error(str(exc))
                r = measure(learner, args)
                if config not in best or _cost(r, args.replay) < _cost(best[config], args.replay):
                    best[config] = r
        for (algo, arch, mode), r in best.items():
            print(
                f"{algo:<13}{mode:<9}{arch:<5}{r['rollout']:>9,.0f}{r['update']:>8,.0f}{r['overall']:>9,.0f}"
                f"{r['wall']:>8,.0f}  " + "".join(f"{r[p]:>8.0f}" for p in PARTS)
            )
        for algo in args.algos if not args.replay else ():  # replayed, the env step costs nothing
            for arch in args.archs:
                for mode in ("residual", "score"):
                    if (algo, arch, mode) in best and (algo, arch, "target") in best:
                        ratio = _env_step(best[(algo, arch, mode)]) / _env_step(best[(algo, arch, "target")])
                        print(f"  {algo} {arch}: env step {mode}/target = {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
