"""ATS: DeepBoot's adaptive task scaling (docs/policies.md §8), with lending and ATS-I reclaim.

At every boundary ATS solves a group knapsack over the active training jobs:

* capacity C = every GPU training may hold (not held by a RUNNING/PROTECT pod); with lending this
  includes idle and SLEEP inference GPUs, without (``ats-nolend``) only the training cluster;
* fair-share normalisation: with J training jobs, ``fair = ceil(C / J)`` replicas; a job's speedup at
  (n nodes, w GPUs) is its progress rate there divided by its rate at ``fair`` GPUs on one node;
* job j may take w = 0 or 1..max_replicas_j GPUs, worth ``S_j(ceil(w / G), w)``, multiplied by the
  restart factor ``phi_j = max(age - 10 restarts, 0) / (age + 10)`` unless w is what it holds now;
* maximise the plain sum of values subject to sum w <= C (dynamic programming over jobs in
  least-attained-service order); the trace-back from c = C takes, for each job in reverse order,
  the *smallest* w that attains the optimum (so on ties a job takes GPUs rather than none).

Cost (docs/policies.md §8.5): the programme spans min(capacity, sum of the jobs' widths) GPUs (the
same choice, bit for bit); beyond :data:`MAX_KNAPSACK_CELLS` cells, with more widths than GPUs, it
runs in bounded passes over the jobs holding GPUs first (never at the default sizes).

Placement: a job whose count is unchanged keeps its GPUs; the others, in ascending order of their
new count, are placed on the remaining free GPUs by DeepBoot's best-fit rule
(:func:`deepboot_env.placement.best_fit`).

Decisions where the original is arbitrary or silent (documented here, docs/policies.md §8.3):

* the goodput model is the calibrated one from the start, so there is no linear-speedup phase for
  jobs without a profile (the exploration cap of 1, 2, 4, ... GPUs still applies);
* in the two-cluster layout a job is placed on training-cluster GPUs when it fits there, and only
  otherwise on lent inference GPUs (the original had one pool); this keeps lent GPUs for the jobs
  that need them and lowers reclaims;
* ties in the trace-back are detected with a relative tolerance of 1e-12.

Two options reproduce rules of the original DeepBoot simulator that the defaults leave out
(docs/policies.md §8.4; both off by default, both on in ``ats-deepboot``):

* ``linear_untrained``: a job that has not trained yet (:attr:`JobView.trained` False: no
  throughput observed, the original's ``perf_params is None``) is worth ``w / fair`` at w GPUs,
  the original's placeholder speedup, instead of its rate-table speedup. It makes a new job
  compete for a GPU with the value of 1/fair of a fair share (the default gives it
  ``rate(1) / rate(min(fair, its cap))``, which is 1 for ncf, capped at one GPU), so in a busy
  cluster new jobs wait for GPUs to free up, as they did in the original;
* ``relist_restarts``: the original keeps a job's GPUs as a list of node ids in the order its
  placement took them, and ATS-I, which runs at every inference event, rewrites every list in
  node order; a rewritten list is a new placement, so a job whose best-fit takes were not in
  node order restarts once more, with the full start-up delay even under AFE. The policy lists
  those jobs in :attr:`Allocation.relist <deepboot_env.sim.state.Allocation.relist>` and the
  simulator charges the restart at the next inference arrival or completion.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from baselines.job_order import job_priority_key
from deepboot_env.placement import place_count_lists, place_counts
from deepboot_env.policy import WIDTH_CLASSES, Allocation, BasePolicy, ClusterState, JobView
from deepboot_env.sim.compiled import cached_on_disk, compiled
from deepboot_env.sim.reclaim import RestartAwareRule, fair_share_base
from deepboot_env.sim.state import GpuRef, RequestView

if TYPE_CHECKING:
    from deepboot_env.sim.array_episode import ArrayEpisode, DecisionInputs

RESTART_PENALTY_S = 10.0
"""Seconds per restart in ATS's restart factor (the original's constant)."""
MAX_KNAPSACK_CELLS = 1 << 24
"""The knapsack's bound (docs/policies.md §8.5): a pass of the dynamic programme fills at most
this many cells (sum over jobs of (width + 1) x (capacity + 1)) unless more jobs are needed for
their useful widths to cover the capacity."""


def restart_factor(job: JobView) -> float:
    """phi = max(age - 10 restarts, 0) / (age + 10)."""
    age = job.age
    return max(age - RESTART_PENALTY_S * job.num_restarts, 0.0) / (age + RESTART_PENALTY_S)


def option_values(
    job: JobView, fair: int, gpus_per_node: int, max_w: int, linear_untrained: bool = False
) -> np.ndarray:
    """Values of giving ``job`` w = 0..max_w GPUs (index w); with ``linear_untrained``, a job
    that has not trained yet is worth ``w / fair`` (the original's speedup without a profile)."""
    return option_matrix([job], fair, gpus_per_node, [max_w], linear_untrained)[0]


def option_matrix(
    jobs: Sequence[JobView],
    fair: int,
    gpus_per_node: int,
    caps: Sequence[int],
    linear_untrained: bool = False,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`option_values` of every job at once: row i holds job i's values of w = 0..caps[i]
    GPUs, then zeros up to ``max(caps)`` (the products :class:`Options` describes; ``weights``
    as there)."""
    options = Options.of(jobs, fair, gpus_per_node, caps, linear_untrained, weights)
    out = np.zeros((len(jobs), max(caps, default=0) + 1))
    columns = zip(options.offsets.tolist(), caps, options.held.tolist(), options.phi, options.weights, strict=True)
    for i, (start, cap, held, phi, weight) in enumerate(columns):
        row = options.speedups[start : start + cap + 1] * weight
        out[i, : cap + 1] = row * phi
        if 0 <= held <= cap:
            out[i, held] = row[held]
    return out


def check_finite_nonnegative(**values: object) -> None:
    """Check that each named option is a finite number >= 0 (not a bool).

    Raises:
        ValueError: naming the first option that is not.
    """
    for name, value in values.items():
        if isinstance(value, bool) or not (isinstance(value, int | float) and 0.0 <= value < math.inf):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


OPTION_FIELDS = ("offset", "width", "held", "phi", "weight")
"""The columns of :attr:`Options.table`, in order."""


class Options(NamedTuple):
    """Every job's option values, without building them: row i of ``table`` holds job i's
    ``offset``, ``width``, ``held``, ``phi`` and ``weight`` (:data:`OPTION_FIELDS`), and its value
    of w = 0..width GPUs is ``speedups[offset + w] * weight``, times its restart factor ``phi``
    unless w is ``held``, the GPUs it holds (-1 or more than its width: none of its options). The
    weights are 1 for ATS (:attr:`AtsPolicy.srpt_power` 0), times ``exp(score)`` under the score
    action mode's scores. The knapsack computes the products as it reads them (the same products
    as :func:`option_matrix`'s).

    The jobs' numbers are one float array (offsets and counts are exact in float64), built from
    one Python list: the score action mode makes one at every env step, and one array is one of
    numpy's per-call costs where an array per field and the compiled knapsack's unboxing of
    each were five (15-18 us of a decision's 47, session 45). A named tuple: one is made at every
    decision, in a third of a frozen dataclass's time."""

    speedups: np.ndarray
    table: np.ndarray

    @classmethod
    def of(
        cls,
        jobs: Sequence[JobView],
        fair: int,
        gpus_per_node: int,
        caps: Sequence[int],
        linear_untrained: bool,
        weights: np.ndarray | None = None,
        scores: Mapping[int, float] | None = None,
    ) -> Options:
        """The options of ``jobs``, job i taking 0..caps[i] GPUs (see :func:`option_values`),
        weighted by ``weights`` (None: all 1) times ``exp(scores[job id])`` (absent ids, or None:
        1, the weight itself)."""
        arena = _ARENA
        arena.start_call()
        get = arena.rows.get
        bases = [1.0] * len(jobs) if weights is None else weights.tolist()
        score = (scores or {}).get
        flat: list[float] = []
        for job, cap, base in zip(jobs, caps, bases, strict=True):
            if linear_untrained and not job.trained:
                offset = arena.linear_row(fair, cap)
            else:  # the memo's hits read inline (the commonest case by far), misses through speedup_row
                # an entry holds its rates object, so a key found is the job's own (_RowArena)
                hit = get((id(job.rates), job.epoch, fair, gpus_per_node))
                offset = (
                    hit[1] if hit is not None and hit[2] >= cap else arena.speedup_row(job, fair, gpus_per_node, cap)
                )
            age, change = job.age, score(job.id)
            # restart_factor's expression inline, its max as a comparison: a call per job is most
            # of what they cost here (a zero's sign aside, the same floats)
            left = age - RESTART_PENALTY_S * job.num_restarts
            phi = (left if left > 0.0 else 0.0) / (age + RESTART_PENALTY_S)
            flat += (offset, cap, job.replicas, phi, base * math.exp(change) if change else base)
        # the rows' array is read last: a row stored above may have grown it
        return cls(arena.values, np.array(flat, dtype=np.float64).reshape(len(caps), len(OPTION_FIELDS)))

    @classmethod
    def of_arrays(
        cls,
        speedups: np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        widths: Sequence[int] | np.ndarray,
        held: Sequence[int] | np.ndarray,
        phi: Sequence[float] | np.ndarray,
        weights: Sequence[float] | np.ndarray,
    ) -> Options:
        """The options whose columns (:data:`OPTION_FIELDS`) are these arrays, one entry per job."""
        table = np.column_stack(
            [np.asarray(column, dtype=np.float64) for column in (offsets, widths, held, phi, weights)]
        )
        return cls(np.asarray(speedups, dtype=np.float64), table.reshape(-1, len(OPTION_FIELDS)))

    @property
    def offsets(self) -> np.ndarray:
        """Each job's row offset in :attr:`speedups` (int64)."""
        return self.table[:, 0].astype(np.int64)

    @property
    def widths(self) -> np.ndarray:
        """The most GPUs each job may take (int64)."""
        return self.table[:, 1].astype(np.int64)

    @property
    def held(self) -> np.ndarray:
        """The GPUs each job holds (int64)."""
        return self.table[:, 2].astype(np.int64)

    @property
    def phi(self) -> np.ndarray:
        """Each job's restart factor."""
        return self.table[:, 3].copy()

    @property
    def weights(self) -> np.ndarray:
        """Each job's weight (its scores' factor included)."""
        return self.table[:, 4].copy()

    def moved(self, speedups: np.ndarray, offsets: Sequence[int] | np.ndarray) -> Options:
        """These options with their rows at ``offsets`` in ``speedups``."""
        table = self.table.copy()
        table[:, 0] = offsets
        return Options(speedups, table)


class _RowArena:
    """The speedup rows ATS has computed, memoised and stored back to back in one array, so that
    :meth:`Options.of` hands the knapsack one array and the rows' offsets in it.

    A job's rates object keeps one table per epoch for as long as it lives, so a job's row is
    memoised by the rates object's identity and the epoch (with the fair share and the GPUs per
    node; the entry holds the object, so the identity cannot be reused while it is cached). An
    entry serves every width up to the one it was computed for (a row's first w + 1 values do not
    depend on how far it goes), and a row is computed at least as wide as its job can use (its
    rate table's ``max_replicas``): a job's width changes with the lending share and the capacity
    at every decision, and rows cut at the width asked missed at the next wider one a third of
    the score action mode's decisions. Rows are never overwritten: the array
    grows by copying, and when the memo holds :data:`_ROWS_LIMIT` entries at the start of an
    :meth:`Options.of`, a new array starts empty; arrays handed out earlier stay valid.
    """

    def __init__(self) -> None:
        self.values = np.zeros(1 << 12)
        self.used = 0
        self.rows: dict[tuple[int, ...], tuple[object, int, int]] = {}
        """(rates id, epoch or -1, fair, GPUs per node or 0) -> (owner, offset, width); with
        (room, top) after them, the row split-valued by :meth:`split_row`."""

    def start_call(self) -> None:
        """Start afresh if the memo is full (never in the middle of one :meth:`Options.of`)."""
        if len(self.rows) >= _ROWS_LIMIT:
            self.values = np.zeros(1 << 12)
            self.used = 0
            self.rows = {}

    def speedup_row(self, job: JobView, fair: int, gpus_per_node: int, max_w: int) -> int:
        """Offset of :func:`speedup_values` of ``job``'s rate table at its epoch (at least
        ``max_w + 1`` values)."""
        rates = job.rates
        key = (id(rates), job.epoch, fair, gpus_per_node)
        hit = self.rows.get(key)
        if hit is not None and hit[0] is rates and hit[2] >= max_w:
            return hit[1]
        # as wide as the job can use (at least): a job's cap moves with the capacity at every
        # decision, and a row cut at one cap would miss at the next wider one
        width = max(max_w, rates.max_replicas)
        return self._store(key, rates, speedup_values(job.rate_table(), fair, gpus_per_node, width))

    def split_row(self, job: JobView, fair: int, gpus_per_node: int, max_w: int, room: int, top: int) -> int:
        """Offset of :meth:`speedup_row`'s row of ``job`` (at least ``max_w + 1`` values) whose
        options ``max(2, room + 1)..top`` read the multi-node rate (:func:`_split_valued`),
        memoised as the row is, by the room and the top width too: a job's room changes only
        when GPUs move, so most decisions find the split row they made before."""
        rates = job.rates
        key = (id(rates), job.epoch, fair, gpus_per_node, room, top)
        hit = self.rows.get(key)
        if hit is not None and hit[0] is rates and hit[2] >= max_w:
            return hit[1]
        width = max(max_w, rates.max_replicas)  # as in speedup_row
        start = self.speedup_row(job, fair, gpus_per_node, width)
        row = _split_valued(self.values[start : start + width + 1], job.rate_table(), room, top, fair)
        return self._store(key, rates, row)

    def linear_row(self, fair: int, max_w: int) -> int:
        """Offset of the row ``w / fair``, w = 0..max_w or more (the value of a job that has not
        trained)."""
        key = (0, -1, fair, 0)
        hit = self.rows.get(key)
        if hit is not None and hit[2] >= max_w:
            return hit[1]
        return self._store(key, None, np.arange(max_w + 1) / max(fair, 1))

    def _store(self, key: tuple[int, ...], owner: object, row: np.ndarray) -> int:
        """Append ``row`` (memoised under ``key``, kept with ``owner``); its offset."""
        start = self.used
        end = start + len(row)
        if end > len(self.values):
            grown = np.zeros(max(2 * len(self.values), end))
            grown[:start] = self.values[:start]
            self.values = grown
        self.values[start:end] = row
        self.used = end
        self.rows[key] = (owner, start, len(row) - 1)
        return start


_NO_SCORES = np.zeros(0)
"""No held scores (:meth:`AtsPolicy.decide_on_arrays`)."""
_NO_WIDTHS = np.zeros((0, WIDTH_CLASSES))
"""No held width scores."""


def held_arrays(
    jobs: int, scores: Mapping[int, float], widths: Mapping[int, Sequence[float]] | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Held per-job ``scores`` and ``widths`` (:meth:`AtsPolicy.decide_scored`'s) as the arrays of
    :meth:`AtsPolicy.decide_on_arrays` over ``jobs`` job indices, or None where they are not
    finite numbers of the right count (the Python decision then names the culprit)."""
    score_array = np.zeros(jobs)
    for j, score in scores.items():
        if not (0 <= j < jobs and math.isfinite(score)):
            return None
        score_array[j] = score
    if not widths:
        return score_array, _NO_WIDTHS
    width_array = np.full((jobs, WIDTH_CLASSES), np.nan)
    for j, row in widths.items():
        if not (0 <= j < jobs and len(row) == WIDTH_CLASSES and all(map(math.isfinite, row))):
            return None
        width_array[j] = row
    return score_array, width_array


_TINY_WEIGHT = 1e-300
"""Weights below are read as this one in :meth:`AtsPolicy.log_weights` (log of 0 is -inf)."""
_LOG_TINY_WEIGHT = math.log(_TINY_WEIGHT)
_ROWS_LIMIT = 1 << 16
_ARENA = _RowArena()


def job_speedups(job: JobView, fair: int, gpus_per_node: int, max_w: int) -> np.ndarray:
    """:func:`speedup_values` of ``job``'s rate table at its epoch, memoised (a read-only view)."""
    start = _ARENA.speedup_row(job, fair, gpus_per_node, max_w)
    row = _ARENA.values[start : start + max_w + 1]
    row.flags.writeable = False
    return row


def speedup_values(table: np.ndarray, fair: int, gpus_per_node: int, max_w: int) -> np.ndarray:
    """Speedup of w = 0..max_w GPUs over ``fair`` GPUs on one node, from a rate table (by
    [multi-node flag, replicas])."""
    k_max = table.shape[1] - 1
    base_k = max(1, min(fair, k_max))
    base = table[0, base_k]
    base = base if base > 0 else 1.0
    values = table[_speedup_index(k_max, gpus_per_node, max_w)] / base
    values[0] = 0.0
    return values


@functools.lru_cache(maxsize=1024)
def _speedup_index(k_max: int, gpus_per_node: int, max_w: int) -> tuple[np.ndarray, np.ndarray]:
    """The (multi-node flag, replicas) cells of a rate table that w = 0..max_w GPUs read in
    :func:`speedup_values`: the replicas capped at ``k_max``, multi-node beyond one node. The same
    few shapes recur for every job, and building them is most of a row's cost (a row is built
    whenever a job's epoch or the fair share changes)."""
    w = np.arange(max_w + 1)
    multi, replicas = (np.ceil(w / gpus_per_node) > 1).astype(int), np.minimum(w, k_max)
    multi.flags.writeable = replicas.flags.writeable = False  # shared by every caller
    return multi, replicas


def job_rooms(jobs: Sequence[JobView], state: ClusterState, lend: bool | float) -> list[int]:
    """Each job's room: the most GPUs one node could give it before the reallocation, the node's
    free GPUs at lending share ``lend`` plus the GPUs the job holds there (what best-fit can place
    on one node; :func:`placement_aware_options`, :func:`width_scored_options`). One array
    operation for all the jobs that hold GPUs; a job holding none has the free GPUs' room."""
    free = np.maximum(state.training_capacity(lend=lend) - state.train_used, 0)
    rooms = [int(free.max()) if len(free) else 0] * len(jobs)
    holding = [i for i, job in enumerate(jobs) if job.replicas]
    if holding:
        peaks = (np.array([jobs[i].alloc for i in holding]) + free).max(axis=1).tolist()
        for i, peak in zip(holding, peaks, strict=True):
            rooms[i] = int(peak)
    return rooms


def placement_aware_options(
    options: Options,
    jobs: Sequence[JobView],
    caps: Sequence[int],
    fair: int,
    state: ClusterState,
    lend: bool | float,
    linear_untrained: bool = False,
    rooms: Sequence[int] | None = None,
) -> Options:
    """``options`` (of :meth:`Options.of`) with each job's 2..G-GPU options (G GPUs per node)
    valued at its multi-node speedup where no node has room for them now (docs/policies.md §8.8;
    ``fair`` as in :func:`speedup_values`).

    A job's room (:func:`job_rooms`; ``rooms``: computed already) is the most GPUs one node could
    give it before the reallocation. Best-fit splits a w-GPU job across nodes when w exceeds
    every node's room, and ATS's one-node valuation then overrates it
    (by 2-16 % for yolov3, whose rate falls most when split). Jobs valued linearly (not trained,
    with ``linear_untrained``) keep their rows. The split rows are memoised beside the one-node
    rows (:meth:`_RowArena.split_row`), never written over them: only the offsets change.

    Raises:
        ValueError: if ``options`` are not those of the latest :meth:`Options.of` (whose rows'
            array the split rows are added to).
    """
    if options.speedups is not _ARENA.values:
        raise ValueError("placement_aware_options takes the options of the latest Options.of (rows in its array)")
    gpus_per_node = state.gpus_per_node
    if rooms is None:
        rooms = job_rooms(jobs, state, lend)
    offsets = options.offsets
    for i, (job, cap, room) in enumerate(zip(jobs, caps, rooms, strict=True)):
        top = min(gpus_per_node, cap)
        if top < 2 or (linear_untrained and not job.trained):
            continue
        if room < top:
            offsets[i] = _ARENA.split_row(job, fair, gpus_per_node, cap, room, top)
    return options.moved(_ARENA.values, offsets)


def width_class(width: int, gpus_per_node: int, room: int) -> int:
    """The class of a ``width``-GPU option: 0 for one GPU, 1 for two on one node, 2 for three to
    ``gpus_per_node`` on one node, 3 where it is split: more than a node holds, or more than
    ``room``, the most GPUs one node could give the job now (best-fit then splits it)."""
    if width <= 1:
        return 0
    if width > gpus_per_node or width > room:
        return 3
    return 1 if width == 2 else 2


def width_scored_options(
    options: Options,
    jobs: Sequence[JobView],
    caps: Sequence[int],
    fair: int,
    state: ClusterState,
    lend: bool | float,
    width_scores: Mapping[int, Sequence[float]],
    linear_untrained: bool = False,
    rooms: Sequence[int] | None = None,
) -> Options:
    """``options`` with the options of each job in ``width_scores`` multiplied by
    ``exp(v[class(w)] - v[class(f)])``: ``v = (0, *width_scores[job id])`` its log-multipliers of the
    :data:`WIDTH_CLASSES` classes of :func:`width_class` (its room of :func:`job_rooms`, at
    least 1; ``rooms``: computed already), ``f = min(fair, its most useful GPUs)`` on one node, the
    fair-share width that normalises its speedups. The job's value at its fair share is unchanged:
    the multipliers reshape its speedup curve (where the fitted one errs by width, split or
    not) and leave its priority to the score. Jobs valued linearly (not trained, with
    ``linear_untrained``) and jobs absent from ``width_scores`` keep their values. The rows are
    copied into one new array (the memoised rows are never written), and multiplied by every
    job's factors in one product (1.0 for the jobs kept: the same floats).

    Raises:
        ValueError: if a job's multipliers are not :data:`WIDTH_CLASSES` finite numbers.
    """
    gpus_per_node = state.gpus_per_node
    if rooms is None:
        rooms = job_rooms(jobs, state, lend)
    factors: list[float] = []
    for job, cap, room in zip(jobs, caps, rooms, strict=True):
        scores = width_scores.get(job.id)
        if scores is None or cap < 1 or (linear_untrained and not job.trained):
            factors += [1.0] * (cap + 1)
            continue
        if len(scores) != WIDTH_CLASSES or not all(map(math.isfinite, scores)):
            raise ValueError(f"job {job.id}: width scores must be {WIDTH_CLASSES} finite numbers, got {scores!r}")
        fair_class = width_class(max(1, min(fair, job.rates.max_replicas)), gpus_per_node, gpus_per_node)
        factors += width_factors((0.0, *scores), fair_class, cap, gpus_per_node, max(room, 1))
    # every job's row 0..cap gathered in one indexing (row i moves from its memo offset to its
    # place in the new array) and multiplied in one product
    lengths = np.asarray(caps, dtype=np.int64) + 1
    offsets = np.cumsum(lengths) - lengths
    gather = np.arange(len(factors)) + np.repeat(options.offsets - offsets, lengths)
    values = options.speedups[gather] * np.array(factors) if len(jobs) else np.zeros(1)
    return options.moved(values, offsets)


def width_factors(logs: Sequence[float], fair_class: int, cap: int, gpus_per_node: int, room: int) -> list[float]:
    """The factors of options w = 0..``cap`` (``cap`` >= 1) of :func:`width_scored_options`: 1.0 for
    w = 0, then ``exp(logs[width_class(w)] - logs[fair_class])``.

    Built class by class, not width by width: the classes are runs of w (1; 2; 3 to the widest
    one-node option; split beyond), so four exponentials serve a row of up to a cluster's GPUs,
    each the same float as the width's own (this runs for every job at every decision of a model
    with width scores)."""
    base = logs[fair_class]
    widest = min(gpus_per_node, room)  # the widest option one node can hold now
    factors = [1.0, math.exp(logs[0] - base)]
    if cap >= 2:  # only the classes the row holds are exponentiated, as width by width
        factors.append(math.exp(logs[width_class(2, gpus_per_node, room)] - base))
        threes = max(0, min(cap, widest) - 2)  # w = 3..min(cap, widest)
        if threes:
            factors += [math.exp(logs[2] - base)] * threes
        if cap - 2 - threes:
            factors += [math.exp(logs[3] - base)] * (cap - 2 - threes)
    return factors


def _split_valued(row: np.ndarray, table: np.ndarray, room: int, top: int, fair: int) -> np.ndarray:
    """A copy of the speedup ``row`` whose options max(2, room + 1)..top read the rate ``table``'s
    multi-node row (over the same one-node base at ``fair`` GPUs as :func:`speedup_values`)."""
    k_max = table.shape[1] - 1
    base = table[0, max(1, min(fair, k_max))]
    base = base if base > 0 else 1.0
    widths = np.arange(max(2, room + 1), top + 1)
    out = row.copy()
    out[widths] = table[1, np.minimum(widths, k_max)] / base
    return out


def knapsack(values: Sequence[np.ndarray], capacity: int) -> list[int]:
    """Group knapsack: choose ``w_i`` (index into ``values[i]``) maximising the sum with ``sum w <= capacity``.

    The trace-back takes, for each item in reverse order, the smallest w > 0 that attains the
    optimum, else 0. (Taking no GPUs adds nothing, whatever ``values[i][0]`` says.)
    """
    widths = [max(min(len(v) - 1, capacity), 0) for v in values]
    matrix = np.zeros((len(values), max(widths, default=0) + 1))
    for row, v, width in zip(matrix, values, widths, strict=True):
        row[1 : width + 1] = v[1 : width + 1]
    return knapsack_matrix(matrix, widths, capacity)


def knapsack_matrix(values: np.ndarray, widths: Sequence[int], capacity: int) -> list[int]:
    """:func:`knapsack` of the items ``values[i, 0..widths[i]]`` (``values[i, 0]`` is ignored;
    every width at most ``capacity``)."""
    n = len(widths)
    if n == 0:
        return []
    flat = np.ascontiguousarray(values, dtype=np.float64)
    offsets = np.arange(n, dtype=np.int64) * flat.shape[1]
    options = Options.of_arrays(flat.reshape(-1), offsets, widths, np.full(n, -1), np.ones(n), np.ones(n))
    return knapsack_options(options, capacity)


def knapsack_options(options: Options, capacity: int) -> list[int]:
    """:func:`knapsack` of the jobs of ``options``, job i taking 0..its width GPUs.

    The dynamic programme and its trace-back run as one compiled loop (:func:`~baselines.ats_loops.knapsack_loops`,
    compiled by numba on first use and cached on disk): every cell is the maximum of the same sums
    of two floats as the definition's, so the choice is bit-identical to it, at about a
    nanosecond per cell instead of numpy's few microseconds per item.
    """
    if len(options.table) == 0:
        return []
    return cast(list[int], _compiled_knapsack()(options.speedups, options.table, int(capacity)).tolist())


@functools.cache
def _kernel_cached(name: str) -> bool:
    """Whether :mod:`baselines.ats_loops`' compiled ``name`` was on disk when this process first
    asked (it then loads instead of compiling; asked once per process and kernel: an episode that
    may not compile declines it)."""
    from baselines import ats_loops

    return cached_on_disk(getattr(ats_loops, name))


@functools.cache
def _compiled_knapsack() -> Callable[..., np.ndarray]:
    """:func:`~baselines.ats_loops.knapsack_loops` compiled (:func:`~deepboot_env.sim.compiled.compiled`:
    cached on disk where it can be), on the first knapsack, so that importing the policies stays
    cheap (numba is imported with the loops)."""
    from baselines.ats_loops import knapsack_loops

    return compiled(knapsack_loops)


def knapsack_prefix(
    widths: Sequence[int], useful: Sequence[int], capacity: int, max_cells: int = MAX_KNAPSACK_CELLS
) -> int:
    """How many jobs, the first in priority order, one pass of the knapsack considers
    (docs/policies.md §8.5).

    All of them when their ``widths`` (the GPUs each may take) add up to at most the capacity
    (nothing is scarce) or when their dynamic programme fills at most ``max_cells`` cells (the
    sum over jobs of ``(width + 1) x (capacity + 1)``). Beyond, the longest prefix within
    ``max_cells`` by their ``useful`` widths (the GPUs each can use: its rate table's width), or
    the shortest whose useful widths add up to the capacity if that is longer, so that the
    considered jobs can use every GPU.
    """
    if not widths:
        return 0
    if sum(widths) <= capacity or (sum(widths) + len(widths)) * (capacity + 1) <= max_cells:
        return len(widths)
    reach = np.cumsum(np.asarray(useful, dtype=np.int64))
    within = int(np.searchsorted((reach + np.arange(1, len(widths) + 1)) * (capacity + 1), max_cells, side="right"))
    covering = int(np.searchsorted(reach, capacity, side="left")) + 1
    return max(within, min(covering, len(widths)))


def arrival_ranks(jobs: Sequence[JobView]) -> np.ndarray:
    """Each job's arrival rank among ``jobs``: +1 for the earliest arrival to -1 for the latest
    (ties by id), 0 for a job alone (the ``u_j`` of :meth:`AtsPolicy.job_weights`' arrival tilt)."""
    ranks = np.zeros(len(jobs))
    if len(jobs) > 1:
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, jobs[i].id))
        ranks[order] = 1.0 - 2.0 * np.arange(len(jobs)) / (len(jobs) - 1)
    return ranks


def epochs_left_work(job: JobView) -> float:
    """The progress of the epochs ``job`` has not completed (its application's target less the
    progress at the end of its last completed epoch): what a scheduler that knows the
    application's epochs and the job's epoch, but not its progress inside the epoch, can tell of
    the work left."""
    app = job.rates.app
    done = float(app.epoch_progress[job.epoch - 1]) if job.epoch > 0 else 0.0
    return app.target_progress - done


def fair_share_seconds(jobs: Sequence[JobView], fair: int) -> np.ndarray:
    """Each job's :func:`epochs_left_work` over its rate at ``fair`` GPUs on one node
    (:func:`~deepboot_env.sim.reclaim.fair_share_base`): the remaining time that ``ats-srpt``
    weighs jobs by.

    Memoised by the job's rates object, epoch and ``fair``, as :class:`_RowArena` memoises rows
    (a job's value changes only when its epoch or the fair share does; the score action mode
    reads it at every decision); the memo starts afresh when it holds :data:`_ROWS_LIMIT` entries.
    """
    memo = _FAIR_SECONDS
    if len(memo) >= _ROWS_LIMIT:
        memo.clear()
    out = []
    for job in jobs:
        rates = job.rates
        key = (id(rates), job.epoch, fair)
        hit = memo.get(key)
        if hit is None or hit[0] is not rates:
            hit = memo[key] = (rates, epochs_left_work(job) / fair_share_base(job, fair))
        out.append(hit[1])
    return np.array(out)


_FAIR_SECONDS: dict[tuple[int, int, int], tuple[object, float]] = {}


def srpt_weights(jobs: Sequence[JobView], fair: int, power: float) -> np.ndarray:
    """Each job's ``ats-srpt`` weight ``max(T, 1) ** -power``, T its :func:`fair_share_seconds`.

    Memoised per job as T is, by the rates object, epoch, ``fair`` and ``power``: the weights
    are read at every decision (twice in the score action mode), and the three array
    operations they take are most of what they cost for a few jobs. The jobs not in the memo are
    computed by libm's ``pow``, as the compiled decision computes them.
    """
    memo = _SRPT_WEIGHTS
    if len(memo) >= _ROWS_LIMIT:
        memo.clear()
    out: list[float] = []
    missed: list[int] = []
    for job in jobs:
        rates = job.rates
        hit = memo.get((id(rates), job.epoch, fair, power))
        if hit is None or hit[0] is not rates:
            missed.append(len(out))
            out.append(0.0)
        else:
            out.append(hit[1])
    if missed:
        # libm's pow, one job at a time (not numpy's, whose vector code may differ in the last bit
        # where a machine has it): the compiled decision (baselines.ats_loops) computes the same
        computed = [
            math.pow(max(seconds, 1.0), -power)
            for seconds in fair_share_seconds([jobs[i] for i in missed], fair).tolist()
        ]
        for i, weight in zip(missed, computed, strict=True):
            rates = jobs[i].rates
            memo[(id(rates), jobs[i].epoch, fair, power)] = (rates, weight)
            out[i] = weight
    return np.array(out)


_SRPT_WEIGHTS: dict[tuple[int, int, int, float], tuple[object, float]] = {}


class AtsPolicy(BasePolicy):
    """DeepBoot ATS allocator.

    Args:
        lend: whether idle inference GPUs are used; a fraction in [0, 1] lends that share of
            them (:meth:`ClusterState.training_capacity
            <deepboot_env.sim.state.ClusterState.training_capacity>`).
        linear_untrained: value jobs that have not trained yet at the linear ``w / fair``
            (see the module docstring).
        relist_restarts: report the moved jobs whose GPU list the original's ATS-I would
            rewrite (:attr:`Allocation.relist <deepboot_env.sim.state.Allocation.relist>`).
        srpt_power: p >= 0; with p > 0 every option value of a job is weighted by ``T ** -p``,
            T its remaining time at its fair share (:meth:`job_weights`; ``ats-srpt``,
            docs/policies.md §8.6); 0 is ATS.
        arrival_tilt: s >= 0; with s > 0 every job's weight is also multiplied by
            ``exp(s * u_j)``, ``u_j`` from +1 for the earliest-arrived active job to -1 for the
            latest, evenly by arrival rank (first come, first served among comparable jobs:
            ``ats-srpt-fcfs``, docs/policies.md §8.7); 0: no tilt.
        placement_aware: value a job's 2..G-GPU options at its multi-node speedup where no
            node has room for them now (:func:`placement_aware_options`; ``ats-srpt-fcfs-place``,
            docs/policies.md §8.8); False: ATS's one-node valuation.
        label: the policy's name in results (default ``ats`` or ``ats-nolend``).
        reclaim_horizon: seconds > 0: inference takes back the lent GPU whose loss costs the
            fewest speedup-seconds over that horizon, the restart it causes included
            (:func:`~deepboot_env.sim.reclaim.restart_aware_victim`; ``ats-srpt-fcfs-place-rr``,
            docs/policies.md §8.9); 0: DeepBoot's ATS-I.
        keep_warm_at: a share in (0, 1]: while inference requests wait or RUNNING and PROTECT pods
            hold at least this share of the inference GPUs (:meth:`ClusterState.inference_load
            <deepboot_env.sim.state.ClusterState.inference_load>`), training is not lent the GPUs
            of SLEEP pods, so that the next requests find their warm pods (``ats-srpt-warm``,
            docs/policies.md §8.10); 0: every idle inference GPU is lendable, as in DeepBoot.
    """

    name = "ats"
    adaptive_batch = True

    def __init__(
        self,
        lend: bool | float = True,
        linear_untrained: bool = False,
        relist_restarts: bool = False,
        srpt_power: float = 0.0,
        label: str | None = None,
        arrival_tilt: float = 0.0,
        placement_aware: bool = False,
        reclaim_horizon: float = 0.0,
        keep_warm_at: float = 0.0,
    ) -> None:
        if isinstance(keep_warm_at, bool) or not (isinstance(keep_warm_at, int | float) and 0.0 <= keep_warm_at <= 1.0):
            raise ValueError(f"keep_warm_at must be a share in [0, 1], got {keep_warm_at!r}")
        check_finite_nonnegative(srpt_power=srpt_power, arrival_tilt=arrival_tilt, reclaim_horizon=reclaim_horizon)
        self.lend = lend
        self.linear_untrained = linear_untrained
        self.relist_restarts = relist_restarts
        self.srpt_power = float(srpt_power)
        self.arrival_tilt = float(arrival_tilt)
        self.placement_aware = bool(placement_aware)
        self.reclaim_horizon = float(reclaim_horizon)
        self._restart_aware = RestartAwareRule(self.reclaim_horizon) if self.reclaim_horizon else None
        self.keep_warm_at = float(keep_warm_at)
        self._warm_memo: tuple[ClusterState, ClusterState] | None = None
        """The latest state given and the state this policy decides on (see :meth:`_lendable`)."""
        self.name = label or ("ats" if lend else "ats-nolend")
        self._array_params: dict[tuple[int, bool], np.ndarray] = {}
        """The compiled decision's parameters by (GPUs per node, adaptive batch) (:meth:`_params_at`)."""
        self._proposal = np.zeros((2, 0), dtype=np.int64)
        """:meth:`decide_on_arrays`' knapsack counts (the jobs in priority order, their GPUs)."""
        self._log_weights_out = np.zeros(0)
        """:meth:`log_weights_on_arrays`' buffer (by job index)."""
        self._weights_memo: tuple[ClusterState, list[JobView], dict[tuple[int, int], np.ndarray | None]] | None = None
        """The state, its jobs in priority order and their weights by (fair, capacity) of the
        latest :meth:`_ranked_weights` (see there)."""

    def __getstate__(self) -> dict[str, object]:
        """The policy without its memo of the latest state (:meth:`_ranked_weights`): a copy or a
        pickle starts afresh, and a state, whose job index is read-only, is not copied."""
        attributes = self.__dict__.copy()
        attributes["_weights_memo"] = attributes["_warm_memo"] = None
        return attributes

    @property
    def choose_reclaim(self) -> Callable[[ClusterState, RequestView], GpuRef | None]:
        """The reclaim hook: the restart-aware rule with a ``reclaim_horizon``, else the default
        ATS-I hook itself; the simulator computes either from its books
        (:func:`~deepboot_env.sim.reclaim.least_loss_horizon`), without a whole state."""
        if self._restart_aware is not None:
            return self._restart_aware
        return super().choose_reclaim

    def decide(self, state: ClusterState) -> Allocation:
        """Knapsack over job GPU counts, then best-fit placement."""
        state = self._lendable(state)
        return self.place_proposal(state, self.propose_counts(state))

    @property
    def decides_on_arrays(self) -> bool:
        """Whether :meth:`decide_on_arrays` decides (not a subclass, not the original's options)."""
        return type(self) is AtsPolicy and not (self.linear_untrained or self.relist_restarts)

    def decide_on_arrays(
        self, episode: ArrayEpisode, scores: np.ndarray = _NO_SCORES, widths: np.ndarray = _NO_WIDTHS, lend: float = 1.0
    ) -> np.ndarray | None:
        """:meth:`decide` at ``episode``'s decision, compiled over its arrays
        (:func:`~baselines.ats_loops.ats_decision_loops`, the same allocation bit for bit): the
        GPUs per node of each job (-1: none, the episode's buffer), or None where the policy
        decides in Python (a subclass, the original's options, a knapsack past its cell bound).
        With ``scores`` (a log-weight per job index) and ``widths`` (width-class log-multipliers
        per job index, NaN rows for none; :func:`held_arrays`), :meth:`decide_scored` at lending
        share ``lend``.

        Raises:
            ValueError: if the knapsack's counts cannot be placed (never: they fit by construction).
        """
        if not self._runs_compiled(episode, "ats_decision_loops"):
            return None
        from baselines import ats_loops as loops

        inputs = episode.decision_inputs()
        params = self._params_at(inputs, lend)
        if self._proposal.shape[1] < len(inputs.jf):
            self._proposal = np.zeros((2, len(inputs.jf)), dtype=np.int64)
        answer = loops.ats_decision_loops(*inputs[:12], params, scores, widths, inputs.wanted, self._proposal)
        if answer == loops.BOUNDED:
            return None
        if answer != loops.DECIDED:
            raise ValueError(f"{self.name}: the knapsack's counts do not fit the free GPUs at t={inputs.now:.0f}s")
        return inputs.wanted

    def propose_on_arrays(self, episode: ArrayEpisode) -> tuple[dict[int, int], np.ndarray] | None:
        """:meth:`propose_counts` and its placement (:meth:`place_proposal`) at ``episode``'s
        decision, compiled (:meth:`decide_on_arrays`): the counts by job id in priority order, and
        the GPUs per node of each job (-1: none; the episode's buffer); or None where the policy
        decides in Python."""
        wanted = self.decide_on_arrays(episode)
        if wanted is None:
            return None
        jobs, chosen = self._proposal[:, : len(episode.active)].tolist()
        return dict(zip(jobs, chosen, strict=True)), wanted

    def log_weights_on_arrays(self, episode: ArrayEpisode) -> np.ndarray | None:
        """:meth:`log_weights` at ``episode``'s decision, compiled
        (:func:`~baselines.ats_loops.ats_log_weights_loops`, the same floats): by job index, valid
        at the active jobs' (a buffer of the policy's, rewritten at the next call); or None where
        the policy decides in Python."""
        if not self._runs_compiled(episode, "ats_log_weights_loops"):
            return None
        from baselines import ats_loops as loops

        inputs = episode.decision_inputs()
        out = self._log_weights_out
        if len(out) < len(inputs.jf):
            out = self._log_weights_out = np.zeros(len(inputs.jf))
        loops.ats_log_weights_loops(
            inputs.jf, inputs.ji, inputs.active, inputs.model, inputs.ends, inputs.dims, inputs.targets,
            inputs.ledger, inputs.kinds, inputs.waiting, self._params_at(inputs, 1.0), out,
        )  # fmt: skip
        return out

    def _runs_compiled(self, episode: ArrayEpisode, kernel: str) -> bool:
        """Whether :mod:`baselines.ats_loops`' ``kernel`` serves this policy in ``episode``: it
        decides compiled at all, and the kernel is cached or the episode may compile it."""
        return self.decides_on_arrays and (episode.may_compile or _kernel_cached(kernel))

    def _params_at(self, inputs: DecisionInputs, lend: float) -> np.ndarray:
        """The compiled decision's parameters (:data:`~baselines.ats_loops.N_PARAMS`) at ``inputs``'
        cluster shape and the lending share ``lend`` times the policy's own."""
        from baselines import ats_loops as loops

        key = (inputs.gpus_per_node, inputs.adaptive)
        params = self._array_params.get(key)
        if params is None:  # the same at every decision of an episode: built once per cluster shape
            params = self._array_params[key] = np.zeros(loops.N_PARAMS)
            params[loops.SRPT_POWER], params[loops.ARRIVAL_TILT] = self.srpt_power, self.arrival_tilt
            params[loops.PLACEMENT_AWARE], params[loops.KEEP_WARM_AT] = self.placement_aware, self.keep_warm_at
            params[loops.GPUS_PER_NODE], params[loops.ADAPTIVE] = key
            params[loops.RESTART_S], params[loops.MAX_CELLS] = RESTART_PENALTY_S, MAX_KNAPSACK_CELLS
            params[loops.WEIGHT_FLOOR] = _TINY_WEIGHT
        params[loops.LEND] = float(self.lend) * lend  # _scored_counts' share (times 1.0: the policy's own)
        return params

    def decide_scored_on_arrays(
        self,
        episode: ArrayEpisode,
        scores: Mapping[int, float],
        lend: float,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> np.ndarray | None:
        """:meth:`scored_placement` at ``episode``'s decision, compiled (:meth:`decide_on_arrays`
        with the scores as arrays), or None where the policy decides in Python."""
        held = held_arrays(len(episode.arrivals), scores, width_scores)
        return None if held is None else self.decide_on_arrays(episode, *held, lend=lend)

    def _lendable(self, state: ClusterState) -> ClusterState:
        """The state the policy decides on: ``state``, or with :attr:`keep_warm_at` and inference
        busy (requests waiting, or its load at least that share) the state whose SLEEP pods count
        as PROTECT (:meth:`ClusterState.keeping_warm_pods
        <deepboot_env.sim.state.ClusterState.keeping_warm_pods>`). Memoised for the latest state
        (every public entry asks, and one decision goes through several), and a state it returned
        maps to itself."""
        if not self.keep_warm_at:
            return state
        memo = self._warm_memo
        if memo is not None and (state is memo[0] or state is memo[1]):
            return memo[1]
        busy = state.waiting_requests > 0 or state.inference_load() >= self.keep_warm_at
        decided = state.keeping_warm_pods() if busy else state
        self._warm_memo = (state, decided)
        return decided

    def decide_scored(
        self,
        state: ClusterState,
        scores: Mapping[int, float],
        lend: float,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> Allocation:
        """:meth:`decide` with each job's knapsack weight times ``exp(scores[job id])`` (absent
        ids: 0), the lending share times ``lend`` in [0, 1] and each job's option values
        reshaped by its width-class log-multipliers ``width_scores[job id]`` (:func:`width_scored_options`;
        absent ids: none) (the score action of :class:`~deepboot_env.env.action.ScoreCodec`).
        All scores 0, no width scores and ``lend`` 1 is :meth:`decide` bit for bit (a weight times
        exp(0) = 1.0 is the weight)."""
        state = self._lendable(state)
        counts, share = self._scored_counts(state, scores, lend, width_scores)
        return self.place_proposal(state, counts, share)

    def scored_placement(
        self,
        state: ClusterState,
        scores: Mapping[int, float],
        lend: float,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> dict[int, list[int]]:
        """:meth:`decide_scored`'s GPUs per node of each job, as lists of ints in the same order,
        and unchecked: valid by construction (the knapsack keeps each job within its
        ``max_replicas`` and all of them within the lending share's capacity, which the placement
        takes from). The score action's decoding at every env step, without an
        :class:`Allocation` of arrays to check and convert back."""
        state = self._lendable(state)
        counts, share = self._scored_counts(state, scores, lend, width_scores)
        return place_count_lists(state, counts, state.training_capacity_list(share)) if counts else {}

    def _scored_counts(
        self,
        state: ClusterState,
        scores: Mapping[int, float],
        lend: float,
        width_scores: Mapping[int, Sequence[float]] | None,
    ) -> tuple[dict[int, int], float]:
        """:meth:`propose_counts` under the scores, and the lending share they are placed at: the
        policy's own times ``lend`` (both scored decisions, :meth:`decide_scored` and
        :meth:`scored_placement`)."""
        share = float(self.lend) * lend
        return self.propose_counts(state, scores, share, width_scores), share

    def propose_counts(
        self,
        state: ClusterState,
        scores: Mapping[int, float] | None = None,
        lend: float | None = None,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> dict[int, int]:
        """The knapsack's GPUs per active job, in least-attained-service order (``scores``,
        ``lend`` and ``width_scores``: see :meth:`decide_scored`; None: the policy's own)."""
        if not state.jobs:
            return {}
        state = self._lendable(state)
        share = self.lend if lend is None else lend
        capacity, fair = self._capacity_and_fair(state, share)
        jobs, base_weights = self._ranked_weights(state, fair, capacity)
        caps = self.job_caps(jobs, capacity, fair)
        total = sum(caps)
        if total > capacity and (total + len(caps)) * (capacity + 1) > MAX_KNAPSACK_CELLS:  # may bind
            useful = [min(cap, j.rates.max_replicas) for cap, j in zip(caps, jobs, strict=True)]
            if knapsack_prefix(caps, useful, capacity) < len(jobs):
                return self._bounded_counts(state, jobs, caps, capacity, fair, share, scores, width_scores)
        options = self.job_options(
            state, jobs, caps, fair, share, base_weights, scores=scores, width_scores=width_scores
        )
        chosen = knapsack_options(options, min(capacity, total))
        return {j.id: w for j, w in zip(jobs, chosen, strict=True)}

    def job_options(
        self,
        state: ClusterState,
        jobs: Sequence[JobView],
        caps: Sequence[int],
        fair: int,
        lend: bool | float,
        weights: np.ndarray | None,
        *,
        scores: Mapping[int, float] | None = None,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> Options:
        """The knapsack's options of ``jobs`` (:meth:`Options.of`: its ``weights`` times each job's
        ``exp(scores[job id])``), placement-aware at lending share ``lend`` if the policy is, then
        reshaped by the jobs' ``width_scores`` if any."""
        options = Options.of(jobs, fair, state.gpus_per_node, caps, self.linear_untrained, weights, scores)
        if not (self.placement_aware or width_scores):
            return options
        rooms = job_rooms(jobs, state, lend)  # the same for both: computed once
        if self.placement_aware:
            options = placement_aware_options(options, jobs, caps, fair, state, lend, self.linear_untrained, rooms)
        if width_scores:
            options = width_scored_options(
                options, jobs, caps, fair, state, lend, width_scores, self.linear_untrained, rooms
            )
        return options

    def _bounded_counts(
        self,
        state: ClusterState,
        jobs: list[JobView],
        caps: list[int],
        capacity: int,
        fair: int,
        lend: bool | float,
        scores: Mapping[int, float] | None = None,
        width_scores: Mapping[int, Sequence[float]] | None = None,
    ) -> dict[int, int]:
        """:meth:`propose_counts` when one programme over every job would pass
        :data:`MAX_KNAPSACK_CELLS`: passes over the jobs holding GPUs first, each within the bound,
        until the GPUs or the jobs run out (docs/policies.md §8.5); counts in ``jobs``' order."""
        counts = dict.fromkeys((j.id for j in jobs), 0)
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].replicas == 0)
        jobs, caps = [jobs[i] for i in order], [caps[i] for i in order]
        start, left = 0, capacity
        while start < len(jobs) and left > 0:
            widths = [min(cap, left) for cap in caps[start:]]
            useful = [min(w, j.rates.max_replicas) for w, j in zip(widths, jobs[start:], strict=True)]
            considered = knapsack_prefix(widths, useful, left)
            part = jobs[start : start + considered]
            if considered < len(widths):  # bounded: values beyond a job's useful width add nothing
                widths = useful
            widths = widths[:considered]
            weights = self.job_weights(part, fair, capacity)
            options = self.job_options(
                state, part, widths, fair, lend, weights, scores=scores, width_scores=width_scores
            )
            chosen = knapsack_options(options, min(left, sum(widths)))
            counts.update(zip((j.id for j in part), chosen, strict=True))
            start += considered
            left -= sum(chosen)
        return counts

    def place_proposal(self, state: ClusterState, counts: Mapping[int, int], lend: float | None = None) -> Allocation:
        """Best-fit placement of ``counts`` (jobs whose count is unchanged keep their GPUs) on the
        GPUs of lending share ``lend`` (None: the policy's own)."""
        if not counts:
            return Allocation({})
        state = self._lendable(state)
        order: dict[int, list[int]] | None = {} if self.relist_restarts else None
        capacity = state.training_capacity(lend=self.lend if lend is None else lend)
        placed = place_counts(state, counts, capacity, order=order)
        relist = frozenset(i for i, nodes in (order or {}).items() if nodes != sorted(nodes))
        return Allocation(placed, relist=relist)

    @staticmethod
    def _capacity_and_fair(state: ClusterState, lend: bool | float) -> tuple[int, int]:
        """The GPUs training may hold at lending share ``lend`` and the fair share of the active
        jobs, ``ceil(capacity / jobs)`` (1 without capacity); ``state`` has active jobs."""
        capacity = state.training_capacity_total(lend)
        return capacity, math.ceil(capacity / len(state.jobs)) if capacity > 0 else 1

    def _ranked_weights(self, state: ClusterState, fair: int, capacity: int) -> tuple[list[JobView], np.ndarray | None]:
        """``state``'s active jobs in priority order (:data:`~baselines.job_order.job_priority_key`) and their
        :meth:`job_weights` at ``fair`` and ``capacity``.

        Memoised for the latest state: the score action mode asks for them when it observes a
        state (:meth:`log_weights`) and again when it decodes the action taken on it; the weights
        are computed once, over the same jobs in the same order (hence the same floats).
        """
        memo = self._weights_memo
        if memo is None or memo[0] is not state:
            memo = self._weights_memo = (state, sorted(state.jobs, key=job_priority_key), {})
        jobs, by_width = memo[1], memo[2]
        key = (fair, capacity)
        if key not in by_width:
            by_width[key] = self.job_weights(jobs, fair, capacity)
        return jobs, by_width[key]

    def log_weights(self, state: ClusterState) -> dict[int, float]:
        """Each active job's knapsack log-weight relative to the heaviest job's (0 for all under
        ATS), at the fair share and capacity :meth:`propose_counts` uses (what the ``score``
        action mode observes as the prior)."""
        if not state.jobs:
            return {}
        state = self._lendable(state)
        capacity, fair = self._capacity_and_fair(state, self.lend)
        jobs, weights = self._ranked_weights(state, fair, capacity)
        if weights is None:
            return dict.fromkeys((job.id for job in jobs), 0.0)
        # Python floats: a state holds a few to a few tens of jobs, where numpy's per-call cost
        # is most of what four small array operations would cost
        logs = [math.log(weight) if weight > _TINY_WEIGHT else _LOG_TINY_WEIGHT for weight in weights.tolist()]
        top = max(logs)
        return {job.id: log - top for job, log in zip(jobs, logs, strict=True)}

    def job_weights(self, jobs: Sequence[JobView], fair: int, capacity: int) -> np.ndarray | None:
        """Each job's weight in the knapsack: ``max(T, 1) ** -srpt_power``, T its remaining time
        at its fair share in seconds, times the arrival tilt ``exp(arrival_tilt * u_j)`` (``u_j``
        from +1 for the earliest arrival among ``jobs`` to -1 for the latest), or None (all 1) for
        ATS (``capacity``, the GPUs training may hold, is for variants whose weights depend on it).

        T is the work of the epochs the job has not completed (its application's profile and its
        epoch, as the RL observation shows them; no ``remaining_work`` oracle) over its rate at
        ``fair`` GPUs on one node (:func:`~deepboot_env.sim.reclaim.fair_share_base`).
        """
        power, tilt = self.srpt_power, self.arrival_tilt
        weights = None
        if power != 0.0:
            weights = srpt_weights(jobs, fair, power)
        if tilt != 0.0 and len(jobs) > 1:
            # libm's exp, as the compiled decision (baselines.ats_loops) computes it
            factors = np.array([math.exp(tilt * rank) for rank in arrival_ranks(jobs).tolist()])
            weights = factors if weights is None else weights * factors
        return weights

    def job_caps(self, jobs: Sequence[JobView], capacity: int, fair: int) -> list[int]:
        """The most GPUs the knapsack may give each job: its cap, at most the whole ``capacity``
        (``fair`` is the fair share ``ceil(capacity / jobs)``; a variant may cap at it)."""
        # min(cap, capacity) in one pass, without a call per job: this runs over every active job
        # at every decision
        return [cap if (cap := job.max_replicas) < capacity else capacity for job in jobs]
