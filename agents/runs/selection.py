"""Model selection on validation: the lowest JCT ratio to a reference, within an inference p99 margin.

A scheduler must shorten jobs *and* keep inference real-time: the project asks a shipped model for
a mean JCT below ``ats``'s with an inference p99 latency within ``ats``'s + :data:`P99_MARGIN_S` on
every family. A selection on the JCT ratio alone can trade the second for the first without anyone
seeing it (an ES generation chosen on validation JCT once came out 0.2 s past the margin on the
test seeds). So PPO's validation (:class:`~agents.runs.callbacks.WorkloadEvalCallback`) and the ES's
(:class:`~agents.trainers.evolution.EsRun`) compare each candidate's inference p99 with the reference's on
the same episodes, family by family, and :func:`replaces` prefers a candidate within the margin
to any outside it, then the lower JCT ratio.

The margin is on each family's *mean* excess (the acceptance's own measure), and one scenario's
tail can push a mean past it: :class:`P99Excess` carries that family's median excess beside it, so
that a log line can tell a tail (the mean outside, the median well inside) from a trend (both
outside). The selection stays on the mean.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from statistics import median
from typing import NamedTuple

P99_MARGIN_S = 5.0
"""How far a selected model's mean inference p99 latency may exceed the reference's on one family
(seconds): the project's acceptance margin."""


class P99Excess(NamedTuple):
    """The family (or group) whose candidate inference p99 exceeds the reference's most, on the mean."""

    mean: float
    """Mean over the group's episodes of candidate minus reference p99 (s); -inf without a group."""
    group: str
    """The group ("" without one)."""
    median: float
    """The same group's median excess (s): near the mean for a trend, far below it when one
    scenario's tail makes the mean."""
    episodes: int
    """The group's episodes with a finite excess."""


NO_P99_EXCESS = P99Excess(-math.inf, "", -math.inf, 0)
"""What :func:`worst_p99_excess` gives without a finite episode (and a validation before its first)."""


def worst_p99_excess(episodes: Iterable[tuple[str, float, float]]) -> P99Excess:
    """The largest mean excess of a candidate's inference p99 over the reference's, its group and
    that group's median excess.

    Args:
        episodes: ``(group, candidate p99, reference p99)`` per validation episode (the group: a
            workload family, or the workload's label). Episodes where either p99 is not finite
            are left out.

    Returns:
        The largest, over the groups, of the mean over the group's episodes of candidate minus
        reference (seconds), with that group, its median and its episode count;
        :data:`NO_P99_EXCESS` without a finite episode.
    """
    excess: dict[str, list[float]] = defaultdict(list)
    for group, candidate, reference in episodes:
        if math.isfinite(candidate) and math.isfinite(reference):
            excess[group].append(candidate - reference)
    means = {group: sum(values) / len(values) for group, values in excess.items()}
    if not means:
        return NO_P99_EXCESS
    group = max(means, key=lambda g: means[g])
    return P99Excess(means[group], group, median(excess[group]), len(excess[group]))


def replaces(score: float, within: bool, best: float | None, best_within: bool) -> bool:
    """Whether a candidate replaces the best model so far.

    Args:
        score: the candidate's validation score (lower is better; not finite: never selected).
        within: whether its inference p99 is within the margin on every group.
        best: the best model's score (None or not finite: there is none yet).
        best_within: whether the best model's p99 was within the margin.

    A candidate within the margin replaces any best outside it; one outside never replaces one
    within; otherwise the lower score wins.
    """
    if not math.isfinite(score):
        return False
    if best is None or not math.isfinite(best):
        return True
    if within != best_within:
        return within
    return score < best


def p99_verdict(excess: P99Excess, reference: str, margin: float) -> str:
    """The validation line's words for :func:`worst_p99_excess`'s ``excess``: "inference p99 +X s
    over REFERENCE's on GROUP (within|outside the M s margin)", and with three episodes or more in
    the group its median: "...; median +Y s over N)"."""
    verdict = "within" if excess.mean <= margin else "outside"
    spread = f"; median {excess.median:+.1f} s over {excess.episodes}" if excess.episodes >= 3 else ""
    return (
        f"inference p99 {excess.mean:+.1f} s over {reference}'s on {excess.group or '-'} "
        f"({verdict} the {margin:g} s margin{spread})"
    )
