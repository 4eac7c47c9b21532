"""What an episode has spent so far: GPU-seconds by state, waiting and job-seconds, the timeline.

:class:`EpisodeAccount` integrates the cluster ledger's GPUs per state
(:data:`~deepboot_env.sim.metrics.GPU_STATES`) and the inference pool's waiting requests over
simulated time (the simulator brings it up to date before anything changes them), samples one
timeline row per interval, and keeps the arrival and completion of every training job for
:meth:`EpisodeAccount.job_seconds` (the Gymnasium env's JCT reward).
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from deepboot_env.sim.cluster import ClusterLedger
from deepboot_env.sim.fork import clone_object
from deepboot_env.sim.metrics import GPU_STATES

if TYPE_CHECKING:
    from deepboot_env.sim.inference import InferencePool


class EpisodeAccount:
    """The running totals of one episode.

    Args:
        ledger: the cluster's GPU ledger (its GPUs per state are read at every event).
        pool: the inference pool (its waiting requests are counted).
        job_arrivals: arrival time of every training job, by job index.

    Attributes:
        gpu_seconds: GPU-seconds spent in each of :data:`~deepboot_env.sim.metrics.GPU_STATES`.
        waiting_seconds: request-seconds spent waiting for a GPU.
        timeline: one row per sampled interval: (time, mean GPUs per state over the interval
            ending then, waiting requests then, inference arrivals during the interval).
        job_arrivals: arrival time of every training job (an array, by job index).
        job_completions: completion time of every training job (inf while unfinished).
    """

    def __init__(self, ledger: ClusterLedger, pool: InferencePool, job_arrivals: Sequence[float]) -> None:
        self.ledger = ledger
        self.pool = pool
        self.gpu_seconds = [0.0] * len(GPU_STATES)
        self.waiting_seconds = 0.0
        self.timeline: list[tuple[float, ...]] = []
        self._t = 0.0
        """Time up to which everything is accounted."""
        self._sample_from: tuple[float, list[float]] = (0.0, self.gpu_seconds.copy())
        self.job_arrivals = np.array(job_arrivals, dtype=float)
        self.job_completions = np.full(len(job_arrivals), np.inf)
        self._done_spans: list[tuple[float, float]] = []
        """(completion, arrival) of the finished jobs, sorted (see :meth:`job_seconds`)."""

    _FORK_FIELDS = frozenset(
        {
            "ledger",
            "pool",
            "gpu_seconds",
            "waiting_seconds",
            "timeline",
            "_t",
            "_sample_from",
            "job_arrivals",
            "job_completions",
            "_done_spans",
        }
    )
    """Every attribute of an account (see :meth:`clone`)."""

    def clone(self, ledger: ClusterLedger, pool: InferencePool) -> EpisodeAccount:
        """An independent copy reading the copies ``ledger`` and ``pool``
        (:mod:`deepboot_env.sim.fork`): the lists and the completion times are copied, their
        rows (tuples) and the arrival times shared (``_sample_from`` is replaced, never changed)."""
        new = clone_object(self, self._FORK_FIELDS)
        new.ledger = ledger
        new.pool = pool
        new.gpu_seconds = self.gpu_seconds.copy()
        new.timeline = self.timeline.copy()
        new.job_completions = self.job_completions.copy()
        new._done_spans = self._done_spans.copy()
        return new

    def keep_jobs(self, count: int) -> None:
        """Forget the training jobs from index ``count`` on, jobs that have not arrived (nothing
        is accounted for them yet; :meth:`Simulator.forget_future
        <deepboot_env.sim.simulator.Simulator.forget_future>`). The arrays are replaced, not
        changed in place (a snapshot shares the arrival times)."""
        self.job_arrivals = self.job_arrivals[:count].copy()
        self.job_completions = self.job_completions[:count].copy()

    def account(self, t: float) -> None:
        """Account the GPUs and waiting requests held now for the time from the last call to ``t``."""
        dt = t - self._t
        if dt <= 0:
            return
        gs = self.gpu_seconds  # a list of floats: same IEEE operations as the array it replaced
        held = self.ledger.by_state
        gs[0] += dt * held[0]
        gs[1] += dt * held[1]
        gs[2] += dt * held[2]
        gs[3] += dt * held[3]
        gs[4] += dt * held[4]
        gs[5] += dt * held[5]
        self.waiting_seconds += dt * len(self.pool.waiting)
        self._t = t

    def close_interval(self, t: float, arrivals: int) -> None:
        """Account up to ``t`` and record one timeline row: the mean GPUs per state over the
        interval that ends at ``t``, waiting requests now, and the interval's ``arrivals``."""
        self.account(t)
        sample_t, sample = self._sample_from
        span = t - sample_t
        if span > 0:
            mean = [(now - then) / span for now, then in zip(self.gpu_seconds, sample, strict=True)]
        else:
            mean = [float(v) for v in self.ledger.by_state]
        self.timeline.append((t, *mean, len(self.pool.waiting), arrivals))
        self._sample_from = (t, self.gpu_seconds.copy())

    def job_done(self, index: int, arrival: float, completion: float) -> None:
        """Training job ``index``, arrived at ``arrival``, completed at ``completion``."""
        self.job_completions[index] = completion
        insort(self._done_spans, (completion, arrival))

    def job_seconds(self, t0: float, t1: float, unfinished: list[float]) -> float:
        """Training job-seconds spent in the system (arrived, not finished) during [t0, t1].

        Args:
            t0: start of the window.
            t1: end of the window.
            unfinished: arrival times of the unfinished jobs that arrive before ``t1`` (those
                arriving later count 0 and may be left out).
        """
        # Fast path: the jobs that can count (unfinished ones arriving before t1, those finished
        # after t0). Their terms are those of the array expression below; when every one is a
        # whole number of seconds the sum is exact in any order, so it equals numpy's.
        # An unfinished job's term is t1 - max(arrival, t0) (its completion counts as inf).
        terms = [t1 - max(arrival, t0) for arrival in unfinished]
        done = self._done_spans
        terms += [
            min(completion, t1) - max(arrival, t0) for completion, arrival in done[bisect_right(done, (t0, math.inf)) :]
        ]
        total = 0.0
        for term in terms:
            if term > 0:
                if not float(term).is_integer():
                    break
                total += term
        else:
            if total < 2.0**53:
                return float(total)
        lo = np.maximum(self.job_arrivals, t0)
        hi = np.minimum(self.job_completions, t1)
        return float(np.maximum(hi - lo, 0.0).sum())
