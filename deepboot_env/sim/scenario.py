"""Scenario: a workload together with the cluster and restart model it is meant to run on.

Workload families (:mod:`traces.families`) draw whole scenarios: besides what arrives, the shape
of both clusters and the restart model vary from one scenario to the next. :meth:`Scenario.configure`
puts them into a :class:`~deepboot_env.sim.config.SimConfig`, keeping every other setting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.restart import validate_model
from deepboot_env.sim.workload import Workload


@dataclass(frozen=True)
class Scenario:
    """One episode's world: what arrives, and on which cluster under which restart model.

    Attributes:
        workload: the training jobs and inference requests.
        cluster: the cluster shape (None: keep the caller's).
        restart: the restart model (None: keep the caller's).
        family: the family it was drawn from ("" if none).
        seed: the seed it was drawn with (-1 if none).
        params: the drawn parameters, (name, value) in drawing order.
    """

    workload: Workload
    cluster: ClusterConfig | None = None
    restart: str | None = None
    family: str = ""
    seed: int = -1
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.restart is not None:
            validate_model(self.restart)

    @property
    def name(self) -> str:
        """The workload's name."""
        return self.workload.name

    def configure(self, config: SimConfig) -> SimConfig:
        """``config`` with this scenario's cluster and restart model (where it sets them)."""
        changes: dict[str, Any] = {}
        if self.cluster is not None and self.cluster != config.cluster:
            changes["cluster"] = self.cluster
        if self.restart is not None and self.restart != config.restart:
            changes["restart"] = self.restart
        return dataclasses.replace(config, **changes) if changes else config

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description: family, seed, cluster, restart and the drawn parameters."""
        return {
            "family": self.family,
            "seed": self.seed,
            "workload": self.workload.name,
            "cluster": None if self.cluster is None else self.cluster.describe(),
            "restart": self.restart,
            "params": dict(self.params),
        }
