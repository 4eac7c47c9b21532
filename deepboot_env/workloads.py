"""Named workloads for the env: sources, and the loader that turns names into workloads.

The env takes :class:`~deepboot_env.sim.workload.Workload` objects, or names (a shipped workload,
a split such as ``train``, a CSV path) that a *workload loader* resolves. The loader is an argument
of the env, or the one a plugin registered (:mod:`deepboot_env.plugins`; the ``traces`` package
registers :func:`traces.loaders.load_workload_source`). deepboot_env itself reads no file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from deepboot_env.plugins import load_plugins, resolve_entry_point
from deepboot_env.sim.workload import Workload

WorkloadSource = str | Path | Workload
"""A workload, or a name a workload loader resolves."""

WorkloadLoader = Callable[[str | Path], Sequence[Workload]]
"""Resolves one name (a workload, a split of several, a file) into its workloads."""

_LOADER: list[str | WorkloadLoader] = []


def register_workload_loader(entry_point: str | WorkloadLoader) -> None:
    """Make ``entry_point`` (``"module:attr"``, imported on first use, or a callable) the loader
    of named workloads."""
    _LOADER[:] = [entry_point]


def default_workload_loader() -> WorkloadLoader:
    """The registered workload loader.

    Raises:
        LookupError: if no plugin registered one (install the ``traces`` package).
    """
    load_plugins()
    if not _LOADER:
        raise LookupError("no workload loader is registered: pass Workload objects or a workload_loader")
    loader = cast(WorkloadLoader, resolve_entry_point(_LOADER[0]))
    _LOADER[:] = [loader]
    return loader


def load_workloads(
    source: WorkloadSource | Sequence[WorkloadSource], loader: WorkloadLoader | None = None
) -> list[Workload]:
    """The workloads of ``source`` (one source or a list); names go through ``loader`` (default:
    the registered one).

    Raises:
        ValueError: if the sources hold no workload.
    """
    # anything but a list or a tuple is one source
    items = list(source) if isinstance(source, list | tuple) else [cast(WorkloadSource, source)]
    out: list[Workload] = []
    for item in items:
        if isinstance(item, Workload):
            out.append(item)
        else:
            out.extend((loader or default_workload_loader())(item))
    if not out:
        raise ValueError(f"no workloads in {source!r}")
    return out
