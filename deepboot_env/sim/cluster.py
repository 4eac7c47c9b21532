"""Cluster layout and the per-node GPU ledger.

Two layouts are supported:

* **two clusters** (default ``8x4+8x4``): nodes ``[0, train_nodes)`` form the training cluster and
  the following ``infer_nodes`` nodes the inference cluster. Inference pods run only on inference
  nodes; training runs on training nodes and, when a policy lends them, on idle or SLEEP inference
  GPUs.
* **shared pool** (``--shared-pool 16x4``): one pool in which inference has priority and training
  may use every GPU not held by a RUNNING/PROTECT pod. This reproduces the original DeepBoot
  simulator, which had no physical split (docs/inference.md §1).

The :class:`ClusterLedger` is the single place that counts who holds GPUs on each node; every
change goes through it and it refuses to over-commit a node.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from deepboot_env.sim.fork import clone_object

NODE_TRAIN = 0
"""Node of the training cluster."""
NODE_INFER = 1
"""Node of the inference cluster."""
NODE_SHARED = 2
"""Node of a shared pool (training and inference)."""


class ClusterConfigError(ValueError):
    """An impossible or malformed cluster description."""


class OverCapacityError(RuntimeError):
    """A node would hold more GPUs than it has."""


_POD_SLOT = {"running": 2, "protect": 3, "sleep": 4}
"""Position of each pod state in :attr:`ClusterLedger.by_state`."""

_SPEC = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*$")


MAX_NODES = 100_000
"""The most nodes a cluster may have (the simulator keeps arrays over nodes and GPUs)."""


@dataclass(frozen=True)
class ClusterConfig:
    """Cluster shape.

    Attributes:
        train_nodes: nodes in the training cluster (shared pool: all nodes).
        infer_nodes: nodes in the inference cluster (0 in shared-pool mode).
        gpus_per_node: GPUs per node (all nodes alike).
        shared_pool: one pool with inference priority instead of two clusters.
    """

    train_nodes: int = 8
    infer_nodes: int = 8
    gpus_per_node: int = 4
    shared_pool: bool = False

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ClusterConfigError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if self.gpus_per_node > 9:
            raise ClusterConfigError(
                f"gpus_per_node must be <= 9 (placements are digit strings), got {self.gpus_per_node}"
            )
        if self.train_nodes < 0 or self.infer_nodes < 0:
            raise ClusterConfigError("node counts must be non-negative")
        if self.train_nodes + self.infer_nodes > MAX_NODES:
            raise ClusterConfigError(
                f"{self.train_nodes + self.infer_nodes:,} nodes, more than the limit of {MAX_NODES:,} "
                "(docs/usage.md §7.1)"
            )
        if self.shared_pool:
            if self.infer_nodes != 0:
                raise ClusterConfigError("a shared pool has no separate inference nodes")
            if self.train_nodes < 1:
                raise ClusterConfigError(f"a shared pool needs >= 1 node, got {self.train_nodes}")
        elif self.train_nodes < 1:
            raise ClusterConfigError(f"the training cluster needs >= 1 node, got {self.train_nodes}")

    @property
    def num_nodes(self) -> int:
        """Total nodes."""
        return self.train_nodes + self.infer_nodes

    @property
    def total_gpus(self) -> int:
        """Total GPUs."""
        return self.num_nodes * self.gpus_per_node

    def node_kinds(self) -> np.ndarray:
        """Kind of each node (:data:`NODE_TRAIN`, :data:`NODE_INFER` or :data:`NODE_SHARED`)."""
        if self.shared_pool:
            return np.full(self.num_nodes, NODE_SHARED, dtype=np.int8)
        return np.array([NODE_TRAIN] * self.train_nodes + [NODE_INFER] * self.infer_nodes, dtype=np.int8)

    def describe(self) -> str:
        """``8x4+8x4`` or ``shared 16x4``."""
        if self.shared_pool:
            return f"shared {self.train_nodes}x{self.gpus_per_node}"
        return f"{self.train_nodes}x{self.gpus_per_node}+{self.infer_nodes}x{self.gpus_per_node}"

    @classmethod
    def parse(cls, spec: str) -> ClusterConfig:
        """Parse ``"8x4+8x4"`` (training + inference) or ``"16x4"`` (training only, no inference).

        Raises:
            ClusterConfigError: with the offending text.
        """
        parts = spec.split("+")
        if len(parts) not in (1, 2):
            raise ClusterConfigError(f"cluster spec {spec!r}: expected 'NxG' or 'NxG+MxG'")
        shapes = []
        for part in parts:
            m = _SPEC.match(part)
            if not m:
                raise ClusterConfigError(f"cluster spec {spec!r}: {part!r} is not of the form NxG (e.g. 8x4)")
            shapes.append((int(m.group(1)), int(m.group(2))))
        if len(shapes) == 2 and shapes[0][1] != shapes[1][1]:
            raise ClusterConfigError(f"cluster spec {spec!r}: both clusters must have the same GPUs per node")
        for _nodes, gpus in shapes:
            if gpus == 0:
                raise ClusterConfigError(f"cluster spec {spec!r}: zero GPUs per node")
        if shapes[0][0] == 0:
            raise ClusterConfigError(f"cluster spec {spec!r}: the training cluster has zero nodes")
        infer = shapes[1][0] if len(shapes) == 2 else 0
        return cls(train_nodes=shapes[0][0], infer_nodes=infer, gpus_per_node=shapes[0][1])

    @classmethod
    def parse_shared(cls, spec: str) -> ClusterConfig:
        """Parse a shared-pool spec ``"16x4"``."""
        m = _SPEC.match(spec)
        if not m:
            raise ClusterConfigError(f"shared-pool spec {spec!r} is not of the form NxG (e.g. 16x4)")
        nodes, gpus = int(m.group(1)), int(m.group(2))
        if nodes == 0 or gpus == 0:
            raise ClusterConfigError(f"shared-pool spec {spec!r}: zero nodes or GPUs")
        return cls(train_nodes=nodes, infer_nodes=0, gpus_per_node=gpus, shared_pool=True)


class NodeLayout(NamedTuple):
    """Which nodes are inference nodes, in the two forms the hot paths use."""

    inference: tuple[int, ...]
    """Indices of the inference-cluster nodes."""
    own: tuple[bool, ...]
    """Per node, whether it is not an inference node."""
    lendable: tuple[int, ...]
    """Indices of the nodes whose training GPUs inference may take back (every node but the
    training cluster's: inference nodes, or every node of a shared pool)."""


_LAYOUTS: dict[bytes, NodeLayout] = {}
_SEEN_LAYOUTS: dict[int, tuple[np.ndarray, NodeLayout]] = {}
"""Node-kinds arrays seen, by id, each held with its layout (so that its id is not reused while
it is here): a simulator hands the same array to every state (node kinds never change during an
episode), and vectorised envs step several simulators in turn, each with its own array."""
_SEEN_LIMIT = 64


def node_layout(kinds: np.ndarray) -> NodeLayout:
    """The :class:`NodeLayout` of the node kinds ``kinds`` (cached per layout, and per array)."""
    seen = _SEEN_LAYOUTS.get(id(kinds))
    if seen is not None and seen[0] is kinds:
        return seen[1]
    key = kinds.tobytes() + kinds.dtype.str.encode()
    layout = _LAYOUTS.get(key)
    if layout is None:
        infer = kinds == NODE_INFER
        lendable = tuple(np.flatnonzero(kinds != NODE_TRAIN).tolist())
        layout = _LAYOUTS[key] = NodeLayout(tuple(np.flatnonzero(infer).tolist()), tuple((~infer).tolist()), lendable)
    if len(_SEEN_LAYOUTS) >= _SEEN_LIMIT:
        _SEEN_LAYOUTS.clear()
    _SEEN_LAYOUTS[id(kinds)] = (kinds, layout)
    return layout


class ClusterLedger:
    """GPUs held per node by training jobs and by inference pods (by pod state).

    The counts are kept as Python lists (:attr:`counts`; a few nodes, changed one element at a
    time by every inference event); the array attributes are numpy copies of them.

    Attributes:
        counts: ``{"train" | "running" | "protect" | "sleep": GPUs per node}`` as lists of ints
            (read them, never change them: every change goes through the methods; a change of
            the training GPUs replaces the ``train`` list, never changes it in place).
        by_state: cluster-wide GPUs in each of the states of
            :data:`~deepboot_env.sim.metrics.GPU_STATES`: training (on training nodes), lent
            (training on inference nodes), running, protect, sleep and idle, kept in step with
            :attr:`counts` (the simulator's GPU-second accounting reads it at every event).
    """

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        n = config.num_nodes
        self.capacity = config.gpus_per_node
        self.kinds = config.node_kinds()
        self.counts: dict[str, list[int]] = {name: [0] * n for name in ("train", "running", "protect", "sleep")}
        self._infer_mask = self.kinds == NODE_INFER
        self._infer_nodes = np.flatnonzero(self._infer_mask).tolist()
        self._total_gpus = config.total_gpus
        self.by_state = [0, 0, 0, 0, 0, self._total_gpus]

    _FORK_FIELDS = frozenset(
        {"config", "capacity", "kinds", "counts", "_infer_mask", "_infer_nodes", "_total_gpus", "by_state"}
    )
    """Every attribute (:meth:`clone` copies ``counts`` and ``by_state``, the rest never changes)."""

    def clone(self) -> ClusterLedger:
        """An independent copy (:mod:`deepboot_env.sim.fork`): the counts are copied, the cluster
        shape and node kinds shared."""
        new = clone_object(self, self._FORK_FIELDS)
        new.counts = {name: list(values) for name, values in self.counts.items()}
        new.by_state = self.by_state.copy()
        return new

    @property
    def totals(self) -> dict[str, int]:
        """Cluster-wide sums of :attr:`counts`, plus ``lent`` (training on inference nodes)."""
        training, lent, running, protect, sleep, _ = self.by_state
        return {"train": training + lent, "lent": lent, "running": running, "protect": protect, "sleep": sleep}

    @property
    def train(self) -> np.ndarray:
        """Training GPUs per node (a copy)."""
        return np.array(self.counts["train"], dtype=np.int64)

    @property
    def running(self) -> np.ndarray:
        """RUNNING pods per node (a copy)."""
        return np.array(self.counts["running"], dtype=np.int64)

    @property
    def protect(self) -> np.ndarray:
        """PROTECT pods per node (a copy)."""
        return np.array(self.counts["protect"], dtype=np.int64)

    @property
    def sleep(self) -> np.ndarray:
        """SLEEP pods per node (a copy)."""
        return np.array(self.counts["sleep"], dtype=np.int64)

    def used(self) -> np.ndarray:
        """GPUs held per node by anyone."""
        return np.array(self.used_list(), dtype=np.int64)

    def used_list(self) -> list[int]:
        """:meth:`used` as a list of ints."""
        c = self.counts
        return [a + b + d + e for a, b, d, e in zip(c["train"], c["running"], c["protect"], c["sleep"], strict=True)]

    def free(self) -> np.ndarray:
        """Empty GPUs per node."""
        return np.array(self.free_list(), dtype=np.int64)

    def free_list(self) -> list[int]:
        """:meth:`free` as a list of ints."""
        cap = self.capacity
        return [cap - held for held in self.used_list()]

    def pinned(self) -> np.ndarray:
        """GPUs per node held by RUNNING or PROTECT pods (never pre-empted)."""
        return self.running + self.protect

    def change_training(self, delta: np.ndarray, who: str) -> None:
        """Add ``delta`` training GPUs per node, refusing to over-commit (:meth:`set_training`).

        Raises:
            OverCapacityError: naming the node and ``who``.
        """
        self.set_training(list(map(operator.add, self.counts["train"], np.asarray(delta).tolist())), who)

    def pod_counts(self) -> list[int]:
        """Pods (RUNNING, PROTECT or SLEEP) per node, as Python ints."""
        c = self.counts
        return [a + b + d for a, b, d in zip(c["running"], c["protect"], c["sleep"], strict=True)]

    def set_training(self, counts: list[int], who: str, pods: list[int] | None = None) -> None:
        """Set the training GPUs per node to ``counts``, refusing to over-commit; ``pods`` is
        :meth:`pod_counts` when the caller has it already.

        Raises:
            OverCapacityError: naming ``who`` and the first node with a negative count, else the
                first node that would hold more GPUs than it has.
        """
        if pods is None:
            pods = self.pod_counts()
        if min(counts) < 0:
            node = next(i for i, k in enumerate(counts) if k < 0)
            raise OverCapacityError(f"{who}: releases more GPUs than it holds on node {node}")
        if max(map(operator.add, counts, pods)) > self.capacity:
            node, held = next(
                (i, k + h) for i, (k, h) in enumerate(zip(counts, pods, strict=True)) if k + h > self.capacity
            )
            raise OverCapacityError(f"{who}: node {node} would hold {held} GPUs but has {self.capacity}")
        self.counts["train"] = list(counts)
        self._count_training(counts)

    def _count_training(self, train: list[int]) -> None:
        """Update :attr:`by_state` to ``train`` training GPUs per node."""
        held = self.by_state
        total = sum(train)
        lent = sum([train[node] for node in self._infer_nodes])
        held[0] = total - lent
        held[1] = lent
        held[5] = self._total_gpus - total - held[2] - held[3] - held[4]

    def add_pod(self, node: int, state: str, who: str) -> None:
        """Count one more pod in ``state`` on ``node``."""
        c = self.counts
        if c["train"][node] + c["running"][node] + c["protect"][node] + c["sleep"][node] >= self.capacity:
            raise OverCapacityError(f"{who}: node {node} has no free GPU for a pod")
        c[state][node] += 1
        held = self.by_state
        held[_POD_SLOT[state]] += 1
        held[5] -= 1

    def move_pod(self, node: int, old: str, new: str) -> None:
        """A pod on ``node`` changes state."""
        c = self.counts
        c[old][node] -= 1
        c[new][node] += 1
        held = self.by_state
        held[_POD_SLOT[old]] -= 1
        held[_POD_SLOT[new]] += 1

    def remove_pod(self, node: int, state: str) -> None:
        """A pod in ``state`` leaves ``node``."""
        counts = self.counts[state]
        if counts[node] <= 0:
            raise OverCapacityError(f"no {state} pod to remove on node {node}")
        counts[node] -= 1
        held = self.by_state
        held[_POD_SLOT[state]] -= 1
        held[5] += 1

    def check(self) -> None:
        """Assert the ledger is consistent (every count within [0, capacity])."""
        for name in ("train", "running", "protect", "sleep"):
            if min(self.counts[name]) < 0:
                raise OverCapacityError(f"negative {name} count on some node")
        used = self.used_list()
        if max(used) > self.capacity:
            node = next(i for i, k in enumerate(used) if k > self.capacity)
            raise OverCapacityError(f"node {node} over capacity")
        c = self.counts
        train, lent = sum(c["train"]), sum([c["train"][node] for node in self._infer_nodes])
        pods = [sum(c["running"]), sum(c["protect"]), sum(c["sleep"])]
        expected = [train - lent, lent, *pods, self._total_gpus - train - sum(pods)]
        if expected != self.by_state:
            raise OverCapacityError(f"ledger GPUs by state {self.by_state} disagree with per-node counts {expected}")
