"""Inference requests, the warm-pod lifecycle and the :class:`InferencePool` (docs/inference.md §2-§4).

Every request needs one GPU for its duration. A *pod* is a warm container bound to one app
instance (``infer-bert-1``) and one GPU:

* created RUNNING when a cold request gets a GPU (it pays the model's start-up delay);
* when its request finishes it turns PROTECT for ``T_p(c)`` seconds, where c counts consecutive
  warm hits: ``T_p(c) = floor(min(30 P + 15 P c, 120 P))`` with protect scale P
  (30, 45, ..., 120 s for P = 1). A pod finishing at t_c is PROTECT during [t_c, t_c + T_p] and
  SLEEP from t_c + T_p + 1 (the original per-tick countdown);
* SLEEP pods keep their GPU until the GPU is wanted: a cold request of any app evicts one, and
  lending at a boundary evicts the SLEEP pods whose GPUs training takes.

A request of instance A is a *warm hit* if a pod of A is SLEEP or PROTECT (the one with most
consecutive hits is taken): it starts at once with no start-up delay; the pod's hit counter
grows if it was PROTECT and restarts from 0 if it was SLEEP. RUNNING and PROTECT pods are never
pre-empted. A request that finds no pod and no GPU waits in FIFO order; nothing is dropped.

:class:`InferencePool` runs all of this for the simulator: it owns the pods, the waiting queue
and the request records, places requests (warm pod -> empty inference GPU -> SLEEP pod's GPU,
evicted -> a lent training GPU reclaimed through its :class:`TrainingSide` -> wait), and handles
the REQUEST_DONE and POD_SLEEP events. It counts GPUs on the simulator's shared
:class:`~deepboot_env.sim.cluster.ClusterLedger` and schedules its events on the shared
:class:`~deepboot_env.sim.events.EventQueue`. The training jobs and their placements live in
the simulator's :class:`~deepboot_env.sim.training.TrainingJobs`; the pool's :class:`TrainingSide`
is the :class:`~deepboot_env.sim.simulator.Simulator` itself (it keeps the clock and the whole
state a reclaim hook sees, and hands the GPU over to its training jobs).
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, NamedTuple, Protocol, cast

from deepboot_env.sim.apps import COLD_START_DELAY_S
from deepboot_env.sim.cluster import NODE_INFER, NODE_TRAIN, ClusterLedger
from deepboot_env.sim.events import EventKind, EventQueue
from deepboot_env.sim.fork import clone_object, shallow_copy
from deepboot_env.sim.reclaim import least_loss_horizon
from deepboot_env.sim.state import ClusterState, GpuRef, RequestView
from deepboot_env.sim.workload import InferenceRequestSpec

if TYPE_CHECKING:
    from deepboot_env.sim.hooks import SimulatorHooks

RUNNING = "running"
PROTECT = "protect"
SLEEP = "sleep"

_REQUEST_DONE, _POD_SLEEP = int(EventKind.REQUEST_DONE), int(EventKind.POD_SLEEP)

_PLACED, _NO_GPU, _REFUSED = 1, 0, -1
"""Outcomes of placing one request: started; no GPU free, evictable or lent; the reclaim hook
refused (lent GPUs exist)."""


@cache
def protect_time(hits: int, scale: float = 1.0) -> int:
    """Seconds a pod stays PROTECT after serving, given its consecutive warm ``hits`` (cached:
    it is asked at every request completion, for a few distinct values)."""
    return int(math.floor(min(30.0 * scale + 15.0 * scale * hits, 120.0 * scale)))


@dataclass
class Pod:
    """A warm inference container on one GPU.

    Attributes:
        pid: pod id (creation order).
        instance: app instance key it serves.
        app: the served model.
        node: node of its GPU.
        status: RUNNING, PROTECT or SLEEP.
        hits: consecutive warm hits (cache_times in the original).
        busy_until: completion time of the request it runs (RUNNING only).
        sleep_at: time it turns SLEEP (PROTECT only).
        version: bumped at each state change (invalidates stale events).
        since: time of the last state change.
    """

    pid: int
    instance: str
    app: str
    node: int
    status: str
    hits: int = 0
    busy_until: float = math.inf
    sleep_at: float = math.inf
    version: int = 0
    since: float = 0.0


class RequestRecord(NamedTuple):
    """What happened to one inference request (immutable: the pool replaces a request's record
    when the request starts, so that snapshots share the records, :mod:`deepboot_env.sim.fork`;
    a named tuple, made in a third of a frozen dataclass's time: every request makes two).

    Attributes:
        index: position in the workload.
        arrival: arrival time.
        start: time its service began after any cold start (None while waiting).
        finish: completion time (None until done).
        cold: whether it paid a cold start.
        pod: pod that served it.
    """

    index: int  # type: ignore[assignment]  # the field hides tuple.index, which no record needs
    arrival: float
    start: float | None = None
    finish: float | None = None
    cold: bool = False
    pod: int | None = None


class TrainingSide(Protocol):
    """What an :class:`InferencePool` needs from the training side (the simulator) to reclaim a
    GPU lent to training."""

    def observe(self) -> ClusterState:
        """The state at the current time, shown to the policy's reclaim hook."""
        ...

    def least_loss_victim(self, horizon: float = 0.0) -> GpuRef | None:
        """:func:`~deepboot_env.sim.reclaim.ats_i_victim` (``horizon`` 0) or the restart-aware
        victim at ``horizon`` of :meth:`observe` (computed without the whole state where that is
        cheaper)."""
        ...

    def take_training_gpu(self, ref: GpuRef) -> None:
        """Take the GPU ``ref`` from its training job now (the pod that gets it is counted by
        the pool); raises :class:`~deepboot_env.sim.state.AllocationError` if ``ref`` is not a
        GPU inference may take."""
        ...


class InferencePool:
    """The inference side of one episode: pods, waiting requests and what happened to each request.

    Every method that changes something at the current time takes that time as ``now`` (the
    simulator's clock). The pool is rebuilt at each episode reset.

    Args:
        requests: the workload's inference requests (indexed like :attr:`requests`).
        ledger: the cluster's GPU ledger, shared with training.
        events: the simulator's event queue (REQUEST_DONE and POD_SLEEP events go there).
        protect_scale: P, the scale of the pod protect time.
        training: the training side (the simulator), asked to observe and to give a GPU up on a
            reclaim; held weakly, so that the simulator, which owns the pool, is freed by
            reference counting (pickling and copying keep the link).
        policy: the simulator's hooks (:mod:`deepboot_env.sim.hooks`); its ``choose_reclaim``
            is read at each reclaim (ATS-I itself when it is marked
            :func:`~deepboot_env.sim.reclaim.ats_i_rule`).

    Attributes:
        pods: live pods by pod id (creation order).
        requests: one record per request of the workload.
        waiting: the requests waiting for a GPU, in FIFO order: arrival ticket -> request index
            (see :meth:`serve_waiting`).
        reclaims: lent training GPUs taken back so far.
        inference_nodes: nodes pods may run on (every node that is not a training node).
    """

    def __init__(
        self,
        requests: Sequence[InferenceRequestSpec],
        ledger: ClusterLedger,
        events: EventQueue,
        protect_scale: float,
        training: TrainingSide,
        policy: SimulatorHooks,
    ) -> None:
        self._specs = requests
        self.ledger = ledger
        self.events = events
        self.protect_scale = protect_scale
        self._training = weakref.ref(training)
        self.policy = policy
        self.requests = [RequestRecord(i, r.arrival) for i, r in enumerate(requests)]
        self.pods: dict[int, Pod] = {}
        self._pods_by_instance: dict[str, list[int]] = {}
        self._pod_seq = 0
        self.waiting: OrderedDict[int, int] = OrderedDict()
        self._waiting_of: dict[str, deque[int]] = {}
        """Instance -> the tickets of its waiting requests, in FIFO order."""
        self._tickets = 0
        self._dirty: set[str] = set()
        """Instances that may have gained a warm pod while requests of theirs wait."""
        self.reclaims = 0
        kinds = ledger.kinds.tolist()
        self.inference_nodes: list[int] = [node for node, kind in enumerate(kinds) if kind != NODE_TRAIN]
        self._node_order: list[int] = []
        self._node_order_of: list[int] | None = None
        """The training counts :attr:`_node_order` was sorted by (see :meth:`_inference_node_order`)."""
        # the ledger total that counts the training GPUs inference may reclaim (every node that
        # is not a training node is an inference node, or every node is a shared one)
        if all(kinds[node] == NODE_INFER for node in self.inference_nodes):
            self._reclaimable_total: str | None = "lent"
        elif len(self.inference_nodes) == len(kinds):
            self._reclaimable_total = "train"
        else:
            self._reclaimable_total = None
        self._inference_gpus = len(self.inference_nodes) * ledger.capacity

    _FORK_FIELDS = frozenset(
        {
            "_specs",
            "ledger",
            "events",
            "protect_scale",
            "_training",
            "policy",
            "requests",
            "pods",
            "_pods_by_instance",
            "_pod_seq",
            "waiting",
            "_waiting_of",
            "_tickets",
            "_dirty",
            "reclaims",
            "inference_nodes",
            "_node_order",
            "_node_order_of",
            "_reclaimable_total",
            "_inference_gpus",
        }
    )
    """Every attribute of a pool (see :meth:`clone`)."""

    def clone(self, ledger: ClusterLedger, events: EventQueue, training: TrainingSide) -> InferencePool:
        """An independent copy on the copies ``ledger`` and ``events``, reclaiming from
        ``training`` (:mod:`deepboot_env.sim.fork`): the pods, the waiting queue and the lists
        and sets changed in place are copied; the request records (replaced, never changed), the
        specs, the node order (replaced, never changed) and the policy are shared.

        Raises:
            ForkError: if the pool has an attribute this method does not classify (a subclass's).
        """
        new = clone_object(self, self._FORK_FIELDS)
        new.ledger = ledger
        new.events = events
        new._training = weakref.ref(training)
        new.requests = self.requests.copy()
        new.pods = {pid: shallow_copy(pod) for pid, pod in self.pods.items()}
        new._pods_by_instance = {instance: pids.copy() for instance, pids in self._pods_by_instance.items()}
        new.waiting = self.waiting.copy()
        new._waiting_of = {instance: queue.copy() for instance, queue in self._waiting_of.items()}
        new._dirty = self._dirty.copy()
        # the cached order stays valid while the ledger's training list is the one it was sorted by
        new._node_order_of = ledger.counts["train"] if self._node_order_of is self.ledger.counts["train"] else None
        return new

    def __getstate__(self) -> dict[str, object]:
        """The pool's state for pickle and :mod:`copy`, with the training side itself (a pickled
        or copied simulator gets a pool bound to the copy, not to the original)."""
        state = self.__dict__.copy()
        state["_training"] = self._training()
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        """Restore a pickled or copied pool (the training side held weakly again)."""
        self.__dict__.update(state)
        self._training = weakref.ref(cast(TrainingSide, state["_training"]))

    def replace_future(self, requests: Sequence[InferenceRequestSpec], arrived: int) -> None:
        """Make ``requests`` the pool's requests (:meth:`Simulator.forget_future
        <deepboot_env.sim.simulator.Simulator.forget_future>`): the first ``arrived`` are the
        requests that have arrived, the same as before at the same indices (their records, pods
        and places in the queue are kept); the others, which have not arrived, replace those that
        had not, with fresh records. The record list is changed in place (a fork's own copy)."""
        self._specs = requests
        records = self.requests
        del records[arrived:]
        records.extend(RequestRecord(i, requests[i].arrival) for i in range(arrived, len(requests)))

    # ------------------------------------------------------------------ events
    def arrive(self, idx: int, now: float) -> None:
        """Request ``idx`` arrives now: it joins the queue, which is served at once."""
        alone = not self.waiting
        if alone and self._place_request(idx, now) == _PLACED:
            return  # the common case: nobody waits and it finds a pod or a GPU
        instance = self._specs[idx].instance
        ticket = self._tickets
        self._tickets += 1
        self._waiting_of.setdefault(instance, deque()).append(ticket)
        self.waiting[ticket] = idx
        if not alone:  # tried in FIFO order behind the others
            self._dirty.add(instance)
            self.serve_waiting(now)

    def request_done(self, pod: Pod, now: float) -> None:
        """The request ``pod`` runs finishes now (its REQUEST_DONE event is not stale)."""
        self.ledger.move_pod(pod.node, RUNNING, PROTECT)
        pod.status = PROTECT
        pod.since = now
        pod.version += 1
        pod.sleep_at = now + protect_time(pod.hits, self.protect_scale) + 1
        self.events.push(pod.sleep_at, _POD_SLEEP, pod.pid, pod.version)
        if self.waiting:
            self._dirty.add(pod.instance)
            self.serve_waiting(now)

    def pod_sleep(self, pod: Pod, now: float) -> None:
        """``pod`` falls asleep now (its POD_SLEEP event is not stale)."""
        self.ledger.move_pod(pod.node, PROTECT, SLEEP)
        pod.status = SLEEP
        pod.hits = 0
        pod.since = now
        pod.version += 1
        if self.waiting:
            self.serve_waiting(now)

    # --------------------------------------------------------------- placement
    def serve_waiting(self, now: float) -> None:
        """Place the waiting requests that can start now, in FIFO order; the others keep waiting.

        The result is that of trying every waiting request in FIFO order, at a cost proportional
        to the requests placed rather than to the queue's length:

        1. from the head, requests are placed while they find a pod or a GPU. The first one that
           finds neither (no warm pod of its instance, no empty inference GPU, no SLEEP pod, no
           lent training GPU) shows that no request behind it can get a GPU either: what is left
           is the warm pods of their own instances;
        2. after every pass no waiting request has a warm pod of its instance (it would have
           taken it), so only instances that gained one since (a pod whose request finished, a
           new arrival) are looked at: their first requests, as many as they have warm pods, are
           placed in FIFO order.

        Only when the policy's reclaim hook refuses a request while lent GPUs exist (a choice that
        may depend on the request) is the rest of the queue tried one by one. While no cold start
        can find a GPU (:meth:`_cold_gpu_possible`), step 1 can place only requests with a warm
        pod of their instance, which step 2 places in the same order, so it is skipped: a blocked
        queue costs nothing per event.
        """
        waiting = self.waiting
        waiting_of = self._waiting_of
        specs = self._specs
        while waiting and self._cold_gpu_possible():
            ticket, idx = waiting.popitem(last=False)  # a reclaim's state counts only those behind it
            outcome = self._place_request(idx, now)
            if outcome == _PLACED:
                waiting_of[specs[idx].instance].popleft()
                continue
            if outcome == _REFUSED:
                self._try_each(ticket, idx, now)
                return
            waiting[ticket] = idx
            waiting.move_to_end(ticket, last=False)
            break
        dirty = self._dirty
        if dirty and waiting:
            self._serve_warm(dirty, now)
        dirty.clear()

    def _cold_gpu_possible(self) -> bool:
        """False only when :meth:`_cold_node` certainly finds no GPU now: no empty GPU and no SLEEP
        pod on an inference node, and no training GPU there to reclaim (pods live on inference
        nodes only, so the ledger's cluster-wide counts tell)."""
        key = self._reclaimable_total
        if key is None:
            return True
        training, lent, running, protect, sleep, _ = self.ledger.by_state
        reclaimable = lent if key == "lent" else training + lent
        return sleep > 0 or reclaimable > 0 or running + protect < self._inference_gpus

    def _serve_warm(self, instances: set[str], now: float) -> None:
        """Step 2 of :meth:`serve_waiting`: the first waiting requests of ``instances``, as many
        as each has warm pods, in FIFO order."""
        pods = self.pods
        chosen: list[int] = []
        for instance in instances:
            queue = self._waiting_of.get(instance)
            if not queue:
                continue
            warm = sum(1 for pid in self._pods_by_instance.get(instance, ()) if pods[pid].status != RUNNING)
            chosen.extend(queue[i] for i in range(min(warm, len(queue))))
        waiting = self.waiting
        for ticket in sorted(chosen):
            idx = waiting.pop(ticket)
            if self._place_request(idx, now) != _PLACED:  # pragma: no cover - a warm pod was counted
                raise RuntimeError(f"request {idx} found no warm pod of its instance")
            self._waiting_of[self._specs[idx].instance].popleft()

    def _try_each(self, ticket: int, idx: int, now: float) -> None:
        """Try every request behind the refused request ``idx`` (ticket ``ticket``) in FIFO
        order, as a hook that may refuse one request and accept another requires."""
        waiting = self.waiting
        still = [(ticket, idx)]
        while waiting:
            item = waiting.popitem(last=False)
            if self._place_request(item[1], now) != _PLACED:
                still.append(item)
        waiting.update(still)
        self._waiting_of = {}
        for t, i in still:
            self._waiting_of.setdefault(self._specs[i].instance, deque()).append(t)
        self._dirty.clear()

    def _place_request(self, idx: int, now: float) -> int:
        """Start request ``idx`` now if it finds a pod or a GPU (see the module docstring):
        :data:`_PLACED`, :data:`_NO_GPU` (none free, evictable or lent) or :data:`_REFUSED`
        (lent GPUs exist but the reclaim hook chose none)."""
        spec = self._specs[idx]
        rec = self.requests[idx]
        pod = self._warm_pod(spec.instance)
        if pod is not None:
            self._start_on_pod(pod, rec, spec.duration, False, now)
            return _PLACED
        node = self._cold_node(idx)
        if node is None or node < 0:
            return _NO_GPU if node is None else _REFUSED
        pod = self._new_pod(spec.instance, spec.app, node, now)
        self._start_on_pod(pod, rec, spec.duration, True, now)
        return _PLACED

    def _cold_node(self, idx: int) -> int | None:
        """The node on which request ``idx`` cold-starts, with its GPU made free (an empty GPU,
        else an evicted SLEEP pod's, else a reclaimed training GPU); None if there is none, a
        negative number if the reclaim hook refused. The one step a placement mode replaces
        (:class:`~deepboot_env.sim.aryl_mode.ArylInferencePool`)."""
        node = self._free_inference_gpu()
        if node is None:
            node = self._evict_sleep_pod()
        if node is None:
            node = self._reclaim(idx)
        return node

    def _warm_pod(self, instance: str) -> Pod | None:
        """The SLEEP or PROTECT pod of ``instance`` with the most consecutive hits (the first
        created among equals), or None."""
        best: Pod | None = None
        pods = self.pods
        for pid in self._pods_by_instance.get(instance, ()):
            pod = pods[pid]
            if pod.status != RUNNING and (best is None or pod.hits > best.hits):
                best = pod
        return best

    def _inference_node_order(self) -> list[int]:
        """Inference nodes, those with the fewest lent training GPUs first (stable; cached while
        the ledger's training counts are the same list: it replaces the list at every change)."""
        train = self.ledger.counts["train"]
        if train is not self._node_order_of:
            self._node_order = sorted(self.inference_nodes, key=train.__getitem__)
            self._node_order_of = train
        return self._node_order

    def _free_inference_gpu(self) -> int | None:
        """The first inference node (in :meth:`_inference_node_order`) with an empty GPU, or None."""
        led = self.ledger
        c = led.counts
        train, running, protect, sleep = c["train"], c["running"], c["protect"], c["sleep"]
        cap = led.capacity
        for node in self._inference_node_order():
            if train[node] + running[node] + protect[node] + sleep[node] < cap:
                return node
        return None

    def _evict_sleep_pod(self) -> int | None:
        """Evict a SLEEP pod from the first inference node that has one; its node, or None."""
        sleep = self.ledger.counts["sleep"]
        for node in self._inference_node_order():
            if sleep[node] > 0:
                self.evict_one_sleeper(node)
                return node
        return None

    def evict_one_sleeper(self, node: int) -> None:
        """Evict the SLEEP pod on ``node`` asleep the longest (then the lowest pod id).

        Raises:
            ValueError: if ``node`` has no SLEEP pod.
        """
        victim: Pod | None = None
        for pod in self.pods.values():
            if pod.node == node and pod.status == SLEEP:
                if victim is None or (pod.since, pod.pid) < (victim.since, victim.pid):
                    victim = pod
        if victim is None:
            raise ValueError(f"no SLEEP pod on node {node}")
        self.ledger.remove_pod(node, SLEEP)
        self._drop_pod(victim)

    def _drop_pod(self, pod: Pod) -> None:
        """Forget ``pod`` (its GPU is already off the ledger)."""
        del self.pods[pod.pid]
        self._pods_by_instance[pod.instance].remove(pod.pid)

    def _reclaim(self, idx: int) -> int | None:
        """Take a lent training GPU for request ``idx``: the victim is the policy's
        ``choose_reclaim`` choice (ATS-I by default); its node, None if no training GPU is
        reclaimable, -1 if the hook chose none."""
        key = self._reclaimable_total
        if key is not None:
            if self.ledger.totals[key] <= 0:
                return None
        else:
            train = self.ledger.counts["train"]
            if not any(train[node] > 0 for node in self.inference_nodes):
                return None
        training = self._training()
        if training is None:
            raise ReferenceError("the training side of this inference pool is gone")
        chooser = self.policy.choose_reclaim
        horizon = least_loss_horizon(chooser)
        if horizon is not None:  # ATS-I or the restart-aware rule, made from the jobs that hold GPUs
            ref = training.least_loss_victim(horizon)
        else:
            spec = self._specs[idx]
            ref = chooser(training.observe(), RequestView(idx, spec.instance, spec.app, spec.arrival, spec.duration))
        if ref is None:
            return -1
        training.take_training_gpu(ref)
        self.reclaims += 1
        return ref.node

    def _new_pod(self, instance: str, app: str, node: int, now: float) -> Pod:
        """A new RUNNING pod of ``instance`` on a free GPU of ``node``."""
        self._pod_seq += 1
        pod = Pod(self._pod_seq, instance, app, node, RUNNING, since=now)
        self.ledger.add_pod(node, RUNNING, f"pod of {instance}")
        self.pods[pod.pid] = pod
        self._pods_by_instance.setdefault(instance, []).append(pod.pid)
        return pod

    def _start_on_pod(self, pod: Pod, rec: RequestRecord, duration: float, cold: bool, now: float) -> None:
        """Start the request of ``rec`` on ``pod`` now (after the app's start-up delay if
        ``cold``), replace its record by the started one and schedule its REQUEST_DONE event."""
        if not cold:
            if pod.status == PROTECT:
                pod.hits += 1
            else:
                pod.hits = 0
            self.ledger.move_pod(pod.node, pod.status, RUNNING)
            pod.status = RUNNING
        delay = COLD_START_DELAY_S[pod.app] if cold else 0.0
        start = now + delay
        finish = start + duration
        self.requests[rec.index] = RequestRecord(rec.index, rec.arrival, start, finish, cold, pod.pid)
        pod.busy_until = finish
        pod.since = now
        pod.version += 1
        self.events.push(finish, _REQUEST_DONE, pod.pid, pod.version)
