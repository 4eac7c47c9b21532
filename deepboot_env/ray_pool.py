"""The Ray side of :mod:`deepboot_env.pool`: :func:`~deepboot_env.pool.run_pool`'s items as Ray tasks.

``--backend ray`` runs every item of a pool as one Ray task.

Ray is an optional extra (``pip install -e ".[ray]"``); this module imports it only when called.
Each item is one Ray task of one CPU, retried by Ray (:data:`RETRIES` times) when its worker
process dies; results come back as they finish (``ray.wait``), so the caller saves each one at
once and shows progress. A task whose function raises, or whose worker dies past its retries, is
reported by name once every other task is done (:class:`RunsFailed`): nothing finished is lost.

Where Ray runs: a Ray session already open in this process (``ray.init`` by the caller) is used
as it is; otherwise ``address=None`` starts a private local instance of ``jobs`` CPUs on
127.0.0.1 (:data:`LOOPBACK_ENV`; shut down at the end) and an address (``auto``,
``HOST:PORT``) joins a running cluster.
Token authentication stays on: nothing here sets ``RAY_AUTH_MODE``. Ray 2.60 turns it on for a
local instance (with the token of ``RAY_AUTH_TOKEN``, or of ``~/.ray/auth_token``, generated if
missing) and, for ``auto``, when a token exists; an explicit ``HOST:PORT`` needs
``RAY_AUTH_MODE=token`` in the environment, as the cluster's nodes have (docs/usage.md §4).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar

from deepboot_env.stops import reinstall

_T = TypeVar("_T")
_R = TypeVar("_R")

RETRIES = 3
"""How many times Ray runs a task again whose worker process died (killed, out of memory)."""

INSTALL_HINT = "--backend ray needs Ray, an optional extra: pip install -e '.[ray]' (pip install 'ray[tune]==2.60.0')"
"""The one line shown when Ray is not installed."""


class RayBackendError(ValueError):
    """Ray is missing or cannot be reached: the message is one line for the user."""


class RunsFailed(RuntimeError):
    """Some runs failed (their function raised, or their worker died past its retries); every
    other run finished and was handed back. The message names the failed runs, one line."""

    def __init__(self, failures: Sequence[str], total: int) -> None:
        self.failures = list(failures)
        super().__init__(f"{len(failures)} of {total} runs failed: " + "; ".join(failures))


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Set to ``0`` before Ray is imported, Ray puts a node on 127.0.0.1 (its default on macOS and
Windows): every server of a private local instance then listens on the loopback interface only."""


def check_ray() -> None:
    """Refuse, without importing it, a Ray that is not installed.

    Raises:
        RayBackendError: if Ray is not installed (:data:`INSTALL_HINT`).
    """
    if importlib.util.find_spec("ray") is None:
        raise RayBackendError(INSTALL_HINT)


def import_ray(local: bool) -> ModuleType:
    """The ``ray`` module; for a private ``local`` instance, first imported with its servers on
    127.0.0.1 (:data:`LOOPBACK_ENV`, unless the environment says otherwise).

    Raises:
        RayBackendError: if Ray is not installed (:data:`INSTALL_HINT`).
    """
    if local and "ray" not in sys.modules:
        os.environ.setdefault(LOOPBACK_ENV, "0")
    try:
        import ray
    except ImportError:
        raise RayBackendError(INSTALL_HINT) from None
    return ray


@contextmanager
def ray_session(address: str | None, num_cpus: int) -> Iterator[ModuleType]:
    """Ray, connected for the duration: the session open in this process if there is one, else
    a local instance of ``num_cpus`` CPUs on 127.0.0.1 (``address=None``) or the cluster at
    ``address``; a session opened here is shut down on exit.

    Raises:
        RayBackendError: if Ray is not installed or the cluster cannot be reached.
    """
    ray = import_ray(local=address is None)
    if ray.is_initialized():
        yield ray
        return
    quiet = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    try:
        if address is None:
            ray.init(num_cpus=num_cpus, **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = "a local Ray instance" if address is None else f"the Ray cluster at --address {address}"
        raise RayBackendError(f"cannot start or reach {where}: {_first_line(exc) or type(exc).__name__}") from None
    reinstall()  # ray.init sets its own SIGTERM handler (exit 15); the command's clean stop comes first
    try:
        yield ray
    finally:
        ray.shutdown()


def run_ray(
    fn: Callable[[_T], _R],
    items: Sequence[_T],
    jobs: int,
    address: str | None,
    deliver: Callable[[int, _R], None],
    describe: Callable[[_T], str],
) -> None:
    """``fn`` of every item as a Ray task (see the module); ``deliver(i, result)`` as each one
    finishes (``describe(item)`` names a failed one).

    Raises:
        RayBackendError: if Ray is missing or unreachable.
        RunsFailed: after the others finished, if some runs failed.
    """
    failures: list[str] = []
    with ray_session(address, jobs) as ray:
        from ray.exceptions import RayError, RayTaskError

        task = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(fn)
        refs: dict[Any, int] = {task.remote(item): i for i, item in enumerate(items)}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    i = refs[ref]
                    try:
                        result = ray.get(ref)
                    except RayTaskError as exc:  # fn raised: the same error on every retry
                        failures.append(f"{describe(items[i])} ({type(exc.cause).__name__}: {_first_line(exc.cause)})")
                        continue
                    except RayError as exc:  # its worker died RETRIES + 1 times, or the node is gone
                        failures.append(f"{describe(items[i])} ({type(exc).__name__})")
                        continue
                    deliver(i, result)
        finally:
            for ref in pending:  # interrupted: nothing left running on the cluster
                ray.cancel(ref, force=True)
    if failures:
        raise RunsFailed(failures, len(items))


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
