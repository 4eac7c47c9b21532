"""How large a score model's scores are: the sizes a random-jitter control of its own size draws.

    python -m agents.saved.score_sizes deepboot-score-v8 [--seeds 2]

A learned score model must beat its prior with random persistent scores of the same size (issue
31's control; :class:`baselines.jitter.JitteredAtsPolicy`'s ``sigma`` per job and ``width_sigma``
per width class, each drawn once per job). This plays the model deterministically, as ``ppo:``
does, on the first ``--seeds`` val seeds of every family under the benchmark's dynamics, and
measures over its decisions (each new action; the held action decoded again at later boundaries
is not one) and the jobs each action scores (its slot jobs):

- **per job**: the root mean square of each job's log-weight change over the prior, centred per
  decision (a factor shared by every job leaves the knapsack's choice as it is): ``sigma``;
- **per width class**: the root mean square of the width-class log-multipliers, not centred: they
  value a job's w-GPU option by exp(v[class(w)] - v[class(fair share)]) with the 1-GPU class at 0,
  so no shift they share cancels, and the control draws them uncentred too: ``width_sigma``.

A job the action leaves at zero counts as zero. ``deepboot-score-v5`` measures 0.047 and 0.054,
``deepboot-score-v6`` 0.131 and 0.145 (docs/history.md#score-v6).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import sim_config
from deepboot_env.env.action import ScoreCodec
from deepboot_env.env.observation import slot_jobs
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import ClusterState, checked_policy
from traces.families import FAMILIES, cached_scenario, split_seeds

DYNAMICS = "v1"
"""The dynamics of the measured episodes (the benchmark's)."""


@dataclass(frozen=True)
class ScoreSizes:
    """What :func:`score_sizes` measured.

    Attributes:
        per_job: RMS of the per-decision centred log-weight changes (a jitter control's ``sigma``).
        per_width_class: RMS of the width-class log-multipliers (``width_sigma``; 0 without width
            scores).
        decisions: the new actions measured.
    """

    per_job: float
    per_width_class: float
    decisions: int


class DecisionLog:
    """A score policy's ``on_decision`` hook: the held scores of each decision's slot jobs (the
    first ``max_jobs`` jobs) in its ``codec``."""

    def __init__(self, codec: ScoreCodec, max_jobs: int) -> None:
        self.codec, self.max_jobs = codec, max_jobs
        self.job_sums = [0.0, 0]
        """Sum of squared centred log-weight changes, and their count."""
        self.width_sums = [0.0, 0]
        """Sum of squared width log-multipliers, and their count."""
        self.decisions = 0

    def __call__(self, state: ClusterState) -> None:
        """Add the held scores of ``state``'s slot jobs (a state without jobs: no decision)."""
        codec = self.codec
        jobs = slot_jobs(state, self.max_jobs)
        if not jobs:
            return
        self.decisions += 1
        scores = np.array([codec.held.get(job.id, 0.0) for job in jobs])
        self.job_sums[0] += float(np.sum((scores - scores.mean()) ** 2))
        self.job_sums[1] += scores.size
        classes = codec.width_classes
        if classes:
            zero = (0.0,) * classes
            widths = np.array([codec.held_widths.get(job.id, zero) for job in jobs])
            self.width_sums[0] += float(np.sum(widths**2))
            self.width_sums[1] += widths.size

    def sizes(self) -> ScoreSizes:
        """The sizes so far (NaN per job before any decision)."""

        def rms(sums: list[float]) -> float:
            return math.sqrt(sums[0] / sums[1]) if sums[1] else math.nan

        widths = rms(self.width_sums) if self.width_sums[1] else 0.0
        return ScoreSizes(rms(self.job_sums), widths, self.decisions)


def score_sizes(model: str, scenarios: Iterable[tuple[str, int]]) -> ScoreSizes:
    """The score sizes of the score model at ``model`` (a path or a shipped short name) over the
    ``(family, seed)`` scenarios.

    Raises:
        ValueError: a model that is not a score model (one line); the loader's errors for a file
            that cannot be loaded.
    """
    from agents.saved.policy_adapter import load_agent_policy  # lazy: torch and SB3 are slow to import

    policy = load_agent_policy(model)
    if not isinstance(policy.codec, ScoreCodec):
        raise ValueError(f"{model}: not a score model (action_mode {policy.action_mode!r}): it has no scores to size")
    log = DecisionLog(policy.codec, policy.max_jobs)
    policy.on_decision = log
    played = checked_policy(policy)
    for family, seed in scenarios:
        scenario = cached_scenario(family, seed)
        run_episode(played, scenario.workload, scenario.configure(sim_config(dynamics=DYNAMICS)))
    return log.sizes()


def val_scenarios(seeds: int) -> list[tuple[str, int]]:
    """The first ``seeds`` val seeds of every family."""
    first = list(split_seeds("val")[:seeds])
    return [(family, seed) for family in FAMILIES for seed in first]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: prints the two sizes and the decisions they cover."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a score model zip, run folder or shipped short name (deepboot-score-v8)")
    parser.add_argument("--seeds", type=int, default=2, help="val seeds per family (default 2)")
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= 100:
        parser.error(f"--seeds must be 1 to 100, got {args.seeds}")
    try:
        sizes = score_sizes(args.model, val_scenarios(args.seeds))
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    print(f"per job (sigma): {sizes.per_job:.3f}")
    print(f"per width class (width_sigma): {sizes.per_width_class:.3f}")
    print(f"over {sizes.decisions:,} decisions on {args.seeds} val seeds of each of {len(FAMILIES)} families")
    return 0


if __name__ == "__main__":
    sys.exit(main())
