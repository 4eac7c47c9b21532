"""The models shipped in the package (``agents/pretrained/``), reachable by short names anywhere.

A user of the wheel has no clone to point a path into, so a *bare name* (no folder, no suffix)
names a shipped model: ``ppo:deepboot-v0`` is ``agents/pretrained/deepboot-v0.zip`` and
``priority:deepboot-priority-v1`` is ``agents/pretrained/deepboot-priority-v1.json``, from any
working folder. A shipped name wins over a file of the same name in the working folder (write
``./deepboot-v0`` for that one); every other path is used as given, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.models.priority import PriorityPolicy

PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained"
"""Folder of the shipped models (package data)."""

SUFFIXES: dict[str, str] = {"ppo": ".zip", "priority": ".json"}
"""Policy prefix -> the file suffix of its shipped models."""


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
    return sorted(
        f"{prefix}:{path.stem}" for prefix, suffix in SUFFIXES.items() for path in PRETRAINED_DIR.glob(f"*{suffix}")
    )


def load_priority_policy(path: str, **kwargs: object) -> PriorityPolicy:
    """The ``priority:<path>`` factory: :func:`agents.models.priority.load_priority_policy` of the file a
    shipped name or a path names, labelled ``priority:<path>`` as the user wrote it (a short name
    stays short in tables and plots)."""
    from agents.models.priority import load_priority_policy as load  # lazy: a name resolves without ATS (baselines)

    policy = load(str(resolve_shipped(path, SUFFIXES["priority"])), **kwargs)
    policy.name = f"priority:{path}"
    return policy
