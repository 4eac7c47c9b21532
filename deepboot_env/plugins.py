"""Discovery of the packages that extend deepboot_env, by Python entry points.

A package lists a module under the ``deepboot_env.plugins`` entry-point group (its
``pyproject.toml``); importing that module registers what the package provides: policy names and
prefixes (:func:`deepboot_env.policy.register_policy`), the loader of named workloads
(:func:`deepboot_env.workload_sources.register_workload_loader`). This is the mechanism Gymnasium uses
for env plugins; it lets the lower layers name no higher module. The built-in plugins are
``baselines``, ``agents`` and ``traces``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points

PLUGIN_GROUP = "deepboot_env.plugins"
"""The entry-point group of the plugin modules."""

_loaded = False


def resolve_entry_point(entry_point: str | Callable[..., object]) -> Callable[..., object]:
    """The callable an entry point names: ``"module:attr"`` (``attr`` may be dotted) is imported
    now; a callable is returned as it is."""
    if callable(entry_point):
        return entry_point
    module, _, attr = entry_point.partition(":")
    target: object = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"entry point {entry_point!r} is not callable")
    return target


def load_plugins() -> None:
    """Import every plugin module once (each registers what it provides)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for entry in entry_points(group=PLUGIN_GROUP):
        entry.load()
