"""Aryl mode: DeepBoot's server-granular inference placement (``--ARYL 1``; docs/inference.md §8).

DeepBoot's scripts run the AFS, Optimus and Aryl baselines with ``--ARYL 1``, which changes where
inference runs and how it takes GPUs back (the original's ``infer_scheduler.py`` and ``aryl_remove``):

* inference runs only on the *inference half*: nodes ``[N/2, N)`` of a shared pool (the inference
  nodes of a two-cluster layout, which are the same upper half);
* a cold request takes, scanning the inference half upward from N/2, the first node with an empty
  GPU, else the first node with a SLEEP pod (evicting it); else the node of the inference half with
  the fewest training GPUs (more than none; the first one in node order on ties);
* whenever a request lands on a node, **every** training replica on that node is evicted (the server
  is lent and taken back whole);
* after every training decision, training is stripped from every node that hosts an inference pod
  (RUNNING, PROTECT or SLEEP; the original's ``aryl_remove``), even on GPUs the policy had just
  given it. SLEEP pods that the decision displaces are evicted first, as at any boundary.

The two pieces the simulator uses are :class:`ArylInferencePool` (built instead of the
:class:`~deepboot_env.sim.inference.InferencePool` when ``SimConfig.inference_placement`` is
``"aryl"``) and :func:`strip_training` (applied to every allocation before it takes effect).

A policy may choose the server itself by overriding its ``choose_inference_server(state, request)
-> int | None`` hook (a node of the inference half, or None to let the request wait;
:mod:`deepboot_env.sim.hooks`); the Lyra baseline does (its min-preemption-cost reclaim). The
default, marked :func:`aryl_server_rule`, is the rule above, which the pool applies itself. The
ATS-I ``choose_reclaim`` hook is not used in this mode: the unit of reclaim is a server, not a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from deepboot_env.sim.choices import validate_choice
from deepboot_env.sim.cluster import NODE_INFER, ClusterConfig, ClusterLedger
from deepboot_env.sim.inference import InferencePool, TrainingSide
from deepboot_env.sim.state import AllocationError, ClusterState, RequestView

INFERENCE_PLACEMENTS = ("deepboot", "aryl")
"""Values of ``SimConfig.inference_placement``: DeepBoot's ATS-I (the default) or Aryl mode."""


def validate_placement(name: str) -> str:
    """``name`` if it is one of :data:`INFERENCE_PLACEMENTS` (else ``ValueError``)."""
    return validate_choice("inference_placement", name, INFERENCE_PLACEMENTS)


def aryl_inference_nodes(config: ClusterConfig) -> list[int]:
    """The nodes inference may use in Aryl mode: ``[N/2, N)`` of a shared pool, else the
    inference nodes (the upper half of a two-cluster layout)."""
    if config.shared_pool:
        n = config.num_nodes
        return list(range(n // 2, n))
    return [node for node, kind in enumerate(config.node_kinds().tolist()) if kind == NODE_INFER]


def aryl_server(counts: Mapping[str, Sequence[int]], capacity: int, nodes: Sequence[int]) -> int | None:
    """DeepBoot's Aryl-mode server for a cold request, from per-node GPU ``counts`` (the ledger's
    ``train``/``running``/``protect``/``sleep`` lists): the first of ``nodes`` with an empty GPU,
    else the first with a SLEEP pod, else the one with the fewest training GPUs (more than none,
    the first on ties); None if no node has any of them."""
    train, running, protect, sleep = counts["train"], counts["running"], counts["protect"], counts["sleep"]
    for node in nodes:
        if train[node] + running[node] + protect[node] + sleep[node] < capacity:
            return node
    for node in nodes:
        if sleep[node] > 0:
            return node
    best: int | None = None
    for node in nodes:
        if train[node] > 0 and (best is None or train[node] < train[best]):
            best = node
    return best


def aryl_server_of(state: ClusterState) -> int | None:
    """:func:`aryl_server` read from ``state``: its per-node counts, GPUs per node and the
    inference nodes of Aryl mode (:func:`aryl_inference_nodes`)."""
    used, running, protect, sleeping = state.node_counts
    counts = {"train": used, "running": running, "protect": protect, "sleep": sleeping}
    return aryl_server(counts, state.gpus_per_node, aryl_inference_nodes(state.config))


_Hook = TypeVar("_Hook", bound=Callable[..., object])


def aryl_server_rule(hook: _Hook) -> _Hook:
    """Mark a ``choose_inference_server`` hook that is Aryl mode's own rule
    (``aryl_server_of(state)``, whatever the request): the pool then picks the server from its
    ledger instead of building the whole state for the hook (the same choice; a hook that
    overrides a marked one is not marked unless it says so)."""
    hook.aryl_server = True  # type: ignore[attr-defined]
    return hook


def is_aryl_server_rule(hook: Callable[..., object]) -> bool:
    """Whether ``hook`` is marked :func:`aryl_server_rule`."""
    return bool(getattr(hook, "aryl_server", False))


def server_takeable(state: ClusterState, node: int) -> bool:
    """Whether a cold request may land on ``node`` now: it has an empty GPU, a SLEEP pod or
    training GPUs (which would all be evicted)."""
    used, running, protect, sleeping = state.node_counts
    empty = state.gpus_per_node - used[node] - running[node] - protect[node] - sleeping[node]
    return empty > 0 or sleeping[node] > 0 or used[node] > 0


def strip_training(
    wanted: Mapping[int, list[int]], ledger: ClusterLedger, evict_sleeper: Callable[[int], None]
) -> Mapping[int, list[int]]:
    """The allocation ``wanted`` (GPUs per node of each job) after Aryl mode's strip.

    SLEEP pods in the way of ``wanted`` are evicted first (``evict_sleeper(node)``, as the boundary
    would), then every node still hosting a pod loses all its training GPUs. ``wanted`` is
    returned as it is when nothing is stripped.
    """
    c = ledger.counts
    cap = ledger.capacity
    n = len(c["train"])
    total = [0] * n
    for row in wanted.values():
        for node, k in enumerate(row):
            total[node] += k
    for node in range(n):
        excess = total[node] + c["running"][node] + c["protect"][node] + c["sleep"][node] - cap
        for _ in range(min(max(excess, 0), c["sleep"][node])):
            evict_sleeper(node)
    pods = ledger.pod_counts()
    hosts = [node for node in range(n) if pods[node] > 0 and total[node] > 0]
    if not hosts:
        return wanted
    out: dict[int, list[int]] = {}
    for job_id, row in wanted.items():
        row = list(row)
        for node in hosts:
            row[node] = 0
        out[job_id] = row
    return out


class ServerLender(TrainingSide, Protocol):
    """The training side of an :class:`ArylInferencePool`: it also gives up whole servers."""

    def take_training_node(self, node: int) -> int:
        """Evict every training replica on ``node`` now; the GPUs taken."""
        ...


class ArylInferencePool(InferencePool):
    """:class:`~deepboot_env.sim.inference.InferencePool` with Aryl mode's placement: inference
    only on the inference half, server-granular lending (see the module docstring).

    Warm hits, the pod lifecycle and the waiting queue are the base pool's; only where a cold
    request goes differs (:meth:`_cold_node`).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.inference_nodes = aryl_inference_nodes(self.ledger.config)

    def _cold_gpu_possible(self) -> bool:
        """Always (a server may be cleared): step 1 of :meth:`serve_waiting` always runs."""
        return True

    def _cold_node(self, idx: int) -> int | None:
        """The server Aryl mode (or the policy's own ``choose_inference_server``) picks for request
        ``idx``, cleared for one pod; None if no server can take it, -1 if the policy let it
        wait (see :meth:`InferencePool._cold_node`)."""
        node = aryl_server(self.ledger.counts, self.ledger.capacity, self.inference_nodes)
        if node is None:
            return None
        chooser = self.policy.choose_inference_server
        if not is_aryl_server_rule(chooser):
            choice = self._ask_policy(chooser, idx)
            if choice is None:
                return -1
            node = choice
        self._clear_server(node)
        return node

    def _ask_policy(self, chooser: Callable[[ClusterState, RequestView], int | None], idx: int) -> int | None:
        """The policy's server for request ``idx`` (checked), or None."""
        training = self._lender()
        state = training.observe()
        spec = self._specs[idx]
        node = chooser(state, RequestView(idx, spec.instance, spec.app, spec.arrival, spec.duration))
        if node is None:
            return None
        node = int(node)
        if node not in self.inference_nodes:
            raise AllocationError(f"choose_inference_server: node {node} is not an inference node in Aryl mode")
        if not server_takeable(state, node):
            raise AllocationError(f"choose_inference_server: node {node} has no empty, SLEEP or training GPU")
        return node

    def _lender(self) -> ServerLender:
        training = self._training()
        if training is None:
            raise ReferenceError("the training side of this inference pool is gone")
        return training  # type: ignore[return-value]

    def _clear_server(self, node: int) -> None:
        """Make room for one pod on ``node``: a SLEEP pod is evicted if no GPU is empty, and every
        training replica there is evicted (counted as reclaimed GPUs)."""
        c = self.ledger.counts
        if c["train"][node] + c["running"][node] + c["protect"][node] + c["sleep"][node] >= self.ledger.capacity:
            if c["sleep"][node] > 0:
                self.evict_one_sleeper(node)
        if c["train"][node] > 0:
            self.reclaims += self._lender().take_training_node(node)
