"""One check for every option that takes one of a few names (restart model, truth, trace set,
batch statistics, cap growth, inference placement, dynamics)."""

from __future__ import annotations

from collections.abc import Sequence


def validate_choice(option: str, value: str, known: Sequence[str]) -> str:
    """``value`` if it is one of ``known``.

    Raises:
        ValueError: one line naming ``option``, the value and the known values.
    """
    if value not in known:
        raise ValueError(f"unknown {option} {value!r}; expected one of {', '.join(known)}")
    return value
