"""The inference drain at compiled speed: the simulator's state to arrays, the compiled loop, and
back (docs/simulator.md §9).

When no training decision is left, :meth:`Simulator._drain
<deepboot_env.sim.simulator.Simulator._drain>` runs the remaining inference events to the end of
the episode, with the timeline sampled once per interval: a tenth to a fifth of an episode's
time, paid again by every fork a planner plays to the end. :func:`compiled_drain` runs it with
:func:`~deepboot_env.sim.drain_loops.drain_loops` instead, where that loop is the same episode:
the plain inference pool (not a subclass, not Aryl mode), no training GPU held (so nothing is
reclaimed, no reclaim hook or ATS-I pass is called), and no live training event; the simulator
calls it from a process's second drain on (:data:`PYTHON_DRAINS_FIRST`). It copies the
pool, ledger, event heap, books and clock into arrays (O(pods + requests left + heap), once per
episode), runs the loop, and writes everything back: request records, pods, the waiting queue,
the ledger's counts, the heap, the GPU-seconds and timeline rows, the arrival position and the
event count, bit for bit what the Python loop leaves (tests/sim/test_drain.py).

:mod:`~deepboot_env.sim.drain_loops` is imported where it is used, not at the top: it imports numba
(half a second), which a process whose drains all run in Python never needs. Its layout constants
stay in it, literals beside the kernel, because numba's disk cache is keyed on that module's source
alone: a constant read from another module would be frozen into a cached kernel that a change there
does not invalidate (the tests check the literals against :class:`~deepboot_env.sim.events.EventKind`
and the pool's states).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from deepboot_env.sim.apps import COLD_START_DELAY_S
from deepboot_env.sim.cluster import node_layout
from deepboot_env.sim.events import EventKind
from deepboot_env.sim.inference import PROTECT, RUNNING, SLEEP, InferencePool, Pod, RequestRecord
from deepboot_env.sim.progress import JobArrays
from deepboot_env.sim.workload import InferenceRequestSpec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from deepboot_env.sim.simulator import Simulator

_STATUS_CODES = {RUNNING: 0, PROTECT: 1, SLEEP: 2}
_STATUS_NAMES = (RUNNING, PROTECT, SLEEP)
_RECLAIMABLE_KEYS = {"lent": 0, "train": 1, None: 2}
_TRAIN_DONE = int(EventKind.TRAIN_DONE)
ROW_BUFFER = 4096
"""Timeline rows the loop writes before handing them over (it then goes on where it was)."""


@dataclass(frozen=True)
class RequestColumns:
    """A workload's inference requests as columns (made once per request list, shared by forks).

    Attributes:
        specs: the requests the columns were made from (the pool's, compared by identity).
        instances: instance names, by instance id.
        apps: application names, by application id.
        ids: per request, (instance id, application id).
        times: per request, (duration, cold-start delay of its application).
    """

    specs: Sequence[InferenceRequestSpec]
    instances: list[str]
    apps: list[str]
    ids: np.ndarray
    times: np.ndarray

    @classmethod
    def of(cls, specs: Sequence[InferenceRequestSpec]) -> RequestColumns:
        """The columns of ``specs`` (made once per request list: a workload's episodes, resets
        and forks share it; the last :data:`_COLUMNS_KEPT` lists are kept)."""
        kept = _COLUMNS.get(id(specs))
        if kept is not None and kept.specs is specs:
            return kept
        if len(_COLUMNS) >= _COLUMNS_KEPT:
            _COLUMNS.pop(next(iter(_COLUMNS)))
        columns = _COLUMNS[id(specs)] = cls._made(specs)
        return columns

    @classmethod
    def _made(cls, specs: Sequence[InferenceRequestSpec]) -> RequestColumns:
        """The columns of ``specs``, made afresh."""
        instances: dict[str, int] = {}
        apps: dict[str, int] = {}
        ids = np.empty((len(specs), 2), dtype=np.int64)
        times = np.empty((len(specs), 2), dtype=np.float64)
        for i, spec in enumerate(specs):
            ids[i, 0] = instances.setdefault(spec.instance, len(instances))
            ids[i, 1] = apps.setdefault(spec.app, len(apps))
            times[i, 0], times[i, 1] = spec.duration, COLD_START_DELAY_S[spec.app]
        return cls(specs, list(instances), list(apps), ids, times)


_COLUMNS: dict[int, RequestColumns] = {}
"""Request columns by the id of their request list (which each holds, so that the id is not
reused while it is here)."""
_COLUMNS_KEPT = 16


def drain_applies(sim: Simulator) -> bool:
    """Whether the compiled loop is the same episode as the Python one for ``sim`` now: the plain
    pool, no training GPU held, no live training event, no instance marked for serving."""
    pool = sim._pool
    if type(pool) is not InferencePool or pool._dirty or sim._active:
        return False
    tickets = list(pool.waiting)
    if tickets != sorted(tickets):  # the loop's queue is FIFO by ticket, as the pool's always is
        return False
    held = sim.ledger.by_state
    if held[0] or held[1]:
        return False
    jobs = sim.jobs
    for _, kind, _, target, version in sim.events.heap:
        if kind == _TRAIN_DONE and jobs[target].version == version and jobs[target].completion is None:
            return False
    return True


PYTHON_DRAINS_FIRST = 1
"""Drains each process runs by the Python loop before it compiles the loop (or loads it from
numba's disk cache): a single episode, such as a ``deepboot simulate``, does not pay the start-up
of a loop that saves it milliseconds; a process that plays more pays it once."""
_drains_seen = 0


def kernel_worth_it() -> bool:
    """Whether this drain should run compiled: every drain after the first
    :data:`PYTHON_DRAINS_FIRST` of the process (counted here)."""
    global _drains_seen
    _drains_seen += 1
    return _drains_seen > PYTHON_DRAINS_FIRST


def compiled_drain(sim: Simulator, limit: float, columns: RequestColumns) -> None:
    """Run ``sim._drain(limit)`` by the compiled loop (``sim`` meets :func:`drain_applies`;
    ``columns`` are those of ``sim``'s pool's requests)."""
    from deepboot_env.sim.drain_loops import ROWS, ROWS_FULL, drain_loops

    arrays = _DrainArrays.of(sim, limit, columns)
    while True:
        answer = drain_loops(
            arrays.st, arrays.fs, arrays.pods, arrays.events, arrays.reqs, arrays.queue, None, None, arrays.rows
        )
        arrays.hand_over_rows(sim)
        if answer != ROWS_FULL:
            break
        arrays.st[ROWS] = 0
    arrays.write_back(sim)


@dataclass
class _DrainArrays:
    """The arrays :func:`~deepboot_env.sim.drain_loops.drain_loops` runs on (its module
    docstring), with what it takes to write them back."""

    st: np.ndarray
    fs: np.ndarray
    pods: tuple[np.ndarray, ...]
    events: tuple[np.ndarray, np.ndarray]
    reqs: tuple[np.ndarray, ...]
    queue: tuple[np.ndarray, np.ndarray]
    training: tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]] | tuple[None, None]
    """The training side: (train, tables) of :mod:`~deepboot_env.sim.drain_loops` (None, None in a drain)."""
    rows: np.ndarray
    columns: RequestColumns
    first_pod: int
    """The last pod id before the drain (later ids are the drain's pods)."""
    first_ticket: int
    """The ticket of waiting-queue row 0."""
    first_arrival: int
    """The arrival-stream position of arrival row 0."""

    @classmethod
    def of(cls, sim: Simulator, limit: float, columns: RequestColumns, jobs: JobArrays | None = None) -> _DrainArrays:
        """``sim``'s state as the loop's arrays, to run up to ``limit``; with ``jobs`` (``sim``'s
        jobs as rows), its training side too: the active jobs, the live TRAIN_DONE events and
        the deferred ones projected (else none: a drain, :func:`drain_applies`)."""
        from deepboot_env.sim import drain_loops as k

        pool, books = sim._pool, sim._books
        first_arrival = sim._next_request
        arrivals_left = len(sim._arrival_times) - first_arrival
        first_ticket = next(iter(pool.waiting), pool._tickets)
        st = np.zeros(k.ST_SIZE, dtype=np.int64)
        st[k.POD_SEQ], st[k.SEQ], st[k.TICKETS] = pool._pod_seq, sim.events._seq, pool._tickets - first_ticket
        st[k.ARRIVED_BEFORE] = sim._arrived_before - first_arrival
        st[k.CAPACITY], st[k.INFERENCE_GPUS] = sim.ledger.capacity, pool._inference_gpus
        st[k.RECLAIM_KEY] = _RECLAIMABLE_KEYS[pool._reclaimable_total]
        st[k.HELD :] = sim.ledger.by_state
        fs = np.zeros(k.FS_SIZE)
        fs[k.NOW], fs[k.WAIT_S], fs[k.ACC_T] = sim.now, books.waiting_seconds, books._t
        fs[k.SAMPLE_T], fs[k.DRAIN_T] = books._sample_from[0], sim._boundary
        fs[k.SCALE], fs[k.INTERVAL], fs[k.LIMIT] = pool.protect_scale, sim.config.interval, limit
        fs[k.GS : k.SAMPLE], fs[k.SAMPLE :] = books.gpu_seconds, books._sample_from[1]
        # pushes: a request started pushes REQUEST_DONE, then POD_SLEEP, and its reclaim a
        # TRAIN_DONE; an allocation a TRAIN_DONE per job (the loop refuses to overflow)
        started_most = len(pool.waiting) + arrivals_left + len(pool.pods)
        training = _training_arrays(sim, jobs, st, fs)
        trained = [] if jobs is None else _training_events(sim)
        reqs = (
            np.concatenate([columns.ids, np.zeros_like(columns.ids)], axis=1),
            np.concatenate([columns.times, np.zeros_like(columns.times)], axis=1),
            np.array(sim._arrival_times[first_arrival:], dtype=np.float64),
            np.array(sim._arrival_order[first_arrival:], dtype=np.int64),
        )
        return cls(
            st,
            fs,
            _pod_arrays(sim, columns, pool._pod_seq + arrivals_left + len(pool.waiting) + 1, st),
            _heap_arrays(sim.events.heap, st, 3 * started_most + 1 + (0 if jobs is None else len(sim.jobs)), trained),
            reqs,
            _waiting_arrays(pool, columns, first_ticket, arrivals_left, st),
            training,
            np.zeros((ROW_BUFFER, k.ROW_WIDTH)),
            columns,
            pool._pod_seq,
            first_ticket,
            first_arrival,
        )

    def hand_over_rows(self, sim: Simulator) -> None:
        """Append the timeline rows the loop wrote to ``sim``'s books (and their arrivals to the
        recent arrivals)."""
        from deepboot_env.sim.drain_loops import ROWS

        for *values, waiting, arrivals in self.rows[: self.st[ROWS]].tolist():
            sim._books.timeline.append((*values, int(waiting), int(arrivals)))
            sim._recent.append(int(arrivals))

    def write_back(self, sim: Simulator) -> None:
        """Make ``sim`` what the Python drain would have left (the timeline rows are handed over)."""
        from deepboot_env.sim import drain_loops as k

        st, fs = self.st, self.fs
        sim.now = float(fs[k.NOW])
        sim._next_request = self.first_arrival + int(st[k.NXT])
        sim._arrived_before = self.first_arrival + int(st[k.ARRIVED_BEFORE])
        sim.num_events += int(st[k.PROCESSED])
        books = sim._books
        books.gpu_seconds[:] = fs[k.GS : k.SAMPLE].tolist()
        books.waiting_seconds, books._t = float(fs[k.WAIT_S]), float(fs[k.ACC_T])
        books._sample_from = (float(fs[k.SAMPLE_T]), fs[k.SAMPLE :].tolist())
        counts = self.pods[3]
        for row, name in enumerate(("running", "protect", "sleep"), start=1):
            sim.ledger.counts[name][:] = counts[row].tolist()
        sim.ledger.by_state[:] = st[k.HELD :].tolist()
        heap, (heap_t, heap_i) = sim.events.heap, self.events
        count = int(st[k.HEAP_N])
        heap[:] = [(t, *rest) for t, rest in zip(heap_t[:count].tolist(), heap_i[:count].tolist(), strict=True)]
        heapq.heapify(heap)
        sim.events._seq = int(st[k.SEQ])
        self._write_requests(sim._pool)
        self._write_pods(sim._pool)
        self._write_waiting(sim._pool)

    def _write_requests(self, pool: InferencePool) -> None:
        """The records of the requests the loop started."""
        from deepboot_env.sim import drain_loops as k

        req_i, req_f = self.reqs[0], self.reqs[1]
        started = np.flatnonzero(req_i[:, k.R_POD] > 0)
        records = pool.requests
        for idx, (cold, pid), (start, finish) in zip(
            started.tolist(), req_i[started, k.R_COLD :].tolist(), req_f[started, k.R_START :].tolist(), strict=True
        ):
            records[idx] = RequestRecord(idx, records[idx].arrival, start, finish, bool(cold), pid)

    def _write_pods(self, pool: InferencePool) -> None:
        """The live pods (in creation order) and the pods of each instance."""
        from deepboot_env.sim import drain_loops as k

        pod_i, pod_f, live = self.pods[0], self.pods[1], self.pods[2]
        instances, apps = self.columns.instances, self.columns.apps
        pool._pod_seq = int(self.st[k.POD_SEQ])
        by_instance = pool._pods_by_instance
        for pid in range(self.first_pod + 1, pool._pod_seq + 1):  # created here: their instance listed
            by_instance.setdefault(instances[pod_i[pid, k.INST]], [])
        for pids in by_instance.values():
            pids.clear()
        pool.pods.clear()
        for pid in live[: self.st[k.N_LIVE]].tolist():
            inst, app, node, status, hits, version = pod_i[pid].tolist()
            busy, sleep_at, since = pod_f[pid].tolist()
            name = instances[inst]
            pool.pods[pid] = Pod(
                pid, name, apps[app], node, _STATUS_NAMES[status], hits, busy, sleep_at, version, since
            )
            by_instance[name].append(pid)

    def _write_waiting(self, pool: InferencePool) -> None:
        """The waiting queue, FIFO and per instance, and the next ticket."""
        from deepboot_env.sim import drain_loops as k

        waits, st = self.queue[0], self.st
        instances, ids = self.columns.instances, self.columns.ids
        pool.waiting.clear()
        for queue in pool._waiting_of.values():
            queue.clear()
        for row in range(int(st[k.W_HEAD]), int(st[k.TICKETS])):
            idx = int(waits[row, k.W_REQUEST])
            if idx >= 0:
                ticket = self.first_ticket + row
                pool.waiting[ticket] = idx
                pool._waiting_of.setdefault(instances[ids[idx, 0]], deque()).append(ticket)
        pool._tickets = self.first_ticket + int(st[k.TICKETS])


def _heap_arrays(
    heap: list[tuple[float, int, int, int, int]],
    st: np.ndarray,
    pushes: int,
    training: list[tuple[float, int, int, int, int]],
) -> tuple[np.ndarray, np.ndarray]:
    """The event heap's inference events and the ``training`` ones as the loop's heap (sorted,
    so a heap), with room for ``pushes`` more (the heap's own training events are all stale in a
    drain, :func:`drain_applies`, and ``training`` holds the live ones otherwise)."""
    from deepboot_env.sim.drain_loops import HEAP_N

    entries = sorted([entry for entry in heap if entry[1] != _TRAIN_DONE] + training)
    heap_t = np.empty(len(entries) + pushes)
    heap_i = np.empty((len(entries) + pushes, 4), dtype=np.int64)
    if entries:
        heap_t[: len(entries)] = [entry[0] for entry in entries]
        heap_i[: len(entries)] = [entry[1:] for entry in entries]
    st[HEAP_N] = len(entries)
    return heap_t, heap_i


def _training_events(sim: Simulator) -> list[tuple[float, int, int, int, int]]:
    """The live TRAIN_DONE events of ``sim``: those on its heap, and the deferred ones of its
    completion schedule projected now, with the sequence numbers they reserved (the loop projects
    every change at once: :func:`~deepboot_env.sim.drain_loops._schedule`)."""
    jobs = sim.jobs
    live = [e for e in sim.events.heap if e[1] == _TRAIN_DONE and jobs[e[3]].version == e[4] and not jobs[e[3]].done]
    for index, (_, seq, version, state) in sim._training.completions._deferred.items():
        job = jobs[index]
        due = job.completion_from(state) if job.version == version else None
        if due is not None:  # after every horizon so far, so after now: the max with now is due
            live.append((due, _TRAIN_DONE, seq, index, version))
    return live


def _training_arrays(
    sim: Simulator, jobs: JobArrays | None, st: np.ndarray, fs: np.ndarray
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]] | tuple[None, None]:
    """The loop's ``train`` and ``tables`` for ``sim``'s ``jobs``, and its training scalars in
    ``st`` and ``fs``: the restart model, the active jobs, the cluster's GPUs and the reclaim
    rule's horizon; (None, None) for a drain (no job: numba then compiles none of the training
    side into the drain, whose loop stays as quick to compile as it was without it)."""
    from deepboot_env.sim import drain_loops as k
    from deepboot_env.sim.reclaim import least_loss_horizon

    if jobs is None:
        return None, None
    kinds = sim.ledger.kinds
    lendable = np.array(node_layout(kinds).lendable, dtype=np.int64)
    inference = np.array(sim._pool.inference_nodes, dtype=np.int64)
    lent = np.zeros(len(kinds), dtype=np.int64)
    lent[sim.ledger._infer_nodes] = 1
    st[k.TOTAL_GPUS] = sim.config.cluster.total_gpus
    active = np.zeros(len(jobs.rows[0]), dtype=np.int64)
    active[: len(sim._active)] = sim._active
    st[k.MODEL], st[k.N_ACTIVE] = jobs.model, len(sim._active)
    fs[k.HORIZON] = least_loss_horizon(sim.policy.choose_reclaim) or 0.0
    done = np.zeros(len(active), dtype=np.int64)
    return (*jobs.rows, active, lendable, inference, done, lent), jobs.tables


def _waiting_arrays(
    pool: InferencePool, columns: RequestColumns, first_ticket: int, arrivals_left: int, st: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The waiting queue as ticket rows from ``first_ticket`` (room for every request left to
    arrive) linked per instance, and the per-instance queue heads, tails, lengths and dirty marks."""
    from deepboot_env.sim import drain_loops as k

    waits = np.full((pool._tickets - first_ticket + arrivals_left + 1, 2), -1, dtype=np.int64)
    queues = np.full((len(columns.instances), 5), -1, dtype=np.int64)
    queues[:, k.Q_LEN] = queues[:, k.Q_DIRTY] = 0
    for ticket, idx in pool.waiting.items():
        row, inst = ticket - first_ticket, columns.ids[idx, 0]
        waits[row, k.W_REQUEST] = idx
        if queues[inst, k.Q_TAIL] >= 0:
            waits[queues[inst, k.Q_TAIL], k.W_NEXT] = row
        else:
            queues[inst, k.Q_HEAD] = row
        queues[inst, k.Q_TAIL] = row
        queues[inst, k.Q_LEN] += 1
    st[k.N_WAITING] = len(pool.waiting)
    return waits, queues


def _pod_arrays(sim: Simulator, columns: RequestColumns, rows: int, st: np.ndarray) -> tuple[np.ndarray, ...]:
    """The pods as rows by pod id (``rows`` of them: room for a pod per request left), the live
    ones in creation order, the ledger's GPUs per node and the inference nodes in the pool's order."""
    from deepboot_env.sim import drain_loops as k

    pool = sim._pool
    pod_i = np.zeros((rows, 6), dtype=np.int64)
    pod_i[:, k.STATUS] = k.DEAD
    pod_f = np.zeros((rows, 3))
    live = np.zeros(len(pool.inference_nodes) * sim.ledger.capacity + 1, dtype=np.int64)
    inst_ids = {name: i for i, name in enumerate(columns.instances)}
    app_ids = {name: i for i, name in enumerate(columns.apps)}
    for j, pod in enumerate(pool.pods.values()):
        pod_i[pod.pid] = (
            inst_ids[pod.instance],
            app_ids[pod.app],
            pod.node,
            _STATUS_CODES[pod.status],
            pod.hits,
            pod.version,
        )
        pod_f[pod.pid] = pod.busy_until, pod.sleep_at, pod.since
        live[j] = pod.pid
    st[k.N_LIVE] = len(pool.pods)
    counts = np.array([sim.ledger.counts[name] for name in ("train", "running", "protect", "sleep")], dtype=np.int64)
    order = np.array(pool._inference_node_order(), dtype=np.int64)
    return pod_i, pod_f, live, counts, order
