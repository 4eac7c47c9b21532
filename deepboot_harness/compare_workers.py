"""Running one comparison's runs: tasks, worker processes and the progress bar.

A :class:`RunTask` is one (policy, workload, seed) of :func:`deepboot_harness.compare_grid.run_comparison`;
:func:`run_tasks` runs a list of them in this process or in a pool of worker processes and
returns their :class:`RunOutcome` in task order, whatever order they finish in. Each process
loads a workload once (:func:`load_workload_once`); only the chosen run sends its timeline back.
:func:`run_pool` is the pool and progress bar underneath, for any picklable function (training's
validation episodes and warm start use it too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import Workload

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True)
class RunTask:
    """One (policy, workload, seed) run; ``index`` is its row, ``workload`` its label.

    ``loaded``: the workload itself, sent to the worker with the task (for a workload that no
    ``source`` names, e.g. a family's scenario); None: loaded from ``source``."""

    index: int
    policy: str
    workload: str  # label
    source: str
    seed: int
    config: SimConfig
    want_timeline: bool
    loaded: Workload | None = None


@dataclass
class RunOutcome:
    """What a run sends back: scalar metrics, per-job JCTs, the timeline if it was asked for, and
    the GPUs a learned policy's action decoding repaired (0 for others)."""

    index: int
    metrics: dict[str, object]
    jcts: dict[str, float]
    timeline: list[tuple[float, ...]] | None
    repaired_gpus: int = 0


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
    from deepboot_env.policy import make_policy

    policy = make_policy(task.policy)
    metrics: EpisodeMetrics = run_episode(
        policy, workload or task.loaded or load_workload_once(task.source), task.config, seed=task.seed
    )
    return RunOutcome(
        index=task.index,
        metrics=metrics.to_dict(include_jcts=False),
        jcts=dict(metrics.jcts),
        timeline=list(metrics.timeline) if task.want_timeline else None,
        repaired_gpus=int(getattr(policy, "repaired_gpus", 0)),
    )


def run_tasks(
    tasks: list[RunTask], loaded: dict[str, Workload], jobs: int, progress: bool, label: str = "compare"
) -> list[RunOutcome]:
    """Run ``tasks`` (``loaded``: workloads by source, used in this process); the outcomes are
    indexed like the tasks whatever order they finish in."""
    outcomes = run_pool(
        run_task,
        tasks,
        jobs,
        progress,
        label=label,
        describe=lambda t: f"{t.policy} on {t.workload} seed {t.seed}",
        local=lambda t: run_task(t, loaded.get(t.source)),
    )
    assert all(o.index == t.index for o, t in zip(outcomes, tasks, strict=True))
    return outcomes


def run_pool(
    fn: Callable[[_T], _R],
    items: Sequence[_T],
    jobs: int,
    progress: bool,
    label: str,
    describe: Callable[[_T], str] = str,
    local: Callable[[_T], _R] | None = None,
) -> list[_R]:
    """``[fn(item) for item in items]`` in ``jobs`` worker processes (in this process, with
    ``local`` if given, for ``jobs == 1`` or a single item), with a progress bar on stderr
    (``label``, then ``describe(item)`` of the last item done) when ``progress``; results in item
    order whatever order they finish in. ``fn`` and the items must be picklable for ``jobs > 1``;
    a worker's error is raised here."""
    results: list[_R | None] = [None] * len(items)
    if jobs <= 1 or len(items) <= 1:
        with _ProgressBar(len(items), progress, label) as advance:
            for i, item in enumerate(items):
                results[i] = (local or fn)(item)
                advance(describe(item))
        return cast(list[_R], results)
    # Every worker is forked (at submission) before the progress bar's thread starts, so none
    # inherits a lock that thread holds.
    executor = ProcessPoolExecutor(max_workers=min(jobs, len(items)))
    try:
        futures: dict[Future[_R], int] = {executor.submit(fn, item): i for i, item in enumerate(items)}
        with _ProgressBar(len(items), progress, label) as advance:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in done:
                    i = futures[fut]
                    results[i] = fut.result()  # re-raises a worker's error
                    advance(describe(items[i]))
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return cast(list[_R], results)


class _ProgressBar:
    """A rich progress bar on stderr (or nothing); entering gives ``advance(description)``."""

    def __init__(self, total: int, enabled: bool, label: str) -> None:
        self.total = total
        self.enabled = enabled
        self.label = label
        self._progress: Any = None  # a rich Progress while entered

    def __enter__(self) -> Callable[[str], None]:
        if not self.enabled:
            return lambda description: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = progress = Progress(
            TextColumn(f"[bold]{self.label}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=False,
        )
        progress.start()
        bar = progress.add_task("", total=self.total)

        done = [0]

        def advance(description: str) -> None:
            done[0] += 1
            progress.update(bar, advance=1, description="done" if done[0] == self.total else description)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
