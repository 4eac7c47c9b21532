"""Cached progress rates of one application: :class:`RateTable` (docs/goodput.md §8-§9).

A job's progress rate at each epoch and placement, with the batch chosen by the goodput model of
:mod:`deepboot_env.sim.goodput`, computed once per application and shared across simulators
(:func:`shared_rate_table`), with the helpers that turn rates into finish times and bounds.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from deepboot_env.sim.apps import AppProfile
from deepboot_env.sim.choices import validate_choice
from deepboot_env.sim.goodput import (
    evaluate,
    optimize,
)
from deepboot_env.sim.restart import Phase

BATCH_STATS: tuple[str, ...] = ("m0", "at_batch")
"""Gradient statistics the batch choice reads (``SimConfig.batch_stats``, :class:`RateTable`)."""


def validate_batch_stats(batch_stats: str) -> str:
    """``batch_stats`` if it is one of :data:`BATCH_STATS` (else ``ValueError``)."""
    return validate_choice("batch_stats", batch_stats, BATCH_STATS)


def epoch_suffix(thresholds: np.ndarray, column: Sequence[float]) -> np.ndarray:
    """Suffix sums of the per-epoch durations at a constant placement: epoch ``e`` lasts
    ``round((thresholds[e] - thresholds[e - 1]) / column[e])`` whole seconds (inf if its rate is 0);
    entry ``e`` of the result is the seconds a job starting epoch ``e`` needs, the last entry 0."""
    n = len(thresholds)
    durations = np.empty(n)
    prev = 0.0
    for e in range(n):
        rate = column[e]
        target = thresholds[e]
        durations[e] = round((target - prev) / rate) if rate > 0 else np.inf
        prev = float(target)
    return np.append(np.cumsum(durations[::-1])[::-1], 0.0)


def finish_time_from_suffix(suffix: Sequence[float], t: float, epoch: int) -> float | None:
    """Completion time of a job starting ``epoch`` at time ``t`` on a constant placement whose
    :func:`epoch_suffix` is ``suffix`` (None if some rate is 0). Adds the durations one by one
    when ``t`` is fractional, so the float result equals a step-by-step advance."""
    rest = suffix[epoch]
    if rest == math.inf:
        return None
    if float(t).is_integer():
        return t + rest
    for e in range(epoch, len(suffix) - 1):
        t += suffix[e] - suffix[e + 1]
    return t


def bounds_after(thresholds: Sequence[float], peak: float) -> list[float]:
    """Per epoch ``e``, a lower bound on the seconds needed from the end of ``e`` to finish the
    epochs after it at rates of at most ``peak``: each epoch's work at ``peak``, less half a
    second for the rounding of its end (inf if ``peak`` is 0)."""
    n = len(thresholds)
    bounds = [0.0] * n
    acc = 0.0
    for e in range(n - 1, 0, -1):
        if peak > 0:
            acc += max((thresholds[e] - thresholds[e - 1]) / peak - 0.5, 0.0)
        else:
            acc = math.inf  # no placement makes progress: the job never completes
        bounds[e - 1] = acc
    return bounds


def seconds_from(
    thresholds: Sequence[float], suffix: Sequence[float], rate: float, epoch: int, progress: float
) -> float:
    """A lower bound on the seconds a job at ``progress`` in ``epoch`` needs at ``rate`` (> 0)
    now and a placement of suffix sums ``suffix`` after (see :meth:`RateTable.min_seconds_from`)."""
    later_epochs = len(suffix) - 2 - epoch
    rest = max((thresholds[epoch] - progress) / rate - 0.5, 0.0)
    return rest + suffix[epoch + 1] - later_epochs


class ProgressRates(Protocol):
    """What advancing a job reads: per-epoch progress rates keyed by a placement *class* and the
    GPUs. :class:`RateTable` (the fitted truth; the class is the multi-node flag) and
    :class:`~deepboot_env.sim.measured.MeasuredRates` (the measured truth; the class is the
    placement's shape) provide it; see :class:`~deepboot_env.sim.jobs.TrainingJob`."""

    def placement_class(self, counts: list[int], multi_node: bool, /) -> Any:
        """The class of a placement of GPUs per node ``counts``."""

    def phase_class(self, phase: Phase, /) -> Any:
        """The class of the replicas that train during a restart phase."""

    def rate_column(self, cls: Any, replicas: int, /) -> list[float]:
        """Progress rate of every epoch at a class (0 for 0 GPUs)."""

    def epoch_suffix_list(self, cls: Any, replicas: int, /) -> list[float]:
        """Suffix sums of the rounded per-epoch durations at a class."""

    def finish_time(self, t: float, epoch: int, cls: Any, replicas: int, /) -> float | None:
        """Completion time from ``epoch`` at ``t`` at a constant class."""

    def min_seconds_after(self, epoch: int, placement_class: Any = None, /) -> float:
        """A lower bound on the seconds needed after ``epoch`` at a class."""

    def min_seconds_from(self, epoch: int, progress: float, cls: Any, replicas: int, /) -> float:
        """A lower bound on the seconds needed from ``progress`` at a class."""


class RateTable:
    """Cached progress rates of one application under one batch policy.

    ``rate(epoch, multi_node, replicas)`` is the true progress rate (M0-iterations/s) of the batch
    configuration the job chooses from its observed statistics; tables are computed once per
    epoch for K = 1..max_replicas with one vectorised :func:`optimize` call per node class.

    ``batch_stats`` is which gradient statistics the batch choice reads (:data:`BATCH_STATS`,
    docs/goodput.md §9.7): ``m0``, the epoch's statistics at the smallest traced batch M0 for
    every candidate; ``at_batch``, each candidate's statistics at its own batch, a stationary form
    of the originals' rule (they read the statistics at the batch the job last ran).
    """

    def __init__(
        self, app: AppProfile, max_replicas: int, fixed_batch: int | None = None, batch_stats: str = "m0"
    ) -> None:
        self.app = app
        self.max_replicas = max(int(max_replicas), 1)
        self.fixed_batch = fixed_batch if fixed_batch is not None else app.fixed_batch_size
        self.batch_stats = validate_batch_stats(batch_stats)
        self._rates: dict[int, np.ndarray] = {}
        self._goodputs: dict[int, np.ndarray] = {}
        self._batches: dict[int, np.ndarray] = {}
        self._choices: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """Per epoch the chosen (micro-batch m, accumulation steps s) by [multi-node flag, K]."""
        self._suffix: dict[tuple[int, int], np.ndarray] = {}
        self._suffix_lists: dict[tuple[int, int], list[float]] = {}
        self._curves: dict[tuple[int, tuple[int, ...], int], np.ndarray] = {}
        self._curve_values: dict[tuple[int, tuple[int, ...], int], tuple[float, ...]] = {}
        self._rows: dict[int, tuple[list[float], list[float]]] = {}
        """Per epoch, the two rows of its rate table as Python floats (fast scalar look-ups)."""
        self._columns: dict[tuple[bool, int], list[float]] = {}
        self._min_after: list[float] | None = None
        self._thresholds: list[float] = app.epoch_progress.tolist()
        """Progress at the end of each epoch, as Python floats."""

    def _table(self, epoch: int) -> np.ndarray:
        table = self._rates.get(epoch)
        if table is None:
            ks = np.arange(1, self.max_replicas + 1, dtype=float)
            table = np.zeros((2, self.max_replicas + 1))
            goodput = np.zeros((2, self.max_replicas + 1))
            batch = np.zeros((2, self.max_replicas + 1))
            local = np.zeros((2, self.max_replicas + 1))
            accum = np.zeros((2, self.max_replicas + 1))
            observed = self.app.observed_stats(epoch) if self.batch_stats == "m0" else None
            for flag in (0, 1):
                nodes = np.full_like(ks, 1.0 + flag)
                choice = optimize(self.app, nodes, ks, epoch=epoch, stats=observed, fixed_batch=self.fixed_batch)
                true_goodput, true_rate = evaluate(
                    self.app, nodes, ks, choice.local_bsz, choice.accum_steps, epoch=epoch
                )
                table[flag, 1:] = np.where(choice.goodput > 0, true_rate, 0.0)
                goodput[flag, 1:] = np.where(choice.goodput > 0, true_goodput, 0.0)
                batch[flag, 1:] = choice.total_batch
                local[flag, 1:] = choice.local_bsz
                accum[flag, 1:] = choice.accum_steps
            self._rates[epoch] = table
            self._goodputs[epoch] = goodput
            self._batches[epoch] = batch
            self._choices[epoch] = (local, accum)
        return table

    def finish_time(self, t: float, epoch: int, multi_node: bool, replicas: int) -> float | None:
        """Completion time of a job starting ``epoch`` at time ``t`` on a constant placement, with
        each epoch's duration rounded to whole seconds (None if some rate is 0); see
        :func:`finish_time_from_suffix`."""
        return finish_time_from_suffix(self.epoch_suffix_list(multi_node, replicas), t, epoch)

    def epoch_suffix_list(self, multi_node: bool, replicas: int) -> list[float]:
        """Suffix sums of the rounded per-epoch durations at a constant placement, as Python
        floats (cached): entry ``e`` is the seconds a job starting epoch ``e`` needs to finish
        (inf if some rate is 0); the last entry is 0."""
        key = (int(multi_node), min(int(replicas), self.max_replicas))
        suffix = self._suffix_lists.get(key)
        if suffix is None:
            suffix = self._suffix_lists[key] = self._epoch_suffix(multi_node, replicas).tolist()
        return suffix

    def _epoch_suffix(self, multi_node: bool, replicas: int) -> np.ndarray:
        """Suffix sums of the rounded per-epoch durations at a constant placement."""
        key = (int(multi_node), min(int(replicas), self.max_replicas))
        suffix = self._suffix.get(key)
        if suffix is None:
            thresholds = self.app.epoch_progress
            column = [self.rate(e, bool(key[0]), key[1]) for e in range(len(thresholds))]
            suffix = self._suffix[key] = epoch_suffix(thresholds, column)
        return suffix

    def min_seconds_after(self, epoch: int, placement_class: object = None) -> float:
        """A lower bound on the seconds any job of this table needs, from the end of ``epoch``,
        to finish the epochs after it: each epoch's work at the fastest rate of the whole table
        (any epoch, placement and GPU count), less half a second for the rounding of its end to
        whole seconds (an epoch that ends in several constant-rate stretches has only its last
        one rounded; :func:`bounds_after`). Computes the rates of every epoch once. The bound
        holds for every placement, so ``placement_class`` (the measured truth's argument) is
        not used."""
        bounds = self._min_after
        if bounds is None:
            n = len(self._thresholds)
            peak = max(float(self._table(e).max()) for e in range(n))
            bounds = self._min_after = bounds_after(self._thresholds, peak)
        return bounds[epoch]

    def min_seconds_from(self, epoch: int, progress: float, multi_node: bool, replicas: int) -> float:
        """A lower bound on the seconds a job at ``progress`` in ``epoch`` needs to finish if it
        trains at ``replicas`` GPUs from now on at a speed factor of at most 1: the rest of
        ``epoch`` at that rate, then the epochs after it at their rounded durations
        (:meth:`epoch_suffix_list`), each less half a second (an epoch that ends in several
        constant-rate stretches has only its last one rounded; a speed factor below 1 rounds a
        longer duration: it can end half a second earlier than the duration at speed 1 rounded
        up, hence one second per later epoch); inf if some rate is 0."""
        rate = self.rate(epoch, multi_node, replicas)
        if rate <= 0:
            return math.inf
        return seconds_from(self._thresholds, self.epoch_suffix_list(multi_node, replicas), rate, epoch, progress)

    def speedup_curve(self, epoch: int, points: tuple[int, ...], gpus_per_node: int) -> np.ndarray:
        """Rates at ``points`` GPUs packed on nodes of ``gpus_per_node``, divided by their peak
        (cached; a read-only array)."""
        key = (epoch, points, gpus_per_node)
        curve = self._curves.get(key)
        if curve is None:
            table = self._table(epoch)
            k_max = table.shape[1] - 1
            curve = np.array([table[int(k > gpus_per_node), min(k, k_max)] for k in points])
            peak = curve.max()
            curve = curve / peak if peak > 0 else np.zeros_like(curve)
            curve.flags.writeable = False
            self._curves[key] = curve
        return curve

    def speedup_values(self, epoch: int, points: tuple[int, ...], gpus_per_node: int) -> tuple[float, ...]:
        """:meth:`speedup_curve` as a tuple of Python floats (cached)."""
        key = (epoch, points, gpus_per_node)
        values = self._curve_values.get(key)
        if values is None:
            values = self._curve_values[key] = tuple(self.speedup_curve(epoch, points, gpus_per_node).tolist())
        return values

    def rate(self, epoch: int, multi_node: bool, replicas: int) -> float:
        """Progress rate at ``replicas`` GPUs (0 for 0 GPUs)."""
        if replicas <= 0:
            return 0.0
        rows = self._rows.get(epoch)
        if rows is None:
            table = self._table(epoch)
            rows = self._rows[epoch] = (table[0].tolist(), table[1].tolist())
        return rows[1 if multi_node else 0][min(int(replicas), self.max_replicas)]

    def rate_column(self, multi_node: bool, replicas: int) -> list[float]:
        """:meth:`rate` of every epoch at one placement, indexed by epoch (cached; shared: do not
        modify). A job keeps the column of its placement, so advancing it reads a list."""
        key = (multi_node, replicas)
        column = self._columns.get(key)
        if column is None:
            n = len(self.app.epoch_progress)
            column = self._columns[key] = [self.rate(e, multi_node, replicas) for e in range(n)]
        return column

    def rates(self, epoch: int) -> np.ndarray:
        """Array (2, max_replicas + 1): rate by [multi-node flag, K]; column 0 is 0."""
        return self._table(epoch)

    def goodputs(self, epoch: int) -> np.ndarray:
        """Array (2, max_replicas + 1): best goodput by [multi-node flag, K]."""
        self._table(epoch)
        return self._goodputs[epoch]

    def batch_columns(self, multi_node: bool, replicas: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per epoch, the batch configuration chosen at ``replicas`` (>= 1) GPUs: arrays of the
        micro-batch m, the accumulation steps s and whether the choice is feasible (rate > 0).
        The measured truth runs these choices at measured step times."""
        flag, k = int(multi_node), min(int(replicas), self.max_replicas)
        n = len(self._thresholds)
        m, s, ok = np.empty(n), np.empty(n), np.empty(n, dtype=bool)
        for e in range(n):
            rate = self._table(e)[flag, k]
            local, accum = self._choices[e]
            m[e], s[e], ok[e] = local[flag, k], accum[flag, k], rate > 0
        return m, s, ok

    def placement_class(self, counts: list[int], multi_node: bool) -> bool:
        """The key of a placement's rates in this table: only whether it spans several nodes
        (the measured truth's :meth:`~deepboot_env.sim.measured.MeasuredRates.placement_class`
        keys them by shape)."""
        return multi_node

    def phase_class(self, phase: Phase) -> bool:
        """:meth:`placement_class` of the replicas that train during a restart ``phase``."""
        return phase.multi_node

    def total_batch(self, epoch: int, multi_node: bool, replicas: int) -> float:
        """Total batch chosen at ``replicas`` GPUs (0 for 0 GPUs)."""
        if replicas <= 0:
            return 0.0
        self._table(epoch)
        return float(self._batches[epoch][int(multi_node), min(int(replicas), self.max_replicas)])


_SHARED_TABLES: weakref.WeakKeyDictionary[AppProfile, dict[tuple[int, int | None, str], RateTable]] = (
    weakref.WeakKeyDictionary()
)


def shared_rate_table(
    app: AppProfile, max_replicas: int, fixed_batch: int | None = None, batch_stats: str = "m0"
) -> RateTable:
    """The process-wide :class:`RateTable` of ``app`` (by identity) for ``max_replicas``,
    ``fixed_batch`` and ``batch_stats``: a table is a pure cache of deterministic values, so every
    simulator of the process shares it and an episode after the first computes no rate again."""
    tables = _SHARED_TABLES.setdefault(app, {})
    key = (max(int(max_replicas), 1), fixed_batch, batch_stats)
    table = tables.get(key)
    if table is None:
        table = tables[key] = RateTable(app, max_replicas, fixed_batch=fixed_batch, batch_stats=batch_stats)
    return table
