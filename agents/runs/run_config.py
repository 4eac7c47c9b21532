"""Settings of a training run: configuration presets, command-line flags, env options.

:class:`TrainSettings` is what a run is asked for: one field per flag of ``train_policy.py``
(whose parser takes its defaults from it) and the command line; the library functions
(:func:`agents.trainers.training_run.train`, :func:`agents.trainers.sweep.sweep`,
:func:`agents.trainers.evolution.train_es`) take it. Every setting resolves as built-in default <
configuration preset (a YAML
file, the shipped ``agents/conf/deepboot.yml`` unless ``--conf-file`` says otherwise) < flag:
:func:`load_conf` reads a preset, :func:`resolve_settings` merges the run settings
(:data:`RUN_KEYS`), the model-selection reference (:func:`resolve_eval_reference`), the
behaviour-cloning warm start (:data:`PRETRAIN_KEYS`, :func:`resolve_pretrain`), the env options
(checked by :func:`env_config`) and the hyperparameters; every bad value is a :class:`~agents.errors.ConfigError`.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.errors import ConfigError
from agents.hyperparameters import (
    ALGOS,
    check_hyperparams,
    check_policy_kwargs_arch,
    parse_kv,
    policy_arch,
    policy_kwargs_from_mapping,
    resolve_hyperparams,
    switch_arch,
)
from agents.saved.checkpoint import CheckpointError
from agents.saved.policy_adapter import saved_dynamics
from deepboot_env import FRONT_END_DYNAMICS, REFERENCE_POLICY
from deepboot_env.config import DYNAMICS, EnvConfig
from deepboot_env.limits import MAX_CONFIG_BYTES, names, parse_yaml, plain, read_bounded, shown
from deepboot_env.policy import available_policies
from traces.families import FAMILIES

DEFAULT_CONF = Path(__file__).resolve().parents[1] / "conf" / "deepboot.yml"
"""Configuration read when ``--conf-file`` is not given: package data, so that a wheel trains with
the same presets as a clone."""

RUN_KEYS: dict[str, Any] = {
    "n_timesteps": 200_000,
    "n_envs": 4,
    "group_size": 1,
    "eval_freq": 20_000,
    "eval_episodes": 0,
    "eval_jobs": 0,
    "save_freq": 25_000,
}
"""Run settings a configuration preset may default, with their built-in defaults."""


PRETRAIN_KEYS: dict[str, Any] = {
    "pretrain_expert": None,
    "pretrain_epochs": 15,
    "pretrain_noise": [0.0, 0.05],
    "residual_neutral_prob": 0.9,
}
"""Behaviour-cloning warm start (:mod:`agents.trainers.imitation`) settings and their defaults."""

TEACHER_KEYS: dict[str, Any] = {
    "teacher_labels": None,
    "teacher_families": None,
    "teacher_seeds": 0,
    "teacher_kind": "held",
    "teacher_generations": 16,
    "teacher_pairs": 8,
    "teacher_lr": 0.05,
    "teacher_probes": 16,
    "teacher_delta": 0.5,
    "teacher_gain": 30.0,
    "teacher_app_gain": 0.0,
    "teacher_table": None,
    "table_generations": 0,
    "teacher_rounds": 1,
    "clone_epochs": 20,
    "clone_lr": 1.0e-3,
    "clone_batch": 256,
}
"""The hindsight start (:mod:`agents.trainers.learner`): the teacher labels the first
``teacher_seeds`` train seeds of each of ``teacher_families`` (None: every family; 0 seeds: no
teacher) with ``teacher_kind`` labels (:data:`~agents.trainers.teacher.LABEL_KINDS`): ``held``,
a search of ``teacher_generations`` x ``teacher_pairs`` at step ``teacher_lr``; ``advantage``,
``teacher_probes`` decisions probed at +-``teacher_delta``, labels ``teacher_gain`` x the
advantage (plus ``teacher_app_gain`` x the job's application's, all its jobs held together),
on the prior's play or, with ``teacher_table`` (a held table's file, ``--algo es --preset
table-es``), on that table's; ``table_generations`` N > 0 trains that table first, from zeros, in
the run (N generations of ``table-es``, :func:`agents.trainers.evolution.train_table`). The new
model regresses the labels for ``clone_epochs`` at ``clone_lr`` in batches of
``clone_batch`` before PPO. With ``teacher_rounds`` R > 1 that is policy iteration: R - 1 more
rounds label the advantages over the latest regression's own play, and the new model regresses
each round's labels afresh. ``teacher_labels``, a folder ``deepboot teach`` wrote, gives the
labels instead (the teacher is not run)."""

FAMILY_SEEDS = 8
"""Scenarios of a workload family that stand for it where a fixed list is needed: the first 8 val
seeds in evaluations (``--eval-workload family:<name>``), the first 8 train seeds for cloning."""

ENV_IDS: dict[str, str] = {f"DeepBoot-{version}": version for version in DYNAMICS}
"""``--env``: the Gymnasium id of each env version and the ``dynamics`` env argument it stands for."""

FIXED_ENV_KWARGS = ("workload", "render_mode")
"""Env arguments that ``--env-kwargs`` may not set (``workload`` comes from ``--workload``)."""


@dataclass(frozen=True)
class TrainSettings:
    """What one training run (or sweep, or ES run) is asked for: the flags of ``train_policy.py``,
    in its order (``--help`` says what each means), and the command line. None leaves a setting to
    the preset, then to the built-in default (:func:`resolve_settings`). ``config.yml`` records
    every field under ``args``."""

    algo: str | None = None
    n_timesteps: int | None = None
    policy_arch: str | None = None
    seed: int = 0
    n_envs: int | None = None
    group_size: int | None = None
    vec_env: str = "dummy"
    address: str | None = None
    device: str = "auto"
    num_threads: int = 1
    workload: list[str] = field(default_factory=lambda: ["train"])
    eval_workload: list[str] = field(default_factory=lambda: ["val"])
    eval_freq: int | None = None
    eval_episodes: int | None = None
    eval_jobs: int | None = None
    eval_reference: str | None = None
    save_freq: int | None = None
    log_folder: str = "runs"
    tensorboard_log: str = ""
    hyperparams: list[str] | None = None
    env: str | None = None
    env_kwargs: list[str] | None = None
    conf_file: str | None = None
    preset: str = "default"
    init_model: str | None = None
    resume_run: str | None = None
    trust_checkpoint: bool = False
    pretrain_expert: str | None = None
    pretrain_epochs: int | None = None
    pretrain_noise: list[float] | None = None
    residual_neutral_prob: float | None = None
    teacher_seeds: int | None = None
    teacher_labels: str | None = None
    tune: str | None = None
    no_progress: bool = False
    distribution_checks: bool = False
    verbose: int = 1
    command: str | None = None
    """The command line (shell syntax) the run records and its resume command repeats (None: this
    process's own)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TrainSettings:
        """The settings ``train_policy.py``'s parser read (``args``: every field, ``command``
        optional)."""
        return cls(**vars(args))


def read_yaml(path: Path, flag: str) -> Any:
    """The YAML document of a configuration file, within :data:`~deepboot_env.limits.MAX_CONFIG_BYTES`
    and the nesting and alias limits of :func:`~deepboot_env.limits.parse_yaml`.

    Raises:
        ConfigError: one line naming ``flag`` and the file.
    """
    try:
        data = read_bounded(path, MAX_CONFIG_BYTES, "the configuration", ConfigError)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read {flag} {path}: {shown(why)}") from None
    except ConfigError as exc:
        raise ConfigError(f"{flag} {exc}") from None
    return parse_yaml(text, f"{flag} {path}", ConfigError)


def preset_section(path: str | Path | None, preset: str) -> tuple[Path, dict[str, Any]]:
    """The configuration file ``path`` (None: the shipped presets) and its preset ``preset``'s
    mapping (``common`` and a section per algorithm).

    Raises:
        ConfigError: unreadable or missing file, unknown preset, or a preset that is no mapping.
    """
    p = Path(path) if path is not None else DEFAULT_CONF
    flag = "--conf-file" if path is not None else "the shipped presets file"
    data = read_yaml(p, flag) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"--conf-file {p}: expected a mapping of presets")
    if set(data) & {"common", *ALGOS}:
        if preset != "default":
            raise ConfigError(f"--conf-file {p} is a single preset; --preset {shown(preset)} names none")
        section = data
    elif preset in data:
        section = data[preset]
    else:
        raise ConfigError(f"--conf-file {p}: no preset {shown(preset)}; presets: {names(list(data), most=20)}")
    if not isinstance(section, dict):
        raise ConfigError(f"--conf-file {p}: preset {shown(preset)} is not a mapping")
    return p, section


def preset_algo(path: str | Path | None, preset: str, algo: str | None) -> str | None:
    """The algorithm a new run of ``preset`` trains: ``algo`` (``--algo``), else ``es`` for a
    preset whose only training section is ``es`` (``deepboot train --preset table-es`` needs no
    ``--algo es``), else None (PPO, or the ``-i`` model's).

    Raises:
        ConfigError: ``--algo`` and a preset for another trainer (an ES preset with a PPO
            algorithm, or ``--algo es`` with a named preset that has no ``es`` section): each
            would run with settings the preset does not hold.
    """
    section = preset_section(path, preset)[1]
    es_only = "es" in section and not set(section) & {"common", *ALGOS}
    if algo is None:
        return "es" if es_only else None
    if es_only and algo != "es":
        raise ConfigError(f"--preset {preset} trains by evolution strategies (an es section only): drop --algo {algo}")
    if algo == "es" and "es" not in section and preset != "default":
        raise ConfigError(f"--preset {preset} has no es section: --algo es would run without it; name an ES preset")
    return algo


def load_conf(path: str | Path | None, preset: str, algo: str, common: bool = True) -> dict[str, Any]:
    """The flat defaults for ``algo`` from ``preset`` of a configuration file (``common`` first,
    unless ``common`` is off: ``--algo es`` reads its own section only, as ``common`` holds PPO's
    settings, whose ``learning_rate`` and ``eval_freq`` mean other things to ES).

    A file whose top level has ``common``/algorithm keys is a single preset (``--preset`` must
    then be left at ``default``). The shipped presets missing (a broken install) is an error, not
    an empty preset: a run must never train with other settings than the preset its config names.

    Raises:
        ConfigError: unreadable or missing file, unknown preset, or entries that are not mappings.
    """
    p, section = preset_section(path, preset)
    out: dict[str, Any] = {}
    for key in ("common", algo) if common else (algo,):
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


def preset_descriptions(path: str | Path | None = None) -> dict[str, str]:
    """Each preset of a configuration file (default :data:`DEFAULT_CONF`) and its ``description``
    entry ("" where it has none); {} for a missing or unreadable file (``--help`` lists them)."""
    p = Path(path) if path is not None else DEFAULT_CONF
    try:
        data = read_yaml(p, "--conf-file") or {}
    except ConfigError:
        return {}
    if not isinstance(data, dict) or set(data) & {"common", *ALGOS}:
        return {}
    return {
        str(name): " ".join(str(section.get("description", "")).split()) if isinstance(section, dict) else ""
        for name, section in data.items()
    }


def resolve_env_id(env_id: str | None, env_kwargs: dict[str, Any], flag_kwargs: Mapping[str, Any]) -> None:
    """Set ``env_kwargs["dynamics"]`` from ``--env`` (``None``: leave the preset's).

    Raises:
        ConfigError: an unknown id, or ``--env-kwargs dynamics:...`` naming another version.
    """
    if env_id is None:
        return
    if env_id not in ENV_IDS:
        raise ConfigError(f"--env: unknown env id {shown(env_id)}; choose from {', '.join(ENV_IDS)}")
    dynamics = ENV_IDS[env_id]
    if flag_kwargs.get("dynamics", dynamics) != dynamics:
        raise ConfigError(f"--env {env_id} contradicts --env-kwargs dynamics:{plain(str(flag_kwargs['dynamics']))}")
    env_kwargs["dynamics"] = dynamics


def default_dynamics(resume: str | Path | None) -> str:
    """The dynamics of a run whose ``--env``, preset and ``--env-kwargs`` name none: the world the
    ``--resume`` model was trained in (a v0 checkpoint goes on training on v0), else
    :data:`~deepboot_env.FRONT_END_DYNAMICS` (v1). Always written into the run's ``env_kwargs``,
    so that ``config.yml``, TensorBoard's config and the saved model name it."""
    if resume is None:
        return FRONT_END_DYNAMICS
    try:
        return saved_dynamics(resume)
    except (OSError, CheckpointError):  # the resume itself reports the bad file
        return FRONT_END_DYNAMICS


def env_config(env_kwargs: Mapping[str, Any]) -> EnvConfig:
    """The :class:`~deepboot_env.config.EnvConfig` of the env options (``workload`` and
    ``render_mode`` are not options: ``--workload`` sets the workloads).

    Raises:
        ConfigError: naming the key (and the accepted ones) or the bad value.
    """
    for key in env_kwargs:
        if key in FIXED_ENV_KWARGS:
            raise ConfigError(f"--env-kwargs: {shown(key)} cannot be set here (use --workload)")
    try:
        return EnvConfig.from_options(**env_kwargs)
    except ValueError as exc:
        raise ConfigError(f"--env-kwargs: {exc}") from None


def resolve_settings(flags: TrainSettings, algo: str) -> dict[str, Any]:
    """Run settings, env kwargs and raw hyperparameters: built-in < config preset < flags."""
    conf = load_conf(flags.conf_file, flags.preset, algo)
    settings: dict[str, Any] = {}
    for key, default in RUN_KEYS.items():
        value = conf.pop(key, default)
        if getattr(flags, key) is not None:
            value = getattr(flags, key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{key} must be an integer, got {shown(value)}")
        settings[key] = value
    if settings["n_timesteps"] < 0:
        raise ConfigError(f"--n-timesteps must be >= 0, got {shown(settings['n_timesteps'])}")
    if settings["n_envs"] < 1:
        raise ConfigError(f"--n-envs must be >= 1, got {shown(settings['n_envs'])}")
    if settings["group_size"] < 1 or settings["n_envs"] % settings["group_size"]:
        raise ConfigError(
            f"--group-size must be >= 1 and divide --n-envs {settings['n_envs']}, got {settings['group_size']}"
        )
    for key in ("eval_episodes", "eval_jobs", "eval_freq", "save_freq"):  # 0: one per workload, auto, never
        if settings[key] < 0:
            raise ConfigError(f"--{key.replace('_', '-')} must be >= 0, got {shown(settings[key])}")
    settings["eval_reference"] = resolve_eval_reference(flags, conf)
    settings.update(resolve_pretrain(flags, conf))
    settings.update(resolve_teacher(flags, conf))
    if starts_from_teacher(settings) and settings["pretrain_expert"] is not None:
        raise ConfigError("a run starts from the teacher's labels or from an expert's, not both: --teacher-seeds 0")
    if settings["n_timesteps"] == 0 and not starts_from_teacher(settings) and settings["pretrain_expert"] is None:
        raise ConfigError("--n-timesteps 0 (no PPO update) needs a warm start: --teacher-seeds or --pretrain-expert")
    env_kwargs = dict(conf.pop("env_kwargs", {}) or {})
    flag_kwargs = parse_kv(flags.env_kwargs, "--env-kwargs")
    resolve_env_id(flags.env, env_kwargs, flag_kwargs)
    env_kwargs.update(flag_kwargs)
    env_kwargs.setdefault("dynamics", default_dynamics(flags.init_model))
    env_config(env_kwargs)
    cli = parse_kv(flags.hyperparams, "--hyperparams")
    check_hyperparams(cli)
    settings["env_kwargs"] = env_kwargs
    settings["cli_hyperparams"] = cli
    hyperparams = resolve_hyperparams(algo, conf, cli)
    if flags.policy_arch is not None:
        switch_arch(hyperparams, flags.policy_arch, keep_policy_kwargs="policy_kwargs" in cli)
    check_policy_kwargs_arch(
        policy_arch(hyperparams["policy"]), policy_kwargs_from_mapping(hyperparams.get("policy_kwargs") or {})
    )
    settings["hyperparams"] = hyperparams
    return settings


def resolve_eval_reference(flags: TrainSettings, conf: dict[str, Any]) -> str | None:
    """The policy every evaluation divides the model's JCT by, for model selection (the ``conf``
    entry ``eval_reference`` is consumed): built-in ``ats`` < preset < ``--eval-reference``;
    None for ``none``.

    Raises:
        ConfigError: an unknown policy name.
    """
    value = conf.pop("eval_reference", REFERENCE_POLICY)
    if flags.eval_reference is not None:
        value = flags.eval_reference
    if value in ("", "none", None):
        return None
    if value not in available_policies():
        known = ", ".join(available_policies())
        raise ConfigError(f"--eval-reference: unknown policy {shown(value)}; available: none, {known}")
    return str(value)


def resolve_teacher(flags: TrainSettings, conf: dict[str, Any]) -> dict[str, Any]:
    """The hindsight start's settings (:data:`TEACHER_KEYS`; ``conf`` entries are consumed):
    built-in < preset < ``--teacher-seeds``.

    Raises:
        ConfigError: a value of the wrong kind or out of range.
    """
    out = {key: conf.pop(key, default) for key, default in TEACHER_KEYS.items()}
    if flags.teacher_seeds is not None:
        out["teacher_seeds"] = flags.teacher_seeds
    if flags.teacher_labels is not None:
        out["teacher_labels"] = flags.teacher_labels
    if out["teacher_labels"] is not None and not isinstance(out["teacher_labels"], str):
        raise ConfigError(f"teacher_labels must be a folder, got {shown(out['teacher_labels'])}")
    if out["teacher_table"] is not None and not isinstance(out["teacher_table"], str):
        raise ConfigError(f"teacher_table must be a table file, got {shown(out['teacher_table'])}")
    if out["teacher_table"] and out.get("table_generations"):
        raise ConfigError("teacher_table gives the table that table_generations would train: set one of them")
    whole_numbers = (
        ("teacher_seeds", 0),
        ("teacher_generations", 0),
        ("teacher_pairs", 1),
        ("teacher_probes", 1),
        ("teacher_rounds", 1),
        ("table_generations", 0),
        ("clone_epochs", 0),
        ("clone_batch", 1),
    )
    for key, low in whole_numbers:
        value = out[key]
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 10_000:
            raise ConfigError(f"{key} must be a whole number from {low} to 10,000, got {shown(value)}")
    families = out["teacher_families"]
    if families is not None and (not isinstance(families, list) or not all(f in FAMILIES for f in families)):
        raise ConfigError(f"teacher_families must be a list of {', '.join(FAMILIES)}, got {shown(families)}")
    if out["teacher_kind"] not in ("held", "advantage"):
        raise ConfigError(f"teacher_kind must be held or advantage, got {shown(out['teacher_kind'])}")
    for key, high in (("teacher_lr", 10), ("teacher_delta", 10), ("teacher_gain", 1_000), ("clone_lr", 10)):
        value = out[key]
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= high:
            raise ConfigError(f"{key} must be a number in (0, {high:,}], got {shown(value)}")
        out[key] = float(value)
    app_gain = out["teacher_app_gain"]
    if not isinstance(app_gain, int | float) or isinstance(app_gain, bool) or not 0 <= app_gain <= 1_000:
        raise ConfigError(f"teacher_app_gain must be a number in [0, 1,000], got {shown(app_gain)}")
    out["teacher_app_gain"] = float(app_gain)
    return out


def starts_from_teacher(settings: Mapping[str, Any]) -> bool:
    """Whether resolved ``settings`` ask for the hindsight start: a teacher to run, or its labels."""
    return bool(settings["teacher_seeds"] or settings["teacher_labels"])


def resolve_pretrain(flags: TrainSettings, conf: dict[str, Any]) -> dict[str, Any]:
    """The behaviour-cloning settings (``conf`` entries are consumed): built-in < preset < flags.

    Raises:
        ConfigError: an unknown expert policy, negative epochs or a noise level outside [0, 1).
    """
    out: dict[str, Any] = {}
    for key, default in PRETRAIN_KEYS.items():
        value = conf.pop(key, default)
        if getattr(flags, key) is not None:
            value = getattr(flags, key)
        out[key] = value
    expert = out["pretrain_expert"]
    if expert in ("", "none", None):
        out["pretrain_expert"] = None
    elif expert not in available_policies():
        raise ConfigError(
            f"--pretrain-expert: unknown policy {shown(expert)}; available: {', '.join(available_policies())}"
        )
    epochs = out["pretrain_epochs"]
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
        raise ConfigError(f"--pretrain-epochs must be an integer >= 0, got {shown(epochs)}")
    noise = out["pretrain_noise"]
    noise = [noise] if isinstance(noise, int | float) else list(noise or [])
    if not noise or any(not isinstance(p, int | float) or not 0.0 <= p < 1.0 for p in noise):
        raise ConfigError(f"--pretrain-noise needs levels in [0, 1), got {shown(out['pretrain_noise'])}")
    out["pretrain_noise"] = [float(p) for p in noise]
    prob = out["residual_neutral_prob"]
    if not isinstance(prob, int | float) or not 0.0 < prob < 1.0:
        raise ConfigError(f"--residual-neutral-prob must lie in (0, 1), got {shown(prob)}")
    return out
