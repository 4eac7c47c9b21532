"""Online predictor of co-location interference, learned from what a scheduler observes.

At every decision a policy can call :meth:`InterferencePredictor.observe` on the
:class:`~deepboot_env.sim.state.ClusterState` it receives: every job that trains (GPUs held, no
restart stall) contributes one sample, the features of its co-location (who shares its nodes) and
its measured slowdown ``JobView.throughput_ratio`` (measured over isolated throughput). The
predictor is a ridge regression of ``-log(ratio)`` (so slowdowns of several neighbours add up, as
the simulator's products of per-pair factors do) on these features, solved exactly and online by
recursive least squares (a Sherman-Morrison update of the inverse per sample: O(p^2) memory and
time, p = 81 features for the six applications, no matrix factorisation).

Features of a job of application a (A = applications + one slot for unknown ones):

* shared (all applications): number of co-located jobs, number of co-located distributed jobs
  when the job itself is distributed, and whether there is at least one such (Pollux's rule);
* per victim application: one-hot(a) x [distributed and a distributed neighbour];
* per application pair: one-hot(a) x (co-located jobs per neighbour application) and one-hot(a)
  x (co-located distributed jobs per neighbour application, when distributed).

The shared features make the model hierarchical: a pair never observed borrows the average
effect of observed pairs, the role collaborative filtering over job similarity plays in the
interference-aware scheduler of Xu et al. (Cluster Computing 2020); the per-pair features then
learn each application pair's own slowdown. Ridge shrinks towards a *prior* that assumes two
co-located distributed jobs slow each other by ``prior_slowdown`` (10 %) and nothing else, so a
fresh predictor is cautious about exactly the co-location Pollux avoids.

Neighbours are counted over the union of the job's nodes (the simulator's matrix rule takes the
worst node; the predictor learns the average effect).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deepboot_env.sim.apps import APP_NAMES

if TYPE_CHECKING:
    from deepboot_env.sim.state import ClusterState

SHARED_FEATURES = 3
MIN_RATIO = 1e-3


class InterferencePredictor:
    """Ridge regression of -log(throughput ratio) on co-location features (see module docstring).

    Args:
        ridge: L2 strength pulling the weights towards the prior.
        prior_slowdown: slowdown assumed, before any sample, for a distributed job sharing a
            node with another distributed job.
        apps: application names of the one-hot encodings (plus one slot for unknown ones).
    """

    def __init__(self, ridge: float = 1.0, prior_slowdown: float = 0.1, apps: Sequence[str] = APP_NAMES) -> None:
        if not (math.isfinite(ridge) and ridge > 0):
            raise ValueError(f"ridge must be a finite number > 0, got {ridge}")
        if not (0.0 <= prior_slowdown < 1.0):
            raise ValueError(f"prior_slowdown must be in [0, 1), got {prior_slowdown}")
        self.apps = tuple(apps)
        self._index = {a: i for i, a in enumerate(self.apps)}
        self.num_apps = len(self.apps) + 1
        a = self.num_apps
        self.num_features = SHARED_FEATURES + a + 2 * a * a
        self.ridge = float(ridge)
        self.prior = np.zeros(self.num_features)
        self.prior[2] = -math.log1p(-prior_slowdown)
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        p = self.num_features
        self._inv = np.eye(p) / self.ridge  # (X'X + ridge I)^-1
        self._rhs = self.ridge * self.prior  # X'y + ridge prior
        self.samples = 0
        self._weights: np.ndarray | None = self.prior.copy()

    # ------------------------------------------------------------ features
    def app_index(self, app: str) -> int:
        """One-hot slot of ``app`` (the last slot for unknown applications)."""
        return self._index.get(app, self.num_apps - 1)

    def features(self, app: str, alloc: np.ndarray, neighbours: Sequence[tuple[str, np.ndarray]]) -> np.ndarray:
        """Feature vector of a job of ``app`` placed at ``alloc`` (GPUs per node) among other
        jobs ``neighbours`` (application, GPUs per node); jobs not sharing a node are ignored."""
        n = len(alloc)
        apps = np.array([self.app_index(a) for a, _ in neighbours], dtype=np.int64)
        present = np.array([np.asarray(b) > 0 for _, b in neighbours], dtype=bool).reshape(len(neighbours), n)
        return self.features_arrays(self.app_index(app), np.asarray(alloc) > 0, apps, present)

    def features_arrays(
        self, app_index: int, present: np.ndarray, nb_apps: np.ndarray, nb_present: np.ndarray
    ) -> np.ndarray:
        """:meth:`features` on arrays: the job's application slot, its nodes (bool, N), the
        neighbours' application slots (M,) and nodes (bool, M x N)."""
        a = self.num_apps
        x = np.zeros(self.num_features)
        if not present.any() or len(nb_apps) == 0:
            return x
        share = nb_present[:, present].any(axis=1)
        if not share.any():
            return x
        host = np.bincount(nb_apps[share], minlength=a).astype(float)
        if int(np.count_nonzero(present)) > 1:
            dist = share & (nb_present.sum(axis=1) > 1)
            net = np.bincount(nb_apps[dist], minlength=a).astype(float)
        else:
            net = np.zeros(a)
        i = app_index
        any_net = float(net.sum() > 0)
        x[0] = host.sum()
        x[1] = net.sum()
        x[2] = any_net
        x[SHARED_FEATURES + i] = any_net
        base = SHARED_FEATURES + a
        x[base + i * a : base + (i + 1) * a] = host
        base += a * a
        x[base + i * a : base + (i + 1) * a] = net
        return x

    def state_features(self, state: ClusterState, job_id: int, alloc: np.ndarray | None = None) -> np.ndarray:
        """Features of job ``job_id`` in ``state`` (at ``alloc`` if given) among the other jobs."""
        job = state.job(job_id)
        others = [(o.app, o.alloc) for o in state.jobs if o.id != job_id and o.replicas > 0]
        return self.features(job.app, job.alloc if alloc is None else alloc, others)

    # ------------------------------------------------------------ learning
    def add(self, x: np.ndarray, ratio: float, weight: float = 1.0) -> None:
        """Record one observation: features ``x`` and measured throughput ratio."""
        y = -math.log(min(max(float(ratio), MIN_RATIO), 1.0))
        xs = np.asarray(x, dtype=float) * math.sqrt(weight)
        px = self._inv @ xs
        self._inv -= np.outer(px, px) / (1.0 + float(xs @ px))
        self._rhs += math.sqrt(weight) * y * xs
        self.samples += 1
        self._weights = None

    def observe(self, state: ClusterState) -> int:
        """Record a sample for every job of ``state`` that trains now; returns how many."""
        placed = [j for j in state.jobs if j.replicas > 0]
        added = 0
        for job in placed:
            if job.stalled_seconds > 0:
                continue
            others = [(o.app, o.alloc) for o in placed if o.id != job.id]
            self.add(self.features(job.app, job.alloc, others), job.throughput_ratio)
            added += 1
        return added

    @property
    def weights(self) -> np.ndarray:
        """Current ridge solution (prior before any sample)."""
        if self._weights is None:
            self._weights = self._inv @ self._rhs
        return self._weights

    # ------------------------------------------------------------ prediction
    def predict_features(self, x: np.ndarray) -> np.ndarray | float:
        """Predicted throughput ratio(s) in (0, 1] for feature row(s) ``x``."""
        y = np.maximum(np.asarray(x) @ self.weights, 0.0)
        return np.exp(-y)

    def predict(self, app: str, alloc: np.ndarray, neighbours: Sequence[tuple[str, np.ndarray]]) -> float:
        """Predicted throughput ratio of a job of ``app`` at ``alloc`` among ``neighbours``."""
        return float(self.predict_features(self.features(app, alloc, neighbours)))
