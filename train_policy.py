"""Train PPO / MaskablePPO on DeepBoot-v1 by default (flags in the style of RL Baselines3 Zoo).

``deepboot train`` is this script with the same flags (it ships in the wheel).

Examples::

    python train_policy.py --algo maskable_ppo --n-timesteps 200000 --seed 0
    python train_policy.py --algo ppo --preset smoke --workload tiny --eval-workload tiny  # seconds
    python train_policy.py --algo ppo --env DeepBoot-v1 --workload family:mixed \
        --eval-workload family:mixed  # train on a workload family, select on its val seeds
    python train_policy.py --algo maskable_ppo --policy-arch set --env DeepBoot-v1 \
        --workload family:mixed --eval-workload family:mixed   # the set-based policy
    python train_policy.py --algo maskable_ppo --vec-env ray --n-envs 16 --address auto  # envs on a Ray cluster
    python train_policy.py --algo maskable_ppo --tune sweep.yml --address auto  # a Ray Tune sweep
    python train_policy.py --algo maskable_ppo -i runs/maskable_ppo_1/final_model.zip  # a new run from a model
    python train_policy.py --resume runs/maskable_ppo_1  # continue a stopped run as it started
    python train_policy.py --algo es --preset priority-es --workload family:mixed  # the learned priority
    python train_policy.py --algo es --preset width-es -i models/lineage/deepboot-score-v3.zip \
        --workload family:mixed  # a score model's width table
    tensorboard --logdir runs/

Each run writes ``<log-folder>/<algo>_<n>/``: ``config.yml`` (arguments, resolved
hyperparameters and env arguments, versions), ``final_model.zip``, ``best_model.zip`` (best mean
validation JCT ratio to ``ats``, run once on the same episodes; ``--eval-reference none``: best mean
validation JCT), ``evaluations.csv`` (one row per validation episode, with the ratio), ``progress.csv`` and
TensorBoard events (``tb/`` there, or ``<tensorboard-log>/<algo>_<n>/``) with ``reward/step_*``
and ``sched/step_*`` from the first rollout, ``sched/*``, ``reward/*``, ``rollout/*`` per finished
episode, ``eval/*``, ``train/*``, the settings as hparams and text, and ``pretrain/*`` in the run
``tb/pretrain``; ``checkpoints/`` every
``--save-freq`` steps (25,000 by default). SIGINT (Ctrl-C) or SIGTERM stops the run at the next
step (an evaluation or the warm start in progress sooner): the model, its config and the
evaluations so far are saved as at a normal end, one line gives the command that resumes it, and
the exit status is 130 or 143 (``docs/usage.md`` §2, stops and locks). ``--algo es`` trains the learned priority
of :mod:`agents.models.priority` by evolution strategies instead (:func:`agents.trainers.evolution.train_es`:
``es_<n>/`` with ``best_model.json``, loaded as ``priority:<path>``); ``--algo es -i MODEL.zip``
trains a score model's width table (:mod:`agents.models.width_table`; ``best_model.zip``). Evaluate the result like
any baseline::

    deepboot compare --policies ats ppo:runs/maskable_ppo_1/best_model.zip --workloads test

This script holds the command line; the settings are resolved in :mod:`agents.runs.run_config` and the
run itself is :func:`agents.trainers.training_run.train`.
"""

from __future__ import annotations

if __name__ == "__main__":  # first, before the imports below: a stop while they run is clean too
    from deepboot_harness.launch import launch

    raise SystemExit(launch("train_policy.py", "train_policy:main"))

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from agents.errors import ConfigError
from agents.hyperparameters import ALGOS, POLICY_ARCHS
from agents.models.algorithms import DEVICES
from agents.runs.interrupt import TrainingInterrupted
from agents.runs.run_config import (
    ENV_IDS,
    FAMILY_SEEDS,
    PRETRAIN_KEYS,
    RUN_KEYS,
    TEACHER_KEYS,
    TrainSettings,
    preset_algo,
    preset_descriptions,
)
from agents.saved.checkpoint import CheckpointError
from agents.saved.policy_adapter import resolve_model_path, run_config
from agents.trainers.ppo import VEC_ENVS
from deepboot_env import FRONT_END_DYNAMICS, REFERENCE_POLICY
from deepboot_env.argparsing import ArgumentParser, whole
from deepboot_env.extras import MissingExtraError, require_extra
from deepboot_env.limits import NotRegularFile, open_regular
from deepboot_env.stops import Stopped, StopSignals
from deepboot_harness.curves import write_run_curve

# The modules that train import torch and stable-baselines3 (the `rl` extra): imported when a run
# starts, after the check that names the extra, so that --help and a missing extra need neither.

PROG = "train_policy.py"
"""The script's name in usage lines and messages (``deepboot train`` passes its own)."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command-line parser: one flag per field of :class:`~agents.runs.run_config.TrainSettings`,
    whose defaults it takes (None where a preset may set the value); the defaults its help names
    come from the same place (:func:`_default`)."""
    presets = preset_descriptions()
    width = max(map(len, presets), default=0)
    p = ArgumentParser(
        prog=prog,
        description=f"Train PPO / MaskablePPO (or the learned priority) on DeepBoot-{FRONT_END_DYNAMICS} by default "
        "(RL-Zoo-style flags).",
        epilog="presets of agents/conf/deepboot.yml (--preset NAME):\n"
        + "".join(f"  {name:<{width}}  {text}\n" for name, text in presets.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = (_algorithm_flags, _env_flags, _evaluation_flags, _output_flags, _config_flags, _resume_flags)
    for add in (*groups, _warm_start_flags, _run_flags):  # in this order: --help's and config.yml's args
        add(p)
    p.set_defaults(**asdict(TrainSettings()))
    return p


def _default(name: str) -> str:
    """The built-in default of the setting ``name`` as ``--help`` writes it: the field's of
    :class:`~agents.runs.run_config.TrainSettings`, or, where that is None (the preset decides), the one
    a preset may override (:data:`~agents.runs.run_config.RUN_KEYS`, :data:`~agents.runs.run_config.PRETRAIN_KEYS`,
    :data:`~agents.runs.run_config.TEACHER_KEYS`,
    :data:`~deepboot_env.REFERENCE_POLICY`). A default is written in one place; the
    parser's defaults and its help follow it."""
    value = getattr(TrainSettings(), name)
    if value is None:
        value = {**RUN_KEYS, **PRETRAIN_KEYS, **TEACHER_KEYS, "eval_reference": REFERENCE_POLICY}[name]
    items = value if isinstance(value, list) else [value]
    return " ".join(f"{item:g}" if isinstance(item, float) else str(item) for item in items)


def _algorithm_flags(p: argparse.ArgumentParser) -> None:
    """What trains: the algorithm, for how long, the policy architecture, the seed."""
    p.add_argument(
        "--algo",
        help=f"{' | '.join(ALGOS)} | es (default: es for an ES preset, else ppo or the -i model's); es: "
        "evolution strategies for the learned priority and the held table (agents.trainers.evolution)",
    )
    p.add_argument(
        "-n",
        "--n-timesteps",
        type=int,
        help=f"timesteps to train (preset: {_default('n_timesteps')}); --algo es: generations",
    )
    p.add_argument(
        "--policy-arch",
        choices=tuple(POLICY_ARCHS),
        help="mlp: SB3's MLP over the flattened job slots; set: one shared per-job encoder, a pooled-context "
        "block (or attention), pooling (agents.models.set_policy). Default: the preset's policy (mlp)",
    )
    p.add_argument(
        "--seed",
        type=whole(0, 2**32 - 1),
        help=f"seed of torch, numpy and env i (seed + i); default {_default('seed')}",
    )


def _env_flags(p: argparse.ArgumentParser) -> None:
    """Where it trains: the parallel envs, their kind and cluster, the device, torch's threads."""
    p.add_argument("--n-envs", type=int, help=f"parallel envs (preset: {_default('n_envs')})")
    p.add_argument(
        "--group-size",
        type=int,
        help="envs per same-scenario group: with a workload family, the envs of a group play the same scenarios "
        f"in the same order (common random numbers); must divide --n-envs (preset: {_default('group_size')})",
    )
    p.add_argument(
        "--vec-env",
        choices=VEC_ENVS,
        help=f"VecEnv class (default {_default('vec_env')}); ray: one Ray actor per env, spread over the cluster "
        "(the ray extra)",
    )
    p.add_argument(
        "--address",
        metavar="ADDR",
        help="--vec-env ray, --tune: the Ray cluster to join (auto, HOST:PORT; default: a private local instance "
        "on 127.0.0.1)",
    )
    p.add_argument(
        "--device",
        help=f"{' | '.join(DEVICES)} (default {_default('device')}: cuda where available, else cpu); "
        "cuda -> cpu if absent",
    )
    p.add_argument(
        "--num-threads",
        type=whole(0, 1024),
        help=f"torch threads (default {_default('num_threads')}; 0: torch's default)",
    )


def _evaluation_flags(p: argparse.ArgumentParser) -> None:
    """On what it trains and validates, and how the model is selected."""
    p.add_argument(
        "--workload",
        nargs="+",
        help=f"split, name or CSV (default {_default('workload')}), or one workload family family:<name> "
        "(a new train-seed scenario per episode)",
    )
    p.add_argument(
        "--eval-workload",
        nargs="+",
        help=f"validation workloads (default {_default('eval_workload')}); family:<name> stands for the family's "
        f"first {FAMILY_SEEDS} val seeds",
    )
    p.add_argument("--eval-freq", type=whole(0), help="evaluate every N timesteps; 0: never (preset)")
    p.add_argument("--eval-episodes", type=int, help="episodes per evaluation (0: one per workload)")
    p.add_argument(
        "--eval-jobs",
        type=int,
        help="worker processes for the validation episodes and the warm start's demonstrations (0, the default: "
        "one per CPU; 1: in the training process)",
    )
    p.add_argument(
        "--eval-reference",
        metavar="POLICY",
        help="select the model by its mean JCT ratio to this policy on the val workloads (preset; default "
        f"{_default('eval_reference')}; none: by mean censored JCT)",
    )


def _output_flags(p: argparse.ArgumentParser) -> None:
    """What the run writes where: checkpoints, the run folder, TensorBoard."""
    p.add_argument(
        "--save-freq", type=whole(0), help=f"checkpoint every N timesteps (default {_default('save_freq')}); 0: never"
    )
    p.add_argument("-f", "--log-folder", help=f"runs go to <log-folder>/<algo>_<n>/ (default {_default('log_folder')})")
    p.add_argument("-tb", "--tensorboard-log", help="TensorBoard root (default: <run>/tb)")


def _config_flags(p: argparse.ArgumentParser) -> None:
    """The hyperparameters, the env and the configuration preset."""
    p.add_argument("-params", "--hyperparams", nargs="+", metavar="K:V", help="overrides, e.g. n_steps:128")
    p.add_argument(
        "--env",
        metavar="ID",
        help=f"environment id: {' | '.join(ENV_IDS)} (sets the dynamics; default: the preset's, else the -i "
        f"model's, else DeepBoot-{FRONT_END_DYNAMICS})",
    )
    p.add_argument("--env-kwargs", nargs="+", metavar="K:V", help="DeepBootEnv args, e.g. max_jobs:16")
    p.add_argument("-conf", "--conf-file", help="YAML of presets (default: the shipped ones)")
    p.add_argument("--preset", help=f"preset of the configuration file (default: {_default('preset')})")


def _resume_flags(p: argparse.ArgumentParser) -> None:
    """Starting from a saved model, and continuing a run."""
    p.add_argument(
        "-i",
        "--trained-agent",
        dest="init_model",
        metavar="MODEL",
        help="a new run from a saved model (zip, run folder or shipped name), with its algorithm and "
        "hyperparameters unless a preset or -params say otherwise; with --algo es: a score model's table",
    )
    p.add_argument(
        "--resume",
        dest="resume_run",
        metavar="RUN_FOLDER",
        help="continue a run folder exactly as it started (its config.yml: algorithm, preset, hyperparameters, "
        "schedule, env arguments, workloads); -n trains that much more; a changed setting is refused",
    )
    p.add_argument(
        "--trust-checkpoint",
        action="store_true",
        help="--trained-agent: also unpickle the checkpoint's pickled fields (runs any code in the file; "
        "by default they are rebuilt from checked data)",
    )


def _warm_start_flags(p: argparse.ArgumentParser) -> None:
    """Cloning an expert before PPO, and the residual policy's start."""
    p.add_argument(
        "--pretrain-expert",
        metavar="POLICY",
        help="clone this registered policy (e.g. ats) on the training workloads before PPO (preset; none: skip)",
    )
    p.add_argument(
        "--pretrain-epochs", type=int, help=f"behaviour-cloning epochs (preset: {_default('pretrain_epochs')})"
    )
    p.add_argument(
        "--pretrain-noise",
        type=float,
        nargs="+",
        metavar="P",
        help=f"one demonstration pass per noise level (DART-style action noise; preset: {_default('pretrain_noise')})",
    )
    p.add_argument(
        "--residual-neutral-prob",
        type=float,
        metavar="P",
        help="residual env: after the warm start, each slot keeps the base policy's count with "
        f"probability P (default {_default('residual_neutral_prob')}; the residual and generalist presets set 0.95)",
    )
    p.add_argument(
        "--teacher-seeds",
        type=whole(0, 10_000),
        metavar="N",
        help="score mode: the hindsight teacher labels the first N train seeds of every training family and the "
        f"new model regresses its labels before PPO (agents.trainers.learner; 0: no teacher; preset: "
        f"{_default('teacher_seeds')})",
    )
    p.add_argument(
        "--teacher-labels",
        metavar="DIR",
        help="start from the labels `deepboot teach` wrote in DIR instead of running the teacher (its env must be "
        "the run's)",
    )


def _run_flags(p: argparse.ArgumentParser) -> None:
    """A sweep instead of one run, and what the run shows and checks."""
    p.add_argument(
        "--tune",
        metavar="SPEC",
        help="sweep seeds and hyperparameters on Ray Tune (ASHA on the validation score) from this YAML search "
        "space; the other flags are every trial's (agents.trainers.sweep; the ray extra)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--distribution-checks",
        action="store_true",
        help="keep torch.distributions argument validation (off by default: ~40%% faster MaskablePPO)",
    )
    p.add_argument(
        "--verbose",
        type=whole(0, 2),
        help=f"0: quiet; {_default('verbose')} (default): log tables and evaluation lines",
    )


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Command-line entry point; returns the exit status (2 for bad flags or files, and for a
    file that cannot be written; 130 / 143 / 129 for a run stopped by SIGINT / SIGTERM / SIGHUP).
    ``prog`` names the command in messages and in the run's recorded command (``deepboot train``)."""
    with StopSignals():  # a signal before the run folder exists stops at once
        try:
            return _main(argv, prog)
        except Stopped as stop:  # in the flags' checks, the trainers' imports or before a model was saved
            print(f"{prog}: {stop}: stopped before a run folder held a model; nothing to resume", file=sys.stderr)
            return stop.exit_status


def _main(argv: Sequence[str] | None, prog: str) -> int:
    """:func:`main` inside its stop handler."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.command = recorded_command(argv, prog)
    try:
        require_extra("rl", prog)
        check_input_files(args)
    except (MissingExtraError, ConfigError, FileNotFoundError) as exc:
        parser.error(str(exc))
    from agents.trainers.evolution import EsConfigError  # lazy: the trainers load after the extra's check (above)

    try:
        dispatch(args)
    except (ConfigError, CheckpointError, EsConfigError, FileNotFoundError) as exc:
        parser.error(str(exc))
    except TrainingInterrupted as stop:
        print(f"{prog}: {stop}", file=sys.stderr)
        return stop.exit_status
    except OSError as exc:  # a run folder in use, a full disk: the previous files are intact
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0


INPUT_FLAGS: dict[str, str] = {"conf_file": "--conf-file", "tune": "--tune", "init_model": "-i"}
"""The flags that name a file to read (a run folder too, for ``-i``; ``--resume`` names a folder)."""


def check_input_files(args: argparse.Namespace) -> None:
    """Refuse, before the trainers import (seconds), a flag's file that is a FIFO, a device, a
    socket or a folder (:func:`~deepboot_env.limits.open_regular`; ``-i`` takes a run folder and
    reads the model in it, :func:`~agents.saved.policy_adapter.resolve_model_path`, or for an ES
    run (``--algo es``, or an ES preset) an ES run folder, whose files its reader checks). A
    missing file is left to the reader's own message.

    Raises:
        ConfigError: naming the flag, the path and what it is.
        FileNotFoundError: ``-i`` names a folder without a model.
    """
    for key, flag in INPUT_FLAGS.items():
        path = getattr(args, key, None)
        if key == "init_model" and path and preset_algo(args.conf_file, args.preset, args.algo) != "es":
            path = resolve_model_path(path)  # a run folder's model, a shipped name's file
        if not path or not Path(path).exists() or (key == "init_model" and Path(path).is_dir()):
            continue  # an ES run folder: its own reader checks its files
        try:
            open_regular(path).close()
        except NotRegularFile as exc:
            raise ConfigError(f"{flag} {path}: {exc.strerror}") from None


def recorded_command(argv: Sequence[str] | None, prog: str = PROG) -> str:
    """The command line a run records and its resume command repeats (shell syntax): ``prog``
    and ``argv``, or this process's interpreter, script and arguments."""
    if argv is None:
        return shlex.join([sys.executable, *sys.argv])
    return shlex.join([*(["python", prog] if prog == PROG else prog.split()), *argv])


def run(argv: Sequence[str]) -> Path:
    """Parse ``argv`` and train (or sweep, with ``--tune``); returns the run (or sweep) folder
    (for scripts and tests)."""
    args = build_parser().parse_args(list(argv))
    args.command = recorded_command(list(argv))
    return dispatch(args)


def dispatch(args: argparse.Namespace) -> Path:
    """Run what ``args`` ask for (as :class:`~agents.runs.run_config.TrainSettings`): an ES run
    (``--algo es``), a sweep (``--tune``) or a PPO run.

    Raises:
        ConfigError: a ``--log-folder`` that is a file (checked before any work).
    """
    settings = TrainSettings.from_args(args)
    folder = Path(settings.log_folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"-f/--log-folder {folder}: is a file, not a folder")
    if settings.tune:
        from agents.trainers.sweep import sweep  # lazy: the trainers load after the extra's check (above)

        return sweep(settings)
    from agents.runs.resume import run_algo  # lazy: the trainers load after the extra's check (above)
    from agents.trainers.evolution import train_es  # lazy: the trainers load after the extra's check (above)
    from agents.trainers.training_run import train  # lazy: the trainers load after the extra's check (above)

    algo = run_algo(settings)  # a continued run's own
    trainer: Callable[[TrainSettings], Path] = train_es if algo == "es" else train
    try:
        run_dir = trainer(settings)
    except TrainingInterrupted as stop:
        write_curve(stop.run_dir, algo)
        raise
    write_curve(run_dir, algo)
    return run_dir


def write_curve(run_dir: Path, algo: str | None) -> Path | None:
    """The run's ``curve.png``: its validation ratio to its evaluation reference
    (:func:`deepboot_harness.curves.write_run_curve`; ES runs validate against ``ats``)."""
    reference = "ats" if algo == "es" else run_config(run_dir / "final_model.zip").get("eval_reference")
    x_label = "training episodes" if algo == "es" else "training timesteps"
    return write_run_curve(run_dir, reference if isinstance(reference, str) else None, x_label)
