"""Running one comparison's runs: tasks, worker processes and the progress bar.

A :class:`RunTask` is one (policy, workload, seed) of :func:`deepboot_harness.compare_grid.run_comparison`;
:func:`run_tasks` runs a list of them in this process or in a pool of worker processes and
returns their :class:`RunOutcome` in task order, whatever order they finish in. Each process
loads a workload once (:func:`load_workload_once`); only the chosen run sends its timeline back.
"""

from __future__ import annotations

from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

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


def run_task(task: RunTask, workload: Workload | None = None) -> RunOutcome:
    """One run (worker side): only the chosen run sends its timeline back."""
    from deepboot_env.evaluation import run_episode

    metrics: EpisodeMetrics = run_episode(
        task.policy, workload or load_workload_once(task.source), task.config, seed=task.seed
    )
    return RunOutcome(
        index=task.index,
        metrics=metrics.to_dict(include_jcts=False),
        jcts=dict(metrics.jcts),
        timeline=list(metrics.timeline) if task.want_timeline else None,
    )


def run_tasks(tasks: list[RunTask], loaded: dict[str, Workload], jobs: int, progress: bool) -> list[RunOutcome]:
    """Run ``tasks``; the outcomes are indexed like the tasks whatever order they finish in."""
    outcomes: list[RunOutcome | None] = [None] * len(tasks)
    bar = _progress_bar(progress)
    bar_task = bar.add_task("", total=len(tasks))

    def done(outcome: RunOutcome, task: RunTask) -> None:
        outcomes[outcome.index] = outcome
        bar.advance(bar_task)
        last = "done" if bar.finished else f"{task.policy} on {task.workload} seed {task.seed}"
        bar.update(bar_task, description=last)

    if jobs == 1 or len(tasks) == 1:
        with bar:
            for task in tasks:
                done(run_task(task, loaded[task.source]), task)
    else:
        # All tasks are submitted before the progress bar's refresh thread starts (on entering
        # it), so forked workers never inherit a held lock.
        executor = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)))
        try:
            futures: dict[Future[RunOutcome], RunTask] = {executor.submit(run_task, t): t for t in tasks}
            with bar:
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for fut in finished:
                        done(fut.result(), futures[fut])  # result() re-raises a worker's error
        finally:
            executor.shutdown(wait=True, cancel_futures=True)
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None]


def _progress_bar(enabled: bool) -> Progress:
    r"""rich's progress bar on stderr (``disable``\ d when not ``enabled``)."""
    return Progress(
        TextColumn("[bold]compare[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=Console(stderr=True),
        disable=not enabled,
    )
