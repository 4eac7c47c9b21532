"""The diff-stable JSON layout of the shipped tables ``apps.json`` and ``step_times.json``.

:func:`table_json` writes objects indented and lists of scalars on one line, with floats rounded
to :data:`SIGNIFICANT_DIGITS` significant digits (:func:`round_sig`), so that a calibration run
on the same traces writes the same bytes. ``deepboot calibrate`` writes both tables with it
(:mod:`traces.calibrate`, :mod:`traces.step_times`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

SIGNIFICANT_DIGITS = 7
"""Significant digits of every float in the tables."""


def round_sig(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``value`` rounded to ``digits`` significant digits."""
    return float(f"{float(value):.{digits}g}")


def _scalar(value: object) -> str:
    """JSON text of a scalar; floats as 7 significant digits (``1.955907e+14``, ``7387.0``)."""
    if isinstance(value, float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"cannot write non-finite value {value} to apps.json")
        text = f"{value:.{SIGNIFICANT_DIGITS}g}"
        return text if any(c in text for c in ".e") else text + ".0"
    return json.dumps(value)


def table_json(obj: object, indent: int = 0) -> str:
    """Deterministic JSON text of ``obj``: objects indented, lists of scalars on one line, floats as
    :data:`SIGNIFICANT_DIGITS` significant digits (diff-stable files)."""
    pad = "  " * (indent + 1)
    if isinstance(obj, Mapping):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k)}: {table_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(obj, list | tuple):
        if all(not isinstance(v, Mapping | list | tuple) for v in obj):
            return "[" + ", ".join(_scalar(v) for v in obj) + "]"
        items = [f"{pad}{table_json(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + "  " * indent + "]"
    return _scalar(obj)
