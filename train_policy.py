"""Train PPO / MaskablePPO on DeepBoot-v0 (flags in the style of RL Baselines3 Zoo).

Examples::

    python train_policy.py --algo maskable_ppo --n-timesteps 200000 --seed 0
    python train_policy.py --algo ppo --preset smoke --workload tiny.csv --eval-workload tiny.csv
    python train_policy.py --algo maskable_ppo --resume runs/maskable_ppo_1/final_model.zip -n 100000
    tensorboard --logdir runs/

Each run writes ``<log-folder>/<algo>_<n>/``: ``config.yml`` (arguments, resolved
hyperparameters and env arguments, versions), ``final_model.zip``, ``best_model.zip`` (best mean
validation JCT), ``evaluations.csv`` (one row per validation episode), ``progress.csv`` and
TensorBoard events (``tb/`` there, or ``<tensorboard-log>/<algo>_<n>/``) with ``sched/*``,
``reward/*``, ``eval/*``, ``rollout/*`` and ``train/*`` scalars; ``checkpoints/`` with
``--save-freq``. Evaluate the result like any baseline::

    deepboot compare --policies ats ppo:runs/maskable_ppo_1/best_model.zip --workloads test
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

from agents.factory import (
    ALGOS,
    DEVICES,
    ConfigError,
    algo_class,
    build_model,
    check_algo,
    check_hyperparams,
    make_vec_env_for,
    model_kwargs,
    parse_kv,
    resolve_device,
    resolve_hyperparams,
)
from deepboot_env.config import EnvConfig

DEFAULT_CONF = Path(__file__).resolve().parent / "conf" / "deepboot.yml"
"""Configuration read when ``--conf-file`` is not given (if it exists)."""

RUN_KEYS: dict[str, Any] = {
    "n_timesteps": 200_000,
    "n_envs": 4,
    "eval_freq": 20_000,
    "eval_episodes": 0,
    "save_freq": 0,
}
"""Run settings a configuration preset may default, with their built-in defaults."""

PRETRAIN_KEYS: dict[str, Any] = {
    "pretrain_expert": None,
    "pretrain_epochs": 15,
    "pretrain_noise": [0.0, 0.05],
    "residual_neutral_prob": 0.9,
}
"""Behaviour-cloning warm start (:mod:`agents.imitation`) settings and their defaults."""

FIXED_ENV_KWARGS = ("workload", "render_mode")
"""Env arguments that ``--env-kwargs`` may not set (``workload`` comes from ``--workload``)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (options default to None where a preset may set them)."""
    p = _Parser(
        prog="train_policy.py",
        description="Train PPO / MaskablePPO on DeepBoot-v0 (RL-Zoo-style flags).",
    )
    p.add_argument("--algo", default=None, help=f"{' | '.join(ALGOS)} (default: ppo, or the --resume model's)")
    p.add_argument("-n", "--n-timesteps", type=int, default=None, help="timesteps to train (preset: 200000)")
    p.add_argument("--seed", type=int, default=0, help="seed of torch, numpy and env i (seed + i); default 0")
    p.add_argument("--n-envs", type=int, default=None, help="parallel envs (preset: 4)")
    p.add_argument("--vec-env", choices=("dummy", "subproc"), default="dummy", help="VecEnv class (default dummy)")
    p.add_argument("--device", default="cpu", help=f"{' | '.join(DEVICES)} (default cpu); cuda -> cpu if absent")
    p.add_argument("--num-threads", type=int, default=1, help="torch threads (default 1; <= 0: torch's default)")
    p.add_argument("--workload", nargs="+", default=["train"], help="split, name or CSV (default train)")
    p.add_argument("--eval-workload", nargs="+", default=["val"], help="validation workloads (default val)")
    p.add_argument("--eval-freq", type=int, default=None, help="evaluate every N timesteps; <= 0: never (preset)")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per evaluation (0: one per workload)")
    p.add_argument("--save-freq", type=int, default=None, help="checkpoint every N timesteps; <= 0: never (default)")
    p.add_argument("-f", "--log-folder", default="runs", help="runs go to <log-folder>/<algo>_<n>/ (default runs)")
    p.add_argument("-tb", "--tensorboard-log", default="", help="TensorBoard root (default: <run>/tb)")
    p.add_argument(
        "-params", "--hyperparams", nargs="+", default=None, metavar="K:V", help="overrides, e.g. n_steps:128"
    )
    p.add_argument("--env-kwargs", nargs="+", default=None, metavar="K:V", help="DeepBootEnv args, e.g. max_jobs:16")
    p.add_argument("-conf", "--conf-file", default=None, help="YAML of defaults (default: conf/deepboot.yml)")
    p.add_argument("--preset", default="default", help="preset of the configuration file (default: default)")
    p.add_argument("--resume", default=None, metavar="PATH", help="continue training a saved model (zip or run)")
    p.add_argument(
        "--pretrain-expert",
        default=None,
        metavar="POLICY",
        help="clone this registered policy (e.g. ats) on the training workloads before PPO (preset; none: skip)",
    )
    p.add_argument("--pretrain-epochs", type=int, default=None, help="behaviour-cloning epochs (preset: 15)")
    p.add_argument(
        "--pretrain-noise",
        type=float,
        nargs="+",
        default=None,
        metavar="P",
        help="one demonstration pass per noise level (DART-style action noise; preset: 0 0.05)",
    )
    p.add_argument(
        "--residual-neutral-prob",
        type=float,
        default=None,
        metavar="P",
        help="residual env: after the warm start, each slot keeps the base policy's count with "
        "probability P (preset: 0.9)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--distribution-checks",
        action="store_true",
        help="keep torch.distributions argument validation (off by default: ~40%% faster MaskablePPO)",
    )
    p.add_argument("--verbose", type=int, default=1, help="0: quiet; 1 (default): log tables and evaluation lines")
    return p


# ------------------------------------------------------------------------------ configuration
def load_conf(path: str | Path | None, preset: str, algo: str) -> dict[str, Any]:
    """The flat defaults for ``algo`` from ``preset`` of a configuration file (``common`` first).

    A file whose top level has ``common``/algorithm keys is a single preset.

    Raises:
        ConfigError: unreadable file, unknown preset, or entries that are not mappings.
    """
    if path is None:
        if not DEFAULT_CONF.is_file():
            return {}
        path = DEFAULT_CONF
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read --conf-file {p}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--conf-file {p}: expected a mapping of presets")
    if set(data) & {"common", *ALGOS}:
        section = data
    elif preset in data:
        section = data[preset]
    else:
        raise ConfigError(f"--conf-file {p}: no preset {preset!r}; presets: {', '.join(map(str, data))}")
    if not isinstance(section, dict):
        raise ConfigError(f"--conf-file {p}: preset {preset!r} is not a mapping")
    out: dict[str, Any] = {}
    for key in ("common", algo):
        part = section.get(key) or {}
        if not isinstance(part, dict):
            raise ConfigError(f"--conf-file {p}: {preset}.{key} is not a mapping")
        for k, v in part.items():
            if k == "env_kwargs":
                if not isinstance(v, dict):
                    raise ConfigError(f"--conf-file {p}: {preset}.{key}.env_kwargs is not a mapping")
                out.setdefault("env_kwargs", {}).update(v)
            else:
                out[k] = copy.deepcopy(v)
    return out


def env_config(env_kwargs: Mapping[str, Any]) -> EnvConfig:
    """The :class:`~deepboot_env.config.EnvConfig` of the env options (``workload`` and
    ``render_mode`` are not options: ``--workload`` sets the workloads).

    Raises:
        ConfigError: naming the key (and the accepted ones) or the bad value.
    """
    for key in env_kwargs:
        if key in FIXED_ENV_KWARGS:
            raise ConfigError(f"--env-kwargs: {key!r} cannot be set here (use --workload)")
    try:
        return EnvConfig.from_options(**env_kwargs)
    except ValueError as exc:
        raise ConfigError(f"--env-kwargs: {exc}") from None


def resolve_settings(args: argparse.Namespace, algo: str) -> dict[str, Any]:
    """Run settings, env kwargs and raw hyperparameters: built-in < config preset < flags."""
    conf = load_conf(args.conf_file, args.preset, algo)
    settings: dict[str, Any] = {}
    for key, default in RUN_KEYS.items():
        value = conf.pop(key, default)
        if getattr(args, key) is not None:
            value = getattr(args, key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        settings[key] = value
    if settings["n_timesteps"] < 1:
        raise ConfigError(f"--n-timesteps must be >= 1, got {settings['n_timesteps']}")
    if settings["n_envs"] < 1:
        raise ConfigError(f"--n-envs must be >= 1, got {settings['n_envs']}")
    if settings["eval_episodes"] < 0:
        raise ConfigError(f"--eval-episodes must be >= 0, got {settings['eval_episodes']}")
    settings.update(resolve_pretrain(args, conf))
    env_kwargs = dict(conf.pop("env_kwargs", {}) or {})
    env_kwargs.update(parse_kv(args.env_kwargs, "--env-kwargs"))
    env_config(env_kwargs)
    cli = parse_kv(args.hyperparams, "--hyperparams")
    check_hyperparams(cli)
    settings["env_kwargs"] = env_kwargs
    settings["cli_hyperparams"] = cli
    settings["hyperparams"] = resolve_hyperparams(algo, conf, cli)
    return settings


def resolve_pretrain(args: argparse.Namespace, conf: dict[str, Any]) -> dict[str, Any]:
    """The behaviour-cloning settings (``conf`` entries are consumed): built-in < preset < flags.

    Raises:
        ConfigError: an unknown expert policy, negative epochs or a noise level outside [0, 1).
    """
    from deepboot_env.policy import available_policies

    out: dict[str, Any] = {}
    for key, default in PRETRAIN_KEYS.items():
        value = conf.pop(key, default)
        if getattr(args, key) is not None:
            value = getattr(args, key)
        out[key] = value
    expert = out["pretrain_expert"]
    if expert in ("", "none", None):
        out["pretrain_expert"] = None
    elif expert not in available_policies():
        raise ConfigError(f"--pretrain-expert: unknown policy {expert!r}; available: {', '.join(available_policies())}")
    epochs = out["pretrain_epochs"]
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
        raise ConfigError(f"--pretrain-epochs must be an integer >= 0, got {epochs!r}")
    noise = out["pretrain_noise"]
    noise = [noise] if isinstance(noise, int | float) else list(noise or [])
    if not noise or any(not isinstance(p, int | float) or not 0.0 <= p < 1.0 for p in noise):
        raise ConfigError(f"--pretrain-noise needs levels in [0, 1), got {out['pretrain_noise']!r}")
    out["pretrain_noise"] = [float(p) for p in noise]
    prob = out["residual_neutral_prob"]
    if not isinstance(prob, int | float) or not 0.0 < prob < 1.0:
        raise ConfigError(f"--residual-neutral-prob must lie in (0, 1), got {prob!r}")
    return out


def warm_start(model: Any, settings: Mapping[str, Any], workloads: Sequence[Any], seed: int) -> dict[str, Any]:
    """Clone ``settings["pretrain_expert"]`` into ``model`` (see :mod:`agents.imitation`);
    returns what to record in ``config.yml``, and logs ``pretrain/*`` scalars."""
    from agents.imitation import collect_demonstrations, pretrain

    t0 = time.perf_counter()
    demos = collect_demonstrations(
        settings["pretrain_expert"],
        workloads,
        env_kwargs=settings["env_kwargs"],
        gamma=float(model.gamma),
        noise=settings["pretrain_noise"],
        seed=seed,
    )
    history = pretrain(model, demos, epochs=settings["pretrain_epochs"], seed=seed)
    for epoch, losses in enumerate(history):
        for key, value in losses.items():
            model.logger.record(f"pretrain/{key}", value)
        model.logger.dump(epoch)
    return {
        "expert": settings["pretrain_expert"],
        "transitions": len(demos),
        "expert_jct_mean": round(float(sum(demos.episode_jct) / len(demos.episode_jct)), 1),
        "epochs": settings["pretrain_epochs"],
        "noise": settings["pretrain_noise"],
        "final_losses": {k: round(v, 5) for k, v in history[-1].items()} if history else {},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def next_run_dir(log_folder: str | Path, algo: str) -> Path:
    """``<log_folder>/<algo>_<n>`` with n one more than the largest existing (from 1)."""
    root = Path(log_folder)
    pattern = re.compile(rf"^{re.escape(algo)}_(\d+)$")
    taken = [int(m.group(1)) for d in root.glob(f"{algo}_*") if (m := pattern.match(d.name)) and d.is_dir()]
    run = root / f"{algo}_{max(taken, default=0) + 1}"
    run.mkdir(parents=True, exist_ok=False)
    return run


def load_workloads(values: Sequence[str]) -> list[tuple[str, Any]]:
    """``(label, Workload)`` for every workload named (splits ``train``/``val``/``test`` expanded)."""
    from traces.loaders import expand_workload_sources, load_workload

    out = []
    for source in expand_workload_sources(list(values)):
        out.append((str(source), load_workload(source)))
    return out


def _plain(value: Any) -> Any:
    """YAML-safe copy of ``value``."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool):
        return value
    for kind in (int, float, str):  # also numpy scalars and str subclasses (torch's version)
        if isinstance(value, kind):
            return kind(value)
    return str(value)


def write_config(path: Path, config: Mapping[str, Any]) -> None:
    """Write ``config.yml``."""
    path.write_text(yaml.safe_dump(_plain(dict(config)), sort_keys=False), encoding="utf-8")


def _versions() -> dict[str, Any]:
    from stable_baselines3 import get_system_info

    import deepboot_env

    info, _ = get_system_info(print_info=False)
    try:
        import sb3_contrib

        info["sb3-contrib"] = sb3_contrib.__version__
    except ImportError:  # pragma: no cover
        pass
    info["deepboot-env"] = deepboot_env.__version__
    return info


# ---------------------------------------------------------------------------------- training
def train(args: argparse.Namespace) -> Path:
    """Train as ``args`` say; returns the run folder.

    Raises:
        ConfigError, FileNotFoundError, ValueError: bad flags, files or env arguments.
    """
    import torch
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
    from stable_baselines3.common.logger import Logger, make_output_format
    from torch.distributions import Distribution

    from agents.callbacks import SchedMetricsCallback, WorkloadEvalCallback
    from agents.policy_adapter import detect_algo, env_shape_of, resolve_model_path

    resume = resolve_model_path(args.resume) if args.resume else None
    algo = args.algo or (detect_algo(resume) if resume else "ppo")
    check_algo(algo)
    if resume is not None and detect_algo(resume) != algo:
        raise ConfigError(f"--resume {resume} holds a {detect_algo(resume)} model, not {algo}")
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    device = resolve_device(args.device)
    settings = resolve_settings(args, algo)
    env_kwargs = settings["env_kwargs"]
    cls = algo_class(algo)
    saved_shape: dict[str, Any] = {}
    if resume is not None:
        saved_shape = env_shape_of(cls.load(resume, device="cpu"))
        for key, value in saved_shape.items():
            if key in env_kwargs and type(value)(env_kwargs[key]) != value:
                raise ConfigError(f"--resume model was trained with {key}={value}, not {env_kwargs[key]}")
            env_kwargs[key] = value
        for key in ("policy", "policy_kwargs"):
            if key in settings["cli_hyperparams"]:
                raise ConfigError(f"--hyperparams {key} cannot change when resuming")

    try:
        train_workloads = [w for _, w in load_workloads(args.workload)]
        eval_workloads = load_workloads(args.eval_workload) if settings["eval_freq"] > 0 else []
        vec_env = make_vec_env_for(train_workloads, settings["n_envs"], args.seed, env_kwargs, vec_env=args.vec_env)
    except (ValueError, TypeError) as exc:  # bad workload files or env argument values
        raise ConfigError(str(exc).splitlines()[0]) from None
    run_dir = next_run_dir(args.log_folder, algo)
    tb_dir = Path(args.tensorboard_log) / run_dir.name if args.tensorboard_log else run_dir / "tb"
    config: dict[str, Any] = {
        "algo": algo,
        "run_dir": str(run_dir),
        "tensorboard_dir": str(tb_dir),
        "device": device,
        "seed": args.seed,
        "workload": list(args.workload),
        "eval_workload": list(args.eval_workload),
        **{k: settings[k] for k in RUN_KEYS},
        "env_kwargs": env_kwargs,
        "hyperparams": settings["cli_hyperparams"] if resume else settings["hyperparams"],
        "resumed_from": str(resume) if resume else None,
        **{k: settings[k] for k in PRETRAIN_KEYS},
        "conf_file": str(args.conf_file or (DEFAULT_CONF if DEFAULT_CONF.is_file() else "")),
        "preset": args.preset,
        "args": vars(args),
        "command": " ".join(sys.argv) if args.command is None else args.command,
        "versions": _versions(),
    }
    write_config(run_dir / "config.yml", config)

    if resume is None:
        model = build_model(algo, vec_env, device=device, seed=args.seed, hyperparams=settings["hyperparams"])
    else:
        overrides = model_kwargs(settings["cli_hyperparams"])
        model = cls.load(resume, env=vec_env, device=device, **overrides)
        model.set_random_seed(args.seed)
    formats = [make_output_format("csv", str(run_dir)), make_output_format("tensorboard", str(tb_dir))]
    if args.verbose >= 1:
        formats.append(make_output_format("stdout", str(run_dir)))
    model.set_logger(Logger(str(run_dir), formats))
    pretrained = resume is None and settings["pretrain_expert"] is not None
    if pretrained:
        config["pretrain"] = warm_start(model, settings, train_workloads, args.seed)
    cfg = env_config(env_kwargs)
    neutral = cfg.make_codec().neutral_action()
    residual_start = resume is None and neutral is not None
    if residual_start:  # start at the base policy (after cloning, whose critic it keeps)
        from agents.imitation import init_residual_policy

        init_residual_policy(model, neutral, float(settings["residual_neutral_prob"]))
        config["residual_neutral_prob"] = settings["residual_neutral_prob"]
    if pretrained or residual_start:
        write_config(run_dir / "config.yml", config)

    sched = SchedMetricsCallback()
    callbacks: list[Any] = [sched]
    evaluator = None
    if settings["eval_freq"] > 0:
        evaluator = WorkloadEvalCallback(
            eval_workloads,
            cfg.sim,
            eval_freq=settings["eval_freq"],
            n_episodes=settings["eval_episodes"],
            log_dir=run_dir,
            max_rounds=cfg.max_rounds,
            eval_at_start=pretrained or residual_start,
            base_policy=cfg.base_policy,
            verbose=args.verbose,
        )
        callbacks.append(evaluator)
    if settings["save_freq"] > 0:
        callbacks.append(
            CheckpointCallback(
                save_freq=max(settings["save_freq"] // settings["n_envs"], 1),
                save_path=str(run_dir / "checkpoints"),
                name_prefix=algo,
            )
        )

    start_steps = model.num_timesteps
    # MaskablePPO builds one Categorical per action dimension (33 by default) at every step;
    # validating their arguments costs ~30% of the training time and checks nothing we need.
    validate_before = Distribution._validate_args
    Distribution.set_default_validate_args(bool(args.distribution_checks))
    t0 = time.perf_counter()
    try:
        model.learn(
            total_timesteps=settings["n_timesteps"],
            callback=CallbackList(callbacks),
            reset_num_timesteps=resume is None,
            progress_bar=not args.no_progress,
        )
    finally:
        Distribution.set_default_validate_args(validate_before)
    wall = time.perf_counter() - t0
    model.logger.dump(model.num_timesteps)  # flush the last update's train/* values
    model.save(run_dir / "final_model.zip")
    vec_env.close()

    steps = model.num_timesteps - start_steps
    eval_s = evaluator.eval_seconds if evaluator is not None else 0.0
    config["results"] = {
        "timesteps": steps,
        "total_timesteps": model.num_timesteps,
        "wall_seconds": round(wall, 2),
        "eval_seconds": round(eval_s, 2),
        "steps_per_second": round(steps / max(wall - eval_s, 1e-9), 1),
        "train_episodes": sched.episodes,
        "best_val_censored_jct_mean": evaluator.best_score if evaluator is not None else None,
        "evaluations": [list(h) for h in evaluator.history] if evaluator is not None else [],
    }
    write_config(run_dir / "config.yml", config)
    if args.verbose >= 1:
        r = config["results"]
        print(
            f"run folder: {run_dir}  ({steps} steps in {wall:.1f} s, "
            f"{r['steps_per_second']} steps/s excluding {eval_s:.1f} s of evaluation)"
        )
    return run_dir


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 for bad flags or files)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command = None if argv is None else "train_policy.py " + " ".join(argv)
    try:
        train(args)
    except (ConfigError, FileNotFoundError) as exc:
        parser.error(str(exc))
    return 0


def run(argv: Sequence[str]) -> Path:
    """Parse ``argv`` and train; returns the run folder (for scripts and tests)."""
    args = build_parser().parse_args(list(argv))
    args.command = "train_policy.py " + " ".join(argv)
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
