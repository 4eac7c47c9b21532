"""Discovery of the packages that extend deepboot_env, by Python entry points.

A package lists a module under the ``deepboot_env.plugins`` entry-point group (its
``pyproject.toml``); importing that module registers what the package provides: policy names and
prefixes (:func:`deepboot_env.policy.register_policy`), the loader of named workloads
(:func:`deepboot_env.workloads.register_workload_loader`). This is the mechanism Gymnasium uses
for env plugins; it lets the lower layers name no higher module. The built-in plugins are
``baselines``, ``agents`` and ``traces``.
"""

from __future__ import annotations

from importlib.metadata import entry_points

PLUGIN_GROUP = "deepboot_env.plugins"
"""The entry-point group of the plugin modules."""

_loaded = False


def load_plugins() -> None:
    """Import every plugin module once (each registers what it provides)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for entry in entry_points(group=PLUGIN_GROUP):
        entry.load()
