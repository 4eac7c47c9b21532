"""``deepboot benchmark``: every policy on the test seeds of every workload family, resumable.

    deepboot benchmark --families philly-periodic heavy-inference --policies ats ones-lend \\
        --seeds 10 --jobs 2 --out runs/benchmark [--resume] [--backend ray [--address auto]]

A run is one (policy, family, seed): scenario ``seed`` of the family (:mod:`traces.families`) on
its own cluster with its restart model, under the benchmark's dynamics (DeepBoot-v1 by default).
Each finished run is appended at once to ``runs.jsonl`` in the output folder, so an interrupted
benchmark continues with ``--resume`` where it stopped (runs go to worker processes or, with
``--backend ray``, to Ray tasks: :func:`deepboot_env.pool.run_pool`); ``benchmark.json``
records the settings a resume must match. Every run carries its scenario's JCT lower bounds
(docs/bounds.md) and is checked against them: a mean JCT below the bound stops the benchmark
(:class:`BoundViolation`). At the end the folder holds ``results.csv`` (one tidy row per run),
``jobs.csv`` (one row per training job), ``leaderboard.md`` and the plots
(:mod:`deepboot_harness.leaderboard`).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deepboot_env import FRONT_END_DYNAMICS, REFERENCE_POLICY
from deepboot_env.atomic import lock_folder
from deepboot_env.config import sim_config
from deepboot_env.pool import LOCAL, Backend, run_pool
from deepboot_env.sim.bounds import jct_bounds
from deepboot_harness.run_log import (
    RUNS_FILE,
    RowFields,
    RunLogError,
    append_run,
    check_run_folder,
    open_run_log,
    read_runs,
)

DEFAULT_POLICIES: tuple[str, ...] = (
    "fifo",
    "ats-nolend",
    "ats",
    "afs-lend",
    "ones-lend",
    "pollux-lend",
    "ats-srpt-fcfs-place",
    "ats-srpt-fcfs-place-rr",
    "ppo:deepboot-v0",
    "ppo:deepboot-score-v8",
    "priority:deepboot-priority-v1",
    "oracle-lookahead",
)
"""The policies of the README's leaderboard."""

DEFAULT_OPTIONS: dict[str, Any] = {"dynamics": FRONT_END_DYNAMICS}
"""Simulation options of every run (flat :func:`deepboot_env.config.sim_config` options): the
benchmark runs on DeepBoot-v1's dynamics; each scenario sets its cluster and restart model."""


class BenchmarkError(ValueError):
    """Bad benchmark input (unknown family or policy, empty seed range, unusable output folder)."""


@dataclass(frozen=True)
class BenchmarkSpec:
    """What a benchmark runs.

    Attributes:
        families: workload families, in table order.
        policies: policy names, in table order.
        seeds: how many seeds of ``split`` each family runs (its first ones).
        split: the seed range: ``test`` for the leaderboard.
        options: flat simulation options of every run.
        policy_seeds: fewer seeds for some policies (a slow one), by policy name.
        skip_seeds: how many of the split's first seeds to pass over (a validation that leaves out
            the seeds a model was selected on: ``--split val --skip-seeds 8``).
        reference: the policy every JCT ratio is paired against (one of ``policies``; ``ats``
            for the leaderboard, a model's own prior or control to judge the model against it).
    """

    families: tuple[str, ...]
    policies: tuple[str, ...]
    seeds: int = 10
    split: str = "test"
    options: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_OPTIONS))
    policy_seeds: dict[str, int] = field(default_factory=dict)
    reference: str = REFERENCE_POLICY
    skip_seeds: int = 0

    def check(self) -> None:
        """Refuse, before any work, what cannot run.

        Raises:
            BenchmarkError: for no families or policies, an unknown family, split or policy, a
                seed count < 1 or beyond the split, or bad simulation options.
        """
        from deepboot_env.policy import make_policy
        from traces.families import FamilyError, get_family, split_seeds

        if not self.families:
            raise BenchmarkError("no families given (--families)")
        if not self.policies:
            raise BenchmarkError("no policies given (--policies)")
        for flag, names in (("--families", self.families), ("--policies", self.policies)):
            twice = sorted(name for name, count in Counter(names).items() if count > 1)
            if twice:
                raise BenchmarkError(f"{flag} names {', '.join(twice)} more than once; give each name once")
        try:
            for family in self.families:
                get_family(family)
            seeds = split_seeds(self.split)
        except FamilyError as exc:
            raise BenchmarkError(str(exc)) from None
        if not 0 <= self.skip_seeds < len(seeds):
            raise BenchmarkError(f"--skip-seeds must be 0 to {len(seeds) - 1}, got {self.skip_seeds}")
        left = len(seeds) - self.skip_seeds
        counts = {"--seeds": self.seeds, **{f"--policy-seeds {p}": n for p, n in self.policy_seeds.items()}}
        for flag, n in counts.items():
            if not 1 <= n <= left:
                raise BenchmarkError(f"{flag}: the seed range is empty or too long: {n} (1 to {left})")
        stray = sorted(set(self.policy_seeds) - set(self.policies))
        if stray:
            raise BenchmarkError(f"--policy-seeds names policies not benchmarked: {', '.join(stray)}")
        for policy in self.policies:
            try:
                make_policy(policy)
            except (ValueError, OSError, TypeError) as exc:
                raise BenchmarkError(f"--policies {policy}: {exc}") from None
        if self.reference not in self.policies:
            raise BenchmarkError(
                f"--policies must include the reference policy {self.reference!r} (--reference): "
                "the leaderboard's JCT ratios are to it"
            )
        if self.seed_count(self.reference) < max(map(self.seed_count, self.policies)):
            raise BenchmarkError(
                f"--policy-seeds: the reference policy {self.reference!r} must run every seed another policy runs"
            )
        try:
            sim_config(**self.options)
        except (ValueError, TypeError) as exc:
            raise BenchmarkError(f"simulation options {self.options}: {exc}") from None

    def seed_count(self, policy: str) -> int:
        """How many seeds ``policy`` runs."""
        return self.policy_seeds.get(policy, self.seeds)

    def seeds_of(self, policy: str) -> list[int]:
        """The scenario seeds ``policy`` runs on."""
        from traces.families import split_seeds

        first = self.skip_seeds
        return list(split_seeds(self.split)[first : first + self.seed_count(policy)])

    def runs(self) -> list[tuple[str, str, int]]:
        """Every (policy, family, seed), seeds outermost so that a partial run covers every policy."""
        width = max(len(self.seeds_of(p)) for p in self.policies)
        out = []
        for k in range(width):
            for family in self.families:
                for policy in self.policies:
                    seeds = self.seeds_of(policy)
                    if k < len(seeds):
                        out.append((policy, family, seeds[k]))
        return out

    def settings(self) -> dict[str, Any]:
        """What a resumed benchmark must share with the one it continues."""
        return {"split": self.split, "options": self.options}


# ----------------------------------------------------------------------------------------------
# one run (worker side)


ROW_FIELDS: RowFields = {
    "policy": (str,),
    "family": (str,),
    "seed": (int,),
    "train_jct_mean": (float, int, type(None)),
    "jcts": (dict,),
}
"""What every saved run of a benchmark holds (:func:`run_one`'s row; checked on resume)."""


def run_one(policy: str, family: str, seed: int, options: dict[str, Any]) -> dict[str, Any]:
    """Run ``policy`` on scenario ``seed`` of ``family``; the result row with per-job JCTs
    (``jcts``), the run's CPU seconds (``cpu_s``) and the scenario's JCT lower bounds
    (:func:`scenario_bounds`).

    Raises:
        BoundViolation: if the run's mean JCT is below the scenario's lower bound.
    """
    from deepboot_env.evaluation import run_episode
    from traces.families import cached_scenario

    scenario = cached_scenario(family, seed)
    config = scenario.configure(sim_config(**options))
    start = time.process_time()
    metrics = run_episode(policy, scenario.workload, config, seed=0)
    row = metrics.to_dict(include_jcts=True)
    row.pop("timeline", None)
    row.pop("gpu_seconds_by_state", None)
    row.pop("wall_seconds", None)
    out = {
        "policy": policy,
        "family": family,
        "seed": seed,
        "cluster": config.cluster.describe(),
        "restart": config.restart,
        "cpu_s": round(time.process_time() - start, 3),
        **row,
        **scenario_bounds(family, seed, tuple(sorted(options.items()))),
    }
    check_bound(out)
    return out


class BoundViolation(RuntimeError):
    """A run's mean JCT is below its scenario's lower bound: the bound or the simulator is wrong."""


@functools.lru_cache(maxsize=16)
def scenario_bounds(family: str, seed: int, options: tuple[tuple[str, Any], ...]) -> dict[str, float]:
    """The JCT lower bounds of scenario ``seed`` of ``family`` under the simulation ``options``
    (docs/bounds.md; cached per process: every policy of a scenario shares them): ``jct_bound``
    (the tightest) and ``jct_bound_<name>`` for each bound (no timing: a row is deterministic but
    for ``cpu_s``; ``benchmarks/bench_bounds.py`` measures their cost)."""
    from traces.families import cached_scenario

    scenario = cached_scenario(family, seed)
    bounds = jct_bounds(scenario.workload, scenario.configure(sim_config(**dict(options))))
    named = {
        f"jct_bound_{name}": value for name, value in bounds.as_dict().items() if name != "best" and value is not None
    }
    return {"jct_bound": bounds.best, **named}


def check_bound(row: dict[str, Any]) -> None:
    """Refuse a finished run whose mean JCT is below its scenario's lower bound (``jct_bound``;
    rows without one, and runs cut at the time limit, pass).

    Raises:
        BoundViolation: naming the run, its mean JCT and the bound.
    """
    bound = row.get("jct_bound")
    if bound is None or row.get("truncated"):
        return
    if row["train_jct_mean"] < bound * (1.0 - 1e-9):
        raise BoundViolation(
            f"{row['policy']} on {row['family']} seed {row['seed']}: mean JCT {row['train_jct_mean']:.3f} s is below "
            f"the scenario's lower bound {bound:.3f} s (docs/bounds.md): a bound or the simulator is wrong"
        )


# ----------------------------------------------------------------------------------------------
# the output folder


OUTPUT_FILES: tuple[str, ...] = (
    "results.csv",
    "jobs.csv",
    "leaderboard.csv",
    "leaderboard.md",
    "jct_ratio.png",
    "jct_aggregate.png",
    "jct_cdf.png",
)
"""The files the end of a benchmark writes in its folder (:func:`deepboot_harness.leaderboard.write_outputs`)."""


def check_outputs(out: Path) -> None:
    """Refuse, before the first run, a folder where an output file's name is taken by a folder
    (the benchmark would run every cell, then fail to write its results).

    Raises:
        BenchmarkError: naming the path.
    """
    for name in OUTPUT_FILES:
        if (out / name).is_dir():
            raise BenchmarkError(f"--out {out}: {name} is a folder, so the results cannot be written there")


def prepare_folder(out: Path, spec: BenchmarkSpec, resume: bool) -> set[tuple[str, str, int]]:
    """Check and set up ``out`` (:func:`deepboot_harness.run_log.open_run_log`); the (policy,
    family, seed) already done when resuming.

    Raises:
        BenchmarkError: if ``out`` is a file or cannot be written; if it holds a benchmark and
            ``resume`` is off; if ``resume`` is on and its settings differ.
    """
    try:
        rows = open_run_log(out, "benchmark", spec.settings(), resume, ROW_FIELDS, extra=asdict(spec))
    except RunLogError as exc:
        raise BenchmarkError(str(exc)) from None
    return {(r["policy"], r["family"], r["seed"]) for r in rows}


# ----------------------------------------------------------------------------------------------
# running


Cell = tuple[str, str, int, dict[str, Any]]
"""One run and its options: (policy, family, seed, simulation options)."""


def run_cell(cell: Cell) -> dict[str, Any]:
    """:func:`run_one` of one cell (a pool's job)."""
    return run_one(*cell)


def execute(
    todo: Sequence[tuple[str, str, int]],
    options: dict[str, Any],
    jobs: int,
    save: Callable[[dict[str, Any]], None],
    backend: Backend = LOCAL,
) -> None:
    """Run ``todo`` in ``jobs`` processes or on Ray (:func:`deepboot_env.pool.run_pool`),
    calling ``save`` with each row as it finishes."""
    cells: list[Cell] = [(*run, options) for run in todo]
    run_pool(
        run_cell,
        cells,
        jobs,
        progress=False,
        label="benchmark",
        describe=lambda cell: f"{cell[0]} on {cell[1]} seed {cell[2]}",
        on_result=lambda i, row: save(row),
        backend=backend,
    )


def run_benchmark(
    spec: BenchmarkSpec,
    out: str | Path,
    jobs: int = 1,
    resume: bool = False,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    backend: Backend = LOCAL,
    hold: contextlib.ExitStack | None = None,
) -> list[dict[str, Any]]:
    """Run what ``spec`` asks for that ``out`` does not hold yet (in ``jobs`` processes, or on
    Ray with ``backend``); every run's row, in spec order. Once the input is checked, the folder
    is locked (:func:`deepboot_env.atomic.lock_folder`: a second benchmark on it is refused)
    until the call returns, or until ``hold`` closes (to keep it while the caller writes more).

    Raises:
        BenchmarkError: for bad input (see :meth:`BenchmarkSpec.check`, :func:`prepare_folder`).
        deepboot_env.atomic.FolderInUse: another process writes ``out``.
        deepboot_env.ray_pool.RunsFailed: on Ray, once the other runs are saved, if some failed.
    """
    spec.check()
    if jobs < 1:
        raise BenchmarkError(f"--jobs must be >= 1, got {jobs}")
    backend.check()
    out = Path(out)
    with contextlib.ExitStack() as own:
        check_folder(out)
        (hold or own).enter_context(lock_folder(out))
        return _run_missing(spec, out, jobs, resume, progress, backend)


def check_folder(out: Path) -> None:
    """Refuse an output folder that is a file or cannot be created or written (:func:`prepare_folder`'s
    checks, before the folder is locked), or where an output's name is taken (:func:`check_outputs`).

    Raises:
        BenchmarkError: naming the folder.
    """
    try:
        check_run_folder(out)
    except RunLogError as exc:
        raise BenchmarkError(str(exc)) from None
    check_outputs(out)


def _run_missing(
    spec: BenchmarkSpec,
    out: Path,
    jobs: int,
    resume: bool,
    progress: Callable[[int, int, dict[str, Any]], None] | None,
    backend: Backend,
) -> list[dict[str, Any]]:
    """:func:`run_benchmark` in a checked, locked folder."""
    done = prepare_folder(out, spec, resume)
    runs = spec.runs()
    todo = [run for run in runs if run not in done]
    count = [len(runs) - len(todo)]

    def save(row: dict[str, Any]) -> None:
        append_run(out, row)
        count[0] += 1
        if progress is not None:
            progress(count[0], len(runs), row)

    execute(todo, spec.options, jobs, save, backend)
    rows = {(r["policy"], r["family"], r["seed"]): r for r in read_runs(out / RUNS_FILE, ROW_FIELDS)}
    done_rows = [rows[run] for run in runs if run in rows]
    for row in done_rows:  # resumed runs too
        check_bound(row)
    return done_rows
