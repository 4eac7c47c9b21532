"""The rules of the ATS variants, as the options each adds to :class:`baselines.ats.AtsPolicy`.

The variants form a chain, each the one before it plus one rule (docs/policies.md §8.7-§8.10);
the registry (:mod:`baselines`) builds the named variants and their jitter controls from these,
and the ``wjitter:<sigma>,<width_sigma>`` prefix (:mod:`baselines.jitter`) the warm prior's.
Plain data, so that importing it imports nothing else.
"""

from __future__ import annotations

from typing import Any

SRPT: dict[str, Any] = {"lend": True, "srpt_power": 0.25}
"""``ats-srpt``: lending, and weights by remaining time to the power 0.25."""

FCFS: dict[str, Any] = {"arrival_tilt": 0.15}
"""First come, first served among comparable jobs (§8.7)."""

PLACE: dict[str, Any] = {**FCFS, "placement_aware": True}
"""A job split across nodes valued at its multi-node speedup (§8.8)."""

RR: dict[str, Any] = {**PLACE, "reclaim_horizon": 300.0}
"""Reclaims that count the restart they cause (§8.9)."""

WARM: dict[str, Any] = {"keep_warm_at": 0.9}
"""No SLEEP pod's GPU lent while inference is busy (§8.10)."""
