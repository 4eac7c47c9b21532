"""Running picklable tasks in worker processes or as Ray tasks, with a progress bar: :func:`run_pool`.

The one pool of the project: ``deepboot compare`` runs its (policy, workload, seed) runs through
it (:mod:`deepboot_harness.compare_runs`), ``deepboot benchmark`` its (policy, family, seed)
runs (:mod:`deepboot_harness.benchmark`), ``train_policy.py`` its validation episodes
(:class:`agents.runs.callbacks.WorkloadEvalCallback`) and its warm start's demonstrations
(:func:`agents.trainers.imitation.collect_demonstrations`). A :class:`Backend` says where the tasks run:
local processes (the default) or Ray tasks (``--backend ray``: :mod:`deepboot_env.ray_pool`,
this pool's Ray side).

Worker processes never outlive a stop: they ignore SIGINT (Ctrl-C reaches the whole process group,
and the parent decides), die with the parent on Linux (``PR_SET_PDEATHSIG``), and a pool that ends
on an error or a stop (:class:`deepboot_env.stops.Stopped`) kills its workers instead of waiting
for the tasks in progress (:func:`stop_pool`, with SIGKILL).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar, cast

from deepboot_env.stops import SIGNALS, interruptible

_T = TypeVar("_T")
_R = TypeVar("_R")

BACKENDS = ("local", "ray")
"""Where :func:`run_pool` runs tasks: worker processes of this machine, or Ray tasks."""


@dataclass(frozen=True)
class Backend:
    """Where :func:`run_pool` runs tasks.

    Attributes:
        kind: ``local`` (a process pool of ``jobs`` processes) or ``ray`` (one Ray task per
            item: :mod:`deepboot_env.ray_pool`).
        address: for ``ray``, the cluster to join (``auto``, ``HOST:PORT``); None starts a local
            Ray instance of ``jobs`` CPUs.
    """

    kind: Literal["local", "ray"] = "local"
    address: str | None = None

    def check(self) -> None:
        """Refuse, before any work, a backend that cannot run.

        Raises:
            ValueError: for an unknown kind, an address without Ray, or Ray not installed (one line
                saying how to install it).
        """
        if self.kind not in BACKENDS:
            raise ValueError(f"--backend {self.kind!r}: expected one of {', '.join(BACKENDS)}")
        if self.address is not None and self.kind != "ray":
            raise ValueError("--address is for --backend ray")
        if self.kind == "ray":
            from deepboot_env.ray_pool import check_ray

            check_ray()


LOCAL = Backend()
"""Worker processes of this machine."""


def run_pool(
    fn: Callable[[_T], _R],
    items: Sequence[_T],
    jobs: int,
    progress: bool,
    label: str,
    describe: Callable[[_T], str] = str,
    local: Callable[[_T], _R] | None = None,
    on_result: Callable[[int, _R], None] | None = None,
    backend: Backend = LOCAL,
) -> list[_R]:
    """``[fn(item) for item in items]`` in ``jobs`` worker processes (in this process, with
    ``local`` if given, for ``jobs == 1`` or a single item), with a progress bar on stderr
    (``label``, then ``describe(item)`` of the last item done) when ``progress``; results in item
    order whatever order they finish in; ``on_result(i, result)`` is called as each one arrives.
    ``fn`` and the items must be picklable for ``jobs > 1``; a worker's error is raised here.

    With ``backend`` Ray every item is a Ray task, whatever ``jobs`` (the CPUs of a local Ray
    instance): see :func:`deepboot_env.ray_pool.run_ray` (a failed run is reported by name, as
    :class:`deepboot_env.ray_pool.RunsFailed`, once the others are done)."""
    results: list[_R | None] = [None] * len(items)

    def deliver(advance: Callable[[str], None], i: int, result: _R) -> None:
        results[i] = result
        if on_result is not None:
            on_result(i, result)
        advance(describe(items[i]))

    bar = _ProgressBar(len(items), progress, label)
    if backend.kind == "ray":
        from deepboot_env.ray_pool import run_ray

        with bar as advance, interruptible():
            run_ray(fn, items, jobs, backend.address, partial(deliver, advance), describe)
    elif jobs <= 1 or len(items) <= 1:
        with bar as advance, interruptible():
            for i, item in enumerate(items):
                deliver(advance, i, (local or fn)(item))
    else:
        executor = process_pool(min(jobs, len(items)))
        try:
            # Every worker is forked (at submission) before the progress bar's thread starts, so
            # none inherits a lock that thread holds.
            futures: dict[Future[_R], int] = {executor.submit(fn, item): i for i, item in enumerate(items)}
            with bar as advance, interruptible():
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        deliver(advance, futures[fut], fut.result())  # result() re-raises a worker's error
        except BaseException:
            stop_pool(executor)  # a stop or an error: the tasks in progress are dropped, not awaited
            raise
        executor.shutdown(wait=True)
    return cast(list[_R], results)


def available_cpus() -> int:
    """CPUs this process may run on (the default number of worker processes)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def process_pool(workers: int, context: Any = None) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes (started by the multiprocessing ``context``, default fork
    on Linux) that never outlive a stop (:func:`_start_worker`)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker)


def _start_worker() -> None:
    """A worker's signal dispositions: SIGINT and SIGHUP ignored (the parent stops the pool: Ctrl-C
    and a closed terminal reach the whole process group), SIGTERM ends it (the parent's handler,
    inherited by fork, is dropped), and on Linux SIGKILL when its parent dies, so that not even a
    killed parent leaves a worker behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()


@contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """The stop signals held back in this thread for the block (delivered at its end): processes
    started in it inherit the mask, so that an env worker cannot die of a Ctrl-C before
    :func:`start_env_worker` sets its dispositions (with SB3's default ``forkserver``, the server
    started here passes the mask on to every worker it forks)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def start_env_worker() -> None:
    """An env worker's signal dispositions (SB3's ``SubprocVecEnv``): every stop signal ignored,
    since the parent, which gets the same Ctrl-C, ``kill`` of the group or closed terminal, stops
    training at its next step, saves the model and closes its envs; then the signals the parent
    held back while starting it (:func:`stop_signals_blocked`) let through, to be ignored; and
    SIGKILL when the parent dies (:func:`die_with_parent`)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    die_with_parent()


def die_with_parent() -> None:
    """On Linux, have this process get SIGKILL when its parent dies (``PR_SET_PDEATHSIG``)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        try:
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the parent still stops its workers
            pass


def stop_pool(executor: ProcessPoolExecutor) -> None:
    """Shut ``executor`` down now: queued tasks cancelled, workers killed (SIGKILL) and reaped.

    SIGKILL, not SIGTERM: a worker forked a moment ago may not have run :func:`_start_worker` yet
    and still holds the parent's SIGTERM handler, which only records the signal; that worker would
    live on, and the executor's shutdown waits for every worker. A worker holds nothing to save (its
    result is dropped), so nothing is lost by not letting it run a handler."""
    workers = list((getattr(executor, "_processes", None) or {}).values())  # the standard library's pid -> Process
    for process in workers:
        if process.is_alive():
            process.kill()
    executor.shutdown(wait=True, cancel_futures=True)
    for process in workers:
        process.join(timeout=5)


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
