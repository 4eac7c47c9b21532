"""Training-job progress: epochs, placements, restarts, attained service.

A job moves through its application's epochs at the progress rate of its placement, read from
its *truth*: the fitted model's :class:`~deepboot_env.sim.rates.RateTable` (keyed by the
multi-node flag and the GPUs) or the measured
:class:`~deepboot_env.sim.measured.MeasuredRates` (keyed by the placement's shape); the key is
the placement's *class* (docs/goodput.md §9). Between changes the rate is constant except at
epoch ends, where the batch size is re-chosen; the time to reach an epoch end is rounded to whole
seconds as in the Pollux and DeepBoot simulators. The job is advanced lazily: only when its
placement changes, when a policy looks at it and when it completes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from deepboot_env.sim.apps import AppProfile
from deepboot_env.sim.choices import validate_choice
from deepboot_env.sim.fork import clone_object
from deepboot_env.sim.rates import ProgressRates, RateTable
from deepboot_env.sim.restart import Phase, RestartPlan
from deepboot_env.sim.workload import TrainingJobSpec

ProjectionState = tuple[float, int, float, Sequence[Phase], tuple[float, float] | None]
"""(time, epoch, progress, phases, anchor) of a job: see :meth:`TrainingJob.projection_state`."""


_FROZEN_ALLOCS: dict[tuple[int, ...], np.ndarray] = {}
_FROZEN_ALLOCS_MAX = 16384


def frozen_alloc(counts: list[int]) -> np.ndarray:
    """GPUs per node ``counts`` as a read-only int64 array, one per distinct placement (cached:
    jobs change placement at almost every step of a training episode, and building and freezing
    a small array costs more than the look-up; the cache is emptied when it grows large)."""
    key = tuple(counts)
    alloc = _FROZEN_ALLOCS.get(key)
    if alloc is None:
        if len(_FROZEN_ALLOCS) >= _FROZEN_ALLOCS_MAX:
            _FROZEN_ALLOCS.clear()
        alloc = _FROZEN_ALLOCS[key] = np.array(key, dtype=np.int64)
        alloc.flags.writeable = False
    return alloc


class TrainingJob:
    """Mutable state of one training job during an episode.

    Attributes:
        index: position in the workload (stable id).
        spec: the job as submitted.
        app: its application profile.
        rates: its progress-rate table (the fitted model: what schedulers see).
        truth: the rates it progresses at: ``rates`` itself (the fitted truth) or the measured
            :class:`~deepboot_env.sim.measured.MeasuredRates` of ``rates``.
        rate_class: the class of its placement in ``truth`` (the multi-node flag, or the shape).
        alloc: GPUs per node currently held (a read-only array shared by equal placements, see
            :func:`frozen_alloc`; views of the job share it too).
        epoch: epochs completed.
        progress: cumulative progress (M0-equivalent iterations).
        attained_service: GPU-seconds held so far (restart stalls included).
        num_restarts: placement changes after the first start.
        max_profiled: largest replica count the job has run with: counted when the allocation is
            made, or with ``cap_after_training`` once the job has trained at it (after the
            restart stall of the change; :meth:`profiled`).
        completion: completion time, or None.
        first_start: time it first received GPUs, or None.
        version: bumped at every placement change (invalidates scheduled completions).
        speed: co-location interference factor multiplying the progress rate (1 = undisturbed;
            set by the simulator from every job's placement, :mod:`deepboot_env.sim.interference`).
        epoch_rates: progress rate of each epoch at the current placement, at speed 1 (the
            ``rate_column`` of ``rate_class`` in ``truth``; a shared list, replaced at each change,
            never changed in place).
        epoch_ends: progress at the end of each epoch (``app.epoch_progress``; the last is
            ``target_progress``; shared between the jobs of an application: read only).
    """

    def __init__(
        self,
        index: int,
        spec: TrainingJobSpec,
        app: AppProfile,
        rates: RateTable,
        num_nodes: int,
        truth: ProgressRates | None = None,
        cap_after_training: bool = False,
    ) -> None:
        self.index = index
        self.cap_after_training = cap_after_training
        self.pending_profile: tuple[float, int] | None = None
        """With ``cap_after_training``: (time after which the job trains at its new size, that
        size), until :meth:`profiled` counts it."""
        self.spec = spec
        self.app = app
        self.rates = rates
        self.truth: ProgressRates = rates if truth is None else truth
        self.rate_class: Hashable = False
        self.counts = [0] * num_nodes
        """:attr:`alloc` as a list of ints (kept in step with it)."""
        self.alloc = frozen_alloc(self.counts)
        self.replicas = 0
        self.multi_node = False
        self.epoch = 0
        self.progress = 0.0
        self.attained_service = 0.0
        self.num_restarts = 0
        self.max_profiled = 0
        self.completion: float | None = None
        self.first_start: float | None = None
        self.version = 0
        self.speed = 1.0
        self._phases: Sequence[Phase] = ()
        self._anchor: tuple[float, float] | None = None
        self._t = spec.arrival
        self._settled = -1
        """Version at which the job was last advanced to ``_t`` (advancing again is then a no-op)."""
        self.epoch_rates: list[float] = self.truth.rate_column(False, 0)
        self.epoch_ends: list[float] = app.epoch_progress.tolist()
        self.target_progress = self.epoch_ends[-1]
        """Progress at which the job completes (``app.target_progress``)."""

    _FORK_FIELDS = frozenset(
        {
            "index",
            "cap_after_training",
            "pending_profile",
            "spec",
            "app",
            "rates",
            "truth",
            "rate_class",
            "counts",
            "alloc",
            "replicas",
            "multi_node",
            "epoch",
            "progress",
            "attained_service",
            "num_restarts",
            "max_profiled",
            "completion",
            "first_start",
            "version",
            "speed",
            "_phases",
            "_anchor",
            "_t",
            "_settled",
            "epoch_rates",
            "epoch_ends",
            "target_progress",
        }
    )
    """Every attribute of a job. None is changed in place: each is a number, a tuple, a shared
    table or a list that a change replaces (``counts``, ``_phases``, ``epoch_rates``), so a shallow
    copy is an independent one (:meth:`clone`)."""

    def clone(self) -> TrainingJob:
        """An independent copy of the job (:mod:`deepboot_env.sim.fork`)."""
        return clone_object(self, self._FORK_FIELDS)

    @property
    def done(self) -> bool:
        """Whether the job has completed."""
        return self.completion is not None

    @property
    def last_update(self) -> float:
        """Time up to which the job has been advanced."""
        return self._t

    @property
    def stalled_seconds_left(self) -> float:
        """Seconds of restart stall still ahead of the job."""
        phases = self._phases
        if not phases:
            return 0
        return sum(p.seconds for p in phases if p.replicas == 0)

    def progress_fraction(self) -> float:
        """Fraction of the target progress reached."""
        return min(self.progress / self.app.target_progress, 1.0)

    def advance(self, t: float) -> None:
        """Advance the job to time ``t`` (no-op if earlier or completed).

        Advancing to the current time still takes an epoch end due exactly now (a change of
        placement can leave a job whose remaining work rounds to zero seconds).
        """
        t_last = self._t
        if t < t_last:
            return
        if self.completion is not None:
            self._t = t
            return
        if t == t_last and self._settled == self.version:
            return  # already advanced to t since the last change: _run(t, t) would change nothing
        if self.replicas == 0:  # no GPU: only the clock moves, and no rate stretch is running
            self._anchor = None
            self._t = t
            self._settled = self.version
            return
        self.attained_service += self.replicas * (t - t_last)
        start = (t_last, self.epoch, self.progress, self._phases, self._anchor)  # projection_state(): the hottest call
        self.epoch, self.progress, self._phases, self._anchor, completion = _run(self, t, start)
        if completion is not None:
            self.completion = completion
        self._t = t
        self._settled = self.version

    def time_of_completion(self) -> float | None:
        """When the job completes if its placement does not change (None if it holds no GPU)."""
        if self.done:
            return self.completion
        if self.replicas == 0:
            return None
        return _run(self, math.inf, self.projection_state())[4]

    def projection_state(self) -> ProjectionState:
        """What advancing the job changes and its progress starts from (:func:`_run`: the time
        it was last advanced to, its epoch, progress, remaining phases and anchor); with
        :meth:`completion_from`, its projection can be computed later, exactly as it is now
        (while :attr:`version` is unchanged)."""
        return (self._t, self.epoch, self.progress, self._phases, self._anchor)

    def completion_from(self, state: ProjectionState) -> float | None:
        """:meth:`time_of_completion` of the job as it was when ``state`` was taken (same
        version: the same placement and speed)."""
        if self.done:
            return self.completion
        if self.replicas == 0:
            return None
        return _run(self, math.inf, state)[4]

    def completion_lower_bound(self) -> float:
        """A time before which the job cannot complete at its current version (a cheap bound on
        :meth:`time_of_completion`): its restart stalls plus the epochs after the current one at
        the fastest rate of any placement, each rounded down by half a second, minus a second for
        float rounding; -inf where no such bound is cheap (a speed factor above 1). While a phase
        trains on part of the GPUs (stop-free scaling) the job may complete inside it, so only
        the stalls before that phase count. :meth:`completion_bound_from` is tighter and dearer."""
        if self.speed > 1.0:
            return -math.inf
        truth = self.truth
        after = truth.min_seconds_after(self.epoch, self.rate_class)
        stall = 0.0
        for phase in self._phases:
            if phase.replicas:
                after = min(after, truth.min_seconds_after(self.epoch, truth.phase_class(phase)))
                break
            stall += phase.seconds
        return self._t + stall + after - 1.0

    def completion_bound_from(self, state: ProjectionState) -> float:
        """A lower bound on :meth:`completion_from` ``(state)``, much tighter than
        :meth:`completion_lower_bound`: the restart stalls, then the rest of the work at the
        rates of the job's placement (:meth:`~deepboot_env.sim.rates.RateTable.min_seconds_from`),
        minus a second for float rounding; -inf where no such bound is cheap (a speed factor
        above 1, or a phase that trains on part of the GPUs, as stop-free scaling does)."""
        if self.speed > 1.0:
            return -math.inf
        t0, epoch, progress, phases, _ = state
        stall = 0.0
        for phase in phases:
            if phase.replicas:
                return -math.inf
            stall += phase.seconds
        return t0 + stall + self.truth.min_seconds_from(epoch, progress, self.rate_class, self.replicas) - 1.0

    def apply_change(
        self, new_alloc: np.ndarray, plan: RestartPlan, now: float, counts: list[int] | None = None
    ) -> None:
        """Switch to ``new_alloc`` at ``now`` (the job must already be advanced to ``now``);
        ``counts`` is ``new_alloc.tolist()`` when the caller has it already."""
        counts = np.asarray(new_alloc, dtype=np.int64).tolist() if counts is None else list(counts)
        self.adopt_change(frozen_alloc(counts), counts, plan, now)

    def adopt_change(
        self, alloc: np.ndarray, counts: list[int], plan: RestartPlan, now: float, replicas: int | None = None
    ) -> None:
        """:meth:`apply_change` that takes ``alloc`` (``frozen_alloc(counts)``) and ``counts`` as
        they are: the caller hands ``counts`` over and keeps no reference to it. ``replicas`` is
        ``sum(counts)`` when the caller has it already."""
        self.alloc = alloc
        self.counts = counts
        self.replicas = replicas = sum(counts) if replicas is None else replicas
        self.multi_node = multi_node = len(counts) - counts.count(0) > 1
        truth = self.truth
        self.rate_class = cls = truth.placement_class(counts, multi_node)
        self.epoch_rates = truth.rate_column(cls, replicas)
        self._phases = plan.phases  # an immutable tuple: _run copies what it changes
        self._anchor = None
        if plan.counts_as_restart:
            self.num_restarts += 1
        if self.cap_after_training:
            self.profiled(now)  # a size trained at before this change counts
            self.pending_profile = None
        if replicas > 0:
            if self.first_start is None:
                self.first_start = now
            if replicas > self.max_profiled:
                if self.cap_after_training:
                    self.pending_profile = (now + sum(p.seconds for p in plan.phases), replicas)
                else:
                    self.max_profiled = replicas
        self.version += 1

    def profiled(self, now: float) -> int:
        """:attr:`max_profiled` at ``now``: with ``cap_after_training``, a larger size the job
        was given counts once it has trained at it, strictly after its restart stall ended
        (the originals profile a size in the step that trains at it)."""
        pending = self.pending_profile
        if pending is not None and now > pending[0]:
            self.max_profiled = max(self.max_profiled, pending[1])
            self.pending_profile = None
        return self.max_profiled

    def set_speed(self, speed: float) -> None:
        """Change the interference speed factor (the job must already be advanced to now); the
        current constant-rate stretch ends here, as at a placement change."""
        self.speed = float(speed)
        self._anchor = None
        self.version += 1


CAP_GROWTH: tuple[str, ...] = ("allocated", "trained")
"""When the exploration cap grows (``SimConfig.cap_growth``): at the allocation, or once trained."""


def validate_cap_growth(cap_growth: str) -> str:
    """``cap_growth`` if it is one of :data:`CAP_GROWTH` (else ``ValueError``)."""
    return validate_choice("cap_growth", cap_growth, CAP_GROWTH)


RunResult = tuple[int, float, Sequence[Phase], tuple[float, float] | None, float | None]
"""(epoch, progress, remaining phases, anchor, completion time or None) of a job after a run."""


def _run(job: TrainingJob, t1: float, start: ProjectionState) -> RunResult:
    """Progress of ``job`` from ``start`` (its :meth:`~TrainingJob.projection_state`, time ``t0``
    first) to ``t1`` without mutating it.

    Returns (epoch, progress, remaining phases, anchor, completion time or None). An epoch ends at
    the time its remaining work needs at the current rate, rounded to whole seconds from the moment
    the rate last changed (the *anchor*: time and progress when the current constant-rate stretch
    began, carried across calls), so the result does not depend on how often the job is advanced.
    Epoch ends that fall exactly on ``t1`` (including zero-length ones at the start of a stretch
    beginning at ``t1``) are taken, so a job advanced to its projected completion is done.

    :func:`_reference_run` is the definition; the commonest calls take one of four fast paths,
    each exactly the reference loop where its precondition holds (``tests/sim/test_fast_paths.py``).

    ``job`` holds GPUs: a job without any does not progress, and every caller
    (:meth:`TrainingJob.advance`, the completion projections) handles it before calling.
    """
    if start[3]:  # the preconditions exclude each other: the commonest is tried first
        fast = (
            _advance_after_stall(job, t1, start)
            or _within_stall(job, t1, start)
            or _project_after_stall(job, t1, start)
        )
    else:
        fast = _advance_within_epoch(job, t1, start)
    return fast or _reference_run(job, t1, start)


def _within_stall(job: TrainingJob, t1: float, start: ProjectionState) -> RunResult | None:
    """Fast path where ``[t0, t1]`` lies inside a restart stall heading the phases (else None).

    The reference loop's only segment is then the stall cut at ``t1``: nothing trains, the stall
    keeps its end (:func:`_cut_phase`) and no constant-rate stretch runs (anchor None). ``job`` is unused:
    every fast path takes what :func:`_run` takes."""
    t0, epoch, progress, phases, _ = start
    if not (phases and phases[0].replicas == 0 and (end := _phase_end(t0, phases[0])) > t1):
        return None
    rest = list(phases)
    rest[0] = _cut_phase(phases[0], end, t1)
    return epoch, progress, rest, None, None


def _phase_end(t: float, phase: Phase) -> float:
    """When ``phase``, running since ``t``, ends: its recorded end once it has been cut
    (:attr:`Phase.end`), else ``t`` plus its seconds."""
    end = phase.end
    return t + phase.seconds if end is None else end


def _cut_phase(phase: Phase, end: float, t1: float) -> Phase:
    """``phase``, ending at ``end``, cut at ``t1`` before it: the seconds left, and the same end."""
    return Phase(end - t1, phase.replicas, phase.multi_node, phase.counts, end)


def _project_after_stall(job: TrainingJob, t1: float, start: ProjectionState) -> RunResult | None:
    """Fast path for the projection after a change: ``t1`` infinite, speed 1, one stall (else None).

    After the stall the job trains at its placement to the end: the current epoch's end is
    rounded from the stall's end (a fresh stretch), and the epochs after it take their cached
    rounded durations (:meth:`~deepboot_env.sim.rates.RateTable.finish_time`), as in the
    reference loop's final stretch."""
    t0, epoch, progress, phases, _ = start
    if not (t1 == math.inf and job.speed == 1.0 and len(phases) == 1 and phases[0].replicas == 0):
        return None
    t = _phase_end(t0, phases[0])
    rate = job.epoch_rates[epoch]
    if rate <= 0:  # the job never completes at this placement
        return epoch, progress, [], None, None
    thresholds = job.epoch_ends
    target = thresholds[epoch]
    t = max(t + round((target - progress) / rate), t)
    epoch += 1
    if epoch >= len(thresholds):
        return epoch, float(target), [], None, t
    finish = job.truth.finish_time(t, epoch, job.rate_class, job.replicas)
    return len(thresholds), float(thresholds[-1]), [], None, finish


def _advance_after_stall(job: TrainingJob, t1: float, start: ProjectionState) -> RunResult | None:
    """Fast path for the advance after a change: one stall ending by a finite ``t1``, then no
    epoch end by ``t1`` (else None).

    The reference loop's second segment starts a stretch at the stall's end (the anchor) and
    cuts it at ``t1`` before the epoch ends: :func:`_advance_within_epoch` from the stall's end,
    with that stretch running."""
    t0, epoch, progress, phases, _ = start
    if not (t1 < math.inf and len(phases) == 1 and phases[0].replicas == 0):
        return None
    t_anchor = _phase_end(t0, phases[0])
    if t_anchor > t1:
        return None
    return _advance_within_epoch(job, t1, (t_anchor, epoch, progress, (), (t_anchor, progress)))


def _advance_within_epoch(job: TrainingJob, t1: float, start: ProjectionState) -> RunResult | None:
    """Fast path for an advance at a constant rate: no phases, a finite ``t1`` and no epoch end
    in ``(t0, t1]`` (else None).

    The reference loop's one segment continues the running stretch (or starts one at ``t0``)
    and cuts it at ``t1`` before the epoch ends."""
    t0, epoch, progress, phases, anchor = start
    if phases or t1 == math.inf:
        return None
    rate = job.epoch_rates[epoch] * job.speed
    if rate <= 0:
        return None
    target = job.epoch_ends[epoch]
    t_anchor, p_anchor = (t0, progress) if anchor is None else anchor
    if t_anchor + round((target - p_anchor) / rate) <= t1:
        return None  # an epoch ends by t1
    if t1 > t0:
        progress = min(p_anchor + rate * (t1 - t_anchor), float(target))
    return epoch, progress, [], (t_anchor, p_anchor), None


def _reference_run(job: TrainingJob, t1: float, start: ProjectionState, jump: bool = True) -> RunResult:
    """:func:`_run` by definition: segment by segment (each phase of ``start`` in turn, then the
    job's placement until ``t1``), each segment epoch by epoch (:func:`_run_segment`).

    A restart stall, the end of a phase and a segment without progress end the constant-rate
    stretch (the anchor); a phase ending exactly at ``t1`` still hands over to the next segment,
    so zero-length epoch ends due at ``t1`` are taken. ``jump`` lets a segment at speed 1 skip
    whole epochs at their cached rounded durations (exact: :func:`_whole_epochs`; a projection
    then reports only its completion time faithfully, see :func:`_run_segment`)."""
    t, epoch, progress, phases, anchor = start
    phases = list(phases)
    last_epoch = len(job.epoch_ends)
    while True:
        final = not phases
        if final:
            seg_end, k, cls, phase_ends = t1, job.replicas, job.rate_class, False
        else:
            seg_end, k, cls, phase_ends = _phase_segment(job.truth, t, t1, phases)
        if k > 0:
            projecting = final and t1 == math.inf
            epoch, progress, anchor, completion = _run_segment(
                job, k, cls, seg_end, t, epoch, progress, anchor, projecting and jump, jump
            )
            if epoch >= last_epoch:
                return epoch, progress, [], None, completion
        t = seg_end
        if k == 0 or phase_ends:
            anchor = None
        if t >= t1 and not phase_ends:
            return epoch, progress, phases, anchor, None


def _phase_segment(truth: ProgressRates, t: float, t1: float, phases: list[Phase]) -> tuple[float, int, Hashable, bool]:
    """The segment the first of ``phases`` gives from ``t``: (end, replicas, placement class,
    whether the phase ends by ``t1``). The phase is removed when it ends, else shortened to what
    is left after ``t1`` (``phases`` is changed in place)."""
    head = phases[0]
    end = _phase_end(t, head)
    seg_end = min(end, t1)
    k = head.replicas
    cls = truth.phase_class(head) if k else False
    if seg_end >= end:
        phases.pop(0)
        return seg_end, k, cls, True
    phases[0] = _cut_phase(head, end, seg_end)
    return seg_end, k, cls, False


def _run_segment(
    job: TrainingJob,
    k: int,
    cls: Hashable,
    seg_end: float,
    t: float,
    epoch: int,
    progress: float,
    anchor: tuple[float, float] | None,
    finish: bool,
    jump: bool,
) -> tuple[int, float, tuple[float, float] | None, float | None]:
    """Progress on ``k`` GPUs of placement class ``cls`` from ``t`` (at ``epoch``, ``progress``
    and ``anchor``) to ``seg_end``, one epoch end at a time: (epoch, progress, anchor, completion
    time or None); the job is complete when the epoch is past the last.

    With ``jump`` at speed 1, after an epoch end the epochs completed by ``seg_end`` are skipped at
    once (:func:`_whole_epochs`), and with ``finish`` (the last segment of a projection) the
    completion time is read from the cached durations (:meth:`ProgressRates.finish_time`): the
    epoch and progress are then the last ones even where a zero rate means no completion."""
    thresholds, truth, speed = job.epoch_ends, job.truth, job.speed
    last_epoch = len(thresholds)
    column = job.epoch_rates if k == job.replicas and cls == job.rate_class else truth.rate_column(cls, k)
    while True:
        rate = column[epoch] * speed
        if rate <= 0:
            return epoch, progress, None, None
        target = thresholds[epoch]
        if anchor is None:
            anchor = (t, progress)
        t_anchor, p_anchor = anchor
        t_cross = t_anchor + round((target - p_anchor) / rate)
        if t_cross > seg_end:
            if seg_end > t:
                progress = min(p_anchor + rate * (seg_end - t_anchor), float(target))
            return epoch, progress, anchor, None
        t = max(t_cross, t)
        progress = float(target)
        epoch += 1
        anchor = None
        if epoch >= last_epoch:
            return epoch, progress, None, t
        if jump and speed == 1.0:
            if finish:
                return last_epoch, float(thresholds[-1]), None, truth.finish_time(t, epoch, cls, k)
            skipped = _whole_epochs(truth, t, epoch, cls, k, seg_end)
            if skipped:
                t, epoch = skipped
                progress = float(thresholds[epoch - 1])
                if epoch >= last_epoch:
                    return epoch, progress, None, t


_EXACT = 2.0**53
"""Whole numbers of seconds below this are exact floats (their sums are exact too)."""


def _whole_epochs(
    truth: ProgressRates, t: float, epoch: int, cls: Hashable, k: int, seg_end: float
) -> tuple[float, int] | None:
    """Jump over the epochs a job that starts ``epoch`` at ``t`` on a constant placement
    (``k`` replicas of placement class ``cls`` in ``truth``, speed 1) completes by ``seg_end``:
    (time, epoch) after the last of them, or None if it completes none or ``t`` is not a whole
    number of seconds.

    Each epoch then lasts its rounded duration of :meth:`RateTable.epoch_suffix_list`, exactly as
    the step-by-step loop of :func:`_run` computes it; from a whole ``t`` every partial sum is a
    whole number below 2**53, so the sum of several durations at once is the same float.
    """
    suffix = truth.epoch_suffix_list(cls, k)
    rest = suffix[epoch]
    if not (float(t).is_integer() and t + rest < _EXACT):  # also false for an infinite rest
        return None
    last = len(suffix) - 1
    end = epoch
    while end < last and t + (rest - suffix[end + 1]) <= seg_end:
        end += 1
    if end == epoch:
        return None
    return t + (rest - suffix[end]), end
