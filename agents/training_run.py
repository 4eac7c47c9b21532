"""One training run of ``train_policy.py``: build or resume the model, train it, record the run.

:func:`train` resolves the settings (:mod:`agents.run_config`), loads the workloads, builds the
vectorised env and the model (or loads ``--resume``), optionally clones an expert first
(:func:`warm_start`) and starts a residual policy at its base policy, trains with the
``sched/*`` and evaluation callbacks, and writes the run folder ``<log-folder>/<algo>_<n>/``
(:func:`next_run_dir`): ``config.yml`` (:func:`write_config`), ``final_model.zip``,
``best_model.zip``, ``evaluations.csv``, ``progress.csv``, TensorBoard events and checkpoints.
"""

from __future__ import annotations

import argparse
import re
import shlex
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from agents.errors import ConfigError
from agents.factory import build_model, make_vec_env_for, resolve_device
from agents.hyperparameters import check_algo, model_kwargs
from agents.interrupt import StopOnSignal, TrainingInterrupted, command_words, resume_command
from agents.run_config import DEFAULT_CONF, PRETRAIN_KEYS, RUN_KEYS, env_config, resolve_settings
from deepboot_env.atomic import lock_folder, write_text
from deepboot_env.sim.scenario import Scenario
from deepboot_env.stops import Stopped, StopSignals, stop_requested
from deepboot_env.workers import available_cpus


def warm_start(
    model: Any,
    settings: Mapping[str, Any],
    workloads: Sequence[Any],
    seed: int,
    tb_dir: Path | None = None,
    jobs: int = 1,
    progress: bool = False,
    verbose: int = 0,
) -> dict[str, Any]:
    """Clone ``settings["pretrain_expert"]`` into ``model`` (see :mod:`agents.imitation`): the
    demonstrations run in ``jobs`` worker processes with a progress bar (``progress``), each
    epoch prints a line (``verbose`` >= 1) and writes ``pretrain/*`` scalars to the TensorBoard
    run ``<tb_dir>/pretrain`` with the epoch (from 1) as step, apart from the training's
    timestep axis. A SIGINT or SIGTERM stops the demonstrations at once (nothing is cloned) or the
    cloning after the batch in progress (:func:`deepboot_env.stops.stop_requested`); the record
    then says so (``interrupted``). Returns what to record in ``config.yml``."""
    from agents.imitation import collect_demonstrations, pretrain

    t0 = time.perf_counter()
    expert, epochs = settings["pretrain_expert"], settings["pretrain_epochs"]
    if verbose >= 1:
        levels = len(settings["pretrain_noise"])
        print(f"warm start: {expert} demonstrations on {len(workloads)} workloads x {levels} noise levels")
    info: dict[str, Any] = {"expert": expert, "epochs": epochs, "noise": settings["pretrain_noise"]}
    try:
        demos = collect_demonstrations(
            expert,
            workloads,
            env_kwargs=settings["env_kwargs"],
            gamma=float(model.gamma),
            noise=settings["pretrain_noise"],
            seed=seed,
            jobs=jobs,
            progress=progress,
        )
    except Stopped:  # the pool is stopped; nothing is cloned
        info.update(interrupted="stopped before the demonstrations were done, nothing cloned")
        return {**info, "epochs_done": 0, "seconds": round(time.perf_counter() - t0, 1)}
    writer = None
    if tb_dir is not None:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(tb_dir / "pretrain"))

    def on_epoch(epoch: int, losses: Mapping[str, float]) -> None:
        if writer is not None:
            for key, value in losses.items():
                writer.add_scalar(f"pretrain/{key}", value, epoch)
        if verbose >= 1:
            values = ", ".join(f"{k} {v:.4f}" for k, v in losses.items())
            print(f"warm start: epoch {epoch}/{epochs}: {values} ({time.perf_counter() - t0:.0f} s)")

    try:
        history = pretrain(model, demos, epochs=epochs, seed=seed, on_epoch=on_epoch, should_stop=stop_requested)
    finally:
        if writer is not None:
            writer.close()
    if len(history) < epochs and stop_requested():
        info["interrupted"] = f"stopped after {len(history)} of {epochs} cloning epochs"
    return {
        **info,
        "transitions": len(demos),
        "expert_jct_mean": round(float(sum(demos.episode_jct) / len(demos.episode_jct)), 1),
        "epochs_done": len(history),
        "final_losses": {k: round(v, 5) for k, v in history[-1].items()} if history else {},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def hparams_of(config: Mapping[str, Any]) -> dict[str, bool | str | float | int]:
    """The run's settings as flat TensorBoard ``hparams``: run settings, ``hyperparams.*`` and
    ``env_kwargs.*`` (lists and mappings as text, None as ``none``)."""
    keys = ("algo", "seed", "preset", "device", *RUN_KEYS, "eval_reference", *PRETRAIN_KEYS)
    flat: dict[str, Any] = {k: config.get(k) for k in keys}
    flat["workload"] = " ".join(config.get("workload", []))
    flat["eval_workload"] = " ".join(config.get("eval_workload", []))
    for group in ("hyperparams", "env_kwargs"):
        flat.update({f"{group}.{k}": v for k, v in (config.get(group) or {}).items()})

    def scalar(value: Any) -> bool | str | float | int:
        if value is None:
            return "none"
        if isinstance(value, bool | int | float | str):
            return value
        return str(_plain(value))

    return {k: scalar(v) for k, v in flat.items()}


def log_run_config(logger: Any, config: Mapping[str, Any]) -> None:
    """Write the run's configuration to the logger's TensorBoard run: as ``hparams`` (the
    HPARAMS tab, :func:`hparams_of`, against ``eval/best_score`` and ``reward/step_jct``) and as
    the text ``config`` (``config.yml`` as written so far), both at step 0."""
    from stable_baselines3.common.logger import TensorBoardOutputFormat
    from torch.utils.tensorboard.summary import hparams

    for fmt in logger.output_formats:
        if isinstance(fmt, TensorBoardOutputFormat):
            text = yaml.safe_dump(_plain(dict(config)), sort_keys=False)
            fmt.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)  # indented: preformatted
            metrics = {"eval/best_score": 0.0, "reward/step_jct": 0.0}
            writer = fmt.writer.file_writer
            assert writer is not None
            for summary in hparams(hparams_of(config), metric_dict=metrics):
                writer.add_summary(summary)
            fmt.writer.flush()


def next_run_dir(log_folder: str | Path, algo: str) -> Path:
    """``<log_folder>/<algo>_<n>`` with n one more than the largest existing (from 1)."""
    root = Path(log_folder)
    pattern = re.compile(rf"^{re.escape(algo)}_(\d+)$")
    taken = [int(m.group(1)) for d in root.glob(f"{algo}_*") if (m := pattern.match(d.name)) and d.is_dir()]
    run = root / f"{algo}_{max(taken, default=0) + 1}"
    run.mkdir(parents=True, exist_ok=False)
    return run


FAMILY_SEEDS = 8
"""Scenarios of a workload family that stand for it where a fixed list is needed: the first 8 val
seeds in evaluations (``--eval-workload family:<name>``), the first 8 train seeds for cloning."""


def load_workloads(values: Sequence[str], family_split: str = "train") -> list[tuple[str, Scenario]]:
    """``(label, Scenario)`` for every workload named: splits ``train``/``val``/``test`` expanded,
    a family ``family:<name>[:<split>[:<n>]]`` as its first ``n`` (default :data:`FAMILY_SEEDS`)
    seeds of the split (``family_split`` when it names none). Validation that can see a 0.5 %
    difference needs 32 or more (``family:mixed:val:32``).

    Raises:
        ConfigError: for a seed count that is not a whole number >= 1.
    """
    from deepboot_env.workloads import FAMILY_PREFIX, scenario_sampler
    from traces.loaders import expand_workload_sources, load_workload

    out: list[tuple[str, Scenario]] = []
    files = [v for v in values if not v.startswith(FAMILY_PREFIX)]
    for source in expand_workload_sources(files) if files else []:
        out.append((str(source), Scenario(load_workload(source))))
    for value in values:
        if value.startswith(FAMILY_PREFIX):
            parts = value.split(":")
            count = FAMILY_SEEDS
            if len(parts) == 4:
                if not (parts[3].isdigit() and int(parts[3]) >= 1):
                    raise ConfigError(f"{value}: the seed count must be a whole number >= 1, got {parts[3]!r}")
                count = int(parts.pop())
            sampler = scenario_sampler(":".join(parts) if len(parts) == 3 else f"{value}:{family_split}")
            assert sampler is not None
            out.extend((f"{s.family}-{s.seed}", s) for s in map(sampler.sample, sampler.seeds[:count]))
    return out


def training_source(values: Sequence[str]) -> Any:
    """What the training envs draw from: the family a single ``family:`` value names (a new
    scenario per reset), else the workloads named.

    Raises:
        ConfigError: for a family mixed with other workloads.
    """
    from deepboot_env.workloads import FAMILY_PREFIX

    families = [v for v in values if v.startswith(FAMILY_PREFIX)]
    if families and len(values) > 1:
        raise ConfigError(f"--workload: give one workload family or a list of workloads, not {' '.join(values)}")
    return families[0] if families else [s for _, s in load_workloads(values)]


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
    """Write ``config.yml`` (atomically: :func:`deepboot_env.atomic.write_text`)."""
    write_text(path, yaml.safe_dump(_plain(dict(config)), sort_keys=False))


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
def train(args: argparse.Namespace, on_evaluation: Callable[[int, float], None] | None = None) -> Path:
    """Train as ``args`` say; returns the run folder. ``on_evaluation(timesteps, score)`` is
    called after each validation (see :class:`~agents.callbacks.WorkloadEvalCallback`).

    Raises:
        ConfigError, FileNotFoundError, ValueError: bad flags, files or env arguments.
    """
    import torch
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.logger import Logger, make_output_format

    from agents.callbacks import AtomicCheckpointCallback, SchedMetricsCallback, WorkloadEvalCallback
    from agents.checkpoint import load_checkpoint, read_data, saved_arch
    from agents.distributions import distribution_checks
    from agents.env_shape import env_shape_of
    from agents.policy_adapter import detect_algo, resolve_model_path

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
    saved_shape: dict[str, Any] = {}
    if resume is not None:
        saved_shape = env_shape_of(load_checkpoint(resume, algo, device="cpu", trust=args.trust_checkpoint))
        for key, value in saved_shape.items():
            if key in env_kwargs and type(value)(env_kwargs[key]) != value:
                raise ConfigError(f"--resume model was trained with {key}={value}, not {env_kwargs[key]}")
            env_kwargs[key] = value
        for key in ("policy", "policy_kwargs"):
            if key in settings["cli_hyperparams"]:
                raise ConfigError(f"--hyperparams {key} cannot change when resuming")
        arch = saved_arch(read_data(Path(resume)))
        if getattr(args, "policy_arch", None) not in (None, arch):
            raise ConfigError(f"--resume model has the {arch} policy architecture, not {args.policy_arch}")

    try:
        train_source = training_source(args.workload)
        eval_workloads = load_workloads(args.eval_workload, "val") if settings["eval_freq"] > 0 else []
        address = getattr(args, "address", None)
        if address is not None and args.vec_env != "ray":
            raise ConfigError("--address is for --vec-env ray and --tune")
        vec_env = make_vec_env_for(
            train_source,
            settings["n_envs"],
            args.seed,
            env_kwargs,
            vec_env=args.vec_env,
            address=address,
            group_size=settings["group_size"],
            antithetic=bool(settings["hyperparams"].get("group_advantage")),
        )
    except (ValueError, TypeError) as exc:  # bad workload files or env argument values
        raise ConfigError(str(exc).splitlines()[0]) from None
    run_dir = next_run_dir(args.log_folder, algo)
    # one writer per run folder; from here on a signal stops the run with its model saved
    with lock_folder(run_dir, "--log-folder"), StopSignals(interruptible=False) as stops:
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
            "eval_reference": settings["eval_reference"],
            "env_kwargs": env_kwargs,
            "hyperparams": settings["cli_hyperparams"] if resume else settings["hyperparams"],
            "resumed_from": str(resume) if resume else None,
            **{k: settings[k] for k in PRETRAIN_KEYS},
            "conf_file": str(args.conf_file or (DEFAULT_CONF if DEFAULT_CONF.is_file() else "")),
            "preset": args.preset,
            "args": vars(args),
            "command": shlex.join(command_words(args.command)),
            "versions": _versions(),
        }
        write_config(run_dir / "config.yml", config)

        if resume is None:
            model = build_model(
                algo,
                vec_env,
                device=device,
                seed=args.seed,
                hyperparams=settings["hyperparams"],
                env_kwargs=env_kwargs,
                group_size=settings["group_size"],
            )
        else:
            overrides = model_kwargs(settings["cli_hyperparams"])
            model = load_checkpoint(resume, algo, device=device, env=vec_env, trust=args.trust_checkpoint, **overrides)
            model.set_random_seed(args.seed)
        formats = [make_output_format("csv", str(run_dir)), make_output_format("tensorboard", str(tb_dir))]
        if args.verbose >= 1:
            formats.append(make_output_format("stdout", str(run_dir)))
        model.set_logger(Logger(str(run_dir), formats))
        log_run_config(model.logger, config)
        pretrained = resume is None and settings["pretrain_expert"] is not None
        if pretrained and env_config(env_kwargs).make_codec().continuous:
            raise ConfigError(
                "--pretrain-expert clones discrete actions; action_mode 'score' starts at its prior already"
            )
        if pretrained:
            demo_scenarios = (
                train_source if isinstance(train_source, list) else [s for _, s in load_workloads(args.workload)]
            )
            config["pretrain"] = warm_start(
                model,
                settings,
                demo_scenarios,
                args.seed,
                tb_dir=tb_dir,
                jobs=settings["eval_jobs"] or available_cpus(),
                progress=not args.no_progress,
                verbose=args.verbose,
            )
        cfg = env_config(env_kwargs)
        codec = cfg.make_codec()
        neutral = codec.neutral_action()
        residual_start = resume is None and neutral is not None
        # start at the base policy (after cloning, whose critic it keeps); a score policy starts at
        # its prior by construction (zero means: agents.set_policy)
        if residual_start and neutral is not None and not codec.continuous:
            from agents.imitation import init_residual_policy

            init_residual_policy(model, neutral, float(settings["residual_neutral_prob"]))
            config["residual_neutral_prob"] = settings["residual_neutral_prob"]
        if pretrained or residual_start:
            write_config(run_dir / "config.yml", config)

        sched = SchedMetricsCallback(config=cfg, reference=settings["eval_reference"] or "ats")
        callbacks: list[Any] = [sched]
        evaluator = None
        if settings["eval_freq"] > 0:
            evaluator = WorkloadEvalCallback(
                eval_workloads,
                cfg,
                eval_freq=settings["eval_freq"],
                n_episodes=settings["eval_episodes"],
                log_dir=run_dir,
                eval_at_start=pretrained or residual_start,
                reference=settings["eval_reference"],
                jobs=settings["eval_jobs"],
                progress=not args.no_progress,
                verbose=args.verbose,
                on_evaluation=on_evaluation,
            )
            callbacks.append(evaluator)
        if settings["save_freq"] > 0:
            callbacks.append(
                AtomicCheckpointCallback(
                    save_freq=max(settings["save_freq"] // settings["n_envs"], 1),
                    save_path=str(run_dir / "checkpoints"),
                    name_prefix=algo,
                )
            )

        def skip_final_evaluation() -> None:
            if evaluator is not None:
                evaluator.eval_at_end = False

        stopper = StopOnSignal(stops, on_stop=skip_final_evaluation)
        callbacks.insert(0, stopper)
        start_steps = model.num_timesteps
        with distribution_checks(args.distribution_checks):
            t0 = time.perf_counter()
            if stops.signum is None:  # not stopped before learning (during the warm start)
                steps, progress = settings["n_timesteps"], not args.no_progress
                _learn(model, steps, CallbackList(callbacks), resume is None, progress, skip_final_evaluation)
            final = _finish_run(model, vec_env, run_dir, config, sched, evaluator, start_steps, t0, stops.signum)
        if stops.signum is not None:
            left = settings["n_timesteps"] - (model.num_timesteps - start_steps)
            command = resume_command(command_words(args.command), final, left)
            raise TrainingInterrupted(stops.signum, run_dir, final, command, _warm_start_note(config.get("pretrain")))
        return run_dir


def _learn(model: Any, steps: int, callback: Any, reset: bool, progress: bool, on_stop: Callable[[], None]) -> None:
    """``model.learn``; a signal during an evaluation (its pool stops at once:
    :class:`~deepboot_env.stops.Stopped`) ends it too: ``on_stop()`` (no final evaluation), then
    the callbacks' training end (their background workers stopped)."""
    try:
        model.learn(total_timesteps=steps, callback=callback, reset_num_timesteps=reset, progress_bar=progress)
    except Stopped:
        on_stop()
        callback.on_training_end()


def _warm_start_note(pretrain: Mapping[str, Any] | None) -> str:
    """What a stop during the warm start left out, in words ("" if it finished or did not run)."""
    if not pretrain or not pretrain.get("interrupted"):
        return ""
    return f"during the warm start: {pretrain['interrupted']}; PPO starts from the model as saved"


def _finish_run(
    model: Any,
    vec_env: Any,
    run_dir: Path,
    config: dict[str, Any],
    sched: Any,
    evaluator: Any,
    start_steps: int,
    t0: float,
    signum: int | None,
) -> Path:
    """Save the final model and the run's results in ``config.yml`` (``interrupted``: the signal
    that stopped the run, or None); returns the model's path."""
    wall = time.perf_counter() - t0
    if model.logger.name_to_value:  # flush the last update's train/* values (nothing to flush: no warning)
        model.logger.dump(model.num_timesteps)
    from agents.callbacks import save_model

    final = save_model(model, run_dir / "final_model.zip")
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
        "best_val_score": evaluator.best_score if evaluator is not None else None,
        "selected_by": evaluator.selected_by if evaluator is not None else None,
        "eval_share": round(eval_s / wall, 3) if wall > 0 else None,
        "evaluations": [list(h) for h in evaluator.history] if evaluator is not None else [],
        "interrupted": None if signum is None else signal.Signals(signum).name,
    }
    write_config(run_dir / "config.yml", config)
    if config["args"].get("verbose", 1) >= 1:
        r = config["results"]
        print(
            f"run folder: {run_dir}  ({steps} steps in {wall:.1f} s, "
            f"{r['steps_per_second']} steps/s excluding {eval_s:.1f} s of evaluation, {r['eval_share'] or 0:.0%})"
        )
    return final
