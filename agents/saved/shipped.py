"""The models shipped in the package (``agents/pretrained/``), reachable by short names anywhere.

A user of the wheel has no clone to point a path into, so a *bare name* (no folder, no suffix)
names a shipped model: ``ppo:deepboot-v0`` is ``agents/pretrained/deepboot-v0.zip``,
``priority:deepboot-priority-v1`` is ``agents/pretrained/deepboot-priority-v1.json`` and
``table:deepboot-table-v1`` is ``agents/pretrained/deepboot-table-v1.table.json``, from any
working folder. A shipped name wins over a file of the same name in the working folder (write
``./deepboot-v0`` for that one); every other path is used as given, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from agents.models.app_table import AppTablePolicy
    from agents.models.priority import PriorityPolicy


class _Named(Protocol):
    name: str


Loaded = TypeVar("Loaded", bound=_Named)
"""A loaded policy (its name is set to what the user wrote)."""

PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained"
"""Folder of the shipped models (package data)."""

SUFFIXES: dict[str, str] = {"ppo": ".zip", "priority": ".json", "table": ".table.json"}
"""Policy prefix -> the file suffix of its shipped models (a shipped name has no dot, so
``deepboot-table-v1.table.json`` is a table's and not a priority's)."""


def shipped_model(name: str | Path, suffix: str) -> Path | None:
    """The shipped model file a bare ``name`` stands for (``None`` for a path, a name with a
    suffix, or a name no shipped ``<name><suffix>`` has)."""
    text = str(name)
    if not text or "/" in text or "\\" in text or Path(text).suffix:
        return None
    path = PRETRAINED_DIR / f"{text}{suffix}"
    return path if path.is_file() else None


def resolve_shipped(name: str | Path, suffix: str) -> Path:
    """``name`` as a path: the shipped model a bare name stands for, else ``name`` itself."""
    return shipped_model(name, suffix) or Path(name).expanduser()


def shipped_names() -> list[str]:
    """Every shipped model as a policy name (``ppo:deepboot-v0``, ...), sorted."""
    names = (
        (prefix, path.name[: -len(suffix)])
        for prefix, suffix in SUFFIXES.items()
        for path in PRETRAINED_DIR.glob(f"*{suffix}")
    )
    return sorted(f"{prefix}:{name}" for prefix, name in names if "." not in name)


def _load_shipped(prefix: str, path: str, load: Callable[..., Loaded], kwargs: dict[str, object]) -> Loaded:
    """``load`` of the file a shipped name or a path names, labelled ``<prefix>:<path>`` as the
    user wrote it (a short name stays short in tables and plots)."""
    policy = load(str(resolve_shipped(path, SUFFIXES[prefix])), **kwargs)
    policy.name = f"{prefix}:{path}"
    return policy


def load_priority_policy(path: str, **kwargs: object) -> PriorityPolicy:
    """The ``priority:<path>`` factory: :func:`agents.models.priority.load_priority_policy` of a
    shipped name or a path."""
    from agents.models.priority import load_priority_policy as load  # lazy: a name resolves without ATS (baselines)

    return _load_shipped("priority", path, load, kwargs)


def load_table_policy(path: str, **kwargs: object) -> AppTablePolicy:
    """The ``table:<path>`` factory: :func:`agents.models.app_table.load_table_policy` of a shipped
    name or a path."""
    from agents.models.app_table import load_table_policy as load  # lazy: a name resolves without ATS (baselines)

    return _load_shipped("table", path, load, kwargs)
