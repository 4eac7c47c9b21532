"""The fidelity anchors: runs of the original simulators that deepboot-env reproduces.

Each :class:`Anchor` names a workload of the reference data (``../shared/data``), a policy, the
flat simulation options (:func:`deepboot_env.config.sim_config`) and the original's mean training
JCT. :func:`run_anchor` simulates one and :func:`anchor_table` prints the table that
``docs/results.md`` §1 shows (``python benchmarks/bench_anchors.py``; ``tests/harness/test_anchors.py``
pins the fast ones). The DeepBoot anchors use DeepBoot's copy of the placement traces
(``trace_set="deepboot"``), the Pollux artifact's anchors Pollux's own (docs/goodput.md §9).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from traces.loaders import load_workload

POLLUX_WORKLOADS = "workloads/pollux/load-1.0/workload-{}.csv"
SMALL = "workloads/deepboot/small.csv"
PURE_TRAIN = "workloads/deepboot/pure_train.csv"

MEASURED_POLLUX: Mapping[str, Any] = {"dynamics": "v1", "trace_set": "pollux"}
"""DeepBoot-v1's dynamics with the Pollux artifact's traces (its anchors)."""
MEASURED_DEEPBOOT: Mapping[str, Any] = {"dynamics": "v1", "trace_set": "deepboot"}
"""DeepBoot-v1's dynamics with DeepBoot's copy of the traces (its anchors)."""


@dataclass(frozen=True)
class Anchor:
    """One run of an original simulator and how to repeat it here.

    Attributes:
        key: short unique name (``pollux-w1``).
        label: what the run is, for tables.
        workload: the workload CSV, relative to the reference data folder.
        policy: the policy's registry name.
        options: flat simulation options (:func:`deepboot_env.config.sim_config` keywords).
        reference: the original's mean training JCT (s).
        spread: half the difference between machines the original gave (s; 0 if run once).
        tolerance: the accepted relative difference (issue 19: 5 %, 10 % for ``aryl-deepboot``).
        source: where the reference number comes from.
        slow: whether one run takes tens of CPU seconds (benchmark only, not CI).
    """

    key: str
    label: str
    workload: str
    policy: str
    options: Mapping[str, Any]
    reference: float
    source: str
    spread: float = 0.0
    tolerance: float = 0.05
    slow: bool = False


def _pollux_anchors(policy: str, references: Sequence[float], slow: bool) -> list[Anchor]:
    return [
        Anchor(
            key=f"{policy}-w{i}",
            label=f"{policy}, Pollux workload {i}, 16x4 (`--restart pollux`)",
            workload=POLLUX_WORKLOADS.format(i),
            policy=policy,
            options={"shared_pool": "16x4", "restart": "pollux", **MEASURED_POLLUX},
            reference=ref,
            source="Pollux artifact README (docs/references.md §4)",
            slow=slow,
        )
        for i, ref in enumerate(references, start=1)
    ]


ANCHORS: tuple[Anchor, ...] = (
    Anchor(
        key="dp-afe",
        label="DeepBoot ATS-I + AFE, `small.csv`, shared pool 16x4 (`ats-deepboot --restart afe`)",
        workload=SMALL,
        policy="ats-deepboot",
        options={"shared_pool": "16x4", "restart": "afe", **MEASURED_DEEPBOOT},
        reference=2376.7,
        spread=38.2,
        source="reference-runs/anchors.csv dp_afe (mean of two machines)",
    ),
    Anchor(
        key="dp-full",
        label="DeepBoot ATS-I, `small.csv`, shared pool 16x4 (`ats-deepboot --restart full`)",
        workload=SMALL,
        policy="ats-deepboot",
        options={"shared_pool": "16x4", "restart": "full", **MEASURED_DEEPBOOT},
        reference=2471.5,
        spread=28.9,
        source="reference-runs/anchors.csv dp_full (mean of two machines)",
    ),
    Anchor(
        key="dp-pure-train",
        label="DP on `pure_train.csv`, 8x4 (`ats-nolend --restart full`)",
        workload=PURE_TRAIN,
        policy="ats-nolend",
        options={"shared_pool": "8x4", "restart": "full", **MEASURED_DEEPBOOT},
        reference=4116.2,
        source="docs/references.md §4 (DeepBoot original, machine A)",
    ),
    Anchor(
        key="afs-aryl",
        label="AFS in Aryl mode + AFE, `small.csv`, shared pool 16x4 (`afs --restart afe --aryl-mode`)",
        workload=SMALL,
        policy="afs",
        options={"shared_pool": "16x4", "restart": "afe", "inference_placement": "aryl", **MEASURED_DEEPBOOT},
        reference=2662.3,
        source="reference-runs/anchors.csv afs_afe (machine B)",
    ),
    Anchor(
        key="aryl-deepboot",
        label="Aryl (DeepBoot's), Aryl mode + AFE, `small.csv`, 16x4 (`aryl-deepboot --restart afe --aryl-mode`)",
        workload=SMALL,
        policy="aryl-deepboot",
        options={"shared_pool": "16x4", "restart": "afe", "inference_placement": "aryl", **MEASURED_DEEPBOOT},
        reference=41412.6,
        tolerance=0.10,
        source="reference-runs/anchors.csv aryl_afe (machine B)",
    ),
    Anchor(
        key="pollux-pure-train",
        label="Pollux on `pure_train.csv`, 8x4 (`pollux --restart full`)",
        workload=PURE_TRAIN,
        policy="pollux",
        options={"shared_pool": "8x4", "restart": "full", **MEASURED_DEEPBOOT},
        reference=4444.3,
        source="docs/references.md §4 (DeepBoot's copy of Pollux, unseeded)",
        slow=True,
    ),
    *_pollux_anchors("tiresias", (2474, 5145, 3876, 3280), slow=False),
    *_pollux_anchors("optimus", (4087, 6914, 3944, 5968), slow=False),
    *_pollux_anchors("pollux", (2089, 3323, 2188, 2721), slow=True),
)
"""Every anchor, DeepBoot's first, then the Pollux artifact's by policy."""


@dataclass(frozen=True)
class AnchorResult:
    """One anchor simulated: its mean training JCT, signed error and CPU seconds."""

    anchor: Anchor
    value: float
    cpu_seconds: float

    @property
    def error(self) -> float:
        """(value - reference) / reference."""
        return (self.value - self.anchor.reference) / self.anchor.reference

    @property
    def within(self) -> bool:
        """Whether the error is within the anchor's tolerance."""
        return abs(self.error) <= self.anchor.tolerance


def anchor_by_key(key: str) -> Anchor:
    """The anchor named ``key``.

    Raises:
        KeyError: naming the known keys.
    """
    for anchor in ANCHORS:
        if anchor.key == key:
            return anchor
    raise KeyError(f"unknown anchor {key!r}; known: {', '.join(a.key for a in ANCHORS)}")


def run_anchor(anchor: Anchor, data_dir: Path, overrides: Mapping[str, Any] | None = None) -> AnchorResult:
    """Simulate ``anchor`` with the reference data in ``data_dir`` (``../shared/data``);
    ``overrides`` replace simulation options (an ablation)."""
    workload = load_workload(data_dir / anchor.workload)
    config = sim_config(**{**anchor.options, **(overrides or {})})
    start = time.process_time()
    metrics = run_episode(anchor.policy, workload, config)
    return AnchorResult(anchor, metrics.train_jct_mean, time.process_time() - start)


def mean_signed_error(results: Iterable[AnchorResult]) -> float:
    """The mean of the signed relative errors (NaN for none)."""
    errors = [r.error for r in results]
    return sum(errors) / len(errors) if errors else math.nan


def anchor_table(results: Sequence[AnchorResult]) -> str:
    """A markdown table of ``results``, with the mean signed error as its last line."""
    lines = [
        "| anchor | reference (s) | deepboot-env (s) | difference | within |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        ref = f"{r.anchor.reference:,.1f}" + (f" ± {r.anchor.spread:,.1f}" if r.anchor.spread else "")
        lines.append(
            f"| {r.anchor.label} | {ref} | {r.value:,.1f} | {100 * r.error:+.1f} % | "
            f"{'yes' if r.within else 'NO'} (±{100 * r.anchor.tolerance:.0f} %) |"
        )
    lines.append(f"\nMean signed error over {len(results)} anchors: {100 * mean_signed_error(results):+.2f} %")
    return "\n".join(lines)
