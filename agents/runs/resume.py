"""``--resume RUN_FOLDER``: a run goes on exactly as it started, whatever its trainer.

A run folder's ``config.yml`` records the settings the run was asked for (``args``: every field of
:class:`~agents.runs.run_config.TrainSettings`). :func:`resumed_settings` gives them back: the
algorithm, preset, configuration file, hyperparameters, env arguments, workloads and seed. A flag
given again with the same value is fine; one that changes a setting is refused in one line,
except the few a resume applies (:data:`APPLIED_ON_RESUME`: how long to train on, where the
episodes run, what is printed), each said in one line. Starting a new run from a model is
``-i MODEL`` (:mod:`agents.trainers.training_run`), a different thing.

The trainer then continues the folder: PPO loads ``final_model.zip`` (saved at every stop) with its
own hyperparameters and schedule and trains to the recorded total; ES loads ``state.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import CSVOutputFormat

from agents.errors import ConfigError
from agents.runs.run_config import TrainSettings, preset_algo, read_yaml
from deepboot_env.limits import shown

CONFIG_FILE = "config.yml"
"""The file of a run folder that records the run's settings."""

APPLIED_ON_RESUME: frozenset[str] = frozenset(
    {"n_timesteps", "no_progress", "verbose", "eval_jobs", "num_threads", "device", "trust_checkpoint", "address"}
)
"""Settings a resume may change: ``-n`` trains that many steps (generations) more than the run
has done; the rest change where and how visibly it runs, not what it learns."""

NOT_COMPARED: frozenset[str] = frozenset({"resume_run", "command"})
"""Fields that are not settings of the run."""


def run_folder_of(path: str | Path) -> Path:
    """The run folder ``--resume`` names (a file in it names its folder).

    Raises:
        ConfigError: no such folder, or a folder without ``config.yml``.
    """
    folder = Path(path)
    folder = folder if folder.is_dir() or not folder.exists() else folder.parent
    if not folder.is_dir():
        raise ConfigError(f"--resume {path}: no such run folder")
    if not (folder / CONFIG_FILE).is_file():
        raise ConfigError(f"--resume {path}: not a run folder (no {CONFIG_FILE})")
    return folder


def recorded_config(folder: Path) -> dict[str, Any]:
    """A run folder's ``config.yml`` (bounded, checked YAML; {} if it is not a mapping).

    Raises:
        ConfigError: an unreadable file (one line).
    """
    config = read_yaml(folder / CONFIG_FILE, "--resume")
    return config if isinstance(config, dict) else {}


def recorded_settings(folder: Path) -> TrainSettings:
    """The settings a run folder's ``config.yml`` recorded.

    Raises:
        ConfigError: an unreadable file, or one that records no settings (one line).
    """
    args = recorded_config(folder).get("args")
    if not isinstance(args, dict):
        raise ConfigError(f"--resume {folder}: {CONFIG_FILE} records no settings (args); start a new run with -i")
    known = {f.name for f in fields(TrainSettings)}
    return TrainSettings(**{key: value for key, value in args.items() if key in known})


def run_algo(settings: TrainSettings) -> str | None:
    """The algorithm a run trains: a continued run's recorded one (its trainer) unless ``--algo``
    says, else what ``--algo`` and the preset give (:func:`~agents.runs.run_config.preset_algo`).

    Raises:
        ConfigError: ``--resume`` names no run folder; ``--algo`` and a preset for another trainer.
    """
    if settings.resume_run and not settings.algo:
        algo = recorded_config(run_folder_of(settings.resume_run)).get("algo")
        return str(algo) if algo else None
    return preset_algo(settings.conf_file, settings.preset, settings.algo)


def flag_name(field: str) -> str:
    """The command-line flag of a settings field (``eval_freq`` -> ``--eval-freq``)."""
    return {"hyperparams": "-params", "n_timesteps": "-n", "init_model": "-i"}.get(
        field, f"--{field.replace('_', '-')}"
    )


def given_fields(settings: TrainSettings) -> dict[str, Any]:
    """The settings fields ``settings`` sets away from their defaults (the flags a user gave)."""
    default = asdict(TrainSettings())
    return {key: value for key, value in asdict(settings).items() if key not in NOT_COMPARED and value != default[key]}


def resumed_settings(
    settings: TrainSettings, say: Callable[[str], None] | None = print
) -> tuple[TrainSettings, int | None]:
    """The settings a ``--resume`` run continues with: its folder's recorded ones, with the flags
    of :data:`APPLIED_ON_RESUME` that ``settings`` gives applied (each said through ``say``), and
    the steps (generations) ``-n`` asks for on top of what the run has done (None: to the run's
    own total). A new run: ``settings`` itself and None.

    Raises:
        ConfigError: not a run folder, or a flag that would change a recorded setting (naming
            the flag, both values and what to do instead).
    """
    if not settings.resume_run:
        return settings, None
    folder = run_folder_of(settings.resume_run)
    recorded = recorded_settings(folder)
    applied = _applied(folder, given_fields(settings), asdict(recorded))
    more = applied.pop("n_timesteps", None)
    if say is not None:
        for key, value in applied.items():
            say(f"--resume {folder}: {flag_name(key)} {shown(value)} (the run had {shown(getattr(recorded, key))})")
        if more is not None:
            say(f"--resume {folder}: -n {more:,} more than the run has done (its schedule stretched to the new total)")
    return replace(recorded, **applied, resume_run=str(folder), command=settings.command), more


def _applied(folder: Path, given: Mapping[str, Any], recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The given fields a resume applies; refuses one that changes any other recorded setting."""
    for key, value in given.items():
        if key not in APPLIED_ON_RESUME and value != recorded[key]:
            model = next(iter(sorted(folder.glob("final_model.*"))), folder / "final_model.zip")
            raise ConfigError(
                f"--resume {folder}: {flag_name(key)} {shown(value)} differs from the run's {shown(recorded[key])}; "
                f"a resumed run goes on as it started (a new run from its model: -i {model})"
            )
    applied = {key: value for key, value in given.items() if key in APPLIED_ON_RESUME and value != recorded[key]}
    if "n_timesteps" in given:  # -n on a resume always means more, even the run's own number
        applied["n_timesteps"] = given["n_timesteps"]
    return applied


class ContinuedCSVOutputFormat(CSVOutputFormat):
    """SB3's ``progress.csv`` writer going on in a continued run's file: its header read back
    and new rows appended (SB3's own would start the file again), new columns added as SB3
    adds them (it rewrites the file with the extra separators)."""

    def __init__(self, path: Path) -> None:  # noqa: D107 - SB3's writer, on an existing file
        self.file = open(path, "r+")  # noqa: SIM115 - SB3's writer keeps it open until close()
        header = self.file.readline().rstrip("\n")
        self.keys = header.split(",") if header else []
        self.separator, self.quotechar = ",", '"'
        self.file.seek(0, 2)
