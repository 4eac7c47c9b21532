"""Evolution strategies for the learned priority of :mod:`agents.models.priority` (``train_policy.py --algo es``).

The learned part of :class:`~agents.models.priority.PriorityPolicy` is a handful of coefficients that
decide every job's weight in ATS's knapsack. Its effect shows only in whole episodes (who finishes
first changes every later decision), so it is trained on the episode's own objective, the mean
training JCT, by natural evolution strategies (Wierstra et al. 2014; Salimans et al. 2017 for
RL), not by a per-decision policy gradient:

* each generation draws ``seeds_per_family`` train-seed scenarios of every training family
  (:func:`traces.families.sample_scenario`; the same scenarios for every candidate: common random
  numbers) and ``pairs`` Gaussian directions e; candidates theta +- sigma e (antithetic pairs)
  run every scenario;
* a candidate's fitness is its mean ratio of mean training JCT to ``ats`` on the same scenarios
  (ATS's JCTs are computed once per scenario), shaped into centred ranks (one catastrophic
  candidate counts as any worse one); the gradient estimate is
  sum_i (f(theta + sigma e_i) - f(theta - sigma e_i)) e_i / (2 pairs sigma) over the shaped
  fitnesses f, and Adam descends it;
* the start is ``ats-srpt``'s theta (:func:`~agents.models.priority.srpt_theta`), so training begins at
  the best heuristic (as DL2 starts from a heuristic before improving online);
* every ``eval_freq`` generations (and at generation 0) theta runs the validation scenarios (the
  first 8 val seeds of each ``--eval-workload`` family): the best mean ratio to ``ats`` is
  ``best_model.json``; the selection never sees a test seed.

The run folder (``<log-folder>/es_<n>/``) holds ``config.yml``, ``final_model.json``,
``best_model.json``, ``evaluations.csv`` (one row per validation episode in the schema every
trainer writes, :data:`agents.runs.validation.EVAL_COLUMNS`: ``timesteps`` counts the training
episodes simulated so far, ``iteration`` the generation),
``generations.csv`` (one row per generation), ``state.json`` (theta, Adam's moments, the random
generator, the cached ATS JCTs: what ``--resume`` continues from) and TensorBoard events in
``tb/``: ``sched/val_jct_ratio``, ``sched/train_jct_ratio``, ``es/*`` and ``theta/*``. SIGINT or
SIGTERM stops the generation in progress at once (its worker processes stopped) and saves the run
at the last finished one, as at a normal end; the run folder is locked while it runs. Episodes run in
worker processes or on Ray (:func:`deepboot_env.pool.run_pool`).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import platform
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from agents.hyperparameters import parse_kv
from agents.models.app_table import TABLE_SIZE, AppTableModel, AppTablePolicy, table_names
from agents.models.env_shape import env_shape_of
from agents.models.priority import FEATURES, KNOWN_FEATURES, PriorityModel, PriorityPolicy, srpt_theta
from agents.models.width_table import (
    WidthTableError,
    grow_state_scores,
    grow_width_outputs,
    has_state_scores,
    set_width_table,
    width_names,
    width_table,
)
from agents.runs.interrupt import TrainingInterrupted, command_words, resume_command
from agents.runs.resume import resumed_settings
from agents.runs.run_config import FAMILY_SEEDS, TrainSettings, load_conf, read_yaml
from agents.runs.run_folder import next_run_dir, write_config
from agents.runs.selection import P99_MARGIN_S, p99_verdict
from agents.runs.validation import EVAL_COLUMNS, Validator
from agents.threads import use_torch_threads
from baselines.ats import AtsPolicy
from baselines.hindsight import DEFAULT_PRIOR
from deepboot_env.atomic import append_csv, lock_folder, write_text
from deepboot_env.config import EnvConfig, sim_config
from deepboot_env.es import adam_update, antithetic_gradient
from deepboot_env.evaluation import StalledEpisodeError, run_episode
from deepboot_env.limits import MAX_ES_STATE_BYTES, names, parse_json, read_bounded, shown
from deepboot_env.policy import Policy
from deepboot_env.pool import LOCAL, Backend, available_cpus, run_pool
from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.stops import Stopped, StopSignals
from traces.families import FAMILIES, FamilyError, cached_scenario, family_sampler, split_seeds, val_scenarios

DYNAMICS = "v1"
"""The simulation dynamics of training and validation episodes (the benchmark's)."""

Scenario = tuple[str, int]
"""(family, seed)."""
Item = tuple[tuple[float, ...] | None, str, int, "Subject"]
"""One episode to run: theta (None: ``ats``), family, seed, what theta parameterises."""
GENERATION_COLUMNS = ("generation", "episodes", "train_jct_ratio", "candidate_mean", "candidate_best")
"""The first columns of ``generations.csv``; theta follows, one column per feature. The
candidates' columns are their fitness: the mean JCT ratio, plus ``p99_weight`` times the
:func:`p99_penalty` where that is set (``train_jct_ratio``, theta's own, is the ratio alone)."""


class EsConfigError(ValueError):
    """Bad evolution-strategies settings (one line naming the setting)."""


@dataclass(frozen=True)
class EsSettings:
    """Hyperparameters of an ES run (``agents/conf/deepboot.yml`` preset ``es`` sections, ``-params``).

    Attributes:
        generations: generations to run (``-n`` with ``--algo es``).
        pairs: antithetic pairs of candidates per generation.
        seeds_per_family: train scenarios of each training family per generation.
        sigma: standard deviation of the perturbations of theta.
        learning_rate: Adam's step size on theta.
        eval_freq: validate every this many generations (and at generation 0).
        srpt_power: the warm start, ``ats-srpt``'s power.
        arrival_tilt: > 0 adds the ``arrival_rank`` feature, starting at this coefficient (0.15:
            the warm start is ``ats-srpt-fcfs``).
        app_features: 1 adds one ``app_<name>`` feature per application, starting at 0.
        score_row: 1 (a run over a score model's table, ``-i MODEL.zip``) trains the table's
            score row too: each application's log-weight change, then the width outputs.
        p99_weight: > 0 adds to each candidate's fitness this much per second of its inference
            p99 over ``ats``'s, hinged at 0 on each scenario and averaged over the generation's
            (:func:`p99_penalty`): the selection's p99 margin, kept inside the search.
        state_scores: 1 (a run over a score model's table) also trains the score's weights on
            each job's features (``application_scores`` 2, grown at zero if the model has none):
            scores that move with the job's state (:data:`~agents.models.width_table.STATE_FEATURES`).
        app_table: 1 trains a held application table from zeros (:mod:`agents.models.app_table`:
            each application's score and width scores over the score models' prior, no model, its
            episodes compiled), saved as ``best_model.json`` and played as ``table:<path>``.
    """

    generations: int = 24
    pairs: int = 8
    seeds_per_family: int = 3
    sigma: float = 0.1
    learning_rate: float = 0.02
    eval_freq: int = 2
    srpt_power: float = 0.25
    arrival_tilt: float = 0.0
    app_features: int = 0
    score_row: int = 0
    p99_weight: float = 0.0
    state_scores: int = 0
    app_table: int = 0

    @property
    def features(self) -> tuple[str, ...]:
        """The features theta weighs: :data:`~agents.models.priority.FEATURES` and the extras asked for."""
        extras = ("arrival_rank",) if self.arrival_tilt > 0 else ()
        apps = tuple(f"app_{name}" for name in APP_NAMES) if self.app_features else ()
        return FEATURES + extras + apps

    @classmethod
    def of(cls, values: dict[str, Any]) -> EsSettings:
        """Settings from a flat mapping, checked.

        Raises:
            EsConfigError: an unknown key or a value out of range.
        """
        known = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise EsConfigError(f"unknown ES settings {names(unknown)}; known: {', '.join(known)}")
        out: dict[str, Any] = {
            name: _setting(name, value, int if known[name] == "int" else float) for name, value in values.items()
        }
        settings = cls(**out)
        for name in ("generations", "pairs", "seeds_per_family", "eval_freq"):
            if getattr(settings, name) < 1:
                raise EsConfigError(f"ES setting {name} must be >= 1, got {getattr(settings, name)}")
        for name in ("sigma", "learning_rate"):
            if not (0 < getattr(settings, name) < math.inf):
                raise EsConfigError(f"ES setting {name} must be > 0 and finite, got {getattr(settings, name)}")
        for name in ("srpt_power", "arrival_tilt", "p99_weight"):
            if not (0 <= getattr(settings, name) < math.inf):
                raise EsConfigError(f"ES setting {name} must be >= 0 and finite, got {getattr(settings, name)}")
        for name in ("app_features", "score_row", "state_scores", "app_table"):
            if getattr(settings, name) not in (0, 1):
                raise EsConfigError(f"ES setting {name} must be 0 or 1, got {getattr(settings, name)}")
        if settings.app_table and (settings.app_features or settings.arrival_tilt):
            raise EsConfigError(
                "ES setting app_table trains a table, not a priority: drop app_features and arrival_tilt"
            )
        return settings


MAX_SETTING = 1_000_000
"""The largest count an ES setting may hold (generations, pairs, ...): more would run for years."""


def _setting(name: str, value: Any, kind: type) -> int | float:
    """``value`` of ES setting ``name`` as ``kind`` (int: a whole number up to :data:`MAX_SETTING`).

    Raises:
        EsConfigError: a value that is not a (whole, finite) number, named and cut.
    """
    whole = " (whole)" if kind is int else ""
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    try:
        number = float(value) if ok else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or (kind is int and not (number.is_integer() and abs(number) <= MAX_SETTING)):
        limit = f" up to {MAX_SETTING:,}" if kind is int else ""
        raise EsConfigError(f"ES setting {name} must be a number{whole} (finite{limit}), got {shown(value)}")
    return int(number) if kind is int else number


@dataclass(frozen=True)
class Subject:
    """What theta parameterises: the learned priority's coefficients of ``features`` (``model``
    None), a held application table (``table``: :mod:`agents.models.app_table`), or the width
    outputs (with ``score_row``, the whole application table; with ``state_scores``, then the
    score's weights on the job's features) of the score model saved at ``model`` (``features``:
    the :func:`~agents.models.width_table.width_names`)."""

    features: tuple[str, ...]
    model: str | None = None
    score_row: bool = False
    state_scores: bool = False
    table: bool = False

    def policy(self, theta: Sequence[float]) -> Policy:
        """The candidate ``theta`` as a policy (a worker's: the model is loaded once per process)."""
        if self.table:  # a Policy: its simulator hooks are the prior's, served read-only
            return cast(Policy, AppTablePolicy(theta))
        if self.model is None:
            return PriorityPolicy(theta, features=self.features)
        policy = _saved_agent(self.model)
        self.write_table(policy.model, theta)
        return policy

    @property
    def trains(self) -> str:
        """What theta is, in words (the run's ``config.yml``)."""
        if self.table:
            return "held application table"
        if self.model is None:
            return "priority"
        table = "application table" if self.score_row else "width table"
        return f"{table} and state scores" if self.state_scores else table

    def prior(self, settings: EsSettings) -> str:
        """The policy the run starts from, which validation compares with: the start model (its
        table as it was), else the warm start of the learned priority (``ats-srpt``, or
        ``ats-srpt-fcfs`` with an arrival tilt; a resumed run started elsewhere still names it)."""
        if self.model is not None:
            return f"ppo:{self.model}"
        if self.table:
            return DEFAULT_PRIOR
        return "ats-srpt-fcfs" if settings.arrival_tilt else "ats-srpt"

    def write_table(self, model: Any, theta: Sequence[float]) -> None:
        """Write ``theta`` into ``model``'s table (the width outputs, and the score row too)."""
        assert self.model is not None
        set_width_table(model, theta, self.model, self.score_row, self.state_scores)


@functools.lru_cache(maxsize=2)
def _saved_agent(path: str) -> Any:
    """The score model at ``path`` as a policy, loaded once per process (each candidate then
    writes its width table into it)."""
    from agents.saved.policy_adapter import load_agent_policy  # lazy: torch and SB3 are slow to import

    return load_agent_policy(path)


ATS: Subject = Subject(())
"""The subject of a reference episode (theta None: ``ats``)."""


def episode_outcome(item: Item) -> tuple[float, float]:
    """Mean training JCT and inference p99 latency (s) of one episode: theta's policy (``ats``
    for None) on scenario ``seed`` of ``family`` (a worker's job); an infinite JCT and no p99
    (NaN) for an episode the watchdog stopped (no training progress for a week of simulated time:
    a candidate that thrashes ranks last)."""
    theta, family, seed, subject = item
    scenario = cached_scenario(family, seed)
    policy = AtsPolicy() if theta is None else subject.policy(theta)
    config = scenario.configure(sim_config(dynamics=DYNAMICS))
    try:
        metrics = run_episode(policy, scenario.workload, config)
    except StalledEpisodeError:
        return math.inf, math.nan
    return float(metrics.train_jct_mean), float(metrics.infer_latency_p99)


def episode_jct(item: Item) -> float:
    """The mean training JCT of :func:`episode_outcome`."""
    return episode_outcome(item)[0]


@dataclass
class EsState:
    """What a run continues from: theta, Adam's moments, the generation, the random generator's
    state and the ATS JCT of every scenario run so far (``state.json``)."""

    theta: list[float]
    m: list[float]
    v: list[float]
    generation: int = 0
    episodes: int = 0
    best_val: float | None = None
    best_within: bool = True
    """Whether the best model's inference p99 was within the margin (:mod:`agents.runs.selection`;
    True in a state written before the margin: its best stays unless a candidate scores lower)."""
    rng: dict[str, Any] | None = None
    ats_jct: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @classmethod
    def start(cls, settings: EsSettings, seed: int, theta: Sequence[float] | None = None) -> EsState:
        """A new run's state at ``theta`` (None: the warm start of the learned priority,
        ``ats-srpt``, or ``ats-srpt-fcfs`` with ``arrival_tilt`` 0.15), Adam at rest, the
        generator seeded by ``seed``."""
        if theta is None:
            theta = srpt_theta(settings.srpt_power, settings.features, settings.arrival_tilt).tolist()
        zeros = [0.0] * len(theta)
        rng = dict(np.random.default_rng(seed).bit_generator.state)
        return cls([float(x) for x in theta], zeros, list(zeros), rng=rng)

    @classmethod
    def load(cls, path: Path) -> EsState:
        """Read ``state.json`` (plain JSON).

        Raises:
            EsConfigError: a missing or malformed file, named.
        """
        try:
            data = read_bounded(path, MAX_ES_STATE_BYTES, "an ES state", EsConfigError)
        except OSError as exc:
            raise EsConfigError(f"{path}: cannot resume from it ({exc.strerror or exc})") from None
        doc = parse_json(data, str(path), EsConfigError, max_values=MAX_ES_STATE_BYTES // 8)
        return cls(**check_state(path, doc))

    def save(self, path: Path) -> None:
        """Write ``state.json`` (atomically: a stop or a full disk leaves the previous state)."""
        write_text(path, json.dumps(asdict(self)) + "\n")


STATE_FIELDS = (
    "theta",
    "m",
    "v",
    "generation",
    "episodes",
    "best_val",
    "best_within",
    "rng",
    "ats_jct",
    "wall_seconds",
)
"""The fields of ``state.json``."""

ATS_JCT_RANGE = (1.0, 1e9)
"""The range of a cached ATS mean JCT (s): a value outside was not simulated (a tampered cache
would make every ratio to it garbage)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_state(path: Path, doc: Any) -> dict[str, Any]:
    """The fields of a ``state.json`` document, checked: types, shapes (one entry per feature),
    finiteness, counts, the random generator's state and the ATS cache (keys ``family/seed`` of a
    known family and a train or val seed, values in :data:`ATS_JCT_RANGE`).

    Raises:
        EsConfigError: one line naming the file and the field.
    """

    def bad(name: str, want: str) -> EsConfigError:
        return EsConfigError(f"{path}: field {name!r} must be {want}, got {shown(doc.get(name))}")

    if not isinstance(doc, dict):
        raise EsConfigError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    odd = sorted(set(doc) - set(STATE_FIELDS), key=str)
    if odd or not {"theta", "m", "v"} <= set(doc):
        raise EsConfigError(f"{path}: expected the fields {', '.join(STATE_FIELDS)}; unknown or missing: {shown(odd)}")
    tables = [len(width_names(row, state)) for state in (False, True) for row in (False, True)]
    sizes = {*range(len(FEATURES), len(KNOWN_FEATURES) + 1), *tables}
    for name in ("theta", "m", "v"):
        value = doc[name]
        if not (isinstance(value, list) and len(value) in sizes and all(map(_is_number, value))):
            priority = f"{len(FEATURES)} to {len(KNOWN_FEATURES)} (a priority)"
            tabled = f"{tables[0]} (a width table), {tables[1]} (a whole table)"
            want = f"{priority}, {tabled}, or either with state scores ({tables[2]}, {tables[3]})"
            raise bad(name, f"{want} finite numbers")
        if len(value) != len(doc["theta"]):
            raise bad(name, f"as many numbers as theta ({len(doc['theta'])})")
    if any(x < 0 for x in doc["v"]):
        raise bad("v", "non-negative (Adam's second moments)")
    for name in ("generation", "episodes"):
        value = doc.get(name, 0)
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**12):
            raise bad(name, "a whole number >= 0")
    for name, low in (("best_val", 0.0), ("wall_seconds", 0.0)):
        value = doc.get(name)
        if value is not None and not (_is_number(value) and value >= low):
            raise bad(name, "a finite number >= 0")
    if not isinstance(doc.get("best_within", True), bool):
        raise bad("best_within", "true or false")
    try:
        np.random.default_rng().bit_generator.state = doc.get("rng") or np.random.default_rng().bit_generator.state
    except (TypeError, ValueError, KeyError, OverflowError):
        raise bad("rng", "a PCG64 random generator state") from None
    cache = doc.get("ats_jct", {})
    if not isinstance(cache, dict):
        raise bad("ats_jct", "an object of ATS JCTs by family/seed")
    splits = (split_seeds("train"), split_seeds("val"))  # ranges: membership without a set of millions
    low, high = ATS_JCT_RANGE
    for key, value in cache.items():
        family, _, seed = str(key).partition("/")
        whole = seed.isascii() and seed.isdigit() and len(seed) <= 20
        if family not in FAMILIES or not whole or not any(int(seed) in split for split in splits):
            raise EsConfigError(f"{path}: field 'ats_jct': {shown(key)} is not a family/seed of the train or val split")
        if not (_is_number(value) and low <= value <= high):
            raise EsConfigError(
                f"{path}: field 'ats_jct': {key} holds {shown(value)}, not an ATS mean JCT ({low:g} to {high:g} s)"
            )
    return doc


def verify_cache(path: Path, state: EsState, checks: int = 2) -> None:
    """Recompute the ATS JCT of up to ``checks`` cached scenarios (the first and the last key)
    and refuse the state where one differs: a cache edited by hand, or made by another version
    of the simulator, would skew every ratio to ATS (a poisoned entry once gave a ratio of 1e303).
    A spot check: about a second of simulation per scenario.

    Raises:
        EsConfigError: naming the file, the scenario and both values.
    """
    keys = sorted(state.ats_jct)
    picks = [keys[0], keys[-1]][:checks] if keys else []
    for key in dict.fromkeys(picks):
        family, _, seed = key.partition("/")
        jct = episode_jct((None, family, int(seed), ATS))
        saved = state.ats_jct[key]
        if not math.isclose(jct, saved, rel_tol=1e-9):
            raise EsConfigError(
                f"{path}: field 'ats_jct': {key} holds {saved:g} s but ATS takes {jct:g} s on that scenario: "
                "the cache does not match the scenarios (edited, or from another version)"
            )


def adam_step(state: EsState, grad: np.ndarray, lr: float) -> None:
    """One Adam descent step of ``state.theta`` along ``grad`` (:func:`deepboot_env.es.adam_update`;
    moments and step count in the state)."""
    theta, m, v = adam_update(
        np.asarray(state.theta), np.asarray(state.m), np.asarray(state.v), state.generation, grad, lr
    )
    state.theta, state.m, state.v = theta.tolist(), m.tolist(), v.tolist()


def centered_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks of ``values`` scaled to [-0.5, 0.5] (ties in order of appearance): the fitness
    shaping of Salimans et al. 2017, so that one catastrophic candidate weighs no more than any
    other worse one."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks / max(len(values) - 1, 1) - 0.5


def p99_penalty(p99s: np.ndarray, ats_p99s: np.ndarray) -> np.ndarray:
    """Each candidate's mean, over the scenarios, of its inference p99 over ``ats``'s, hinged at
    0 (seconds; an episode without a finite p99 adds 0: a stalled one already ranks last).

    Args:
        p99s: ``(candidates, scenarios)`` inference p99s.
        ats_p99s: ``(scenarios,)`` ``ats``'s.

    Why a hinge per scenario: a table that is faster on JCT by lending more can push one bursty
    scenario's p99 tens of seconds up while the family mean moves a few; the hinge sees that
    scenario, and a p99 below ``ats``'s earns nothing to trade against it.
    """
    excess = np.asarray(p99s, dtype=float) - np.asarray(ats_p99s, dtype=float)[None, :]
    return np.where(np.isfinite(excess), np.maximum(excess, 0.0), 0.0).mean(axis=1)


class EsRun:
    """One ES run in ``run_dir`` (see the module docstring).

    Args:
        run_dir: the run folder (exists).
        families: the training families.
        val: the validation scenarios.
        settings: the hyperparameters.
        state: where to start (new or resumed).
        subject: what theta parameterises.
        jobs: worker processes; backend: where episodes run.
        command: the command line, kept in the models' info.
        log: where progress lines go (None: nowhere).
    """

    def __init__(
        self,
        run_dir: Path,
        families: Sequence[str],
        val: Sequence[Scenario],
        settings: EsSettings,
        state: EsState,
        subject: Subject,
        jobs: int,
        backend: Backend = LOCAL,
        command: str | None = None,
        log: Callable[[str], None] | None = print,
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter  # lazy: torch is slow to import (for TensorBoard only)

        self.run_dir, self.families, self.val, self.settings = run_dir, list(families), list(val), settings
        self.state, self.jobs, self.backend, self.command, self.log = state, jobs, backend, command, log
        self.subject = subject
        self.rng = np.random.default_rng()
        if state.rng is not None:
            self.rng.bit_generator.state = state.rng
        self.writer = SummaryWriter(str(run_dir / "tb"))
        self.t0 = time.time()
        self.wall_before = state.wall_seconds
        self.ats_p99: dict[str, float] = {}
        """``ats``'s inference p99 by ``family/seed``, for the training's p99 term (this process only)."""
        self.validator = (
            Validator(
                [(f"{family}-{seed}", cached_scenario(family, seed)) for family, seed in self.val],
                EnvConfig.from_options(dynamics=DYNAMICS),
                csv_path=run_dir / "evaluations.csv",
                prior=subject.prior(settings),
                jobs=jobs,
                backend=backend,
            )
            if self.val
            else None
        )
        """The validation (None without validation scenarios): ``ats`` and the prior run once per
        scenario in this process (on resume, the first validation runs them once more)."""

    # ------------------------------------------------------------------ episodes
    def _run(self, items: Sequence[Item], label: str, with_p99: bool) -> list[tuple[float, float]]:
        """JCTs and inference p99s of the items; ATS's JCTs are cached in the state and its p99s
        in this process (``with_p99`` False: an ATS p99 not cached is NaN, and not run for)."""
        jct_cache, p99_cache = self.state.ats_jct, self.ats_p99
        keys = {(f, s): f"{f}/{s}" for _, f, s, _ in items}
        needed = sorted(k for k, key in keys.items() if key not in jct_cache or (with_p99 and key not in p99_cache))
        todo = [(None, f, s, ATS) for f, s in needed] + [it for it in items if it[0] is not None]
        results = run_pool(episode_outcome, todo, self.jobs, False, label, backend=self.backend)
        for scenario, (jct, p99) in zip(needed, results, strict=False):
            jct_cache[keys[scenario]], p99_cache[keys[scenario]] = jct, p99
        out = iter(results[len(needed) :])
        return [
            (jct_cache[keys[f, s]], p99_cache.get(keys[f, s], math.nan)) if theta is None else next(out)
            for theta, f, s, _ in items
        ]

    def outcomes(
        self, thetas: Sequence[tuple[float, ...]], scenarios: Sequence[Scenario], label: str, with_p99: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(len(thetas), len(scenarios))`` JCT ratios to ``ats`` and inference p99s, and
        ``ats``'s p99 per scenario (NaN without ``with_p99``)."""
        items: list[Item] = [(None, f, s, ATS) for f, s in scenarios]
        items += [(t, f, s, self.subject) for t in thetas for f, s in scenarios]
        results = np.asarray(self._run(items, label, with_p99), dtype=float).reshape(len(items), 2)
        ats, rest = results[: len(scenarios)], results[len(scenarios) :].reshape(len(thetas), len(scenarios), 2)
        return rest[..., 0] / ats[:, 0], rest[..., 1], ats[:, 1]

    # ------------------------------------------------------------------ the loop
    def validate(self) -> float:
        """Theta's mean ratio to ``ats`` on the validation scenarios, through the run's
        :class:`~agents.runs.validation.Validator` (the one every trainer uses): rows to
        ``evaluations.csv``, the best model kept by the one best-model rule."""
        st = self.state
        if self.validator is None:
            raise EsConfigError("no validation scenarios (--eval-workload)")
        self.validator.best_score = math.inf if st.best_val is None else st.best_val
        self.validator.best_within = st.best_within
        evaluation = self.validator.validate(self, f"validation {st.generation}")
        score, excess = evaluation.score, evaluation.p99_excess
        self.writer.add_scalar("sched/val_jct_ratio", score, st.generation)
        if math.isfinite(evaluation.prior_ratio):
            self.writer.add_scalar("sched/val_prior_ratio", evaluation.prior_ratio, st.generation)
        if math.isfinite(excess.mean):
            self.writer.add_scalar("sched/val_p99_excess", excess.mean, st.generation)
            self.writer.add_scalar("sched/val_p99_excess_median", excess.median, st.generation)
        if evaluation.improved:
            st.best_val, st.best_within = score, evaluation.within
            self.write_model("best_model", score)
        if self.log:
            self.log(
                f"generation {st.generation}: validation JCT ratio to ats {score:.4f} (best {st.best_val:.4f}); "
                + p99_verdict(excess, "ats", P99_MARGIN_S)
            )
        return score

    def progress(self) -> tuple[int, int]:
        """(training episodes, generations) so far (:class:`~agents.runs.validation.Trainer`)."""
        return self.state.episodes, self.state.generation

    def snapshot(self, folder: Path) -> str:
        """The current theta saved in ``folder`` for the validation's workers; its policy name
        (``priority:<json>``, or ``ppo:<zip>`` for a table of a score model;
        :class:`~agents.runs.validation.Trainer`)."""
        if self.subject.model is not None:
            from agents.saved.checkpoint import save_model  # lazy: SB3 is slow to import

            model = _saved_agent(self.subject.model).model
            self.subject.write_table(model, self.state.theta)
            return f"ppo:{save_model(model, folder / 'model.zip')}"
        path = folder / "model.json"
        self.model(None).save(path)
        return f"{'table' if self.subject.table else 'priority'}:{path}"

    def wall_seconds(self) -> float:
        """Wall time of the run so far, its earlier sessions included."""
        return round(self.wall_before + time.time() - self.t0, 1)

    def write_model(self, name: str, val_ratio: float | None) -> Path:
        """Save the current theta as ``<name>.json`` (a priority model or a held table, with its provenance) or,
        for a width table, as ``<name>.zip``: the start model with theta as its width outputs
        (its provenance: the run's ``config.yml``). Returns the path."""
        if self.subject.model is not None:
            from agents.saved.checkpoint import save_model  # lazy: SB3 is slow to import

            model = _saved_agent(self.subject.model).model  # the candidates' copy: every use writes its table
            self.subject.write_table(model, self.state.theta)
            return save_model(model, self.run_dir / f"{name}.zip")
        path = self.run_dir / f"{name}.json"
        self.model(val_ratio).save(path)
        return path

    def model(self, val_ratio: float | None) -> PriorityModel | AppTableModel:
        """The current theta as a priority model or a held table, with its provenance."""
        info = {
            "algorithm": "evolution strategies (antithetic, common random numbers, Adam)",
            "command": self.command,
            "training_families": self.families,
            "generation": self.state.generation,
            "training_episodes": self.state.episodes,
            "val_jct_ratio_to_ats": val_ratio,
            "val_scenarios": len(self.val),
            "wall_seconds": self.wall_seconds(),
            "machine": machine(),
            "settings": asdict(self.settings),
        }
        if self.subject.table:
            return AppTableModel(tuple(self.state.theta), info=info)
        return PriorityModel(tuple(self.state.theta), self.settings.features, info=info)

    def generation(self) -> None:
        """One generation: draw scenarios and directions, run the candidates, step theta."""
        st, cfg = self.state, self.settings
        train = split_seeds("train")
        draws = [(f, self.rng.integers(len(train))) for f in self.families for _ in range(cfg.seeds_per_family)]
        batch = [(f, int(train[i])) for f, i in draws]
        eps = self.rng.standard_normal((cfg.pairs, len(st.theta)))
        theta = np.asarray(st.theta)
        cands = [theta, *(theta + cfg.sigma * eps), *(theta - cfg.sigma * eps)]
        with_p99 = cfg.p99_weight > 0
        label = f"generation {st.generation}"
        ratios, p99s, ats_p99s = self.outcomes([tuple(c.tolist()) for c in cands], batch, label, with_p99)
        jct = ratios.mean(axis=1)
        penalty = p99_penalty(p99s, ats_p99s) if with_p99 else np.zeros(len(cands))
        fitness = jct + cfg.p99_weight * penalty
        shaped = centered_ranks(fitness[1:])
        grad = antithetic_gradient(shaped[: cfg.pairs], shaped[cfg.pairs :], eps, cfg.sigma)
        adam_step(st, grad, cfg.learning_rate)
        st.episodes += ratios.size
        st.generation += 1
        st.rng = dict(self.rng.bit_generator.state)
        w = self.writer
        w.add_scalar("sched/train_jct_ratio", float(jct[0]), st.generation)
        if with_p99:
            w.add_scalar("es/p99_excess", float(penalty[0]), st.generation)
        w.add_scalar("es/candidate_mean", float(fitness.mean()), st.generation)
        w.add_scalar("es/candidate_best", float(fitness.min()), st.generation)
        w.add_scalar("es/gradient_norm", float(np.linalg.norm(grad)), st.generation)
        w.add_scalar("es/episodes", st.episodes, st.generation)
        features = self.subject.features
        for name, value in zip(features, st.theta, strict=True):
            w.add_scalar(f"theta/{name}", value, st.generation)
        values = [st.generation, st.episodes, jct[0], fitness.mean(), fitness.min(), *st.theta]
        columns = GENERATION_COLUMNS + features
        append_csv(self.run_dir / "generations.csv", columns, [dict(zip(columns, values, strict=True))])
        if self.log:
            spread = f"{fitness.min():.4f}-{fitness.max():.4f}"
            self.log(f"generation {st.generation}: train JCT ratio {jct[0]:.4f} (candidates' fitness {spread})")

    def save(self) -> Path:
        """state.json and final_model.json; returns the model's path."""
        self.state.wall_seconds = self.wall_seconds()
        self.state.save(self.run_dir / "state.json")
        final = self.write_model("final_model", None)
        self.writer.flush()
        return final

    def train(self, stop: Callable[[], bool] = lambda: False) -> Path:
        """Run to ``settings.generations`` (or until ``stop()`` is true after a generation);
        validates at the start, every ``eval_freq`` generations and at the end. A SIGINT or
        SIGTERM during the episodes (:class:`~deepboot_env.stops.Stopped`, their pool stopped)
        ends the run at the last finished generation: its state is saved, and the generation in
        progress runs again on resume (the same draws), as does a validation it cut short."""
        cfg = self.settings
        try:
            if self._validation_due():
                self.validate()
            while self.state.generation < cfg.generations and not stop():
                self.generation()
                if self._validation_due():
                    self.validate()
                self.save()
        except Stopped:
            pass
        final = self.save()
        self.writer.close()
        return final

    def _validation_due(self) -> bool:
        """Whether the current generation is one to validate (0, every ``eval_freq``-th, the
        last) and ``evaluations.csv`` has no row of it yet."""
        g, cfg = self.state.generation, self.settings
        if g % cfg.eval_freq != 0 and g != cfg.generations:
            return False
        return last_generation(self.run_dir / "evaluations.csv") != g


def last_generation(path: Path) -> int | None:
    """The generation (``iteration``) of the last row of an ``evaluations.csv`` (None: no file or no row).

    Raises:
        EsConfigError: the file is not one this trainer wrote (:func:`read_run_csv`).
    """
    rows = read_run_csv(path, EVAL_COLUMNS)
    try:
        return int(rows[-1]["iteration"]) if rows else None
    except ValueError:
        raise EsConfigError(f"{path}: line {len(rows) + 1}: field 'iteration' is not a whole number") from None


MAX_RUN_CSV_BYTES = 64 << 20
"""Largest ``evaluations.csv`` / ``generations.csv`` a resume reads (a row is about 100 bytes)."""


def read_run_csv(path: Path, columns: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a run folder's CSV (``[]`` if there is none), read bounded and checked: the
    header starts with ``columns`` and every row has the header's length. A resume reads both of
    its CSVs so before its first episode, not after a generation's work.

    Raises:
        EsConfigError: one line naming the file and the line.
    """
    if not path.exists():
        return []
    try:
        text = read_bounded(path, MAX_RUN_CSV_BYTES, "a run's CSV", EsConfigError).decode("utf-8")
        table = list(csv.reader(io.StringIO(text, newline="")))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise EsConfigError(f"{path}: cannot resume from it ({shown(why)})") from None
    if not table:
        return []
    header, rows = table[0], table[1:]
    if tuple(header[: len(columns)]) != tuple(columns):
        raise EsConfigError(
            f"{path}: line 1: header {shown(header, 60)} is not this trainer's ({', '.join(columns)}, ...)"
        )
    for number, row in enumerate(rows, 2):
        if len(row) != len(header):
            raise EsConfigError(f"{path}: line {number}: {len(row)} fields, the header has {len(header)}")
    return [dict(zip(header, row, strict=True)) for row in rows]


def machine() -> str:
    """The machine a run ran on, in words (CPUs and platform), for the models' info."""
    return f"{available_cpus()} CPUs, {platform.machine()}, {platform.system()}"


def family_names(values: Sequence[str], flag: str) -> list[str]:
    """The family names of ``family:<name>`` values (the train split, or ``flag``'s split).

    Raises:
        EsConfigError: for a value that is not a family, or an unknown family.
    """
    names = []
    for value in values:
        try:
            names.append(family_sampler(value).family)
        except FamilyError:
            known = ", ".join(FAMILIES)
            raise EsConfigError(
                f"{flag} {shown(value)}: --algo es takes workload families family:<name> ({known})"
            ) from None
    return names


def train_es(flags: TrainSettings) -> Path:
    """``train_policy.py --algo es``: an ES run as ``flags`` say; returns the run folder.

    ``--workload family:<name> ...``: the training families (train seeds); ``--eval-workload``:
    validation families (their first ``--eval-episodes`` val seeds, default 8; the default ``val``
    means every family);
    ``--preset`` / ``-conf``: the ``es`` section of a preset; ``-params K:V``: :class:`EsSettings`
    fields; ``-n``: generations; ``--eval-freq``: generations between validations;
    ``--eval-jobs``: worker processes; ``--vec-env ray`` / ``--address``: episodes on Ray;
    ``--resume RUN``: continue that run folder as it started (:mod:`agents.runs.resume`: its
    settings, families and seed; ``-n`` more generations); ``-i MODEL.zip``:
    a new run over that score model's width outputs (:mod:`agents.models.width_table`; grown first if it
    has none), its models ``best_model.zip`` and ``final_model.zip`` (PPO resumes them).

    Raises:
        EsConfigError: bad flags or settings; TrainingInterrupted: stopped by SIGINT/SIGTERM (saved).
    """
    flags, more = resumed_settings(flags, say=print if flags.verbose else None)
    if flags.resume_run:
        flags = replace(flags, n_timesteps=more)  # es_state: -n more generations, else to the run's own
    families, evals, val = es_scenarios(flags)
    values = es_values(flags)
    run_dir = es_run_folder(flags, values)
    folder_flag = "--resume" if resumed_folder(flags) is not None else "--log-folder"
    with lock_folder(run_dir, folder_flag), StopSignals(interruptible=False) as stops:
        subject, theta = es_subject(flags, run_dir, values)
        settings, state = es_state(flags, run_dir, values, subject, theta)
        jobs = flags.eval_jobs or available_cpus()
        backend = Backend("ray", flags.address) if flags.vec_env == "ray" else LOCAL
        backend.check()
        command = flags.command or shlex.join(command_words(None))
        config = {
            "algo": "es",
            "command": command,
            "args": asdict(flags),
            "workload": families,
            "eval_workload": evals,
            "seed": flags.seed,
            "settings": asdict(settings),
            "trains": subject.trains,
            "start_model": start_model_source(flags, run_dir),
            "jobs": jobs,
            "backend": backend.kind,
            "machine": machine(),
        }
        write_config(run_dir / "config.yml", config)
        log = functools.partial(print, flush=True) if flags.verbose else None
        run = EsRun(run_dir, families, val, settings, state, subject, jobs, backend, command, log)
        final = run.train(stop=lambda: stops.signum is not None)
    if stops.signum is not None:
        resume = resume_command(command_words(command), run_dir)
        raise TrainingInterrupted(stops.signum, run_dir, final, resume)
    if log:
        done = f"{state.generation} generations, {state.episodes} episodes, {state.wall_seconds:.0f} s"
        log(f"run folder: {run_dir}  ({done})")
    return run_dir


def es_scenarios(flags: TrainSettings) -> tuple[list[str], list[str], list[Scenario]]:
    """The training families (``--workload``), the validation families (``--eval-workload``;
    ``val``: every family) and the validation scenarios: each validation family's first
    ``--eval-episodes`` val seeds (default :data:`~agents.runs.run_config.FAMILY_SEEDS`).

    Raises:
        EsConfigError: a workload that is not a family.
    """
    families = family_names(flags.workload, "--workload")
    default_val = list(flags.eval_workload) == ["val"]
    evals = list(FAMILIES) if default_val else family_names(flags.eval_workload, "--eval-workload")
    per_family = flags.eval_episodes or FAMILY_SEEDS
    return families, evals, val_scenarios(evals, per_family)


def es_values(flags: TrainSettings) -> dict[str, Any]:
    """The :class:`EsSettings` values the flags give (not checked yet): the preset's ``es``
    section (a resumed run: the settings its ``config.yml`` recorded, so that it goes on as it
    started whatever the preset), then ``-params`` and ``--eval-freq``."""
    saved = saved_settings(resumed_folder(flags))
    preset = saved if saved is not None else load_conf(flags.conf_file, flags.preset, "es", common=False)
    values = {k: v for k, v in preset.items() if k in EsSettings.__dataclass_fields__}
    values.update(parse_kv(flags.hyperparams, "-params"))
    if flags.eval_freq is not None:
        values["eval_freq"] = flags.eval_freq
    return values


def resumed_folder(flags: TrainSettings) -> Path | None:
    """The run folder ``--resume`` continues (a folder, or a file in it); None for a new run."""
    if not flags.resume_run:
        return None
    path = Path(flags.resume_run)
    return path if path.is_dir() else path.parent


def saved_config(run_dir: Path | None) -> dict[str, Any]:
    """The ``config.yml`` of a run folder (empty: no folder or no file).

    Raises:
        ConfigError: an unreadable file (one line).
    """
    config = run_dir / "config.yml" if run_dir is not None else None
    if config is None or not config.is_file():
        return {}
    saved = read_yaml(config, "--resume")
    return saved if isinstance(saved, dict) else {}


def saved_settings(run_dir: Path | None) -> dict[str, Any] | None:
    """The ``settings`` a run folder's ``config.yml`` recorded (None: none recorded)."""
    settings = saved_config(run_dir).get("settings")
    return dict(settings) if isinstance(settings, dict) else None


def es_run_folder(flags: TrainSettings, values: dict[str, Any]) -> Path:
    """The run folder: the ``--resume`` one, or a new ``<log-folder>/es_<n>`` once ``values``
    (``-n`` as ``generations``) are checked.

    Raises:
        EsConfigError: no such folder to resume, or bad settings.
    """
    run_dir = resumed_folder(flags)
    if run_dir is not None and not run_dir.is_dir():
        raise EsConfigError(f"--resume {flags.resume_run}: no such run folder")
    if run_dir is None and flags.n_timesteps is not None:
        values["generations"] = flags.n_timesteps
    settings = EsSettings.of(values)  # checked before a run folder is made
    for name in ("score_row", "state_scores"):
        if getattr(settings, name) and not trains_a_model(flags, run_dir):
            raise EsConfigError(f"ES setting {name} trains a score model's table: give the model with -i MODEL.zip")
    if settings.app_table and trains_a_model(flags, run_dir):
        raise EsConfigError("ES setting app_table trains a held table from zeros: drop -i MODEL.zip")
    return run_dir if run_dir is not None else next_run_dir(flags.log_folder, "es")


START_MODEL = "start_model.zip"
"""The file, in a run folder over a model's width outputs, of the model it started from (grown)."""


def start_model_path(flags: TrainSettings) -> Path | None:
    """The score model ``-i MODEL.zip`` names for a new run over its widths (None: no ``-i``, or
    a continued run, which has its start model in its folder)."""
    path = Path(flags.init_model) if flags.init_model and not flags.resume_run else None
    return path if path is not None and path.suffix == ".zip" and path.is_file() else None


def trains_a_model(flags: TrainSettings, run_dir: Path | None) -> bool:
    """Whether the run trains a score model's table: ``--resume MODEL.zip``, or a resumed run
    folder ``run_dir`` that holds its start model (else it trains a priority)."""
    if start_model_path(flags) is not None:
        return True
    return run_dir is not None and resumed_folder(flags) is not None and (run_dir / START_MODEL).is_file()


def start_model_source(flags: TrainSettings, run_dir: Path) -> str | None:
    """The model a run over widths started from, as its first session's ``config.yml`` names it
    (a resumed session keeps it there); None for a priority run."""
    source = start_model_path(flags)
    if source is not None:
        return str(source)
    previous = saved_config(run_dir).get("start_model") if (run_dir / START_MODEL).is_file() else None
    return str(previous) if previous is not None else None


def es_subject(flags: TrainSettings, run_dir: Path, values: dict[str, Any]) -> tuple[Subject, tuple[float, ...] | None]:
    """What the run trains, and where a new run over a model starts: the width outputs of
    ``--resume MODEL.zip`` (grown if it has none, saved as ``START_MODEL`` in ``run_dir``; a
    resumed run over widths has that file), otherwise the priority of the settings' features.

    Raises:
        EsConfigError: a model that cannot be loaded or has no width table (one line).
    """
    settings = EsSettings.of(values)
    if settings.app_table:
        return Subject(table_names(), table=True), (0.0,) * TABLE_SIZE
    if not trains_a_model(flags, run_dir):
        return Subject(settings.features), None
    source = start_model_path(flags)
    start = run_dir / START_MODEL
    from agents.saved.checkpoint import CheckpointError, load_checkpoint  # lazy: torch and SB3 are slow to import

    use_torch_threads(None)  # before any torch op: forked workers deadlock after a multi-threaded one
    try:
        model = load_checkpoint(source or start)
        if source is not None and not env_shape_of(model).get("width_classes"):
            grow_width_outputs(model, str(source))
        score_row, state_scores = bool(settings.score_row), bool(settings.state_scores)
        if source is not None and state_scores and not has_state_scores(model):
            grow_state_scores(model, str(source))
        theta = tuple(width_table(model, str(source or start), score_row, state_scores))
    except (CheckpointError, WidthTableError) as exc:
        raise EsConfigError(str(exc)) from None
    if source is not None:
        from agents.saved.checkpoint import save_model  # lazy: SB3 is slow to import

        save_model(model, start)
    return Subject(width_names(score_row, state_scores), str(start.resolve()), score_row, state_scores), theta


def es_state(
    flags: TrainSettings,
    run_dir: Path,
    values: dict[str, Any],
    subject: Subject,
    theta: Sequence[float] | None,
) -> tuple[EsSettings, EsState]:
    """The run's settings and state: those ``--resume`` saved in ``run_dir`` (the cached ATS
    JCTs verified; ``-n`` more generations) or a new start from ``values`` at ``theta`` (None:
    the priority's warm start).

    Raises:
        EsConfigError: bad settings, or a saved state that does not fit them.
    """
    state = EsState.load(run_dir / "state.json") if resumed_folder(flags) is not None else None
    if state is not None:
        last_generation(run_dir / "evaluations.csv")  # both CSVs checked before any work
        read_run_csv(run_dir / "generations.csv", GENERATION_COLUMNS)
        verify_cache(run_dir / "state.json", state)
    if state is not None and flags.n_timesteps is not None:
        values["generations"] = state.generation + flags.n_timesteps
    settings = EsSettings.of(values)
    features = subject.features
    if state is not None and len(state.theta) != len(features):
        raise EsConfigError(
            f"{run_dir / 'state.json'}: theta has {len(state.theta)} coefficients, the run trains "
            f"{len(features)} ({', '.join(features)})"
        )
    return settings, state or EsState.start(settings, flags.seed, theta)


TABLE_PRESET = "table-es"
"""The preset whose ES settings a training run's table stage uses (:func:`train_table`)."""


def train_table(
    folder: Path,
    families: Sequence[str],
    generations: int,
    seed: int,
    jobs: int,
    backend: Backend = LOCAL,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[Path, dict[str, Any]]:
    """A held application table trained from zeros in ``folder``: the first stage of a training
    run's hindsight start (``table_generations``). ES with :data:`TABLE_PRESET`'s settings, for
    ``generations``, on the train seeds of ``families``, validated on their first
    :data:`~agents.runs.run_config.FAMILY_SEEDS` val seeds against the prior; a folder that holds
    a stopped stage goes on from its ``state.json`` (the same draws: the same table as without
    the stop). ``stop()`` is asked after each generation, and a signal during the episodes ends
    it at the last finished one.

    Returns ``best_model.json`` and what the run's record shows of the stage: ``complete``,
    generations, episodes, the best validation ratio to ``ats``, wall seconds."""
    values = {**load_conf(None, TABLE_PRESET, "es", common=False), "generations": generations}
    settings = EsSettings.of(values)
    folder.mkdir(parents=True, exist_ok=True)
    state_file = folder / "state.json"
    if state_file.is_file():
        state = EsState.load(state_file)
        verify_cache(state_file, state)
    else:
        state = EsState.start(settings, seed, (0.0,) * TABLE_SIZE)
    val = val_scenarios(families, FAMILY_SEEDS)
    subject = Subject(table_names(), table=True)
    run = EsRun(folder, families, val, settings, state, subject, jobs, backend, log=None)
    run.train(stop)
    record = {
        "folder": folder.name,
        "complete": state.generation >= generations,
        "generations": state.generation,
        "episodes": state.episodes,
        "val_jct_ratio": state.best_val,
        "wall_seconds": state.wall_seconds,
    }
    return folder / "best_model.json", record
