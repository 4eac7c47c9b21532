"""A run's folder and its ``config.yml``, for every kind of run (no torch, no SB3).

PPO runs (:mod:`agents.trainers.training_run`), sweeps (:mod:`agents.trainers.sweep`) and ES runs
(:mod:`agents.trainers.evolution`) each write to a new folder ``<log-folder>/<kind>_<n>``
(:func:`next_run_dir`) and record what they were asked for and what they did in its
``config.yml`` (:func:`write_config`: YAML of :func:`yaml_safe` values, written atomically).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from deepboot_env.atomic import write_text


def next_run_dir(log_folder: str | Path, kind: str) -> Path:
    """A new folder ``<log_folder>/<kind>_<n>`` (``kind``: the algorithm, ``es``, ``sweep``) with n
    one more than the largest existing (from 1)."""
    root = Path(log_folder)
    pattern = re.compile(rf"^{re.escape(kind)}_(\d+)$")
    taken = [int(m.group(1)) for d in root.glob(f"{kind}_*") if (m := pattern.match(d.name)) and d.is_dir()]
    run = root / f"{kind}_{max(taken, default=0) + 1}"
    run.mkdir(parents=True, exist_ok=False)
    return run


def config_text(config: Mapping[str, Any]) -> str:
    """``config`` as the YAML text of ``config.yml`` (:func:`yaml_safe` values, keys in order)."""
    return yaml.safe_dump(yaml_safe(dict(config)), sort_keys=False)


def write_config(path: Path, config: Mapping[str, Any]) -> None:
    """Write ``config.yml`` (atomically: :func:`deepboot_env.atomic.write_text`)."""
    write_text(path, config_text(config))


def yaml_safe(value: Any) -> Any:
    """A YAML-safe copy of ``value``: mappings with text keys, lists, and plain ``bool``, ``int``,
    ``float``, ``str`` or None (other scalars converted, anything else as text)."""
    if isinstance(value, dict):
        return {str(k): yaml_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [yaml_safe(v) for v in value]
    if value is None or isinstance(value, bool):
        return value
    for kind in (int, float, str):  # also numpy scalars and str subclasses (torch's version)
        if isinstance(value, kind):
            return kind(value)
    return str(value)
