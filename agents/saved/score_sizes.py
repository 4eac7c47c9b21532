"""How large a score model's scores are: the sizes a random-jitter control of its own size draws.

    python -m agents.saved.score_sizes deepboot-score-v8 [--seeds 2]
    python -m agents.saved.score_sizes table:deepboot-table-v1

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
``deepboot-score-v6`` 0.131 and 0.145 (docs/history.md#score-v6). A held application table
(``table:<path>``) scores every job in the system at every boundary, so each boundary with jobs is
a decision and all its jobs are the decision's.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from agents.models.app_table import AppTablePolicy
from agents.saved.shipped import load_table_policy
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.config import sim_config
from deepboot_env.env.action import ScoreCodec
from deepboot_env.env.observation import slot_jobs
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import WIDTH_CLASSES, Allocation, ClusterState, JobView, checked_policy
from traces.families import FAMILIES, cached_scenario, val_scenarios

TABLE_PREFIX = "table"
"""The policy prefix of a held application table."""
ALL_JOBS = 2**62
"""A slot count past any workload's jobs (a table scores them all)."""
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
    first ``max_jobs`` jobs), ``score_of(job)`` and ``widths_of(job)`` (``width_classes`` of them)."""

    def __init__(
        self,
        score_of: Callable[[JobView], float],
        widths_of: Callable[[JobView], tuple[float, ...]],
        width_classes: int,
        max_jobs: int,
    ) -> None:
        self.score_of, self.widths_of, self.width_classes, self.max_jobs = score_of, widths_of, width_classes, max_jobs
        self.job_sums = [0.0, 0]
        """Sum of squared centred log-weight changes, and their count."""
        self.width_sums = [0.0, 0]
        """Sum of squared width log-multipliers, and their count."""
        self.decisions = 0

    def __call__(self, state: ClusterState) -> None:
        """Add the held scores of ``state``'s slot jobs (a state without jobs: no decision)."""
        jobs = slot_jobs(state, self.max_jobs)
        if not jobs:
            return
        self.decisions += 1
        scores = np.array([self.score_of(job) for job in jobs])
        self.job_sums[0] += float(np.sum((scores - scores.mean()) ** 2))
        self.job_sums[1] += scores.size
        if self.width_classes:
            widths = np.array([self.widths_of(job) for job in jobs])
            self.width_sums[0] += float(np.sum(widths**2))
            self.width_sums[1] += widths.size

    def sizes(self) -> ScoreSizes:
        """The sizes so far (NaN per job before any decision)."""

        def rms(sums: list[float]) -> float:
            return math.sqrt(sums[0] / sums[1]) if sums[1] else math.nan

        widths = rms(self.width_sums) if self.width_sums[1] else 0.0
        return ScoreSizes(rms(self.job_sums), widths, self.decisions)


class _LoggedTable(AppTablePolicy):
    """A held table that shows each decision's state to ``log`` (it decides in Python: the
    compiled decision has no state to show)."""

    @property
    def decides_on_arrays(self) -> bool:
        """Never: the log reads each decision's state."""
        return False

    def __init__(self, table: AppTablePolicy, log: Callable[[ClusterState], None]) -> None:
        super().__init__(table.values, table.prior_name, table.name)
        self.log = log

    def decide(self, state: ClusterState) -> Allocation:
        self.log(state)
        return super().decide(state)


def codec_log(codec: ScoreCodec, max_jobs: int) -> DecisionLog:
    """The log of a score model's decisions: the scores its ``codec`` holds for its slot jobs (a
    job it holds none for counts as zero)."""
    zero = (0.0,) * codec.width_classes
    return DecisionLog(
        lambda job: codec.held.get(job.id, 0.0),
        lambda job: codec.held_widths.get(job.id, zero),
        codec.width_classes,
        max_jobs,
    )


def table_log(table: AppTablePolicy) -> DecisionLog:
    """The log of a held table's decisions: every job's application row."""
    return DecisionLog(
        lambda job: table.app_scores[job.app], lambda job: table.app_widths[job.app], WIDTH_CLASSES, ALL_JOBS
    )


def _logged_model(model: str) -> tuple[object, DecisionLog]:
    """The policy ``model`` names, with a :class:`DecisionLog` of its decisions."""
    if model.startswith(f"{TABLE_PREFIX}:"):
        table = load_table_policy(model.removeprefix(f"{TABLE_PREFIX}:"))
        log = table_log(table)
        return _LoggedTable(table, log), log
    from agents.saved.policy_adapter import load_agent_policy  # lazy: torch and SB3 are slow to import

    policy = load_agent_policy(model)
    if not isinstance(policy.codec, ScoreCodec):
        raise ValueError(f"{model}: not a score model (action_mode {policy.action_mode!r}): it has no scores to size")
    log = codec_log(policy.codec, policy.max_jobs)
    policy.on_decision = log
    return policy, log


def score_sizes(model: str, scenarios: Iterable[tuple[str, int]]) -> ScoreSizes:
    """The score sizes of the score model at ``model`` (a path or a shipped short name, or
    ``table:<path or short name>``) over the ``(family, seed)`` scenarios.

    Raises:
        ValueError: a model that is not a score model (one line); the loader's errors for a file
            that cannot be loaded.
    """
    policy, log = _logged_model(model)
    played = checked_policy(policy)
    for family, seed in scenarios:
        scenario = cached_scenario(family, seed)
        run_episode(played, scenario.workload, scenario.configure(sim_config(dynamics=DYNAMICS)))
    return log.sizes()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: prints the two sizes and the decisions they cover."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "model",
        help="a score model zip, run folder or shipped short name (deepboot-score-v8), or table:<path or short name>",
    )
    parser.add_argument("--seeds", type=int, default=2, help="val seeds per family (default 2)")
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= 100:
        parser.error(f"--seeds must be 1 to 100, got {args.seeds}")
    try:
        sizes = score_sizes(args.model, val_scenarios(FAMILIES, args.seeds))
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    print(f"per job (sigma): {sizes.per_job:.3f}")
    print(f"per width class (width_sigma): {sizes.per_width_class:.3f}")
    print(f"over {sizes.decisions:,} decisions on {args.seeds} val seeds of each of {len(FAMILIES)} families")
    return 0


if __name__ == "__main__":
    sys.exit(main())
