"""``train_policy.py --tune SPEC.yml``: sweep seeds and hyperparameters on Ray Tune.

Every trial is one run of :func:`agents.trainers.training_run.train` with the command line's other flags,
its ``seed`` and hyperparameters taken from the search space. After each validation it reports
the selection score (:data:`METRIC`: the mean JCT ratio to ``--eval-reference``, or the mean
censored JCT with ``none``; lower is better) with its timesteps to Tune, whose ASHA scheduler stops
the trials that fall behind at each rung (from ``grace_period`` timesteps, every
``reduction_factor`` times more). The sweep folder ``<log-folder>/sweep_<n>/`` holds:

* ``<trial id>/<algo>_1/``: each trial's run folder (``config.yml``, TensorBoard events in ``tb/``,
  ``checkpoints/``, ``best_model.zip``, ``evaluations.csv``), kept whether or not ASHA stopped it;
* ``tune/``: Tune's own records of the experiment;
* ``trials.csv``: one row per trial (its parameters, best score, timesteps, run folder);
* ``best_model.zip``: the best trial's best model, exported (:func:`agents.saved.export.export_model`)
  so that ``ppo:<sweep folder>/best_model.zip`` loads it.

The search space is YAML: each key is ``seed`` or a hyperparameter (``--hyperparams`` keys), each
value a constant or one of ``{grid: [...]}``, ``{choice: [...]}``, ``{uniform: [low, high]}``,
``{loguniform: [low, high]}``, ``{randint: [low, high]}``; two optional keys set ``num_samples``
(draws of the non-grid entries per grid point, default 1) and ``asha`` (``grace_period``,
default ``--eval-freq``; ``reduction_factor``, default 2)::

    seed: {grid: [0, 1]}
    learning_rate: {loguniform: [1.0e-5, 1.0e-3]}
    num_samples: 2

Each trial asks Ray for one CPU, and one GPU when ``--device`` resolves to CUDA. Ray is reached
through :func:`deepboot_env.ray_pool.ray_session` (``--address``, or a private local instance on
127.0.0.1 of the available CPUs).
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from agents.errors import ConfigError
from agents.hyperparameters import HYPERPARAM_TYPES, check_hyperparams
from agents.models.algorithms import resolve_device
from agents.runs.run_config import TrainSettings, read_yaml, resolve_settings
from agents.runs.run_folder import next_run_dir
from deepboot_env.atomic import atomic_write
from deepboot_env.limits import safe_cell
from deepboot_env.pool import available_cpus
from deepboot_env.ray_pool import RayBackendError, check_ray, ray_session

METRIC = "val_score"
"""What each trial reports after a validation: the selection score (lower is better)."""

DISTRIBUTIONS: tuple[str, ...] = ("grid", "choice", "uniform", "loguniform", "randint")
"""The search-space forms besides a constant."""

SPEC_KEYS: tuple[str, ...] = ("num_samples", "asha")
"""Keys of the YAML that are not search-space entries."""

INSTALL_HINT = "--tune needs Ray Tune, an optional extra: pip install -e '.[ray]' (pip install 'ray[tune]==2.60.0')"
"""The one line shown when Ray is not installed."""


def _number(key: str, value: Any) -> float | int:
    """A bound of a range (YAML reads ``1e-5`` as text)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"--tune: {key}: expected a number, got {value!r}")
    return value


def _check_value(key: str, value: Any) -> Any:
    """``value`` for the entry ``key`` (numbers YAML read as text converted), checked."""
    if isinstance(value, str) and key != "policy":
        try:
            value = float(value)
        except ValueError:
            pass
    if key == "seed":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"--tune: seed: expected an integer, got {value!r}")
        return value
    try:
        check_hyperparams({key: value})
    except ConfigError as exc:
        raise ConfigError(f"--tune: {exc}") from None
    return value


def parse_space(spec: Mapping[str, Any]) -> tuple[dict[str, Any], int, dict[str, float]]:
    """The search space as plain data (``{key: (form, values)}``), ``num_samples`` and the
    ``asha`` settings of a loaded YAML spec.

    Raises:
        ConfigError: for an unknown key or form, or a bad value (one line).
    """
    if not isinstance(spec, Mapping):
        raise ConfigError("--tune: the spec must be a mapping of keys to values or {form: [...]}")
    space: dict[str, Any] = {}
    for key, entry in spec.items():
        if key in SPEC_KEYS:
            continue
        if key != "seed" and key not in HYPERPARAM_TYPES:
            known = ", ".join(["seed", *sorted(HYPERPARAM_TYPES)])
            raise ConfigError(f"--tune: unknown key {key!r}; known: {', '.join(SPEC_KEYS)}, {known}")
        if not (isinstance(entry, Mapping) and len(entry) == 1 and next(iter(entry)) in DISTRIBUTIONS):
            if isinstance(entry, Mapping) and key != "policy_kwargs":
                raise ConfigError(f"--tune: {key}: expected a constant or one of {{{', '.join(DISTRIBUTIONS)}: ...}}")
            space[key] = ("constant", _check_value(key, entry))
            continue
        form, values = next(iter(entry.items()))
        if not isinstance(values, list) or not values:
            raise ConfigError(f"--tune: {key}: {form} takes a non-empty list, got {values!r}")
        if form in ("grid", "choice"):
            space[key] = (form, [_check_value(key, v) for v in values])
            continue
        if len(values) != 2:
            raise ConfigError(f"--tune: {key}: {form} takes [low, high], got {values!r}")
        low, high = (_number(key, v) for v in values)
        if not low < high or (form == "loguniform" and low <= 0):
            raise ConfigError(f"--tune: {key}: {form} needs 0 < low < high, got {values!r}")
        if form == "randint" and not (isinstance(low, int) and isinstance(high, int)):
            raise ConfigError(f"--tune: {key}: randint takes integers, got {values!r}")
        _check_value(key, low)
        space[key] = (form, [low, high])
    if not space:
        raise ConfigError("--tune: the search space is empty")
    samples = spec.get("num_samples", 1)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError(f"--tune: num_samples must be an integer >= 1, got {samples!r}")
    asha = spec.get("asha") or {}
    if not isinstance(asha, Mapping) or set(asha) - {"grace_period", "reduction_factor"}:
        raise ConfigError("--tune: asha takes grace_period and reduction_factor")
    return space, samples, {k: _number(f"asha.{k}", v) for k, v in asha.items()}


def load_spec(path: str | Path) -> tuple[dict[str, Any], int, dict[str, float]]:
    """:func:`parse_space` of the YAML file at ``path``.

    Raises:
        ConfigError: for a missing or unreadable file, or a bad spec.
    """
    return parse_space(read_yaml(Path(path), "--tune"))


def tune_space(space: Mapping[str, Any]) -> dict[str, Any]:
    """Ray Tune's search space for :func:`parse_space`'s."""
    from ray import tune  # lazy: Ray is an optional extra

    forms: dict[str, Callable[..., Any]] = {
        "grid": tune.grid_search,
        "choice": tune.choice,
        "uniform": lambda v: tune.uniform(*v),
        "loguniform": lambda v: tune.loguniform(*v),
        "randint": lambda v: tune.randint(v[0], v[1] + 1),  # both bounds included
    }
    return {key: value if form == "constant" else forms[form](value) for key, (form, value) in space.items()}


def _absolute(value: str) -> str:
    """An existing path made absolute (a trial runs in another folder); anything else as it is."""
    return str(Path(value).resolve()) if value and Path(value).exists() else value


def trial(config: Mapping[str, Any], base: TrainSettings) -> None:
    """One Tune trial: :func:`~agents.trainers.training_run.train` with ``base`` (the command line's
    settings, :func:`trial_settings`) and the trial's ``config`` (seed, hyperparameters) in
    ``<log_folder>/<trial>``, reporting :data:`METRIC` after each validation."""
    from ray import tune  # lazy: Ray is an optional extra

    from agents.trainers.training_run import train  # lazy: SB3 and torch are slow to import

    settings = replace(
        base,
        log_folder=str(Path(base.log_folder) / tune.get_context().get_trial_id()),
        seed=int(config.get("seed", base.seed)),
        hyperparams=[*(base.hyperparams or []), *(f"{k}:{v!r}" for k, v in config.items() if k != "seed")],
    )

    def report(timesteps: int, score: float) -> None:
        tune.report({METRIC: score if math.isfinite(score) else math.inf, "timesteps": timesteps})

    train(settings, on_evaluation=report)


def trial_settings(settings: TrainSettings, algo: str, sweep_dir: Path) -> TrainSettings:
    """What every trial of a sweep in ``sweep_dir`` is asked for: the command line's settings with
    ``algo``, no sweep, no Ray address and no progress bar (the trials run inside the sweep's Ray
    session), runs under the sweep folder, and paths made absolute (a trial runs in another folder)."""
    return replace(
        settings,
        algo=algo,
        tune=None,
        address=None,
        no_progress=True,
        log_folder=str(sweep_dir),
        workload=[_absolute(v) for v in settings.workload],
        eval_workload=[_absolute(v) for v in settings.eval_workload],
        conf_file=_absolute(settings.conf_file or "") or None,
        tensorboard_log=_absolute(settings.tensorboard_log),
    )


def sweep(settings: TrainSettings) -> Path:
    """Run the sweep ``settings.tune`` names (see the module); returns the sweep folder.

    Raises:
        ConfigError: bad spec or flags, Ray missing or unreachable, or no trial that reported.
    """
    from agents.saved.export import export_model  # lazy: SB3 and torch are slow to import

    assert settings.tune is not None, "a sweep needs its --tune spec"
    space, samples, asha = load_spec(settings.tune)
    if settings.init_model or settings.resume_run:
        raise ConfigError("--tune starts new runs; it does not take -i or --resume")
    try:
        check_ray()
    except RayBackendError:
        raise ConfigError(INSTALL_HINT) from None
    algo = settings.algo or "ppo"
    resolved = resolve_settings(settings, algo)
    if resolved["eval_freq"] <= 0:
        raise ConfigError("--tune selects on validation scores: give --eval-freq > 0")
    sweep_dir = next_run_dir(settings.log_folder, "sweep").resolve()
    base = trial_settings(settings, algo, sweep_dir)
    gpus = 1 if resolve_device(settings.device).startswith("cuda") else 0
    results = fit(space, samples, asha, resolved, base, settings.address, gpus)
    rows = [trial_row(results[i], sweep_dir, algo) for i in range(len(results))]
    with atomic_write(sweep_dir / "trials.csv") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["trial"])
        writer.writeheader()
        writer.writerows({key: safe_cell(value) for key, value in row.items()} for row in rows)
    scored = [r for r in rows if math.isfinite(r["best_score"])]
    if not scored:
        errors = [r["error"] for r in rows if r["error"]]
        raise ConfigError(f"--tune: no trial reported a validation score ({len(errors)} of {len(rows)} failed)")
    best = min(scored, key=lambda r: r["best_score"])
    out = export_model(Path(best["run_dir"]) / "best_model.zip", sweep_dir / "best_model.zip")
    if settings.verbose >= 1:
        score = f"{METRIC} {best['best_score']:.4f}"
        print(f"sweep folder: {sweep_dir} ({len(rows)} trials); best: {best['trial']} {score}")
        print(f"best model: {out} (deepboot compare --policies ats ppo:{out})")
    return sweep_dir


def fit(
    space: Mapping[str, Any],
    samples: int,
    asha: Mapping[str, float],
    resolved: Mapping[str, Any],
    base: TrainSettings,
    address: str | None,
    gpus: int,
) -> Any:
    """Ray Tune's results of the trials of ``space`` (``samples`` draws per grid point), each
    ``base`` with its seed and hyperparameters, on one CPU (and ``gpus`` GPUs), stopped early by
    ASHA on :data:`METRIC` (``asha``: the spec's ``grace_period``, default ``--eval-freq``, and
    ``reduction_factor``, default 2; the run's ``n_timesteps`` of ``resolved`` at most), in the Ray
    session of ``address`` (None: a private local instance); Tune's records go to
    ``<base.log_folder>/tune``.

    Raises:
        ConfigError: Ray unreachable.
    """
    try:
        with ray_session(address, available_cpus()):
            from ray import tune  # lazy: Ray is an optional extra
            from ray.tune.schedulers import ASHAScheduler  # lazy: Ray is an optional extra

            scheduler = ASHAScheduler(
                time_attr="timesteps",
                max_t=resolved["n_timesteps"],
                grace_period=asha.get("grace_period", resolved["eval_freq"]),
                reduction_factor=asha.get("reduction_factor", 2),
            )
            tuner = tune.Tuner(
                tune.with_resources(functools.partial(trial, base=base), {"cpu": 1, "gpu": gpus}),
                param_space=tune_space(space),
                tune_config=tune.TuneConfig(metric=METRIC, mode="min", scheduler=scheduler, num_samples=samples),
                run_config=tune.RunConfig(name="tune", storage_path=str(base.log_folder), verbose=0),
            )
            return tuner.fit()
    except RayBackendError as exc:
        raise ConfigError(f"--tune: {exc}") from None


def trial_row(result: Any, sweep_dir: Path, algo: str) -> dict[str, Any]:
    """A trial's row of ``trials.csv``: its parameters, best reported score, timesteps, error
    and run folder (``<sweep_dir>/<trial id>/<algo>_1``)."""
    folder = sweep_dir / str((result.metrics or {}).get("trial_id", ""))  # "": it never reported
    history = result.metrics_dataframe
    reported = history is not None and METRIC in history
    scores: list[float] = [float(v) for v in history[METRIC]] if history is not None and reported else []
    steps = [int(v) for v in history["timesteps"]] if history is not None and reported else []
    return {
        "trial": folder.name,
        **(result.config or {}),
        "best_score": min(scores, default=math.inf),
        "timesteps": max(steps, default=0),
        "error": "" if result.error is None else type(result.error).__name__,
        "run_dir": str(folder / f"{algo}_1"),
    }
