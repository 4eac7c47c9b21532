"""ATS's decision over the compiled loop's arrays: the knapsack, and the whole decision of
:class:`~baselines.ats.AtsPolicy` from the job rows (docs/policies.md §8, docs/simulator.md §10).

:func:`knapsack_loops` is the group knapsack's programme and trace-back that every ATS decision
runs (compiled on the first knapsack by :mod:`baselines.ats`). :func:`ats_decision_loops` is
:meth:`AtsPolicy.decide <baselines.ats.AtsPolicy.decide>` written again over the rows of
:mod:`deepboot_env.sim.progress_loops`, step for step and float operation for float operation:
the warm pods kept, the training capacity at the lending share, the jobs in least-attained-service
order, their ``ats-srpt`` weights and arrival tilt, their speedup rows (split where no node has
room, with ``placement_aware``), the knapsack, then best-fit placement. An
:class:`~deepboot_env.sim.array_episode.ArrayEpisode` of an ATS policy decides through it without
building a state (``tests/sim/test_ats_loops.py`` holds it to the policy at every decision of real
episodes). It reads the policy's rate tables as the loop's stacked tables hold them
(``tables[T_MODEL]``, the model's rates by [app, multi-node flag, GPUs, epoch]).

The scalar functions are libm's (``math.exp``, ``**``), as :mod:`baselines.ats` computes the same
weights, so that the two agree on every machine (numpy's own vector exponentials may differ from
libm's in the last bit where it has them).
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable as inlined

from deepboot_env.sim.compiled import compiled
from deepboot_env.sim.progress_loops import APP, ARRIVAL, EPOCH, MAX_PROFILED, REPLICAS, RESTARTS, SERVICE

PROGRESS_LOOPS_DIGEST = "027caf4eb0a69a55"
"""The digest of ``progress_loops.py`` whose column numbers the cached decision was compiled with
(as :data:`deepboot_env.sim.drain_loops.PROGRESS_LOOPS_DIGEST`; a test checks it)."""

# the decision's parameters, one float64 array (see ats_decision_loops)
LEND, SRPT_POWER, ARRIVAL_TILT, PLACEMENT_AWARE, KEEP_WARM_AT, GPUS_PER_NODE, ADAPTIVE, RESTART_S, MAX_CELLS = range(9)
WEIGHT_FLOOR = 9  # ats_log_weights_loops: weights below read as this one
N_PARAMS = 10
DECIDED, BOUNDED = 0, 1
""":func:`ats_decision_loops`' answers: the allocation is in ``wanted``; the knapsack would pass
its cell bound (the policy's bounded passes decide, in Python)."""
TRAIN_ROW, RUNNING_ROW, PROTECT_ROW, SLEEP_ROW = range(4)
NODE_TRAIN_KIND, NODE_INFER_KIND = 0, 1  # deepboot_env.sim.cluster's NODE_TRAIN, NODE_INFER


@inlined
def knapsack_loops(speedups: np.ndarray, table: np.ndarray, capacity: int) -> np.ndarray:
    """The group knapsack's programme and trace-back over :class:`~baselines.ats.Options` arrays,
    cell by cell (plain Python gives the same result, slowly).

    ``dp[i, c]`` is the best value of the jobs before i within c GPUs; the trace-back takes, for
    each job in reverse order, the smallest w > 0 attaining the optimum within a relative 1e-12,
    else 0.

    Only the cells a choice can depend on are computed, each as the maximum of the same sums as
    the full table's (so the same floats and the same choice): row i's cells beyond ``top[i]``,
    the GPUs the jobs before i can take in all, equal the cell at ``top[i]`` (every sum there
    reads the previous row beyond its own top), so they are copies of it; and cells below
    ``bottom[i]``, what the jobs from i on must leave to the jobs before them for the whole
    capacity to be reached, are never read by the rows after or the trace-back. With a few
    jobs whose widths add up to about the capacity, that is most of the table.
    """
    n = table.shape[0]
    offsets = np.empty(n, dtype=np.int64)
    widths = np.empty(n, dtype=np.int64)
    held = np.empty(n, dtype=np.int64)
    for i in range(n):  # the columns of OPTION_FIELDS
        offsets[i], widths[i], held[i] = int(table[i, 0]), int(table[i, 1]), int(table[i, 2])
    phi, weights = table[:, 3], table[:, 4]
    clipped = np.empty(n, dtype=np.int64)
    for i in range(n):
        clipped[i] = min(widths[i], capacity)
    top = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        top[i + 1] = min(capacity, top[i] + clipped[i])
    reach = top[n]  # the most GPUs all the jobs can take: every cell beyond equals this one
    bottom = np.zeros(n + 1, dtype=np.int64)
    left = 0
    for i in range(n, -1, -1):
        bottom[i] = max(0, reach - left)
        if i > 0:
            left += clipped[i - 1]
    values = np.zeros(capacity + 1)
    dp = np.zeros((n + 1, capacity + 1))
    for i in range(n):
        width = clipped[i]
        start = offsets[i]
        for w in range(1, width + 1):
            value = speedups[start + w] * weights[i]
            values[w] = value if w == held[i] else value * phi[i]
        before, after = dp[i], dp[i + 1]
        low, high = bottom[i + 1], top[i + 1]
        # cell by cell, each the maximum of before[c - w] + values[w] over w = 1..min(width, c)
        # and before[c] (w = 0), read as two runs in step: before[c - last .. c - 1] and the
        # values reversed (values_back[capacity - w] is values[w]). A cell's maximum is over the
        # same sums whatever their order, so the floats are the same as width by width. The
        # compiler makes vector instructions of this loop over two runs, where the loop per
        # width compiled to scalar code: about 20 % less time on recorded instances (session 45)
        values_back = values[::-1]
        for c in range(low, high + 1):
            best = before[c]
            last = min(width, c)
            reads = before[c - last : c]
            backs = values_back[capacity - last : capacity]
            for k in range(last):
                best = max(best, reads[k] + backs[k])
            after[c] = best
        after[high + 1 :] = after[high]
    choice = np.zeros(n, dtype=np.int64)
    c = capacity
    for i in range(n - 1, -1, -1):
        width = min(widths[i], c)
        if width <= 0:
            continue
        target = dp[i + 1, c]
        tol = 1e-12 * max(1.0, abs(target))
        start = offsets[i]
        for w in range(1, width + 1):
            value = speedups[start + w] * weights[i]
            if w != held[i]:
                value *= phi[i]
            if abs(dp[i, c - w] + value - target) <= tol:
                choice[i] = w
                c -= w
                break
    return choice


@inlined
def _decision_counts(counts: np.ndarray, kinds: np.ndarray, gpn: int, waiting: int, keep_warm_at: float) -> np.ndarray:
    """The ledger's GPUs per node (train, running, protect, sleep rows) as the policy decides on
    them: with ``keep_warm_at`` and inference busy (requests waiting, or RUNNING and PROTECT pods
    on at least that share of the lendable nodes' GPUs), the SLEEP pods counted as PROTECT
    (``AtsPolicy._lendable``, ``ClusterState.keeping_warm_pods``)."""
    if keep_warm_at == 0.0:
        return counts
    busy_gpus, lendable = 0, 0
    for node in range(len(kinds)):
        if kinds[node] != NODE_TRAIN_KIND:
            busy_gpus += counts[RUNNING_ROW, node] + counts[PROTECT_ROW, node]
            lendable += 1
    load = busy_gpus / (lendable * gpn) if lendable else 0.0
    sleeping = 0
    for node in range(len(kinds)):
        sleeping += counts[SLEEP_ROW, node]
    if not (waiting > 0 or load >= keep_warm_at) or sleeping == 0:
        return counts
    warm = counts.copy()
    for node in range(len(kinds)):
        warm[PROTECT_ROW, node] += warm[SLEEP_ROW, node]
        warm[SLEEP_ROW, node] = 0
    return warm


@inlined
def _training_capacity(counts: np.ndarray, kinds: np.ndarray, gpn: int, lend: float) -> np.ndarray:
    """``ClusterState.training_capacity_list(lend)``: every node's GPUs not pinned by RUNNING or
    PROTECT pods, of which the inference nodes lend ``floor(lend x lendable)``, the nodes
    training already uses first, then those with most lendable GPUs, then by index."""
    nodes = len(kinds)
    cap = np.empty(nodes, dtype=np.int64)
    lendable, n_infer = 0, 0
    for node in range(nodes):
        cap[node] = gpn - (counts[RUNNING_ROW, node] + counts[PROTECT_ROW, node])
        if kinds[node] == NODE_INFER_KIND:
            lendable += cap[node]
            n_infer += 1
    if n_infer == 0:
        return cap
    budget = int(math.floor(lend * lendable + 1e-9))
    if budget >= lendable:
        return cap
    order = np.empty(n_infer, dtype=np.int64)
    k = 0
    for node in range(nodes):
        if kinds[node] == NODE_INFER_KIND:
            # insertion by (-used, -cap, node): a few inference nodes
            at = k
            while at > 0 and _lends_before(counts, cap, node, order[at - 1]):
                order[at] = order[at - 1]
                at -= 1
            order[at] = node
            k += 1
    out = cap.copy()
    for lender in order:
        out[lender] = 0
    for lender in order:
        if budget == 0:
            break
        take = int(min(budget, cap[lender]))
        out[lender] = take
        budget -= take
    return out


@inlined
def _lends_before(counts: np.ndarray, cap: np.ndarray, a: int, b: int) -> bool:
    """Whether inference node ``a`` lends before node ``b`` (``a`` > ``b``): more training GPUs,
    then more lendable GPUs (the order of ``(-used, -cap, node)``)."""
    if counts[TRAIN_ROW, a] != counts[TRAIN_ROW, b]:
        return counts[TRAIN_ROW, a] > counts[TRAIN_ROW, b]
    return cap[a] > cap[b]


@inlined
def _job_weights(
    jobs: np.ndarray, ranks: np.ndarray, ji: np.ndarray, model: np.ndarray, ends: np.ndarray, dims: np.ndarray,
    targets: np.ndarray, fair: int, power: float, tilt: float, scores: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """``AtsPolicy.job_weights`` of ``jobs`` (in priority order; ``ranks``: each one's arrival
    rank, 0 for the earliest): ``max(T, 1) ** -power``, T the work of the epochs left over the
    rate at the fair share on one node, times ``exp(tilt x u)``, ``u = 1 - 2 rank / (n - 1)``
    (all 1 with neither); then times ``exp(scores[j])`` where a job's score is not 0 (``scores``
    by job index, empty: none; ``Options.of``)."""
    n = len(jobs)
    weights = np.ones(n)
    for i in range(n):
        if power != 0.0:
            j = jobs[i]
            a, epoch = ji[j, APP], ji[j, EPOCH]
            base = model[a, 0, max(1, min(fair, dims[a, 1])), epoch]
            base = base if base > 0 else 1.0
            done = ends[a, epoch - 1] if epoch > 0 else 0.0
            weights[i] = max((targets[a] - done) / base, 1.0) ** -power
        if tilt != 0.0 and n > 1:
            factor = math.exp(tilt * (1.0 - 2.0 * ranks[i] / (n - 1)))
            weights[i] = factor if power == 0.0 else weights[i] * factor
        if len(scores) and scores[jobs[i]] != 0.0:
            weights[i] = weights[i] * math.exp(scores[jobs[i]])
    return weights


@inlined
def _stable_order(keys: np.ndarray) -> np.ndarray:
    """The indices of ``keys`` in ascending order, ties in index order: a bottom-up merge sort
    (numba's own stable argsort costs seconds more to compile)."""
    n = len(keys)
    order = np.arange(n)
    spare = np.empty(n, dtype=np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            a, b = lo, mid
            for out in range(lo, hi):
                if a < mid and (b >= hi or keys[order[a]] <= keys[order[b]]):
                    spare[out] = order[a]
                    a += 1
                else:
                    spare[out] = order[b]
                    b += 1
        order, spare = spare, order
        width *= 2
    return order


@inlined
def _speedup_rows(
    jobs: np.ndarray, caps: np.ndarray, rooms: np.ndarray, ji: np.ndarray, model: np.ndarray, dims: np.ndarray,
    fair: int, gpn: int, split: bool,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The jobs' speedup rows back to back and their offsets: w = 0..cap GPUs over the rate at
    ``fair`` GPUs on one node (``speedup_values``), with ``split`` the options 2..min(G, cap)
    beyond the job's room at the multi-node rate (``placement_aware_options``)."""
    n = len(jobs)
    offsets = np.empty(n, dtype=np.int64)
    total = 0
    for i in range(n):
        offsets[i] = total
        total += caps[i] + 1
    rows = np.zeros(max(total, 1))
    for i in range(n):
        j, start, cap = jobs[i], offsets[i], caps[i]
        a, epoch = ji[j, APP], ji[j, EPOCH]
        kmax = dims[a, 1]
        base = model[a, 0, max(1, min(fair, kmax)), epoch]
        base = base if base > 0 else 1.0
        for w in range(1, cap + 1):
            rows[start + w] = model[a, 1 if w > gpn else 0, min(w, kmax), epoch] / base
        top = min(gpn, cap)
        if split and top >= 2 and rooms[i] < top:
            for w in range(max(2, rooms[i] + 1), top + 1):
                rows[start + w] = model[a, 1, min(w, kmax), epoch] / base
    return rows, offsets


@inlined
def _width_class(width: int, gpn: int, room: int) -> int:
    """``width_class``: 0 for one GPU, 1 for two on one node, 2 for three to G on one node, 3 split."""
    if width <= 1:
        return 0
    if width > gpn or width > room:
        return 3
    return 1 if width == 2 else 2


@inlined
def _width_scored(
    rows: np.ndarray, offsets: np.ndarray, jobs: np.ndarray, caps: np.ndarray, rooms: np.ndarray, ji: np.ndarray,
    dims: np.ndarray, widths: np.ndarray, fair: int, gpn: int,
) -> None:  # fmt: skip
    """``width_scored_options`` in place: the options of each job with width scores (``widths``
    by job index, NaN first: none) times ``exp(v[class(w)] - v[class(f)])``, ``v = (0, *scores)``,
    ``f`` its fair-share width on one node, by class as ``width_factors`` computes them."""
    logs = np.zeros(4)
    for i in range(len(jobs)):
        j, cap = jobs[i], caps[i]
        if math.isnan(widths[j, 0]) or cap < 1:
            continue
        for c in range(3):
            logs[c + 1] = widths[j, c]
        room = max(rooms[i], 1)
        base = logs[_width_class(max(1, min(fair, dims[ji[j, APP], 1])), gpn, gpn)]
        widest = min(gpn, room)
        start = offsets[i]
        rows[start + 1] *= math.exp(logs[0] - base)
        if cap >= 2:
            rows[start + 2] *= math.exp(logs[_width_class(2, gpn, room)] - base)
            threes = max(0, min(cap, widest) - 2)
            three, split = math.exp(logs[2] - base), math.exp(logs[3] - base)
            for w in range(3, cap + 1):
                rows[start + w] *= three if w - 2 <= threes else split


@inlined
def _rooms(jobs: np.ndarray, ji: np.ndarray, jcounts: np.ndarray, capacity: np.ndarray, used: np.ndarray) -> np.ndarray:
    """``job_rooms``: the most GPUs one node could give each job before the reallocation, its
    free GPUs there plus those it holds."""
    nodes = len(capacity)
    free = np.empty(nodes, dtype=np.int64)
    empty = 0
    for node in range(nodes):
        free[node] = max(capacity[node] - used[node], 0)
        empty = max(empty, free[node])
    rooms = np.empty(len(jobs), dtype=np.int64)
    for i in range(len(jobs)):
        j = jobs[i]
        rooms[i] = empty
        if ji[j, REPLICAS]:
            rooms[i] = 0
            for node in range(nodes):
                rooms[i] = max(rooms[i], jcounts[j, node] + free[node])
    return rooms


@inlined
def _best_fit(need: int, avail: np.ndarray, row: np.ndarray) -> bool:
    """``placement._best_fit_takes`` into ``row`` (GPUs per node, added to): repeatedly all the
    GPUs of the first node with the most when ``need`` is more, else ``need`` from the first node
    with the fewest that suffice; False (``avail`` untouched) if fewer than ``need`` are free."""
    free = 0
    for n in range(len(avail)):
        free += avail[n]
    if free < need:
        return False
    while need > 0:
        node = 0  # the first node with the most free GPUs
        for n in range(1, len(avail)):
            if avail[n] > avail[node]:
                node = n
        take = int(avail[node])
        if need <= take:  # the first node with the fewest that suffice
            for n in range(len(avail)):
                if need <= avail[n] < take:
                    node, take = n, int(avail[n])
            take = need
        row[node] += take
        avail[node] -= take
        need -= take
    return True


@inlined
def _place(
    jobs: np.ndarray, chosen: np.ndarray, ji: np.ndarray, jcounts: np.ndarray, capacity: np.ndarray,
    own: np.ndarray, wanted: np.ndarray,
) -> bool:  # fmt: skip
    """``place_count_lists`` with best fit, ascending, into ``wanted`` (-1 rows: no GPU): jobs
    keeping their count keep their GPUs; the others, by ascending count (ties in priority order),
    on training-cluster nodes when they fit there, else anywhere in ``capacity``. False if one
    cannot be placed (never, for the knapsack's counts)."""
    nodes = len(capacity)
    free = capacity.copy()
    order = np.empty(len(jobs))
    for i in range(len(jobs)):
        j = jobs[i]
        order[i] = max(chosen[i], 0)
        kept = chosen[i] > 0 and chosen[i] == ji[j, REPLICAS]
        for node in range(nodes):
            wanted[j, node] = jcounts[j, node] if kept else -1
            free[node] -= jcounts[j, node] if kept else 0
    avail_all = np.empty(nodes, dtype=np.int64)
    avail_own = np.empty(nodes, dtype=np.int64)
    for node in range(nodes):
        avail_all[node] = max(free[node], 0)
        avail_own[node] = avail_all[node] if own[node] else 0
    for i in _stable_order(order):
        j, k = jobs[i], chosen[i]
        if k <= 0 or k == ji[j, REPLICAS]:
            continue
        row = wanted[j]
        for node in range(nodes):
            row[node] = 0
        if _best_fit(k, avail_own, row):
            for node in range(nodes):
                avail_all[node] -= row[node]
        elif _best_fit(k, avail_all, row):
            for node in range(nodes):
                avail_own[node] -= row[node] if own[node] else 0
        else:
            return False
    return True


@inlined
def _priority_order(
    jf: np.ndarray, active: np.ndarray, counts: np.ndarray, kinds: np.ndarray, waiting: int, params: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int, int, np.ndarray, np.ndarray]:
    """What a decision of the ``active`` jobs (at least one) starts from: the ledger's counts as
    the policy decides on them, the training capacity per node at the lending share and its
    total, the fair share ``ceil(capacity / jobs)`` (1 without capacity), and the jobs in
    least-attained-service order with each one's arrival rank (``ranks[i]``: the index in
    ``active`` of the job at priority i)."""
    n = len(active)
    gpn = int(params[GPUS_PER_NODE])
    decided = _decision_counts(counts, kinds, gpn, waiting, params[KEEP_WARM_AT])
    capacity = _training_capacity(decided, kinds, gpn, params[LEND])
    total_capacity = 0
    for node in range(len(capacity)):
        total_capacity += capacity[node]
    fair = -(-total_capacity // n) if total_capacity > 0 else 1
    service = np.empty(n)
    for i in range(n):
        service[i] = jf[active[i], SERVICE]
    ranks = _stable_order(service)  # ties by index: by arrival, then id
    jobs = np.empty(n, dtype=np.int64)
    for i in range(n):
        jobs[i] = active[ranks[i]]
    return decided, capacity, total_capacity, fair, ranks, jobs


@compiled
def ats_log_weights_loops(
    jf: np.ndarray,
    ji: np.ndarray,
    active: np.ndarray,
    model: np.ndarray,
    ends: np.ndarray,
    dims: np.ndarray,
    targets: np.ndarray,
    counts: np.ndarray,
    kinds: np.ndarray,
    waiting: int,
    params: np.ndarray,
    out: np.ndarray,
) -> None:
    """``AtsPolicy.log_weights`` of the ``active`` jobs: ``out[j]``, job j's knapsack log-weight
    relative to the heaviest job's at the fair share and capacity of the lending share
    ``params[LEND]`` (the arguments are :func:`ats_decision_loops`'); the other entries untouched.
    Weights below ``params[WEIGHT_FLOOR]`` read as that one, as the policy reads them."""
    n = len(active)
    if n == 0:
        return
    _, _, _, fair, ranks, jobs = _priority_order(jf, active, counts, kinds, waiting, params)
    weights = _job_weights(
        jobs, ranks, ji, model, ends, dims, targets, fair, params[SRPT_POWER], params[ARRIVAL_TILT], np.zeros(0)
    )
    tiny = params[WEIGHT_FLOOR]
    top = -math.inf
    for i in range(n):
        weights[i] = math.log(weights[i] if weights[i] > tiny else tiny)
        top = max(top, weights[i])
    for i in range(n):
        out[jobs[i]] = weights[i] - top


@compiled
def ats_decision_loops(
    jf: np.ndarray,
    ji: np.ndarray,
    jcounts: np.ndarray,
    active: np.ndarray,
    model: np.ndarray,
    ends: np.ndarray,
    dims: np.ndarray,
    targets: np.ndarray,
    counts: np.ndarray,
    kinds: np.ndarray,
    waiting: int,
    now: float,
    params: np.ndarray,
    scores: np.ndarray,
    widths: np.ndarray,
    wanted: np.ndarray,
    proposal: np.ndarray,
) -> int:
    """``AtsPolicy.decide`` of the ``active`` jobs (in index order, which is their arrival order)
    at ``now``: ``wanted[j]`` is job j's GPUs per node, -1 for none (``apply_counts_loops``' input);
    :data:`DECIDED`, or :data:`BOUNDED` where the knapsack would pass its cell bound. The
    knapsack's counts, ``propose_counts``, are left in ``proposal``: row 0 the jobs in priority
    order, row 1 their GPUs (the first ``len(active)`` columns).

    ``model``, ``ends``, ``dims``: the loop's stacked tables (the rates by [app, flag, GPUs, epoch],
    the epochs' ends, each app's (epochs, max replicas, ...)); ``targets``: each app's target
    progress; ``counts``: the ledger's GPUs per node (train, running, protect, sleep rows);
    ``kinds``: the node kinds; ``waiting``: requests waiting; ``params``: at :data:`LEND` ...
    :data:`MAX_CELLS`; ``scores``, ``widths``: the score action's held per-job log-weights and
    width-class log-multipliers by job index (``decide_scored``; empty: none; a NaN row: none).
    """
    n = len(active)
    if n == 0:
        return DECIDED
    gpn = int(params[GPUS_PER_NODE])
    decided, capacity, total_capacity, fair, ranks, jobs = _priority_order(jf, active, counts, kinds, waiting, params)
    caps = np.empty(n, dtype=np.int64)
    for i in range(n):
        j = jobs[i]
        cap = dims[ji[j, APP], 1]
        if params[ADAPTIVE] != 0.0:
            cap = max(1, min(cap, max(2 * ji[j, MAX_PROFILED], 1)))
        caps[i] = min(cap, total_capacity)
    total = 0
    for i in range(n):
        total += caps[i]
    if total > total_capacity and (total + n) * (total_capacity + 1) > params[MAX_CELLS]:
        return BOUNDED
    # the job at priority i is active[ranks[i]]: its arrival rank is ranks[i] (active is in arrival order)
    weights = _job_weights(
        jobs, ranks, ji, model, ends, dims, targets, fair, params[SRPT_POWER], params[ARRIVAL_TILT], scores
    )
    rooms = _rooms(jobs, ji, jcounts, capacity, decided[TRAIN_ROW])
    rows, offsets = _speedup_rows(jobs, caps, rooms, ji, model, dims, fair, gpn, params[PLACEMENT_AWARE] != 0.0)
    if len(widths):
        _width_scored(rows, offsets, jobs, caps, rooms, ji, dims, widths, fair, gpn)
    table = np.empty((n, 5))  # the columns of OPTION_FIELDS: offset, width, held, phi, weight
    penalty = params[RESTART_S]
    for i in range(n):
        j = jobs[i]
        age = now - jf[j, ARRIVAL]
        left = age - penalty * ji[j, RESTARTS]
        table[i, 0], table[i, 1], table[i, 2] = offsets[i], caps[i], ji[j, REPLICAS]
        table[i, 3], table[i, 4] = (left if left > 0.0 else 0.0) / (age + penalty), weights[i]
    chosen = knapsack_loops(rows, table, min(total_capacity, total))
    for i in range(n):
        proposal[0, i], proposal[1, i] = jobs[i], chosen[i]
    own = np.empty(len(kinds), dtype=np.bool_)
    for node in range(len(kinds)):
        own[node] = kinds[node] != NODE_INFER_KIND
    if not _place(jobs, chosen, ji, jcounts, capacity, own, wanted):
        return -1
    return DECIDED
