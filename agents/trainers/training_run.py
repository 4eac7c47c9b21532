"""One training run of ``train_policy.py``: build or resume the model, train it, record the run.

:func:`train` takes the run's :class:`~agents.runs.run_config.TrainSettings` through a sequence of
steps, each a function of this module:

1. :func:`plan_run`: the algorithm, the device and the settings resolved from built-in defaults,
   preset and flags (:func:`~agents.runs.run_config.resolve_settings`); :func:`check_resume`: for
   ``--resume``, that the saved model fits them (its env shape, fixed hyperparameters and
   architecture);
2. :func:`build_env`: the training workloads (or family), the validation workloads and the
   vectorised env;
3. in the run folder ``<log-folder>/<algo>_<n>/`` (:func:`~agents.runs.run_folder.next_run_dir`,
   locked while the run lasts; :func:`run_record`: what ``config.yml`` records of it):
   :func:`start_model`, a new model or the resumed one, logging to the run folder and to
   TensorBoard;
4. :func:`warm_start`: a new model optionally clones an expert first (:func:`clone_expert`) and
   a residual policy starts at its base policy;
5. :func:`callbacks`: the stop on a signal, the ``sched/*`` metrics, the evaluations and the
   checkpoints;
6. :func:`learn`: ``model.learn``, with torch's distribution checks off unless
   ``--distribution-checks`` (:func:`agents.models.distributions.distribution_checks`);
7. :func:`finish`: the final model and the run's results; a run stopped by SIGINT or SIGTERM
   then raises the :class:`~agents.runs.interrupt.TrainingInterrupted` of :func:`interrupted`.

``config.yml`` (:func:`~agents.runs.run_folder.write_config`, atomic) is written twice: when learning
starts, with the settings and the warm start (a run that never reaches its end, a Ray Tune trial
stopped early, a crash or a kill, still says what it was), and at the end with the results. The run folder also
holds ``final_model.zip``, ``best_model.zip``, ``evaluations.csv``, ``progress.csv``,
TensorBoard events (``tb/``) and ``checkpoints/``.
"""

from __future__ import annotations

import shlex
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sb3_contrib
import torch
from stable_baselines3 import get_system_info
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import Logger, TensorBoardOutputFormat, make_output_format
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

import deepboot_env
from agents.errors import ConfigError
from agents.hyperparameters import check_algo, model_kwargs
from agents.models.algorithms import resolve_device
from agents.models.described_policy import ENV_ARGUMENTS_KEY
from agents.models.distributions import distribution_checks
from agents.models.width_table import grow_width_outputs
from agents.runs.callbacks import (
    AtomicCheckpointCallback,
    EnvStepProgressBar,
    SchedMetricsCallback,
    StopOnSignal,
    WorkloadEvalCallback,
    save_model,
)
from agents.runs.interrupt import TrainingInterrupted, command_words, resume_command
from agents.runs.resume import ContinuedCSVOutputFormat, recorded_config, resumed_settings
from agents.runs.run_config import (
    DEFAULT_CONF,
    FAMILY_SEEDS,
    PRETRAIN_KEYS,
    RUN_KEYS,
    TEACHER_KEYS,
    TrainSettings,
    env_config,
    resolve_settings,
    starts_from_teacher,
)
from agents.runs.run_folder import config_text, next_run_dir, write_config, yaml_safe
from agents.saved.checkpoint import SavedModel
from agents.saved.policy_adapter import resolve_model_path
from agents.trainers.imitation import collect_demonstrations, init_residual_policy, pretrain
from agents.trainers.learner import hindsight_start, teacher_spec
from agents.trainers.ppo import build_model, make_vec_env_for, model_class
from deepboot_env.atomic import lock_folder
from deepboot_env.config import EnvConfig
from deepboot_env.pool import LOCAL, Backend, available_cpus
from deepboot_env.sim.scenario import Scenario
from deepboot_env.stops import Stopped, StopSignals, stop_requested
from deepboot_env.workload_sources import FAMILY_PREFIX, scenario_sampler
from traces.loaders import expand_workload_sources, load_workload


@dataclass
class RunPlan:
    """What a run resolved before anything is built (:func:`plan_run`).

    Attributes:
        settings: what the run was asked for.
        algo: ``ppo`` or ``maskable_ppo`` (``--algo``, else the ``-i`` model's, else ``ppo``).
        device: the torch device (:func:`~agents.models.algorithms.resolve_device`).
        resume: the model zip the run loads (``-i``'s, or the continued run's final model), or None.
        resolved: run settings, env arguments and hyperparameters
            (:func:`~agents.runs.run_config.resolve_settings`; :func:`check_resume` completes
            ``env_kwargs`` from the resumed model's spaces).
        grows_widths: the resumed score model grows width scores (:func:`check_resume`).
        saved: the model a run from a model starts at, read and checked once (:func:`plan_run`).
        continued: the run folder ``--resume`` continues (None: a new run).
        steps: the timesteps to train now (a continued run: to its total, or ``-n`` more).
    """

    settings: TrainSettings
    algo: str
    device: str
    resume: Path | None
    resolved: dict[str, Any]
    grows_widths: bool = False
    saved: SavedModel | None = None
    continued: Path | None = None
    steps: int = 0


@dataclass
class TrainingEnv:
    """What a run trains and validates on (:func:`build_env`).

    Attributes:
        source: the training envs' workloads: a family name (a new scenario per reset) or a list
            of :class:`~deepboot_env.sim.scenario.Scenario`.
        eval_workloads: ``(label, Scenario)`` of the validation episodes ([] without evaluations).
        vec_env: the vectorised training env.
    """

    source: Any
    eval_workloads: list[tuple[str, Scenario]]
    vec_env: Any


@dataclass
class Run:
    """A run in its folder: the steps from :func:`start_model` on share it.

    Attributes:
        plan, env: from :func:`plan_run` and :func:`build_env`.
        run_dir: the run folder; tb_dir: its TensorBoard run.
        record: what ``config.yml`` records (:func:`run_record`; the steps add to it).
        stops: the run's signal handling (a signal stops the run with its model saved).
    """

    plan: RunPlan
    env: TrainingEnv
    run_dir: Path
    tb_dir: Path
    record: dict[str, Any]
    stops: StopSignals


@dataclass
class RunCallbacks:
    """The callbacks of a run's ``model.learn`` (:func:`callbacks`), and the two whose results
    the run records."""

    sched: SchedMetricsCallback
    evaluator: WorkloadEvalCallback | None
    all: list[BaseCallback]

    def skip_final_evaluation(self) -> None:
        """No evaluation when training ends (it stopped on a signal)."""
        if self.evaluator is not None:
            self.evaluator.eval_at_end = False


# ---------------------------------------------------------------------------------- training
def train(settings: TrainSettings, on_evaluation: Callable[[int, float], None] | None = None) -> Path:
    """Train as ``settings`` say (the steps of the module docstring); returns the run folder.
    ``on_evaluation(timesteps, score)`` is called after each validation (see
    :class:`~agents.runs.callbacks.WorkloadEvalCallback`).

    Raises:
        ConfigError, FileNotFoundError, ValueError: bad flags, files or env arguments.
        TrainingInterrupted: stopped by SIGINT or SIGTERM, the model and config saved.
    """
    settings, more = resumed_settings(settings, say=print if settings.verbose else None)
    plan = plan_run(settings, more)
    check_resume(plan)
    env = build_env(plan)
    run_dir = plan.continued or next_run_dir(settings.log_folder, plan.algo)
    # one writer per run folder; from here on a signal stops the run with its model saved
    with (
        lock_folder(run_dir, "--resume" if plan.continued else "--log-folder"),
        StopSignals(interruptible=False) as stops,
    ):
        tb_dir = Path(settings.tensorboard_log) / run_dir.name if settings.tensorboard_log else run_dir / "tb"
        run = Run(plan, env, run_dir, tb_dir, run_record(plan, run_dir, tb_dir), stops)
        model = start_model(run)
        started_at_a_policy = warm_start(run, model)
        write_config(run_dir / "config.yml", run.record)  # again by finish(), with the results
        cbs = callbacks(run, env_config(plan.resolved["env_kwargs"]), started_at_a_policy, on_evaluation)
        start_steps = model.num_timesteps
        with distribution_checks(settings.distribution_checks):
            t0 = time.perf_counter()
            learn(run, model, cbs)
            final = finish(run, model, cbs, start_steps, t0)
        if stops.signum is not None:
            raise interrupted(run, final)
        return run_dir


def plan_run(settings: TrainSettings, more: int | None = None) -> RunPlan:
    """The run's algorithm (checked against the model's), torch's thread count (``--num-threads``
    > 0), the device, the resolved settings and the steps to train now: ``-n`` for a new run;
    for a continued one (``--resume``), ``more`` or what its total leaves.

    Raises:
        ConfigError: an unknown algorithm or one the model does not have, bad settings, a
            continued run with nothing left to train.
        FileNotFoundError: no model where ``-i`` points, or in the continued run folder.
    """
    continued = Path(settings.resume_run) if settings.resume_run else None
    model = continued / "final_model.zip" if continued else settings.init_model
    resume = resolve_model_path(model) if model else None
    saved = SavedModel.read(resume, trust=settings.trust_checkpoint) if resume else None  # the one read
    algo = settings.algo or (saved.algo if saved else "ppo")
    check_algo(algo)
    if saved is not None and saved.algo != algo:
        raise ConfigError(f"{'--resume' if continued else '-i'} {resume} holds a {saved.algo} model, not {algo}")
    if settings.num_threads > 0:
        torch.set_num_threads(settings.num_threads)
    device = resolve_device(settings.device)
    resolved = resolve_settings(settings, algo)
    taught = starts_from_teacher(resolved)
    if taught and continued is None and resume is not None:
        raise ConfigError("the hindsight teacher starts a new model; from a model (-i) add --teacher-seeds 0")
    if taught:
        teacher_spec(resolved)  # a training env the teacher cannot label fails before anything is built
    steps = resolved["n_timesteps"]
    if continued is not None and saved is not None:
        done = int(saved.data.get("num_timesteps", 0))
        steps = more if more is not None else steps - done
        warm_start_due = taught and not teacher_complete(recorded_config(continued))
        if steps < 1 and not warm_start_due:  # a stopped hindsight start goes on, PPO steps or none
            raise ConfigError(f"--resume {continued}: the run has trained its {done:,} steps; -n N trains N more")
    return RunPlan(settings, algo, device, resume, resolved, saved=saved, continued=continued, steps=steps)


def check_resume(plan: RunPlan) -> None:
    """For ``--resume``: the env arguments the saved model's spaces fix (``max_jobs``,
    ``lend_levels``, ``action_mode``, ``outlook``) go into ``env_kwargs``, and flags that would
    change them, its ``policy`` / ``policy_kwargs`` or its architecture are refused.

    Raises:
        ConfigError: naming the flag and the saved model's value.
    """
    if plan.resume is None:
        return
    settings, resolved, saved = plan.settings, plan.resolved, plan.saved
    assert saved is not None
    env_kwargs = resolved["env_kwargs"]
    if plan.continued is not None:  # the model's own hyperparameters and schedule, exactly
        resolved["resume_hyperparams"] = trainer_hyperparams(plan, saved)
        return
    resolved["resume_hyperparams"] = resume_hyperparams(plan, saved)
    saved_shape = saved.env_shape
    grows = saved_shape["action_mode"] == "score" and not saved_shape.get("width_classes")
    plan.grows_widths = grows and bool(env_kwargs.get("width_classes"))
    for key, value in saved_shape.items():
        if key in env_kwargs and type(value)(env_kwargs[key]) != value:
            raise ConfigError(f"-i model was trained with {key}={value}, not {env_kwargs[key]}")
        env_kwargs[key] = value
    for key in ("policy", "policy_kwargs"):
        if key in resolved["cli_hyperparams"]:
            raise ConfigError(f"--hyperparams {key} cannot change for a model (-i): it fixes its network")
    arch = saved.arch
    if settings.policy_arch not in (None, arch):
        raise ConfigError(f"--resume model has the {arch} policy architecture, not {settings.policy_arch}")


def trainer_hyperparams(plan: RunPlan, saved: SavedModel) -> dict[str, Any]:
    """What a model's trainer needs beyond the model's own hyperparameters: GroupPPO's group
    settings (:func:`~agents.saved.checkpoint.saved_trainer`; its ``group_size`` the run's envs
    take unless ``--group-size`` says otherwise), else nothing."""
    trainer = saved.trainer
    if trainer is None:
        return {}
    if plan.settings.group_size is None:
        plan.resolved["group_size"] = trainer["group_size"]
    return {"group_advantage": True, "per_job_ratio": trainer["per_job_ratio"]}


NETWORK_KEYS = ("policy", "policy_kwargs")
"""Hyperparameters a model fixes: a run from it keeps its network."""


def resume_hyperparams(plan: RunPlan, saved: SavedModel) -> dict[str, Any]:
    """The hyperparameters a run from a saved model (``-i``) trains with, over the model's own:
    the preset's when ``--preset`` or ``--conf-file`` names one (its network keys aside), else
    the trainer the model names (GroupPPO's group settings: :func:`~agents.saved.checkpoint.saved_trainer`,
    whose ``group_size`` the run's envs then take unless ``--group-size`` says otherwise); then
    ``--hyperparams`` over either. So the README's ``--preset score-app -i <model>`` trains with
    the preset's algorithm and learning rate, and a bare ``-i`` with the model's.

    Raises:
        agents.saved.checkpoint.CheckpointError: the model names a trainer the loader does not know.
    """
    settings, resolved = plan.settings, plan.resolved
    if settings.preset != "default" or settings.conf_file:
        base = {key: value for key, value in resolved["hyperparams"].items() if key not in NETWORK_KEYS}
    else:
        base = trainer_hyperparams(plan, saved)
    return {**base, **resolved["cli_hyperparams"]}


def build_env(plan: RunPlan) -> TrainingEnv:
    """The training source (:func:`training_source`), the validation workloads (none without
    evaluations) and the vectorised env (:func:`~agents.trainers.ppo.make_vec_env_for`).

    Raises:
        ConfigError: bad workloads, env arguments or ``--address`` without ``--vec-env ray``.
    """
    settings, resolved = plan.settings, plan.resolved
    try:
        source = training_source(settings.workload)
        eval_workloads = load_workloads(settings.eval_workload, "val") if resolved["eval_freq"] > 0 else []
        if settings.address is not None and settings.vec_env != "ray":
            raise ConfigError("--address is for --vec-env ray and --tune")
        vec_env = make_vec_env_for(
            source,
            resolved["n_envs"],
            settings.seed,
            resolved["env_kwargs"],
            vec_env=settings.vec_env,
            address=settings.address,
            group_size=resolved["group_size"],
            antithetic=bool(resolved["hyperparams"].get("group_advantage")),
        )
    except (ValueError, TypeError) as exc:  # bad workload files or env argument values
        raise ConfigError(str(exc).splitlines()[0]) from None
    return TrainingEnv(source, eval_workloads, vec_env)


def run_record(plan: RunPlan, run_dir: Path, tb_dir: Path) -> dict[str, Any]:
    """What ``config.yml`` records of a run before it trains: where it writes, its resolved
    settings (a run from a model: the hyperparameters it applies over the model's,
    :func:`resume_hyperparams`), its arguments and command line, the versions."""
    settings, resolved, resume = plan.settings, plan.resolved, plan.resume
    return {
        "algo": plan.algo,
        "run_dir": str(run_dir),
        "tensorboard_dir": str(tb_dir),
        "device": plan.device,
        "seed": settings.seed,
        "workload": list(settings.workload),
        "eval_workload": list(settings.eval_workload),
        **{k: resolved[k] for k in RUN_KEYS},
        "eval_reference": resolved["eval_reference"],
        "env_kwargs": resolved["env_kwargs"],
        "hyperparams": resolved["resume_hyperparams"] if resume else resolved["hyperparams"],
        "resumed_from": str(resume) if resume and plan.continued is None else None,
        **{k: resolved[k] for k in PRETRAIN_KEYS},
        **{k: resolved[k] for k in TEACHER_KEYS},
        "conf_file": str(settings.conf_file or (DEFAULT_CONF if DEFAULT_CONF.is_file() else "")),
        "preset": settings.preset,
        "args": asdict(settings),
        "command": shlex.join(command_words(settings.command)),
        "versions": _versions(),
        **continued_record(plan),
    }


def continued_record(plan: RunPlan) -> dict[str, Any]:
    """What a continued run's ``config.yml`` keeps of its earlier sessions: their commands and
    results (``sessions``) and the latest results (for the best score so far); {} for a new run."""
    if plan.continued is None:
        return {}
    earlier = recorded_config(plan.continued)
    session = {"command": earlier.get("command"), "results": earlier.get("results")}
    sessions = [*(earlier.get("sessions") or []), session]
    kept = {"hyperparams": earlier.get("hyperparams"), "sessions": sessions, "results": earlier.get("results")}
    if "teacher" in earlier:  # whether its hindsight start is complete (:func:`teacher_due`)
        kept["teacher"] = earlier["teacher"]
    return kept


def start_model(run: Run) -> Any:
    """A new model (:func:`agents.trainers.ppo.build_model`) or the ``--resume`` one with the flags'
    hyperparameters and ``--seed``, logging ``progress.csv`` and TensorBoard events (and, with
    ``--verbose`` >= 1, log tables) to the run, its settings written to TensorBoard
    (:func:`log_run_config`).

    Raises:
        agents.saved.checkpoint.CheckpointError: a resumed model that cannot be loaded.
    """
    plan, settings, resolved = run.plan, run.plan.settings, run.plan.resolved
    if plan.resume is None or teacher_due(run):  # a stopped hindsight start starts again: a new model
        model = new_model(plan, run.env.vec_env)
    else:
        model = resumed_model(run)
        adopt_env_kwargs(model, resolved["env_kwargs"])
        model.set_random_seed(settings.seed)
        if plan.continued is None:
            model.num_timesteps = 0  # -i: a new run, counted (and scheduled) from 0
    run.record["trainer"] = type(model).__name__  # PPO, MaskablePPO or GroupPPO: what trains, as config.yml says
    progress = run.run_dir / "progress.csv"
    csv = (
        ContinuedCSVOutputFormat(progress)
        if plan.continued and progress.is_file()
        else make_output_format("csv", str(run.run_dir))
    )
    formats = [csv, make_output_format("tensorboard", str(run.tb_dir))]
    if settings.verbose >= 1:
        formats.append(make_output_format("stdout", str(run.run_dir)))
    model.set_logger(Logger(str(run.run_dir), formats))
    log_run_config(model.logger, run.record)
    return model


def new_model(plan: RunPlan, vec_env: Any) -> Any:
    """The new model of ``plan`` (:func:`agents.trainers.ppo.build_model`: its algorithm, device,
    ``--seed``, hyperparameters, env arguments and group size) on ``vec_env``, without a logger."""
    resolved = plan.resolved
    return build_model(
        plan.algo,
        vec_env,
        device=plan.device,
        seed=plan.settings.seed,
        hyperparams=resolved["hyperparams"],
        env_kwargs=resolved["env_kwargs"],
        group_size=resolved["group_size"],
    )


def resumed_model(run: Run) -> Any:
    """The ``--resume`` model with the flags' hyperparameters, attached to the run's env. A score
    model without width scores that the run's ``width_classes`` asks for grows them first
    (:func:`~agents.models.width_table.grow_width_outputs`: new outputs zero, the same policy).

    Raises:
        agents.saved.checkpoint.CheckpointError: a model that cannot be loaded.
    """
    plan, vec_env = run.plan, run.env.vec_env
    assert plan.saved is not None
    overrides = model_kwargs(plan.resolved["resume_hyperparams"])
    cls = model_class(plan.algo, overrides, plan.resolved["group_size"])  # the group settings move into overrides
    if not plan.grows_widths:
        return plan.saved.load(plan.device, vec_env, cls, **overrides)
    model = plan.saved.load(plan.device, None, cls, **overrides)
    model.n_envs = vec_env.num_envs  # the rollout buffer the grown model builds is the run's
    grow_width_outputs(model, str(plan.resume))
    model.set_env(vec_env)
    return model


def adopt_env_kwargs(model: Any, env_kwargs: Mapping[str, Any]) -> None:
    """Give a resumed model the env arguments of the run that goes on training it (a new
    ``base_policy`` or ``hold``: what its spaces do not fix), in its policy and in the
    ``policy_kwargs`` it is saved with; otherwise ``ppo:<path>`` would play the saved model over
    the env it was first trained in. Models without env arguments (plain SB3 policies) keep none."""
    if ENV_ARGUMENTS_KEY in (model.policy_kwargs or {}):
        model.policy_kwargs = {**model.policy_kwargs, ENV_ARGUMENTS_KEY: dict(env_kwargs)}
        model.policy.env_kwargs = dict(env_kwargs)


def warm_start(run: Run, model: Any) -> bool:
    """Start a new model at a policy: regress the hindsight teacher's labels (:func:`start_from_teacher`,
    recorded as ``teacher``) or clone ``--pretrain-expert`` (:func:`clone_expert`, recorded
    as ``pretrain``), then start a residual policy at its base policy (after cloning, whose critic
    it keeps; a score policy starts at its prior by construction: zero means, see
    :mod:`agents.models.set_policy`). Returns whether the model starts at a policy (then evaluated
    before the first update, so that ``best_model.zip`` is never worse than the start).

    Raises:
        ConfigError: ``--pretrain-expert`` with a continuous action mode (``score``).
    """
    plan, settings, resolved = run.plan, run.plan.settings, run.plan.resolved
    pretrained = plan.resume is None and resolved["pretrain_expert"] is not None
    if pretrained and env_config(resolved["env_kwargs"]).make_codec().continuous:
        raise ConfigError("--pretrain-expert clones discrete actions; action_mode 'score' starts at its prior already")
    if teacher_due(run):
        run.record["teacher"] = start_from_teacher(run, model)
        return True
    if pretrained:
        source = run.env.source
        demo_scenarios = source if isinstance(source, list) else [s for _, s in load_workloads(settings.workload)]
        run.record["pretrain"] = clone_expert(
            model,
            resolved,
            demo_scenarios,
            settings.seed,
            tb_dir=run.tb_dir,
            jobs=resolved["eval_jobs"] or available_cpus(),
            progress=not settings.no_progress,
            verbose=settings.verbose,
        )
    codec = env_config(resolved["env_kwargs"]).make_codec()
    neutral = codec.neutral_action()
    residual_start = plan.resume is None and neutral is not None
    if residual_start and neutral is not None and not codec.continuous:
        init_residual_policy(model, neutral, float(resolved["residual_neutral_prob"]))
        run.record["residual_neutral_prob"] = resolved["residual_neutral_prob"]
    return pretrained or residual_start


def teacher_due(run: Run) -> bool:
    """Whether the run's model starts from the hindsight teacher's labels now: a new run with
    ``teacher_seeds``, or a continued one whose teacher or regression a signal stopped (recorded
    ``complete: false``)."""
    plan = run.plan
    if not starts_from_teacher(plan.resolved) or (plan.resume is not None and plan.continued is None):
        return False
    return plan.continued is None or not teacher_complete(run.record)


def teacher_complete(record: Mapping[str, Any]) -> bool:
    """Whether a run's record (its ``config.yml``) says its hindsight start finished: every
    round labelled and regressed (``teacher.complete``)."""
    return bool((record.get("teacher") or {}).get("complete", False))


def start_from_teacher(run: Run, model: Any) -> dict[str, Any]:
    """The hindsight start (:func:`agents.trainers.learner.hindsight_start`) of ``model``, its
    teacher's workers those of the run's evaluations (local, or Ray with ``--vec-env ray``), each
    regression epoch logged as ``clone/mse`` (:func:`_epoch_log`). The random state is then
    seeded again, so that PPO goes on alike whether or not a stop came before (what a stopped
    teacher labelled ran in this process or not). Returns what ``config.yml`` records."""
    settings, resolved = run.plan.settings, run.plan.resolved
    t0 = time.perf_counter()
    backend = Backend("ray", settings.address) if settings.vec_env == "ray" else LOCAL
    epochs = resolved["clone_epochs"] * resolved["teacher_rounds"]
    with _epoch_log(run.tb_dir, "clone", epochs, settings.verbose, t0) as on_epoch:
        record = hindsight_start(
            model,
            resolved,
            run.run_dir,
            settings.seed,
            backend,
            resolved["eval_jobs"] or available_cpus(),
            not settings.no_progress,
            on_epoch,
        )
    model.set_random_seed(settings.seed)
    record["seconds"] = round(time.perf_counter() - t0, 1)
    if settings.verbose >= 1 and record.get("complete"):
        print(hindsight_budget(record))
    return record


def hindsight_budget(record: Mapping[str, Any]) -> str:
    """One line of what a complete hindsight start cost: rounds, scenarios labelled, the
    teacher's CPU seconds (its workers' process time) and the stage's wall seconds."""
    rounds = record["rounds"]
    labelled = sum(done["scenarios"] for done in rounds)
    return (
        f"hindsight start: {len(rounds)} round(s), {labelled} scenarios labelled, teacher "
        f"{record['teacher_cpu_s']:,.0f} CPU-s ({record['teacher_cpu_s'] / 3600:.2f} CPU-h), "
        f"{record['seconds']:,.0f} s in all"
    )


def clone_expert(
    model: Any,
    settings: Mapping[str, Any],
    workloads: Sequence[Any],
    seed: int,
    tb_dir: Path | None = None,
    jobs: int = 1,
    progress: bool = False,
    verbose: int = 0,
) -> dict[str, Any]:
    """Clone ``settings["pretrain_expert"]`` into ``model`` (see :mod:`agents.trainers.imitation`): the
    demonstrations run in ``jobs`` worker processes with a progress bar (``progress``), each
    epoch prints a line (``verbose`` >= 1) and writes ``pretrain/*`` scalars to the TensorBoard
    run ``<tb_dir>/pretrain`` (:func:`_epoch_log`). A SIGINT or SIGTERM stops the demonstrations
    at once (nothing is cloned) or the cloning after the batch in progress
    (:func:`deepboot_env.stops.stop_requested`); the record then says so (``interrupted``).
    Returns what to record in ``config.yml``."""
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
    with _epoch_log(tb_dir, "pretrain", epochs, verbose, t0) as on_epoch:
        history = pretrain(model, demos, epochs=epochs, seed=seed, on_epoch=on_epoch, should_stop=stop_requested)
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


@contextmanager
def _epoch_log(
    tb_dir: Path | None, stage: str, epochs: int, verbose: int, t0: float
) -> Iterator[Callable[[int, Mapping[str, float]], None]]:
    """The ``on_epoch`` of a warm start's fit (``stage``: ``pretrain``, the expert's cloning;
    ``clone``, the teacher's regression): each epoch's losses as ``<stage>/*`` scalars of the
    TensorBoard run ``<tb_dir>/<stage>`` (the epoch, from 1, as step: apart from the training's
    timestep axis) and, with ``verbose`` >= 1, a printed line."""
    writer = SummaryWriter(str(tb_dir / stage)) if tb_dir is not None else None

    def on_epoch(epoch: int, losses: Mapping[str, float]) -> None:
        if writer is not None:
            for key, value in losses.items():
                writer.add_scalar(f"{stage}/{key}", value, epoch)
        if verbose >= 1:
            values = ", ".join(f"{k} {v:.4f}" for k, v in losses.items())
            print(f"warm start: epoch {epoch}/{epochs}: {values} ({time.perf_counter() - t0:.0f} s)")

    try:
        yield on_epoch
    finally:
        if writer is not None:
            writer.close()


def callbacks(
    run: Run, config: EnvConfig, eval_at_start: bool, on_evaluation: Callable[[int, float], None] | None
) -> RunCallbacks:
    """The run's callbacks, in order: the stop on a signal (:class:`~agents.runs.callbacks.StopOnSignal`,
    which skips the final evaluation), the ``sched/*`` metrics, the validation every
    ``--eval-freq`` steps (before the first update too with ``eval_at_start``) and a checkpoint
    every ``--save-freq`` steps; ``config`` is the training env's settings."""
    plan, settings, resolved = run.plan, run.plan.settings, run.plan.resolved
    sched = SchedMetricsCallback(config=config, reference=resolved["eval_reference"] or "ats")
    evaluator = None
    if resolved["eval_freq"] > 0:
        evaluator = WorkloadEvalCallback(
            run.env.eval_workloads,
            config,
            eval_freq=resolved["eval_freq"],
            n_episodes=resolved["eval_episodes"],
            log_dir=run.run_dir,
            eval_at_start=eval_at_start,
            reference=resolved["eval_reference"],
            jobs=resolved["eval_jobs"],
            progress=not settings.no_progress,
            verbose=settings.verbose,
            on_evaluation=on_evaluation,
        )
        earlier = run.record.get("results") or {}  # a continued run keeps the best it had
        if plan.continued is not None and isinstance(earlier.get("best_val_score"), float):
            evaluator.validator.best_score = earlier["best_val_score"]
            evaluator.validator.best_within = bool(earlier.get("best_within", True))
    out = RunCallbacks(sched, evaluator, [sched] if evaluator is None else [sched, evaluator])
    if resolved["save_freq"] > 0:
        out.all.append(
            AtomicCheckpointCallback(
                save_freq=max(resolved["save_freq"] // resolved["n_envs"], 1),
                save_path=str(run.run_dir / "checkpoints"),
                name_prefix=plan.algo,
            )
        )
    out.all.insert(0, StopOnSignal(run.stops, on_stop=out.skip_final_evaluation))
    return out


def learn(run: Run, model: Any, cbs: RunCallbacks) -> None:
    """``model.learn`` for ``--n-timesteps`` more steps (a new model counts from 0), unless a
    signal came before (during the warm start). A signal during an evaluation (its pool stops at
    once: :class:`~deepboot_env.stops.Stopped`) ends it too: no final evaluation, then the
    callbacks' training end (their background workers stopped)."""
    if run.stops.signum is not None:
        return
    bar = [] if run.plan.settings.no_progress else [EnvStepProgressBar()]  # counts env steps, as SB3's did not
    callback = CallbackList([*cbs.all, *bar])
    try:
        model.learn(
            total_timesteps=run.plan.steps,  # a continued run: SB3 adds the steps done, so its schedule goes on
            callback=callback,
            reset_num_timesteps=run.plan.continued is None,  # -i: a new run, its schedule from the start
        )
    except Stopped:
        cbs.skip_final_evaluation()
        callback.on_training_end()


def finish(run: Run, model: Any, cbs: RunCallbacks, start_steps: int, t0: float) -> Path:
    """Save the final model and the run's results in ``config.yml`` (``interrupted``: the signal
    that stopped the run, or None); returns the model's path."""
    wall = time.perf_counter() - t0
    if model.logger.name_to_value:  # flush the last update's train/* values (nothing to flush: no warning)
        model.logger.dump(model.num_timesteps)
    model.logger.close()  # progress.csv and the events file: closed now, not whenever the model is collected
    final = save_model(model, run.run_dir / "final_model.zip")
    run.env.vec_env.close()

    steps = model.num_timesteps - start_steps
    evaluator, signum = cbs.evaluator, run.stops.signum
    eval_s = evaluator.eval_seconds if evaluator is not None else 0.0
    run.record["results"] = {
        "timesteps": steps,
        "total_timesteps": model.num_timesteps,
        "wall_seconds": round(wall, 2),
        "eval_seconds": round(eval_s, 2),
        "steps_per_second": round(steps / max(wall - eval_s, 1e-9), 1),
        "train_episodes": cbs.sched.episodes,
        "best_val_score": evaluator.best_score if evaluator is not None else None,
        "best_within": evaluator.best_within if evaluator is not None else None,
        "selected_by": evaluator.selected_by if evaluator is not None else None,
        "eval_share": round(eval_s / wall, 3) if wall > 0 else None,
        "evaluations": [list(h) for h in evaluator.history] if evaluator is not None else [],
        "interrupted": None if signum is None else signal.Signals(signum).name,
    }
    write_config(run.run_dir / "config.yml", run.record)
    if run.plan.settings.verbose >= 1:
        r = run.record["results"]
        print(
            f"run folder: {run.run_dir}  ({steps} steps in {wall:.1f} s, "
            f"{r['steps_per_second']} steps/s excluding {eval_s:.1f} s of evaluation, {r['eval_share'] or 0:.0%})"
        )
    return final


def interrupted(run: Run, final: Path) -> TrainingInterrupted:
    """What a run stopped by a signal raises: the command that continues it (``--resume`` its
    folder: the steps left, as it started), and what the stop cut short of the warm start."""
    assert run.stops.signum is not None
    command = resume_command(command_words(run.plan.settings.command), run.run_dir)
    note = _warm_start_note(run.record.get("pretrain"), run.record.get("teacher"))
    return TrainingInterrupted(run.stops.signum, run.run_dir, final, command, note)


def _warm_start_note(pretrain: Mapping[str, Any] | None, teacher: Mapping[str, Any] | None) -> str:
    """What a stop during the warm start left out, in words ("" if it finished or did not run)."""
    if teacher and teacher.get("interrupted"):
        return f"during the hindsight start: {teacher['interrupted']}; --resume starts it again from them"
    if not pretrain or not pretrain.get("interrupted"):
        return ""
    return f"during the warm start: {pretrain['interrupted']}; PPO starts from the model as saved"


# ------------------------------------------------------------------------------- run records
def hparams_of(config: Mapping[str, Any]) -> dict[str, bool | str | float | int]:
    """The run's settings as flat TensorBoard ``hparams``: run settings, ``hyperparams.*`` and
    ``env_kwargs.*`` (lists and mappings as text, None as ``none``)."""
    keys = ("algo", "seed", "preset", "device", *RUN_KEYS, "eval_reference", *PRETRAIN_KEYS, *TEACHER_KEYS)
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
        return str(yaml_safe(value))

    return {k: scalar(v) for k, v in flat.items()}


def log_run_config(logger: Any, config: Mapping[str, Any]) -> None:
    """Write the run's configuration to the logger's TensorBoard run: as ``hparams`` (the
    HPARAMS tab, :func:`hparams_of`, against ``eval/best_score`` and ``reward/step_jct``) and as
    the text ``config`` (what ``config.yml`` records before the warm start), both at step 0."""
    for fmt in logger.output_formats:
        if isinstance(fmt, TensorBoardOutputFormat):
            text = config_text(config)
            fmt.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)  # indented: preformatted
            metrics = {"eval/best_score": 0.0, "reward/step_jct": 0.0}
            writer = fmt.writer.file_writer
            assert writer is not None
            for summary in hparams(hparams_of(config), metric_dict=metrics):
                writer.add_summary(summary)
            fmt.writer.flush()


def load_workloads(values: Sequence[str], family_split: str = "train") -> list[tuple[str, Scenario]]:
    """``(label, Scenario)`` for every workload named: splits ``train``/``val``/``test`` expanded,
    a family ``family:<name>[:<split>[:<n>]]`` as its first ``n`` (default
    :data:`~agents.runs.run_config.FAMILY_SEEDS`)
    seeds of the split (``family_split`` when it names none). Validation that can see a 0.5 %
    difference needs 32 or more (``family:mixed:val:32``).

    Raises:
        ConfigError: for a seed count that is not a whole number >= 1.
    """
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
    families = [v for v in values if v.startswith(FAMILY_PREFIX)]
    if families and len(values) > 1:
        raise ConfigError(f"--workload: give one workload family or a list of workloads, not {' '.join(values)}")
    return families[0] if families else [s for _, s in load_workloads(values)]


def _versions() -> dict[str, Any]:
    """The versions ``config.yml`` records: SB3's system info, sb3-contrib's and this project's."""
    info, _ = get_system_info(print_info=False)
    info["sb3-contrib"] = sb3_contrib.__version__
    info["deepboot-env"] = deepboot_env.__version__
    return info
