"""Workload sources: what the env's ``workload`` argument and the ``--workload`` flags take, and
how a source becomes scenarios (the loader of names, the scenario samplers of families).

A *workload* is always a :class:`~deepboot_env.sim.workload.Workload`: the training jobs and
inference requests one episode replays (the glossary: docs/README.md). A *workload source*
(:data:`WorkloadSource`) is what stands for one or more of them: a workload, a
:class:`~deepboot_env.sim.scenario.Scenario`, or a name (a shipped workload, a split such as
``train``, a CSV path) that a *workload loader* resolves. The loader is an argument
of the env, or the one a plugin registered (:mod:`deepboot_env.plugins`; the ``traces`` package
registers :func:`traces.loaders.load_workload_source`). deepboot_env itself reads no file.

The env also takes a distribution of worlds: a :class:`ScenarioSampler`, or the name of a
workload family ``family:<name>[:<split>]`` that the registered *family resolver* turns into one
(the ``traces`` package registers :func:`traces.families.family_sampler`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

import numpy as np

from deepboot_env.plugins import load_plugins, resolve_entry_point
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.workload import Workload

WorkloadSource = str | Path | Workload | Scenario
"""A workload (or a scenario: a workload with its cluster and restart model), or a name a workload
loader resolves."""

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


def load_scenarios(
    source: WorkloadSource | Sequence[WorkloadSource], loader: WorkloadLoader | None = None
) -> list[Scenario]:
    """The scenarios of ``source`` (one source or a list): a :class:`Scenario` as it is, a
    workload as a scenario on the caller's cluster, names through ``loader`` (default: the
    registered one).

    Raises:
        ValueError: if the sources hold no workload.
    """
    # anything but a list or a tuple is one source
    items = list(source) if isinstance(source, list | tuple) else [cast(WorkloadSource, source)]
    out: list[Scenario] = []
    for item in items:
        if isinstance(item, Scenario):
            out.append(item)
        elif isinstance(item, Workload):
            out.append(Scenario(item))
        else:
            out.extend(Scenario(w) for w in (loader or default_workload_loader())(item))
    if not out:
        raise ValueError(f"no workloads in {source!r}")
    return out


# ----------------------------------------------------------------------------------------------
# scenario samplers

FAMILY_PREFIX = "family:"
"""Workload sources starting with this name a workload family: ``family:<name>[:<split>]``."""


@runtime_checkable
class ScenarioSampler(Protocol):
    """A distribution of scenarios: one seed gives one :class:`~deepboot_env.sim.scenario.Scenario`."""

    @property
    def name(self) -> str:
        """What the sampler draws, e.g. ``family:mixed:train``."""

    @property
    def seeds(self) -> Sequence[int]:
        """The sampler's seed range, in order (evaluations take its first ones)."""

    def draw_seed(self, rng: np.random.Generator) -> int:
        """A scenario seed drawn with ``rng`` from :attr:`seeds`."""

    def sample(self, seed: int) -> Scenario:
        """Scenario ``seed``: the same seed always gives an equal scenario."""


_FAMILY_RESOLVER: list[str | Callable[[str], ScenarioSampler]] = []


def register_family_resolver(entry_point: str | Callable[[str], ScenarioSampler]) -> None:
    """Make ``entry_point`` (``"module:attr"`` or a callable) the resolver of ``family:`` sources."""
    _FAMILY_RESOLVER[:] = [entry_point]


def scenario_sampler(source: object) -> ScenarioSampler | None:
    """The sampler ``source`` stands for: itself if it is a :class:`ScenarioSampler`, the
    registered resolver's answer for a ``family:`` name, None for any other source.

    Raises:
        LookupError: for a ``family:`` name when no plugin registered a resolver.
        ValueError: from the resolver, for an unknown family or split.
    """
    if isinstance(source, ScenarioSampler):
        return source
    if not (isinstance(source, str) and source.startswith(FAMILY_PREFIX)):
        return None
    load_plugins()
    if not _FAMILY_RESOLVER:
        raise LookupError(f"{source!r}: no workload-family resolver is registered (install the traces package)")
    resolver = cast(Callable[[str], ScenarioSampler], resolve_entry_point(_FAMILY_RESOLVER[0]))
    _FAMILY_RESOLVER[:] = [resolver]
    return resolver(source)
