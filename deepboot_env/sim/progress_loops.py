"""A training job's progress over arrays, compiled by numba: :func:`~deepboot_env.sim.jobs._run` again.

This is :func:`~deepboot_env.sim.jobs._reference_run` (with its epoch jumps, which :func:`_run`'s
fast paths equal) written over the arrays of :mod:`deepboot_env.sim.progress`, step for step and
float operation for float operation, for the fitted truth (a
:class:`~deepboot_env.sim.rates.RateTable`) and the measured one
(:class:`~deepboot_env.sim.measured.MeasuredRates`, classes by placement shape). It is
the first block of the compiled training loop of issue 70: a loop that keeps the jobs' state in
arrays advances a job with :func:`advance_row` without leaving machine code.

A job's state is one row of each of four arrays (:mod:`deepboot_env.sim.progress` builds them):

* ``jf`` (float64): the time it was advanced to, its progress, its anchor (the time and progress
  at which its constant-rate stretch began; NaN when none runs), its speed factor, the GPU-seconds
  it has held, its completion and its first start (NaN: none yet), its arrival, and with caps
  grown once trained the time after which its new size counts (NaN: none pending);
* ``ji`` (int64): its epoch, its GPUs, its placement's class in its truth's table, how many
  phases are left, its
  application, its version (bumped at every change), the version it was last advanced at, its
  restarts, the most GPUs it has been given (counted as it trained at them), whether its cap grows
  only once it has trained at a size (``cap_growth`` "trained") and the size pending;
* ``pf`` (float64, phases x 2): each phase's seconds and its end once cut (NaN: not cut);
* ``pi`` (int64, phases x 2): each phase's replicas and multi-node flag.

Its truth's tables, by placement class: ``rates[c, e]``, the progress rate of epoch ``e`` in class
``c``, ``suffix[c]``, the suffix sums of the rounded epoch durations
(:func:`~deepboot_env.sim.rates.epoch_suffix`), and ``ends``, the progress at each epoch's end. The
fitted truth's class of ``k`` GPUs is ``multi_node * (K + 1) + min(k, K)`` (K its
``max_replicas``); the measured truth's is a measured shape, else a (nodes, GPUs) grid class
(:func:`class_of`). A completion time of None is NaN here.

The column numbers are literals of this module on purpose: numba's disk cache is keyed on this
module's source alone, so a constant read from another module would go stale in a cached kernel.
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable as inlined

from deepboot_env.sim.compiled import compiled

T, PROGRESS, ANCHOR_T, ANCHOR_P, SPEED, SERVICE, COMPLETION, FIRST_START, ARRIVAL, PENDING_T = range(10)
"""``jf`` columns."""
JF_WIDTH = 10
EPOCH, REPLICAS, CLASS, N_PHASES, APP, VERSION, SETTLED, RESTARTS, MAX_PROFILED, CAP_AFTER, PENDING_K = range(11)
"""``ji`` columns."""
JI_WIDTH = 11
P_SECONDS, P_END = range(2)
"""``pf`` columns (a phase's seconds; its end once cut, else NaN)."""
P_REPLICAS, P_CLASS = range(2)
"""``pi`` columns."""
MAX_PHASES = 2
"""The most phases a restart plan holds (stop-free scaling: training on the kept GPUs, then a pause)."""
EXACT = 2.0**53
"""Whole numbers of seconds below this are exact floats (:data:`deepboot_env.sim.jobs._EXACT`)."""
WHOLE = 2.0**52
"""A float at least this large is a whole number: Python's ``round`` gives it unchanged."""


@inlined
def _is_whole(x: float) -> bool:
    """``float(x).is_integer()``."""
    return math.isfinite(x) and x == math.floor(x)


@inlined
def _rounded(x: float) -> float:
    """``round(x)`` as Python computes it, as a float (numba's int64 ``round`` would overflow
    where Python's whole number grows; a float that large is whole already)."""
    return x if abs(x) >= WHOLE else float(round(x))


@inlined
def finish_time(suffix: np.ndarray, n_epochs: int, t: float, epoch: int) -> float:
    """:func:`~deepboot_env.sim.rates.finish_time_from_suffix` (NaN for None)."""
    rest = suffix[epoch]
    if rest == np.inf:
        return np.nan
    if _is_whole(t):
        return t + rest
    for e in range(epoch, n_epochs):
        t += suffix[e] - suffix[e + 1]
    return t


@inlined
def _whole_epochs(suffix: np.ndarray, n_epochs: int, t: float, epoch: int, seg_end: float) -> tuple[float, int]:
    """:func:`~deepboot_env.sim.jobs._whole_epochs`: (time, epoch) after the epochs skipped, or
    (NaN, -1) for None."""
    rest = suffix[epoch]
    if not (_is_whole(t) and t + rest < EXACT):
        return np.nan, -1
    end = epoch
    while end < n_epochs and t + (rest - suffix[end + 1]) <= seg_end:
        end += 1
    if end == epoch:
        return np.nan, -1
    return t + (rest - suffix[end]), end


@inlined
def _run_segment(
    rates: np.ndarray,
    suffix: np.ndarray,
    ends: np.ndarray,
    speed: float,
    k: int,
    cls: int,
    seg_end: float,
    t: float,
    epoch: int,
    progress: float,
    anchor_t: float,
    anchor_p: float,
    finish: bool,
) -> tuple[int, float, float, float, float]:
    """:func:`~deepboot_env.sim.jobs._run_segment` with ``jump`` on ``k`` GPUs of class ``cls``:
    (epoch, progress, anchor time, anchor progress, completion); the anchor is NaN where none runs,
    the completion NaN for None."""
    n_epochs = len(ends)
    column, sums = rates[cls], suffix[cls]
    while True:
        rate = column[epoch] * speed
        if rate <= 0:
            return epoch, progress, np.nan, np.nan, np.nan
        target = ends[epoch]
        if math.isnan(anchor_t):
            anchor_t, anchor_p = t, progress
        t_cross = anchor_t + _rounded((target - anchor_p) / rate)
        if t_cross > seg_end:
            if seg_end > t:
                progress = min(anchor_p + rate * (seg_end - anchor_t), target)
            return epoch, progress, anchor_t, anchor_p, np.nan
        t = max(t_cross, t)
        progress = target
        epoch += 1
        anchor_t = anchor_p = np.nan
        if epoch >= n_epochs:
            return epoch, progress, np.nan, np.nan, t
        if speed == 1.0:
            if finish:
                return n_epochs, ends[n_epochs - 1], np.nan, np.nan, finish_time(sums, n_epochs, t, epoch)
            skipped_t, skipped_epoch = _whole_epochs(sums, n_epochs, t, epoch, seg_end)
            if skipped_epoch >= 0:
                t, epoch = skipped_t, skipped_epoch
                progress = ends[epoch - 1]
                if epoch >= n_epochs:
                    return epoch, progress, np.nan, np.nan, t


@inlined
def _phase_segment(pf: np.ndarray, pi: np.ndarray, ji: np.ndarray, t: float, t1: float) -> tuple[float, int, int, bool]:
    """:func:`~deepboot_env.sim.jobs._phase_segment` on the row's head phase: (end, replicas,
    class, whether the phase ends by ``t1``); the head is removed (the rest moved up) when it
    ends, else cut at ``t1``."""
    seconds, end = pf[0, P_SECONDS], pf[0, P_END]
    if math.isnan(end):
        end = t + seconds
    seg_end = min(end, t1)
    k = pi[0, P_REPLICAS]
    cls = pi[0, P_CLASS]  # a stall's is 0; a phase that trains (stop-free scaling) holds its own
    if seg_end >= end:
        n = ji[N_PHASES]
        for p in range(1, n):
            pf[p - 1] = pf[p]
            pi[p - 1] = pi[p]
        ji[N_PHASES] = n - 1
        return seg_end, k, cls, True
    pf[0, P_SECONDS] = end - seg_end
    pf[0, P_END] = end
    return seg_end, k, cls, False


@inlined
def advance_row(
    jf: np.ndarray,
    ji: np.ndarray,
    pf: np.ndarray,
    pi: np.ndarray,
    t1: float,
    rates: np.ndarray,
    suffix: np.ndarray,
    ends: np.ndarray,
) -> float:
    """:func:`~deepboot_env.sim.jobs._reference_run` (``jump``) of the job whose row is
    ``jf, ji, pf, pi`` to ``t1``, written back into the row (its time is left to the caller, as
    :meth:`TrainingJob.advance` sets it); the completion time, NaN for None. The job holds GPUs."""
    t, epoch, progress = jf[T], ji[EPOCH], jf[PROGRESS]
    anchor_t, anchor_p = jf[ANCHOR_T], jf[ANCHOR_P]
    n_epochs = len(ends)
    while True:
        final = ji[N_PHASES] == 0
        if final:
            seg_end, k, cls, phase_ends = t1, ji[REPLICAS], ji[CLASS], False
        else:
            seg_end, k, cls, phase_ends = _phase_segment(pf, pi, ji, t, t1)
        if k > 0:
            finish = final and t1 == np.inf
            epoch, progress, anchor_t, anchor_p, completion = _run_segment(
                rates, suffix, ends, jf[SPEED], k, cls, seg_end, t, epoch, progress, anchor_t, anchor_p, finish
            )
            if epoch >= n_epochs:
                ji[EPOCH], jf[PROGRESS], ji[N_PHASES] = epoch, progress, 0
                jf[ANCHOR_T] = jf[ANCHOR_P] = np.nan
                return completion
        t = seg_end
        if k == 0 or phase_ends:
            anchor_t = anchor_p = np.nan
        if t >= t1 and not phase_ends:
            ji[EPOCH], jf[PROGRESS], jf[ANCHOR_T], jf[ANCHOR_P] = epoch, progress, anchor_t, anchor_p
            return np.nan


@compiled
def advance_rows(
    jf: np.ndarray,
    ji: np.ndarray,
    pf: np.ndarray,
    pi: np.ndarray,
    t1: np.ndarray,
    rates: np.ndarray,
    suffix: np.ndarray,
    ends: np.ndarray,
    out: np.ndarray,
) -> None:
    """:func:`advance_row` of every row ``j`` to ``t1[j]`` (jobs of one application's tables),
    completion times into ``out`` (NaN for None)."""
    for j in range(len(jf)):
        out[j] = advance_row(jf[j], ji[j], pf[j], pi[j], t1[j], rates, suffix, ends)


# ----------------------------------------------------------------- a job's changes (TrainingJob)
FULL_RESTART, AFE_RESTART, POLLUX_RESTART = range(3)
"""The restart models whose plans depend on the GPU counts alone (``stopfree``'s on the placement: not here)."""
POLLUX_DELAY_S = 30.0
""":data:`~deepboot_env.sim.restart.POLLUX_RESTART_DELAY_S`."""
N_EPOCHS, K_MAX, MEASURED, N_SHAPES = range(4)
"""``dims`` columns: an application's epochs, its table's ``max_replicas``, whether its truth is
the measured one, and its measured shapes."""
T_MODEL, T_RATES, T_SUFFIX, T_ENDS, T_DIMS, T_DELAYS, T_SHAPES = range(7)
"""``tables``: the fitted model's rates by [app, multi-node flag, GPUs, epoch] (what the reclaim
rule weighs), the truth's rates and suffix sums by [app, class, epoch], the epochs' ends, the
dims, the restart delays, and each application's measured shapes as keys (:func:`class_of`)."""
GRID_NODES = 16
"""A grid class counts at most this many nodes (:data:`~deepboot_env.sim.measured.GRID_NODE_CAP`)."""
FULL_DELAY, FAST_DELAY = range(2)
"""``delays`` columns: an application's full and fast restart delays."""
ADVANCE, ADOPT, SET_SPEED, PROJECT, PROFILED = range(5)
"""Operations of :func:`replay_job_ops`."""


@inlined
def app_tables(tables: tuple, app: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Application ``app``'s (model rates, truth rates, truth suffix sums, ends) in the stacked
    ``tables``, cut to its epochs (and the model's to its GPU counts)."""
    dims = tables[T_DIMS]
    epochs, width = dims[app, N_EPOCHS], dims[app, K_MAX] + 1
    model, rates, suffix = tables[T_MODEL][app, :, :width, :epochs], tables[T_RATES][app], tables[T_SUFFIX][app]
    return model, rates[:, :epochs], suffix[:, : epochs + 1], tables[T_ENDS][app, :epochs]


@inlined
def class_of(tables: tuple, app: int, counts: np.ndarray) -> int:
    """The class of GPUs per node ``counts`` (at least one GPU) in application ``app``'s truth:
    the fitted truth's multi-node flag and GPUs; the measured truth's shape (the GPUs per node
    without empty nodes, rotated to the lexicographically smallest rotation) if it is measured,
    else its (nodes up to 16, GPUs) grid class (:meth:`StepTimes.placement_class
    <deepboot_env.sim.measured.StepTimes.placement_class>`)."""
    dims = tables[T_DIMS]
    kmax = dims[app, K_MAX]
    used = counts[counts != 0]
    n, k = len(used), used.sum()
    if not dims[app, MEASURED]:
        return (kmax + 1 if n > 1 else 0) + min(k, kmax)
    best = 0
    for r in range(1, n):  # the smallest rotation
        for i in range(n):
            a, b = used[(r + i) % n], used[(best + i) % n]
            if a != b:
                if a < b:
                    best = r
                break
    if used.max() <= 9:
        key = 0
        for i in range(n):
            key = 10 * key + used[(best + i) % n]
        shapes = tables[T_SHAPES][app]
        for s in range(dims[app, N_SHAPES]):
            if shapes[s] == key:
                return s
    return dims[app, N_SHAPES] + (min(n, GRID_NODES) - 1) * kmax + k - 1


@inlined
def advance_job(
    jf: np.ndarray, ji: np.ndarray, pf: np.ndarray, pi: np.ndarray, j: int, t: float, tables: tuple
) -> None:
    """:meth:`TrainingJob.advance <deepboot_env.sim.jobs.TrainingJob.advance>` of row ``j`` to ``t``."""
    t_last = jf[j, T]
    if t < t_last:
        return
    if not math.isnan(jf[j, COMPLETION]):
        jf[j, T] = t
        return
    if t == t_last and ji[j, SETTLED] == ji[j, VERSION]:
        return
    if ji[j, REPLICAS] == 0:
        jf[j, ANCHOR_T] = jf[j, ANCHOR_P] = np.nan
        jf[j, T] = t
        ji[j, SETTLED] = ji[j, VERSION]
        return
    jf[j, SERVICE] += ji[j, REPLICAS] * (t - t_last)
    _, rates, suffix, ends = app_tables(tables, ji[j, APP])
    completion = advance_row(jf[j], ji[j], pf[j], pi[j], t, rates, suffix, ends)
    if not math.isnan(completion):
        jf[j, COMPLETION] = completion
    jf[j, T] = t
    ji[j, SETTLED] = ji[j, VERSION]


@inlined
def profiled(jf: np.ndarray, ji: np.ndarray, j: int, now: float) -> None:
    """:meth:`TrainingJob.profiled <deepboot_env.sim.jobs.TrainingJob.profiled>`: a larger size
    row ``j`` was given counts once it has trained at it, strictly after its restart stall."""
    if not math.isnan(jf[j, PENDING_T]) and now > jf[j, PENDING_T]:
        ji[j, MAX_PROFILED] = max(ji[j, MAX_PROFILED], ji[j, PENDING_K])
        jf[j, PENDING_T], ji[j, PENDING_K] = np.nan, 0


@inlined
def completion_time(jf: np.ndarray, ji: np.ndarray, pf: np.ndarray, pi: np.ndarray, j: int, tables: tuple) -> float:
    """:meth:`TrainingJob.time_of_completion <deepboot_env.sim.jobs.TrainingJob.time_of_completion>`
    of row ``j`` (NaN for None), without changing the row."""
    if not math.isnan(jf[j, COMPLETION]):
        return jf[j, COMPLETION]
    if ji[j, REPLICAS] == 0:
        return np.nan
    _, rates, suffix, ends = app_tables(tables, ji[j, APP])
    return advance_row(jf[j].copy(), ji[j].copy(), pf[j].copy(), pi[j].copy(), np.inf, rates, suffix, ends)


@inlined
def stall_seconds(model: int, full: float, fast: float, r_old: int, r_new: int) -> float:
    """The one stall of :func:`~deepboot_env.sim.restart.plan_change` from ``r_old`` to ``r_new``
    (> 0) GPUs under ``model`` (:data:`FULL_RESTART`, :data:`AFE_RESTART`, :data:`POLLUX_RESTART`)."""
    if model == POLLUX_RESTART:
        return POLLUX_DELAY_S
    if r_old == 0 or model == FULL_RESTART:
        return full
    if r_new < r_old:
        return fast
    if r_new > r_old:
        return fast + math.floor((full - fast) * (r_new - r_old) / r_new)
    return full


@inlined
def adopt_counts(
    jf: np.ndarray,
    ji: np.ndarray,
    pf: np.ndarray,
    pi: np.ndarray,
    counts: np.ndarray,
    j: int,
    new: np.ndarray,
    now: float,
    model: int,
    tables: tuple,
) -> bool:
    """:meth:`TrainingJob.adopt_change <deepboot_env.sim.jobs.TrainingJob.adopt_change>` of row
    ``j`` to GPUs per node ``new`` at ``now``, with the plan of
    :func:`~deepboot_env.sim.restart.plan_change` under ``model``; whether it counts as a restart."""
    r_old, r_new = ji[j, REPLICAS], 0
    for node in range(len(new)):
        counts[j, node] = new[node]
        r_new += new[node]
    ji[j, REPLICAS] = r_new
    ji[j, CLASS] = class_of(tables, ji[j, APP], new) if r_new else 0
    jf[j, ANCHOR_T] = jf[j, ANCHOR_P] = np.nan
    if ji[j, CAP_AFTER]:
        profiled(jf, ji, j, now)  # a size trained at before this change counts
        jf[j, PENDING_T], ji[j, PENDING_K] = np.nan, 0
    restart = False
    if r_new == 0:
        ji[j, N_PHASES] = 0
    else:
        app = ji[j, APP]
        restart = not math.isnan(jf[j, FIRST_START])
        ji[j, N_PHASES] = 1
        delays = tables[T_DELAYS]
        stall = stall_seconds(model, delays[app, FULL_DELAY], delays[app, FAST_DELAY], r_old, r_new)
        pf[j, 0, P_SECONDS], pf[j, 0, P_END] = stall, np.nan
        pi[j, 0, P_REPLICAS] = pi[j, 0, P_CLASS] = 0
        if math.isnan(jf[j, FIRST_START]):
            jf[j, FIRST_START] = now
        if r_new > ji[j, MAX_PROFILED]:
            if ji[j, CAP_AFTER]:
                jf[j, PENDING_T], ji[j, PENDING_K] = now + stall, r_new
            else:
                ji[j, MAX_PROFILED] = r_new
    if restart:
        ji[j, RESTARTS] += 1
    ji[j, VERSION] += 1
    return restart


@compiled
def replay_job_ops(
    rows: tuple, tables: tuple, model: int, ops: np.ndarray, values: np.ndarray, new: np.ndarray, out: tuple
) -> None:
    """Apply operations ``ops`` (rows of (code, job)) to the job rows ``rows`` = (jf, ji, pf, pi,
    counts) in turn: :data:`ADVANCE` to ``values[m]``, :data:`ADOPT` GPUs per node ``new[m]`` at
    ``values[m]`` (``out[0][m]``: whether a restart), :data:`SET_SPEED` ``values[m]`` (the job
    advanced already; its stretch ends), :data:`PROJECT` (``out[0][m]``: the completion time, NaN
    for None), :data:`PROFILED` at ``values[m]``; after each, the job's rows are copied into
    ``out[1:]`` (jf, ji, pf, pi, counts rows by operation). The job-level operations of a
    compiled loop, run one by one, for checking."""
    jf, ji, pf, pi, counts = rows
    for m in range(len(ops)):
        code, j = ops[m, 0], ops[m, 1]
        if code == ADVANCE:
            advance_job(jf, ji, pf, pi, j, values[m], tables)
        elif code == ADOPT:
            out[0][m] = adopt_counts(jf, ji, pf, pi, counts, j, new[m], values[m], model, tables)
        elif code == SET_SPEED:
            jf[j, SPEED] = values[m]
            jf[j, ANCHOR_T] = jf[j, ANCHOR_P] = np.nan
            ji[j, VERSION] += 1
        elif code == PROFILED:
            profiled(jf, ji, j, values[m])
        else:
            out[0][m] = completion_time(jf, ji, pf, pi, j, tables)
        out[1][m], out[2][m], out[3][m], out[4][m], out[5][m] = jf[j], ji[j], pf[j], pi[j], counts[j]


# ---------------------------------------------------------------------------- reclaims (ATS-I)
TIE = 1e-12
"""Costs closer than this are equal: the first candidate in ATS-I's order keeps the GPU choice."""


@inlined
def _rate(rates: np.ndarray, cls: int, k: int, epoch: int) -> float:
    """:meth:`RateTable.rate <deepboot_env.sim.rates.RateTable.rate>` (0 for no GPU)."""
    if k <= 0:
        return 0.0
    return rates[cls, min(k, rates.shape[1] - 1), epoch]


@inlined
def _holder_order(jf: np.ndarray, holders: np.ndarray, n: int) -> None:
    """Sort the first ``n`` job numbers of ``holders`` into ATS-I's order: least attained
    service, then earliest arrival, then job number (:class:`~deepboot_env.sim.reclaim.Holder`)."""
    for a in range(1, n):
        j = holders[a]
        b = a - 1
        while b >= 0:
            i = holders[b]
            if jf[i, SERVICE] != jf[j, SERVICE]:
                first = jf[i, SERVICE] < jf[j, SERVICE]
            elif jf[i, ARRIVAL] != jf[j, ARRIVAL]:
                first = jf[i, ARRIVAL] < jf[j, ARRIVAL]
            else:
                first = i < j
            if first:
                break
            holders[b + 1] = i
            b -= 1
        holders[b + 1] = j


@inlined
def _reclaim_cost(
    rates: np.ndarray,
    ji: np.ndarray,
    pf: np.ndarray,
    pi: np.ndarray,
    j: int,
    k: int,
    after: float,
    model: int,
    full: float,
    fast: float,
) -> float:
    """:func:`~deepboot_env.sim.reclaim._restart_loss` of taking one of job ``j``'s ``k`` GPUs."""
    epoch = ji[j, EPOCH]
    if after <= 0.0 or k == 1:
        return _rate(rates, 0, 1, epoch) * full
    stalled = 0.0
    for p in range(ji[j, N_PHASES]):
        if pi[j, p, P_REPLICAS] == 0:
            stalled += pf[j, p, P_SECONDS]
    return after * max(stall_seconds(model, full, fast, k, k - 1) - stalled, 0.0)


@inlined
def _holders(
    rows: tuple, tables: tuple, active: np.ndarray, lendable: np.ndarray, now: float
) -> tuple[np.ndarray, int]:
    """The ``active`` jobs with a GPU on a ``lendable`` node, advanced to ``now`` as their views
    would be (the cap once trained too), in ATS-I's order: (job numbers, how many)."""
    jf, ji, pf, pi, counts = rows
    holders = np.empty(len(active), dtype=np.int64)
    n = 0
    for j in active:
        if ji[j, REPLICAS] == 0:
            continue
        lent = False
        for node in lendable:
            lent = lent or counts[j, node] > 0
        if lent:
            advance_job(jf, ji, pf, pi, j, now, tables)
            profiled(jf, ji, j, now)
            holders[n] = j
            n += 1
    _holder_order(jf, holders, n)
    return holders, n


@inlined
def least_loss_victim(
    rows: tuple,
    tables: tuple,
    model: int,
    active: np.ndarray,
    lendable: np.ndarray,
    fair: int,
    horizon: float,
    now: float,
) -> tuple[int, int]:
    """:meth:`Simulator.least_loss_victim <deepboot_env.sim.simulator.Simulator.least_loss_victim>`:
    the (job, node) whose GPU ATS-I (``horizon`` 0) or the restart-aware rule takes back, (-1, -1)
    for none; the holders (the ``active`` jobs with a GPU on a ``lendable`` node) are advanced to
    ``now``, as their views would be. ``fair``: :func:`~deepboot_env.sim.reclaim.fair_replicas`."""
    jf, ji, pf, pi, counts = rows
    holders, n = _holders(rows, tables, active, lendable, now)
    best, victim, at = np.inf, -1, -1
    for h in range(n):
        j = holders[h]
        app, epoch = ji[j, APP], ji[j, EPOCH]
        rates = app_tables(tables, app)[0]
        base = _rate(rates, 0, max(1, min(fair, rates.shape[1] - 1)), epoch)
        base = base if base > 0 else 1.0
        k, spread = 0, 0
        for node in range(counts.shape[1]):
            k += counts[j, node]
            spread += counts[j, node] != 0
        before = _rate(rates, int(spread > 1), k, epoch)
        for node in lendable:
            if counts[j, node] == 0:
                continue
            after_spread = spread - 1 if counts[j, node] == 1 else spread
            after = _rate(rates, int(after_spread > 1), k - 1, epoch)
            loss = (before - after) / base
            if horizon:
                loss *= horizon
                if victim >= 0 and loss >= best - TIE:
                    continue  # the restart term is >= 0: this candidate cannot win
                delays = tables[T_DELAYS]
                loss += (
                    _reclaim_cost(
                        rates, ji, pf, pi, j, k, after, model, delays[app, FULL_DELAY], delays[app, FAST_DELAY]
                    )
                    / base
                )
            if victim < 0 or loss < best - TIE:
                best, victim, at = loss, j, node
    return victim, at


@compiled
def reclaim_victim(
    rows: tuple,
    tables: tuple,
    model: int,
    active: np.ndarray,
    lendable: np.ndarray,
    fair: int,
    horizon: float,
    now: float,
) -> tuple[int, int]:
    """:func:`least_loss_victim`, called from Python (for checking)."""
    return least_loss_victim(rows, tables, model, active, lendable, fair, horizon, now)
