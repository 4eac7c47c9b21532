"""The simulator's event loop over arrays, compiled by numba (docs/simulator.md §9-§10).

These are :meth:`Simulator._drain <deepboot_env.sim.simulator.Simulator._drain>` and the
:class:`~deepboot_env.sim.inference.InferencePool` methods it runs (arrivals, completions, pods
falling asleep, FIFO serving, evictions) together with the
:class:`~deepboot_env.sim.accounting.EpisodeAccount` integration, written again over the arrays
of :mod:`deepboot_env.sim.drain`, step for step and float operation for float operation: the
drain, where no training job holds a GPU, so no GPU can be reclaimed and no hook is called; and,
with the jobs as the rows of :mod:`~deepboot_env.sim.progress_loops` (``train`` and ``tables``,
described above :func:`_sort_order`), the events between two decisions
(:func:`run_events_loops`): reclaims by ATS-I or the restart-aware rule, completions and the
ledger's training GPUs. Importing this module compiles nothing; the first call compiles
:func:`drain_loops` together with its helpers (registered for compiled callers only, so that they
need no Python entry points), and the machine code is cached on disk
(:func:`~deepboot_env.sim.compiled.compiled`).

The state (built by :mod:`deepboot_env.sim.drain`):

* ``st`` (int64) and ``fs`` (float64): the scalars, at the slots named below, the ledger's GPUs
  by state (``st[HELD:]``), the GPU-seconds and the last sample's (``fs[GS:]``, ``fs[SAMPLE:]``);
* ``pods``: ``(pod_i, pod_f, live, counts, order)``: pod columns by pod id; the live pods in
  creation order (at most one per inference GPU, so a scan costs what the Python pool's
  per-instance lists cost); the ledger's GPUs per node (train, running, protect, sleep rows); the
  inference nodes in the pool's order;
* ``events``: ``(heap_t, heap_i)``: a binary heap of ``(time, kind, seq)`` keys, the total order of
  :class:`~deepboot_env.sim.events.EventQueue`'s tuples, so events come out in the same order;
* ``reqs``: ``(req_i, req_f, arr_t, arr_idx)``: per request its instance, application and, once
  started here, cold flag and pod, its duration, cold-start delay, start and finish; the arrival
  stream left (times, request indices);
* ``queue``: ``(waits, queues)``: waiting tickets, FIFO overall and linked per instance, and per
  instance the head, tail, length, dirty flag and (column ``Q_DIRTY_LIST``, by row) the dirty
  instances, so that a blocked queue costs nothing per event, as in the pool;
* ``rows``: the timeline rows written (time, mean GPUs by state, waiting, arrivals).

Tuples are kept to a few arrays each: numba's typing time grows with a tuple's length, and it is
paid once per install (then the cache serves).
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable as inlined

from deepboot_env.sim.compiled import compiled
from deepboot_env.sim.progress_loops import (
    COMPLETION,
    adopt_counts,
    advance_job,
    completion_time,
    least_loss_victim,
    profiled,
)
from deepboot_env.sim.progress_loops import REPLICAS as JOB_REPLICAS
from deepboot_env.sim.progress_loops import VERSION as JOB_VERSION

PROGRESS_LOOPS_DIGEST = "027caf4eb0a69a55"
"""The first 16 hex digits of the SHA-256 of ``progress_loops.py``'s source: numba's disk cache
is keyed on this module's source alone, so a change there must change this line (a test checks
it) for the cached loops to be compiled again with it."""

# int64 scalars in `st`; HELD starts the ledger's six GPUs by state
(NXT, POD_SEQ, N_LIVE, SEQ, TICKETS, W_HEAD, N_WAITING, PROCESSED, ARRIVED_BEFORE, HEAP_N, ROWS, N_DIRTY) = range(12)
CAPACITY, INFERENCE_GPUS, RECLAIM_KEY = 12, 13, 14
MODEL, N_ACTIVE, N_DONE, RESTARTS, RECLAIMS, TOTAL_GPUS, HELD = 15, 16, 17, 18, 19, 20, 21
ST_SIZE = HELD + 6
# float64 scalars in `fs`; GS and SAMPLE start six GPU-second totals each
NOW, WAIT_S, ACC_T, SAMPLE_T, DRAIN_T, SCALE, INTERVAL, LIMIT, HORIZON, NEXT_T, GS = range(11)
SAMPLE = GS + 6
FS_SIZE = SAMPLE + 6
# pod columns: pod_i (int64) and pod_f (float64); a dropped pod's status is DEAD
INST, APP, NODE, STATUS, HITS, VERSION = range(6)
BUSY, SLEEP_AT, SINCE = range(3)
RUNNING, PROTECT, SLEEP, DEAD = 0, 1, 2, -1
"""Pod states; ``counts`` rows 1 + state and ``st[HELD + 2 + state]`` count them."""
# request columns: req_i (int64) and req_f (float64)
R_INST, R_APP, R_COLD, R_POD = range(4)
R_DURATION, R_DELAY, R_START, R_FINISH = range(4)
REQUEST_DONE, POD_SLEEP, TRAIN_DONE, REQUEST_ARRIVAL = 0, 1, 2, 3
"""Event kinds (:class:`~deepboot_env.sim.events.EventKind` values)."""
Q_HEAD, Q_TAIL, Q_LEN, Q_DIRTY, Q_DIRTY_LIST = range(5)
W_REQUEST, W_NEXT = range(2)
ROW_WIDTH = 9
ROWS_FULL = 1
""":func:`drain_loops`' answer when the row buffer is full (call it again after emptying it)."""


@inlined
def _heap_less(heap_t: np.ndarray, heap_i: np.ndarray, a: int, b: int) -> bool:
    """Whether heap entry ``a`` sorts before entry ``b``: by (time, kind, seq)."""
    if heap_t[a] != heap_t[b]:
        return heap_t[a] < heap_t[b]
    if heap_i[a, 0] != heap_i[b, 0]:
        return heap_i[a, 0] < heap_i[b, 0]
    return heap_i[a, 1] < heap_i[b, 1]


@inlined
def _heap_swap(heap_t: np.ndarray, heap_i: np.ndarray, a: int, b: int) -> None:
    heap_t[a], heap_t[b] = heap_t[b], heap_t[a]
    for col in range(4):
        heap_i[a, col], heap_i[b, col] = heap_i[b, col], heap_i[a, col]


@inlined
def _push(st: np.ndarray, events: tuple, time: float, kind: int, target: int, version: int) -> None:
    """:meth:`EventQueue.push <deepboot_env.sim.events.EventQueue.push>`: the next sequence number."""
    st[SEQ] += 1
    _push_reserved(st, events, time, kind, st[SEQ], target, version)


@inlined
def _push_reserved(st: np.ndarray, events: tuple, time: float, kind: int, seq: int, target: int, version: int) -> None:
    """:meth:`EventQueue.push_reserved <deepboot_env.sim.events.EventQueue.push_reserved>`."""
    heap_t, heap_i = events
    k = st[HEAP_N]
    if k >= len(heap_t):  # sized by the caller; numba does not check bounds
        raise RuntimeError("the event heap is full")
    st[HEAP_N] = k + 1
    heap_t[k] = time
    heap_i[k, 0], heap_i[k, 1], heap_i[k, 2], heap_i[k, 3] = kind, seq, target, version
    while k > 0:
        parent = (k - 1) // 2
        if not _heap_less(heap_t, heap_i, k, parent):
            break
        _heap_swap(heap_t, heap_i, k, parent)
        k = parent


@inlined
def _heap_pop(st: np.ndarray, events: tuple) -> None:
    """Remove the earliest entry (read it at row 0 first)."""
    heap_t, heap_i = events
    n = st[HEAP_N] - 1
    st[HEAP_N] = n
    _heap_swap(heap_t, heap_i, 0, n)
    k = 0
    while 2 * k + 1 < n:
        child = 2 * k + 1
        if child + 1 < n and _heap_less(heap_t, heap_i, child + 1, child):
            child += 1
        if not _heap_less(heap_t, heap_i, child, k):
            break
        _heap_swap(heap_t, heap_i, k, child)
        k = child


@inlined
def _account(t: float, st: np.ndarray, fs: np.ndarray) -> None:
    """:meth:`EpisodeAccount.account <deepboot_env.sim.accounting.EpisodeAccount.account>`."""
    dt = t - fs[ACC_T]
    if dt <= 0:
        return
    for state in range(6):
        fs[GS + state] += dt * st[HELD + state]
    fs[WAIT_S] += dt * st[N_WAITING]
    fs[ACC_T] = t


@inlined
def _close_interval(t: float, st: np.ndarray, fs: np.ndarray, rows: np.ndarray) -> None:
    """``Simulator._close_interval``: account up to ``t`` and write one timeline row."""
    arrivals = st[NXT] - st[ARRIVED_BEFORE]
    st[ARRIVED_BEFORE] = st[NXT]
    _account(t, st, fs)
    span = t - fs[SAMPLE_T]
    row = st[ROWS]
    rows[row, 0] = t
    for state in range(6):
        rows[row, 1 + state] = (fs[GS + state] - fs[SAMPLE + state]) / span if span > 0 else float(st[HELD + state])
        fs[SAMPLE + state] = fs[GS + state]
    rows[row, 7], rows[row, 8] = st[N_WAITING], arrivals
    st[ROWS] = row + 1
    fs[SAMPLE_T] = t
    fs[NOW] = t


@inlined
def _move_pod(st: np.ndarray, pods: tuple, pid: int, new: int) -> None:
    """:meth:`ClusterLedger.move_pod <deepboot_env.sim.cluster.ClusterLedger.move_pod>` and the
    pod's status."""
    pod_i, counts = pods[0], pods[3]
    node, old = pod_i[pid, NODE], pod_i[pid, STATUS]
    counts[1 + old, node] -= 1
    counts[1 + new, node] += 1
    st[HELD + 2 + old] -= 1
    st[HELD + 2 + new] += 1
    pod_i[pid, STATUS] = new


@inlined
def _warm_pod(st: np.ndarray, pods: tuple, inst: int) -> int:
    """``InferencePool._warm_pod``: the SLEEP or PROTECT pod of ``inst`` with the most hits (the
    first created among equals), or -1."""
    pod_i, live = pods[0], pods[2]
    best = -1
    for j in range(st[N_LIVE]):
        pid = live[j]
        if pod_i[pid, INST] == inst and pod_i[pid, STATUS] != RUNNING:
            if best < 0 or pod_i[pid, HITS] > pod_i[best, HITS]:
                best = pid
    return best


@inlined
def _free_node(st: np.ndarray, pods: tuple) -> int:
    """``InferencePool._free_inference_gpu``: the first inference node with an empty GPU, or -1."""
    counts, order = pods[3], pods[4]
    for node in order:
        if counts[0, node] + counts[1, node] + counts[2, node] + counts[3, node] < st[CAPACITY]:
            return node
    return -1


@inlined
def _evict_sleeper(st: np.ndarray, pods: tuple) -> int:
    """``InferencePool._evict_sleep_pod``: on the first inference node with a SLEEP pod, evict
    the one asleep the longest (:func:`_evict_on`); its node, or -1."""
    counts, order = pods[3], pods[4]
    for node in order:
        if counts[3, node] > 0:
            _evict_on(st, pods, node)
            return node
    return -1


@inlined
def _evict_on(st: np.ndarray, pods: tuple, node: int) -> None:
    """``InferencePool.evict_one_sleeper``: evict the SLEEP pod on ``node`` asleep the longest
    (then the lowest pod id)."""
    pod_i, pod_f, live, counts = pods[0], pods[1], pods[2], pods[3]
    victim, at = -1, -1
    for j in range(st[N_LIVE]):
        pid = live[j]
        if pod_i[pid, NODE] == node and pod_i[pid, STATUS] == SLEEP:
            since = pod_f[pid, SINCE]
            if victim < 0 or since < pod_f[victim, SINCE] or (since == pod_f[victim, SINCE] and pid < victim):
                victim, at = pid, j
    if victim < 0:
        raise RuntimeError("no SLEEP pod to evict on the node")
    counts[3, node] -= 1
    st[HELD + 4] -= 1
    st[HELD + 5] += 1
    pod_i[victim, STATUS] = DEAD
    for j in range(at, st[N_LIVE] - 1):
        live[j] = live[j + 1]
    st[N_LIVE] -= 1


@inlined
def _new_pod(st: np.ndarray, pods: tuple, inst: int, app: int, node: int, now: float) -> int:
    """``InferencePool._new_pod``: a RUNNING pod of ``inst`` on a free GPU of ``node``; its id."""
    pod_i, pod_f, live, counts = pods[0], pods[1], pods[2], pods[3]
    st[POD_SEQ] += 1
    pid = st[POD_SEQ]
    pod_i[pid, INST], pod_i[pid, APP], pod_i[pid, NODE] = inst, app, node
    pod_i[pid, STATUS], pod_i[pid, HITS], pod_i[pid, VERSION] = RUNNING, 0, 0
    pod_f[pid, BUSY], pod_f[pid, SLEEP_AT], pod_f[pid, SINCE] = np.inf, np.inf, now
    counts[1 + RUNNING, node] += 1
    st[HELD + 2 + RUNNING] += 1
    st[HELD + 5] -= 1
    live[st[N_LIVE]] = pid
    st[N_LIVE] += 1
    return pid


@inlined
def _start_on_pod(
    st: np.ndarray, pods: tuple, events: tuple, reqs: tuple, pid: int, idx: int, cold: bool, now: float
) -> None:
    """``InferencePool._start_on_pod``: request ``idx`` starts on ``pid`` now (after the cold
    start delay if ``cold``); its record and its REQUEST_DONE event."""
    pod_i, pod_f = pods[0], pods[1]
    req_i, req_f = reqs[0], reqs[1]
    if not cold:
        if pod_i[pid, STATUS] == PROTECT:
            pod_i[pid, HITS] += 1
        else:
            pod_i[pid, HITS] = 0
        _move_pod(st, pods, pid, RUNNING)
    delay = req_f[idx, R_DELAY] if cold else 0.0
    start = now + delay
    finish = start + req_f[idx, R_DURATION]
    req_f[idx, R_START], req_f[idx, R_FINISH] = start, finish
    req_i[idx, R_COLD], req_i[idx, R_POD] = 1 if cold else 0, pid
    pod_f[pid, BUSY] = finish
    pod_f[pid, SINCE] = now
    pod_i[pid, VERSION] += 1
    _push(st, events, finish, REQUEST_DONE, pid, pod_i[pid, VERSION])


@inlined
def _place(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    train: tuple | None,
    tables: tuple | None,
    idx: int,
    now: float,
) -> bool:
    """``InferencePool._place_request``: a warm pod of the request's instance, else an empty GPU,
    else an evicted SLEEP pod's, else a lent training GPU taken back (:func:`_reclaim`); False if none."""
    req_i = reqs[0]
    inst = req_i[idx, R_INST]
    pid = _warm_pod(st, pods, inst)
    cold = pid < 0
    if cold:
        node = _free_node(st, pods)
        if node < 0:
            node = _evict_sleeper(st, pods)
        if train is not None:  # None in a drain: numba then compiles none of the training side
            if node < 0:
                assert tables is not None
                node = _reclaim(st, fs, pods, events, train, tables, now)
        if node < 0:
            return False
        pid = _new_pod(st, pods, inst, req_i[idx, R_APP], node, now)
    _start_on_pod(st, pods, events, reqs, pid, idx, cold, now)
    return True


@inlined
def _enqueue(st: np.ndarray, reqs: tuple, queue: tuple, idx: int) -> None:
    """Request ``idx`` joins the waiting queue with the next ticket (last of its instance too)."""
    waits, queues = queue
    ticket = st[TICKETS]
    st[TICKETS] = ticket + 1
    inst = reqs[0][idx, R_INST]
    waits[ticket, W_REQUEST], waits[ticket, W_NEXT] = idx, -1
    if queues[inst, Q_TAIL] >= 0:
        waits[queues[inst, Q_TAIL], W_NEXT] = ticket
    else:
        queues[inst, Q_HEAD] = ticket
    queues[inst, Q_TAIL] = ticket
    queues[inst, Q_LEN] += 1
    st[N_WAITING] += 1


@inlined
def _dequeue(st: np.ndarray, reqs: tuple, queue: tuple, ticket: int) -> None:
    """``ticket``, the first waiting ticket of its instance, leaves the queue."""
    waits, queues = queue
    inst = reqs[0][waits[ticket, W_REQUEST], R_INST]
    waits[ticket, W_REQUEST] = -1
    queues[inst, Q_HEAD] = waits[ticket, W_NEXT]
    if queues[inst, Q_HEAD] < 0:
        queues[inst, Q_TAIL] = -1
    queues[inst, Q_LEN] -= 1
    st[N_WAITING] -= 1


@inlined
def _mark_dirty(st: np.ndarray, queues: np.ndarray, inst: int) -> None:
    """``inst`` may have gained a warm pod while requests of its wait."""
    if queues[inst, Q_DIRTY] == 0:
        queues[inst, Q_DIRTY] = 1
        queues[st[N_DIRTY], Q_DIRTY_LIST] = inst
        st[N_DIRTY] += 1


@inlined
def _cold_gpu_possible(st: np.ndarray) -> bool:
    """``InferencePool._cold_gpu_possible``: False only when no cold start can find a GPU."""
    key = st[RECLAIM_KEY]
    if key == 2:  # the pool's _reclaimable_total is None
        return True
    reclaimable = st[HELD + 1] if key == 0 else st[HELD] + st[HELD + 1]
    return st[HELD + 4] > 0 or reclaimable > 0 or st[HELD + 2] + st[HELD + 3] < st[INFERENCE_GPUS]


@inlined
def _serve_warm(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple | None,
    tables: tuple | None,
    now: float,
) -> None:
    """``InferencePool._serve_warm``: the first waiting requests of the dirty instances, as many
    as each has warm pods, in FIFO (ticket) order."""
    pod_i, live = pods[0], pods[2]
    waits, queues = queue
    chosen = np.empty(st[N_LIVE] + 1, dtype=np.int64)  # every chosen request takes a live pod
    n = 0
    for d in range(st[N_DIRTY]):
        inst = queues[d, Q_DIRTY_LIST]
        if queues[inst, Q_LEN] == 0:
            continue
        warm = 0
        for j in range(st[N_LIVE]):
            pid = live[j]
            if pod_i[pid, INST] == inst and pod_i[pid, STATUS] != RUNNING:
                warm += 1
        ticket = queues[inst, Q_HEAD]
        for _ in range(min(warm, queues[inst, Q_LEN])):
            chosen[n] = ticket
            n += 1
            ticket = waits[ticket, W_NEXT]
    for i in range(1, n):  # in ticket order: an insertion sort of a few tickets (np.sort costs a
        ticket, j = chosen[i], i  # second of compiling, once per install)
        while j > 0 and chosen[j - 1] > ticket:
            chosen[j] = chosen[j - 1]
            j -= 1
        chosen[j] = ticket
    for ticket in chosen[:n]:
        if not _place(st, fs, pods, events, reqs, train, tables, waits[ticket, W_REQUEST], now):
            raise RuntimeError("a waiting request found no warm pod of its instance")
        _dequeue(st, reqs, queue, ticket)


@inlined
def _serve_waiting(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple | None,
    tables: tuple | None,
    now: float,
) -> None:
    """``InferencePool.serve_waiting`` under a reclaim rule that never refuses while GPUs are
    lent (ATS-I, the restart-aware rule): from the head while requests find a pod or a GPU, then
    the dirty instances' warm pods."""
    waits, queues = queue
    while st[N_WAITING] > 0 and _cold_gpu_possible(st):
        while waits[st[W_HEAD], W_REQUEST] < 0:  # tickets served out of order are skipped once
            st[W_HEAD] += 1
        ticket = st[W_HEAD]
        if not _place(st, fs, pods, events, reqs, train, tables, waits[ticket, W_REQUEST], now):
            break
        _dequeue(st, reqs, queue, ticket)
    if st[N_DIRTY] > 0 and st[N_WAITING] > 0:
        _serve_warm(st, fs, pods, events, reqs, queue, train, tables, now)
    for d in range(st[N_DIRTY]):
        queues[queues[d, Q_DIRTY_LIST], Q_DIRTY] = 0
    st[N_DIRTY] = 0


@inlined
def _arrive(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple | None,
    tables: tuple | None,
    idx: int,
    now: float,
) -> None:
    """``InferencePool.arrive``."""
    alone = st[N_WAITING] == 0
    if alone and _place(st, fs, pods, events, reqs, train, tables, idx, now):
        return
    _enqueue(st, reqs, queue, idx)
    if not alone:
        _mark_dirty(st, queue[1], reqs[0][idx, R_INST])
        _serve_waiting(st, fs, pods, events, reqs, queue, train, tables, now)


@inlined
def _request_done(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple | None,
    tables: tuple | None,
    pid: int,
    now: float,
) -> None:
    """``InferencePool.request_done``: the pod turns PROTECT until its POD_SLEEP event."""
    pod_i, pod_f = pods[0], pods[1]
    scale = fs[SCALE]
    _move_pod(st, pods, pid, PROTECT)
    pod_f[pid, SINCE] = now
    pod_i[pid, VERSION] += 1
    protect = int(math.floor(min(30.0 * scale + 15.0 * scale * pod_i[pid, HITS], 120.0 * scale)))
    pod_f[pid, SLEEP_AT] = now + protect + 1
    _push(st, events, pod_f[pid, SLEEP_AT], POD_SLEEP, pid, pod_i[pid, VERSION])
    if st[N_WAITING] > 0:
        _mark_dirty(st, queue[1], pod_i[pid, INST])
        _serve_waiting(st, fs, pods, events, reqs, queue, train, tables, now)


@inlined
def _pod_sleep(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple | None,
    tables: tuple | None,
    pid: int,
    now: float,
) -> None:
    """``InferencePool.pod_sleep``."""
    pod_i, pod_f = pods[0], pods[1]
    _move_pod(st, pods, pid, SLEEP)
    pod_i[pid, HITS] = 0
    pod_f[pid, SINCE] = now
    pod_i[pid, VERSION] += 1
    if st[N_WAITING] > 0:
        _serve_waiting(st, fs, pods, events, reqs, queue, train, tables, now)


@inlined
def _live_top(st: np.ndarray, pods: tuple, events: tuple, train: tuple | None) -> float:
    """Drop the stale events at the top of the heap (``Simulator._is_stale``: a pod re-used or
    gone, a job re-planned or done); the time of the earliest live one, inf if none."""
    pod_i = pods[0]
    heap_t, heap_i = events
    while st[HEAP_N] > 0:
        target, version = heap_i[0, 2], heap_i[0, 3]
        if heap_i[0, 0] == TRAIN_DONE:
            if train is not None:  # a drain's heap holds no live training event
                if train[1][target, JOB_VERSION] == version and math.isnan(train[0][target, COMPLETION]):
                    return heap_t[0]
        elif pod_i[target, STATUS] != DEAD and pod_i[target, VERSION] == version:
            return heap_t[0]
        _heap_pop(st, events)
    return np.inf


@inlined
def _next_live_time(st: np.ndarray, pods: tuple, events: tuple, reqs: tuple, train: tuple | None) -> float:
    """``Simulator._next_live_time``: the earliest live event or arrival, inf if none."""
    arr_t = reqs[2]
    arrival = arr_t[st[NXT]] if st[NXT] < len(arr_t) else np.inf
    return min(_live_top(st, pods, events, train), arrival)


# ----------------------------------------------------------------- the training side
# `train`: (jf, ji, pf, pi, jcounts, active, lendable, infer_nodes, done, lent_mask) - the job
# rows of deepboot_env.sim.progress_loops and their GPUs per node; the active jobs in arrival
# order (the first st[N_ACTIVE]); the nodes inference may take a training GPU from; the inference
# nodes in the pool's order; the jobs completed here, in order (the first st[N_DONE]); per node,
# 1 where the ledger counts training GPUs as lent (an inference node of two clusters).
# `tables`: the applications' stacked tables (progress_loops.app_tables). A drain passes None for
# both: every training call of the loop sits under `train is not None`, which numba prunes from the
# drain's machine code (compiling the training side would triple the drain's first compile).


@inlined
def _sort_order(pods: tuple, train: tuple) -> None:
    """``InferencePool._inference_node_order``: the inference nodes, those with the fewest
    training GPUs first (a stable insertion sort of the pool's order: a few nodes)."""
    counts, order, nodes = pods[3], pods[4], train[7]
    for i in range(len(nodes)):
        node, j = nodes[i], i
        while j > 0 and counts[0, order[j - 1]] > counts[0, node]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = node


@inlined
def _change_training(st: np.ndarray, pods: tuple, train: tuple, node: int, delta: int) -> None:
    """:meth:`ClusterLedger.change_training <deepboot_env.sim.cluster.ClusterLedger.change_training>`
    by ``delta`` GPUs on ``node``: the training row, lent (an inference node of two clusters) or
    training GPUs, and the idle ones."""
    pods[3][0, node] += delta
    st[HELD + train[9][node]] += delta
    st[HELD + 5] -= delta


@inlined
def _schedule(st: np.ndarray, events: tuple, train: tuple, tables: tuple, j: int, now: float) -> None:
    """:meth:`CompletionSchedule.schedule <deepboot_env.sim.completions.CompletionSchedule.schedule>`,
    projected at once: the sequence number is taken now, as the lazy schedule reserves it, so
    the event sorts the same."""
    jf, ji, pf, pi = train[0], train[1], train[2], train[3]
    if ji[j, JOB_REPLICAS] == 0 and math.isnan(jf[j, COMPLETION]):
        return
    st[SEQ] += 1
    t = completion_time(jf, ji, pf, pi, j, tables)
    if not math.isnan(t):
        _push_reserved(st, events, max(t, now), TRAIN_DONE, st[SEQ], j, ji[j, JOB_VERSION])


@inlined
def _change_job(
    st: np.ndarray,
    pods: tuple,
    events: tuple,
    train: tuple,
    tables: tuple,
    j: int,
    new: np.ndarray,
    now: float,
    update_ledger: bool,
) -> None:
    """``TrainingJobs._change_job``: job ``j`` moves to GPUs per node ``new`` at ``now``,
    re-planned and re-projected; with ``update_ledger``, the ledger's training GPUs (and the
    inference nodes' order) too, else the caller has set them."""
    jf, ji, pf, pi, jcounts = train[0], train[1], train[2], train[3], train[4]
    advance_job(jf, ji, pf, pi, j, now, tables)
    if update_ledger:
        for node in range(len(new)):
            if new[node] != jcounts[j, node]:
                _change_training(st, pods, train, node, new[node] - jcounts[j, node])
    if adopt_counts(jf, ji, pf, pi, jcounts, j, new, now, st[MODEL], tables):
        st[RESTARTS] += 1
    _schedule(st, events, train, tables, j, now)
    if update_ledger:
        _sort_order(pods, train)


@inlined
def _reclaim(
    st: np.ndarray, fs: np.ndarray, pods: tuple, events: tuple, train: tuple, tables: tuple, now: float
) -> int:
    """``InferencePool._reclaim`` with the ATS-I or restart-aware rule (horizon ``fs[HORIZON]``):
    the victim's GPU taken back, its node; -1 if no training GPU is reclaimable."""
    key, counts = st[RECLAIM_KEY], pods[3]
    if key == 0:
        lent = st[HELD + 1] > 0
    elif key == 1:
        lent = st[HELD] + st[HELD + 1] > 0
    else:
        lent = False
        for node in train[7]:
            lent = lent or counts[0, node] > 0
    if not lent:
        return -1
    pods_now = st[HELD + 2] + st[HELD + 3] + st[HELD + 4]
    fair = math.ceil(st[TOTAL_GPUS] / max(st[N_ACTIVE] + pods_now, 1))
    rows = (train[0], train[1], train[2], train[3], train[4])
    active = train[5][: st[N_ACTIVE]]
    j, node = least_loss_victim(rows, tables, st[MODEL], active, train[6], fair, fs[HORIZON], now)
    if j < 0:
        raise RuntimeError("the reclaim rule chose no GPU while training GPUs are lent")
    new = train[4][j].copy()
    new[node] -= 1
    _change_job(st, pods, events, train, tables, j, new, now, True)
    st[RECLAIMS] += 1
    return node


@inlined
def _train_done(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple,
    tables: tuple,
    j: int,
    now: float,
) -> None:
    """``TrainingJobs.train_done``: job ``j`` completes now; its GPUs are freed (it is parked),
    it leaves the active jobs, and waiting requests are served."""
    jf, ji, pf, pi, jcounts, active, done = train[0], train[1], train[2], train[3], train[4], train[5], train[8]
    advance_job(jf, ji, pf, pi, j, now, tables)
    if math.isnan(jf[j, COMPLETION]):
        raise RuntimeError("a job was projected to complete now and did not")
    for node in range(jcounts.shape[1]):
        if jcounts[j, node]:
            _change_training(st, pods, train, node, -jcounts[j, node])
    adopt_counts(jf, ji, pf, pi, jcounts, j, np.zeros(jcounts.shape[1], dtype=np.int64), now, st[MODEL], tables)
    n = st[N_ACTIVE]
    at = 0
    while active[at] != j:
        at += 1
    for i in range(at, n - 1):
        active[i] = active[i + 1]
    st[N_ACTIVE] = n - 1
    done[st[N_DONE]] = j
    st[N_DONE] += 1
    _sort_order(pods, train)
    if st[N_WAITING] > 0:
        _serve_waiting(st, fs, pods, events, reqs, queue, train, tables, now)


@inlined
def _run_events(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple | None,
    tables: tuple | None,
    until: float,
) -> None:
    """``Simulator._run_events``: every event up to ``until``, the heap's and the arrivals merged
    in (time, kind, sequence) order (an arrival after every heap event of its second)."""
    heap_i = events[1]
    arr_t, arr_idx = reqs[2], reqs[3]
    while True:
        arrival = arr_t[st[NXT]] if st[NXT] < len(arr_t) else np.inf
        top = _live_top(st, pods, events, train)
        if top <= until and top <= arrival:
            t, kind, target = top, heap_i[0, 0], heap_i[0, 2]
            _heap_pop(st, events)
        elif arrival <= until:
            t, kind, target = arrival, REQUEST_ARRIVAL, arr_idx[st[NXT]]
            st[NXT] += 1
        else:
            return
        st[PROCESSED] += 1
        _account(t, st, fs)
        fs[NOW] = t
        if kind == REQUEST_ARRIVAL:
            _arrive(st, fs, pods, events, reqs, queue, train, tables, target, t)
        elif kind == REQUEST_DONE:
            _request_done(st, fs, pods, events, reqs, queue, train, tables, target, t)
        elif kind == POD_SLEEP:
            _pod_sleep(st, fs, pods, events, reqs, queue, train, tables, target, t)
        elif train is not None:
            assert tables is not None
            _train_done(st, fs, pods, events, reqs, queue, train, tables, target, t)


@compiled
def drain_loops(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple | None,
    tables: tuple | None,
    rows: np.ndarray,
) -> int:
    """``Simulator._drain(fs[LIMIT])``: the events up to the limit interval by interval, a
    timeline row at every interval end with events left; 0 when done (``fs[NEXT_T]``: the next
    live event or arrival after the limit, inf if none), :data:`ROWS_FULL` when ``rows`` is full
    (empty it, set ``st[ROWS]`` to 0 and call again: it goes on where it was)."""
    interval, limit = fs[INTERVAL], fs[LIMIT]
    while True:
        fs[NEXT_T] = _next_live_time(st, pods, events, reqs, train)
        if fs[NEXT_T] > limit:
            return 0
        if st[ROWS] >= len(rows):
            return ROWS_FULL
        t = (math.floor(fs[DRAIN_T] / interval) + 1) * interval
        fs[DRAIN_T] = t
        _run_events(st, fs, pods, events, reqs, queue, train, tables, min(t, limit))
        if _next_live_time(st, pods, events, reqs, train) <= limit and t <= limit:
            _close_interval(t, st, fs, rows)


@inlined
def _apply_counts(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple,
    tables: tuple,
    wanted: np.ndarray,
    now: float,
) -> None:
    """``Simulator.apply_valid_counts``: account to ``now``, then ``TrainingJobs.apply_counts``
    with ``wanted[j]`` the GPUs per node of active job ``j`` (-1 in its first column: absent, none):
    the SLEEP pods in the way evicted, the ledger's training GPUs set, every job whose placement
    changes re-planned in arrival order, waiting requests served."""
    jcounts, active, counts = train[4], train[5], pods[3]
    nodes = jcounts.shape[1]
    _account(now, st, fs)
    total = np.zeros(nodes, dtype=np.int64)
    changed = np.empty(st[N_ACTIVE], dtype=np.int64)
    n = 0
    for a in range(st[N_ACTIVE]):
        j = active[a]
        if wanted[j, 0] < 0:
            if train[1][j, JOB_REPLICAS]:
                wanted[j] = 0
                changed[n] = j
                n += 1
            continue
        moved = False
        for node in range(nodes):
            total[node] += wanted[j, node]
            moved = moved or wanted[j, node] != jcounts[j, node]
        if moved:
            changed[n] = j
            n += 1
    for node in range(nodes):
        for _ in range(total[node] + counts[1, node] + counts[2, node] + counts[3, node] - st[CAPACITY]):
            _evict_on(st, pods, node)
        if total[node] != counts[0, node]:
            _change_training(st, pods, train, node, total[node] - counts[0, node])
    for c in range(n):
        _change_job(st, pods, events, train, tables, changed[c], wanted[changed[c]], now, False)
    _sort_order(pods, train)
    if st[N_WAITING] > 0:
        _serve_waiting(st, fs, pods, events, reqs, queue, train, tables, now)


@compiled
def apply_counts_loops(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple,
    tables: tuple,
    wanted: np.ndarray,
    now: float,
) -> None:
    """:func:`_apply_counts` (``wanted`` is changed: absent jobs' rows become zeros)."""
    _sort_order(pods, train)
    _apply_counts(st, fs, pods, events, reqs, queue, train, tables, wanted, now)


@compiled
def run_events_loops(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple,
    tables: tuple,
    until: float,
) -> None:
    """``Simulator._run_events(until)`` with training jobs: inference events, reclaims of lent
    GPUs by ATS-I or the restart-aware rule, and completions (training side: :mod:`progress_loops`)."""
    _sort_order(pods, train)
    _run_events(st, fs, pods, events, reqs, queue, train, tables, until)


@compiled
def run_to_boundary(
    st: np.ndarray,
    fs: np.ndarray,
    pods: tuple,
    events: tuple,
    reqs: tuple,
    queue: tuple,
    train: tuple,
    tables: tuple,
    until: float,
    rows: np.ndarray,
) -> None:
    """``Simulator._go_to_next_decision``'s step to a boundary: every event up to ``until``, then
    the interval closed there (one timeline row; ``rows`` has room for it)."""
    _sort_order(pods, train)
    _run_events(st, fs, pods, events, reqs, queue, train, tables, until)
    _close_interval(until, st, fs, rows)


@compiled
def advance_holders(train: tuple, tables: tuple, active: np.ndarray, now: float) -> None:
    """The jobs of ``active`` that hold GPUs advanced to ``now`` (as ``StateBuilder.views`` does)."""
    jf, ji, pf, pi = train[0], train[1], train[2], train[3]
    for j in active:
        if ji[j, JOB_REPLICAS]:
            advance_job(jf, ji, pf, pi, j, now, tables)
            profiled(jf, ji, j, now)  # SimConfig(cap_growth="trained"): the cap grows once trained
