"""Running one comparison's runs: tasks, their outcomes, the pool they run in.

A :class:`RunTask` is one (policy, workload, seed) of :func:`deepboot_harness.compare_grid.run_comparison`;
:func:`run_tasks` runs a list of them in this process or in a pool of worker processes and
returns their :class:`RunOutcome` in task order, whatever order they finish in (the pool and
progress bar are :func:`deepboot_env.pool.run_pool`: local processes or Ray tasks). Each
process loads a workload once (:func:`load_workload_once`); only the chosen run sends its
timeline back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deepboot_env.pool import LOCAL, Backend, run_pool
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import Workload


@dataclass(frozen=True)
class RunTask:
    """One (policy, workload, seed) run; ``index`` is its row, ``workload`` its label."""

    index: int
    policy: str
    workload: str  # label
    source: str
    seed: int
    config: SimConfig
    want_timeline: bool


@dataclass
class RunOutcome:
    """What a run sends back: scalar metrics, per-job JCTs, and the timeline if it was asked for."""

    index: int
    metrics: dict[str, object]
    jcts: dict[str, float]
    timeline: list[tuple[float, ...]] | None


_WORKLOAD_CACHE: dict[str, Workload] = {}


def load_workload_once(source: str) -> Workload:
    """Load (once per process) the workload named or stored at ``source``."""
    if source not in _WORKLOAD_CACHE:
        from traces.loaders import load_workload

        _WORKLOAD_CACHE[source] = load_workload(source)
    return _WORKLOAD_CACHE[source]


_BOUND_CACHE: dict[tuple[str, str], float] = {}


def workload_bound(source: str, workload: Workload, config: SimConfig) -> float:
    """The tightest lower bound on the mean training JCT of ``workload`` under ``config`` (once
    per process and pair; docs/bounds.md), NaN for a workload without training jobs."""
    from deepboot_env.sim.bounds import jct_bounds

    key = (source, repr(config))
    if key not in _BOUND_CACHE:
        _BOUND_CACHE[key] = jct_bounds(workload, config).best if workload.jobs else float("nan")
    return _BOUND_CACHE[key]


def run_task(task: RunTask, workload: Workload | None = None) -> RunOutcome:
    """One run (worker side): only the chosen run sends its timeline back."""
    from deepboot_env.evaluation import run_episode

    workload = workload or load_workload_once(task.source)
    metrics: EpisodeMetrics = run_episode(task.policy, workload, task.config, seed=task.seed)
    return RunOutcome(
        index=task.index,
        metrics={
            **metrics.to_dict(include_jcts=False),
            "jct_bound": workload_bound(task.source, workload, task.config),
        },
        jcts=dict(metrics.jcts),
        timeline=list(metrics.timeline) if task.want_timeline else None,
    )


def run_tasks(
    tasks: list[RunTask],
    loaded: dict[str, Workload],
    jobs: int,
    progress: bool,
    label: str = "compare",
    on_done: Callable[[RunTask, RunOutcome], None] | None = None,
    backend: Backend = LOCAL,
) -> list[RunOutcome]:
    """Run ``tasks`` (``loaded``: workloads by source, used in this process) in
    :func:`deepboot_env.pool.run_pool` (on ``backend``); the outcomes are indexed like the tasks whatever order
    they finish in; ``on_done(task, outcome)`` is called as each run finishes."""
    outcomes = run_pool(
        run_task,
        tasks,
        jobs,
        progress,
        label=label,
        describe=lambda t: f"{t.policy} on {t.workload} seed {t.seed}",
        local=lambda t: run_task(t, loaded.get(t.source)),
        on_result=None if on_done is None else lambda i, outcome: on_done(tasks[i], outcome),
        backend=backend,
    )
    assert all(o.index == t.index for o, t in zip(outcomes, tasks, strict=True))
    return outcomes


ROW_FIELDS: dict[str, tuple[type, ...]] = {
    "policy": (str,),
    "workload": (str,),
    "seed": (int,),
    "metrics": (dict,),
    "jcts": (dict,),
    "timeline": (list, type(None)),
}
"""What every saved run of a comparison holds (:func:`outcome_row`; checked on resume)."""


def outcome_row(task: RunTask, outcome: RunOutcome) -> dict[str, object]:
    """A finished run as one JSON-able line of a comparison's ``runs.jsonl``."""
    return {
        "policy": task.policy,
        "workload": task.workload,
        "seed": task.seed,
        "metrics": outcome.metrics,
        "jcts": outcome.jcts,
        "timeline": outcome.timeline,
    }


def outcome_from_row(row: dict[str, Any]) -> RunOutcome:
    """The outcome :func:`outcome_row` saved (JSON keeps every float exactly; the index is set
    by the comparison that reuses it)."""
    timeline = row.get("timeline")
    return RunOutcome(
        index=-1,
        metrics=dict(row["metrics"]),
        jcts={str(k): float(v) for k, v in row["jcts"].items()},
        timeline=None if timeline is None else [tuple(point) for point in timeline],
    )
