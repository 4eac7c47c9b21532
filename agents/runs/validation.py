"""One validator for every trainer: the same episodes, the same ratios, the same best-model rule, one file.

A trainer is whatever implements :class:`Trainer` (PPO through
:class:`~agents.runs.callbacks.WorkloadEvalCallback`, ES through
:class:`~agents.trainers.evolution.EsRun`): it says how far it has trained and saves its current
policy where a worker can load it, naming it as a policy (``ppo:<snapshot>``,
``priority:<snapshot>``). :meth:`Validator.validate` then runs it deterministically on the
validation episodes exactly as
``deepboot compare`` would (:func:`run_eval_episode` through :func:`deepboot_env.pool.run_pool`,
locally or on Ray), with the reference (``ats``) and the prior (the policy the trainer's actions
start from) on the same episodes, each run once and kept. It returns an :class:`Evaluation`:

* ``score``: the mean ratio of censored JCT to the reference's (the mean censored JCT without
  one); ``prior_ratio``: the same to the prior's;
* ``within``: whether the mean inference p99 stays within the reference's + the margin on every
  family; ``improved``: whether this policy replaces the best so far
  (:func:`~agents.runs.selection.replaces`, the one best-model rule);

and appends one row per episode to ``evaluations.csv`` in :data:`EVAL_COLUMNS`, the one schema.
The trainer writes its best model when ``improved``, and logs what it likes.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agents.runs.selection import NO_P99_EXCESS, P99_MARGIN_S, P99Excess, replaces, worst_p99_excess
from deepboot_env.atomic import append_csv
from deepboot_env.config import EnvConfig
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.pool import LOCAL, Backend, available_cpus, process_pool, run_pool, stop_pool
from deepboot_env.sim.metrics import EpisodeMetrics, censored_jct_mean
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import Workload

EVAL_COLUMNS: tuple[str, ...] = (
    "timesteps",
    "iteration",
    "workload",
    "seed",
    "train_jct_mean",
    "censored_jct_mean",
    "train_jct_p99",
    "makespan",
    "train_jobs_done",
    "train_jobs",
    "truncated",
    "infer_latency_mean",
    "infer_latency_p99",
    "infer_cold_starts",
    "lent_gpu_hours",
    "reclaims",
    "restarts",
    "repaired_gpus",
    "wall_seconds",
    "reference_censored_jct",
    "jct_ratio",
    "prior_censored_jct",
    "prior_ratio",
)
"""Columns of every trainer's ``evaluations.csv``, one row per validation episode. ``timesteps``
is what the trainer has trained on so far (PPO: env steps; ES: training episodes) and
``iteration`` its update count (PPO: rollouts; ES: generations). The reference's and the prior's
columns are empty without one."""


@runtime_checkable
class Trainer(Protocol):
    """What the run lifecycle asks of a trainer, whatever it trains."""

    def progress(self) -> tuple[int, int]:
        """(timesteps, iteration): what it has trained on so far (PPO: env steps; ES: training
        episodes) and its update count (PPO: rollouts; ES: generations)."""
        ...

    def snapshot(self, folder: Path) -> str:
        """Save the current policy in ``folder`` for the validation's workers; its policy name."""
        ...


Episode = tuple[int, int]
"""(index of the validation workload, policy seed) of one validation episode."""


@dataclass(frozen=True)
class EvalEpisode:
    """One evaluation episode for a worker: ``policy`` (a registry name, ``ppo:<snapshot>`` for
    the model) on ``workload`` under ``config`` with policy seed ``seed``; ``label`` names the
    workload in the progress bar."""

    policy: str
    label: str
    workload: Workload
    config: SimConfig
    seed: int
    max_decisions: int | None = None

    def describe(self, model: str) -> str:
        """``<policy> on <label> seed <seed>``, the policy ``model`` when it is the snapshot."""
        return f"{'model' if self.policy == model else self.policy} on {self.label} seed {self.seed}"


def run_eval_episode(episode: EvalEpisode) -> tuple[EpisodeMetrics, int]:
    """Run one :class:`EvalEpisode` (a worker's job): its metrics without the timeline, and the
    GPUs the policy's action decoding repaired (0 for a heuristic)."""
    policy = make_policy(episode.policy)
    metrics = run_episode(
        policy, episode.workload, episode.config, seed=episode.seed, max_decisions=episode.max_decisions
    )
    return replace(metrics, timeline=[]), int(policy.repaired_gpus)


@dataclass(frozen=True)
class Evaluation:
    """One validation of one policy (see the module docstring)."""

    rows: list[dict[str, Any]]
    score: float
    prior_ratio: float
    within: bool
    improved: bool
    p99_excess: P99Excess
    train_jct: float
    truncated: int


def column_mean(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    """The mean of column ``key``'s values that are finite numbers (an empty cell is none; NaN
    without one): an evaluation's score and each of its logged means."""
    values = []
    for row in rows:
        try:
            value = float(row[key])
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            values.append(value)
    return float(np.mean(values)) if values else math.nan


@dataclass
class Validator:
    """The validation episodes of a run and the best policy on them so far.

    Attributes:
        workloads: the validation workloads (label, scenario).
        env_config: the env's settings: its simulation settings and ``max_rounds`` apply to the
            episodes (cut after that many decisions, never before the last job arrived).
        n_episodes: episodes per validation (0: one per workload; more cycle through them with
            the next policy seed).
        csv_path: ``evaluations.csv`` (None: no file).
        reference: the policy ratios are taken against (None: the score is the mean censored JCT).
        prior: the policy the trainer starts from (None: no prior columns).
        p99_margin: seconds of inference p99 over the reference's allowed on every family (None:
            no condition).
        jobs: worker processes (0: one per available CPU; 1: in this process).
        backend: where the episodes run (local processes or Ray).
        progress: a progress bar per validation.
        best_score / best_within: the best policy so far (lower is better).
    """

    workloads: list[tuple[str, Scenario]]
    env_config: EnvConfig
    n_episodes: int = 0
    csv_path: Path | None = None
    reference: str | None = "ats"
    prior: str | None = None
    p99_margin: float | None = P99_MARGIN_S
    jobs: int = 1
    backend: Backend = LOCAL
    progress: bool = False
    best_score: float = math.inf
    best_within: bool = False
    _kept: dict[tuple[str, Episode], tuple[EpisodeMetrics, int]] = field(default_factory=dict, repr=False)
    _prefetched: dict[tuple[str, Episode], Future[tuple[EpisodeMetrics, int]]] = field(default_factory=dict, repr=False)
    _prefetcher: ProcessPoolExecutor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.workloads:
            raise ValueError("no validation workloads")
        self.n_episodes = int(self.n_episodes) or len(self.workloads)
        self.jobs = int(self.jobs) or available_cpus()
        if self.prior == self.reference:
            self.prior = None  # its ratio is the score

    @property
    def episodes(self) -> list[Episode]:
        """(workload index, policy seed) of each validation episode."""
        return [(k % len(self.workloads), k // len(self.workloads)) for k in range(self.n_episodes)]

    @property
    def baselines(self) -> list[str]:
        """The reference and the prior: run once per episode and kept."""
        return [name for name in (self.reference, self.prior) if name is not None]

    def task(self, policy: str, episode: Episode) -> EvalEpisode:
        """The worker's job of ``policy`` on ``episode``."""
        label, scenario = self.workloads[episode[0]]
        config = scenario.configure(self.env_config.sim)
        return EvalEpisode(policy, label, scenario.workload, config, episode[1], self.env_config.max_rounds)

    def prefetch_baselines(self) -> None:
        """Start the reference's and the prior's episodes (which do not depend on the trainer) in
        one background worker, so that they run beside training on a spare CPU instead of inside
        the first validation; not with one worker (``jobs`` 1: everything in this process)."""
        if self.jobs <= 1 or self._prefetcher is not None or self.backend != LOCAL:
            return
        todo = [(name, e) for name in self.baselines for e in self.episodes if (name, e) not in self._kept]
        if todo:
            self._prefetcher = process_pool(1)
            for key in todo:
                self._prefetched[key] = self._prefetcher.submit(run_eval_episode, self.task(*key))

    def validate(self, trainer: Trainer, label: str = "validation") -> Evaluation:
        """Validate ``trainer``'s current policy (its snapshot, in a folder removed afterwards)."""
        timesteps, iteration = trainer.progress()
        with tempfile.TemporaryDirectory(prefix="deepboot-val-") as tmp:
            return self.evaluate(trainer.snapshot(Path(tmp)), timesteps, iteration, label)

    def evaluate(self, policy: str, timesteps: int, iteration: int, label: str = "validation") -> Evaluation:
        """Run ``policy`` (and the baselines, the first time each episode needs them) on the
        validation episodes; its :class:`Evaluation`, the rows appended to :attr:`csv_path`."""
        episodes = self.episodes
        for key in [k for k in self._prefetched if k not in self._kept]:
            self._kept[key] = self._prefetched.pop(key).result()  # ready unless training was short
        missing = [(name, e) for name in self.baselines for e in episodes if (name, e) not in self._kept]
        tasks = [self.task(policy, e) for e in episodes] + [self.task(*key) for key in missing]
        outcomes = run_pool(
            run_eval_episode,
            tasks,
            self.jobs,
            self.progress,
            label=label,
            describe=lambda t: t.describe(policy),
            backend=self.backend,
        )
        self._kept.update(zip(missing, outcomes[len(episodes) :], strict=True))
        rows = [
            self._row(e, outcome, timesteps, iteration)
            for e, outcome in zip(episodes, outcomes[: len(episodes)], strict=True)
        ]
        return self._judge(rows)

    def _baseline_jct(self, name: str | None, episode: Episode) -> float | str:
        """The censored JCT of baseline ``name`` on ``episode`` ("" without it)."""
        if name is None:
            return ""
        return censored_jct_mean(self.workloads[episode[0]][1].workload, self._kept[name, episode][0])

    def _row(
        self, episode: Episode, outcome: tuple[EpisodeMetrics, int], timesteps: int, iteration: int
    ) -> dict[str, Any]:
        label, scenario = self.workloads[episode[0]]
        metrics, repaired = outcome
        censored = censored_jct_mean(scenario.workload, metrics)
        reference, prior = self._baseline_jct(self.reference, episode), self._baseline_jct(self.prior, episode)
        return {
            "timesteps": timesteps,
            "iteration": iteration,
            "workload": label,
            "seed": episode[1],
            "train_jct_mean": metrics.train_jct_mean,
            "censored_jct_mean": censored,
            "train_jct_p99": metrics.train_jct_p99,
            "makespan": metrics.makespan,
            "train_jobs_done": metrics.train_jobs_done,
            "train_jobs": metrics.train_jobs,
            "truncated": int(metrics.truncated),
            "infer_latency_mean": metrics.infer_latency_mean,
            "infer_latency_p99": metrics.infer_latency_p99,
            "infer_cold_starts": metrics.infer_cold_starts,
            "lent_gpu_hours": metrics.lent_gpu_seconds / 3600.0,
            "reclaims": metrics.reclaims,
            "restarts": metrics.restarts,
            "repaired_gpus": repaired,
            "wall_seconds": round(metrics.wall_seconds, 3),
            "reference_censored_jct": reference,
            "jct_ratio": censored / reference if isinstance(reference, float) and reference > 0 else "",
            "prior_censored_jct": prior,
            "prior_ratio": censored / prior if isinstance(prior, float) and prior > 0 else "",
        }

    def _judge(self, rows: list[dict[str, Any]]) -> Evaluation:
        """Score the rows, apply the best-model rule and write them."""
        score = column_mean(rows, "jct_ratio") if self.reference is not None else column_mean(rows, "censored_jct_mean")
        excess, within = self._p99_within(rows)
        improved = replaces(score, within, self.best_score, self.best_within)
        if improved:
            self.best_score, self.best_within = score, within
        if self.csv_path is not None:
            append_csv(self.csv_path, EVAL_COLUMNS, rows)
        truncated = sum(int(r["truncated"]) for r in rows)
        return Evaluation(
            rows,
            score,
            column_mean(rows, "prior_ratio"),
            within,
            improved,
            excess,
            column_mean(rows, "train_jct_mean"),
            truncated,
        )

    def _p99_within(self, rows: Sequence[dict[str, Any]]) -> tuple[P99Excess, bool]:
        """The worst family's mean inference p99 excess over the reference, and whether it is
        within the margin (always without a reference or a margin)."""
        if self.reference is None or self.p99_margin is None:
            return NO_P99_EXCESS, True
        families = [self.workloads[e[0]][1].family or self.workloads[e[0]][0] for e in self.episodes]
        excess = worst_p99_excess(
            (family, float(r["infer_latency_p99"]), self._kept[self.reference, e][0].infer_latency_p99)
            for family, e, r in zip(families, self.episodes, rows, strict=True)
        )
        return excess, excess.mean <= self.p99_margin

    def close(self) -> None:
        """Stop the baselines' background worker (episodes still running are dropped)."""
        if self._prefetcher is not None:
            stop_pool(self._prefetcher)
            self._prefetcher = None
            self._prefetched.clear()
