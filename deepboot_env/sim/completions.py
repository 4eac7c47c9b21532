"""Lazy TRAIN_DONE events: the training jobs' completions, projected only when they may be due.

Projecting a job's completion walks its remaining epochs, and most jobs are re-planned (a new
placement, a new speed) long before they complete, so :class:`CompletionSchedule` defers the
projection. At each change the training side (:class:`~deepboot_env.sim.training.TrainingJobs`,
which owns the schedule) hands it the job; the event's sequence number is reserved at once (so
the event sorts exactly as if it had been pushed then), but the projection waits until the
*horizon* (the end of the event run in progress or about to start: the next boundary, set by the
simulator) reaches the job's lower bound on its completion. Events of jobs re-planned since are
dropped: they would be stale.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepboot_env.sim.events import EventKind, EventQueue
from deepboot_env.sim.fork import clone_object
from deepboot_env.sim.jobs import ProjectionState, TrainingJob

_TRAIN_DONE = int(EventKind.TRAIN_DONE)


class CompletionSchedule:
    """The TRAIN_DONE events of one episode's training jobs.

    Args:
        jobs: every training job of the episode (indexed by job index).
        events: the simulator's event queue.

    Attributes:
        horizon: no deferred completion may be due by this time (see :meth:`extend_horizon`).
    """

    def __init__(self, jobs: Sequence[TrainingJob], events: EventQueue) -> None:
        self.jobs = jobs
        self.events = events
        self.horizon = 0.0
        self._deferred: dict[int, tuple[float, int, int, ProjectionState]] = {}
        """Job index -> (completion lower bound, reserved event sequence number, job version,
        job state) of TRAIN_DONE events not pushed yet."""

    def clone(self, jobs: Sequence[TrainingJob], events: EventQueue) -> CompletionSchedule:
        """An independent copy for the copies ``jobs`` and ``events`` (:mod:`deepboot_env.sim.fork`):
        the deferred events are copied (their entries are tuples, shared)."""
        new = clone_object(self, frozenset({"jobs", "events", "horizon", "_deferred"}))
        new.jobs = jobs
        new.events = events
        new._deferred = self._deferred.copy()
        return new

    def schedule(self, job: TrainingJob, now: float) -> None:
        """Schedule the TRAIN_DONE event of ``job`` (just changed at ``now``) at its projected
        completion: pushed now if the job may complete by the horizon, else deferred."""
        if job.replicas == 0 and job.completion is None:
            return  # time_of_completion() is None: nothing to schedule
        seq = self.events.reserve()
        bound = job.completion_lower_bound()
        if bound > self.horizon:
            self._deferred[job.index] = (bound, seq, job.version, job.projection_state())
            return
        t = job.time_of_completion()
        if t is not None:
            self.events.push_reserved(max(t, now), _TRAIN_DONE, seq, job.index, job.version)

    def extend_horizon(self, horizon: float, now: float) -> None:
        """Push the deferred TRAIN_DONE events of the jobs that may complete by ``horizon``, which
        becomes the horizon (the simulator is about to run every event up to it from ``now``).

        The bound a job was deferred with is loose (cheap to take at every change); before
        paying for the projection, :meth:`~deepboot_env.sim.jobs.TrainingJob.completion_bound_from`
        bounds it at the rates of the job's placement, and a job that still cannot complete by
        ``horizon`` stays deferred under that tighter bound (most do: they are re-planned long
        before they complete).
        """
        deferred = self._deferred
        due = [index for index, entry in deferred.items() if entry[0] <= horizon]
        for index in due:
            _, seq, version, state = deferred.pop(index)
            job = self.jobs[index]
            if job.version != version:
                continue
            tighter = job.completion_bound_from(state)
            if tighter > horizon:
                deferred[index] = (tighter, seq, version, state)
                continue
            t = job.completion_from(state)
            if t is not None:
                # t >= bound > every earlier horizon >= now: max(t, now) as at the deferral
                self.events.push_reserved(max(t, now), _TRAIN_DONE, seq, index, version)
        self.horizon = horizon
