"""Training callbacks: scheduling metrics to TensorBoard, evaluation on held-out workloads.

* :class:`SchedMetricsCallback` logs, for every training episode that ends, the cluster metrics
  the env puts in ``info["episode_metrics"]`` under ``sched/*`` and the episode sums of the named
  reward terms under ``reward/*`` (means over the episodes that ended since the last dump).
* :class:`WorkloadEvalCallback` periodically runs the current model deterministically (with
  masks for MaskablePPO) through :func:`deepboot_env.evaluation.run_episode` on validation
  workloads, via :class:`~agents.policy_adapter.AgentPolicy`, i.e. exactly as
  ``deepboot compare`` runs it; it logs ``eval/*``, appends to ``evaluations.csv`` and saves
  ``best_model.zip`` when the mean validation JCT improves.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from deepboot_env.config import EnvConfig
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import Workload

SCHED_KEYS: tuple[str, ...] = (
    "train_jct_mean",
    "train_jct_p99",
    "makespan",
    "lent_gpu_hours",
    "reclaims",
    "restarts",
    "infer_latency_p99",
    "repaired_gpus",
    "train_jobs_done_frac",
    "truncated",
)
"""Tags logged under ``sched/`` per training episode."""

EVAL_COLUMNS: tuple[str, ...] = (
    "timesteps",
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
)
"""Columns of ``evaluations.csv`` (one row per evaluation episode); the last two are empty
without a reference policy."""


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def sched_values(metrics: dict[str, Any], repaired_gpus: float) -> dict[str, float]:
    """The ``sched/*`` values of one episode from its ``episode_metrics`` dict."""
    jobs = float(metrics.get("train_jobs", 0) or 0)
    out = {
        "train_jct_mean": metrics.get("train_jct_mean"),
        "train_jct_p99": metrics.get("train_jct_p99"),
        "makespan": metrics.get("makespan"),
        "lent_gpu_hours": float(metrics.get("lent_gpu_seconds", 0.0)) / 3600.0,
        "reclaims": metrics.get("reclaims"),
        "restarts": metrics.get("restarts"),
        "infer_latency_p99": metrics.get("infer_latency_p99"),
        "repaired_gpus": repaired_gpus,
        "train_jobs_done_frac": float(metrics.get("train_jobs_done", 0)) / jobs if jobs else None,
        "truncated": float(bool(metrics.get("truncated", False))),
    }
    return {k: v for k, v in ((k, _finite(v)) for k, v in out.items()) if v is not None}


class SchedMetricsCallback(BaseCallback):
    """Log scheduling metrics and reward terms of every finished training episode.

    Reads ``self.locals["infos"]`` at each step: sums ``reward_jct``, ``reward_infer`` and
    ``repaired_gpus`` per sub-env, and when an info carries ``episode_metrics`` (terminated or
    truncated) records ``sched/<key>`` for :data:`SCHED_KEYS` and ``reward/jct``,
    ``reward/infer``, ``reward/total`` with ``logger.record_mean``; SB3 writes them at the next
    dump (after each rollout). ``sched/episodes`` counts finished episodes.
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.episodes = 0
        self._jct = np.zeros(0)
        self._infer = np.zeros(0)
        self._repaired = np.zeros(0)
        self.last_episode: dict[str, float] = {}

    def _init_callback(self) -> None:
        n = self.training_env.num_envs if self.training_env is not None else 1
        self._jct = np.zeros(n)
        self._infer = np.zeros(n)
        self._repaired = np.zeros(n)

    def _on_step(self) -> bool:
        infos = self.locals.get("infos") or ()
        for i, info in enumerate(infos):
            if i >= len(self._jct):  # env count changed (not expected)
                self._init_callback()
            self._jct[i] += float(info.get("reward_jct", 0.0))
            self._infer[i] += float(info.get("reward_infer", 0.0))
            self._repaired[i] += float(info.get("repaired_gpus", 0.0))
            metrics = info.get("episode_metrics")
            if metrics is None:
                continue
            values = sched_values(metrics, self._repaired[i])
            for key, value in values.items():
                self.logger.record_mean(f"sched/{key}", value)
            self.logger.record_mean("reward/jct", float(self._jct[i]))
            self.logger.record_mean("reward/infer", float(self._infer[i]))
            self.logger.record_mean("reward/total", float(self._jct[i] + self._infer[i]))
            self.episodes += 1
            self.logger.record("sched/episodes", self.episodes)
            self.last_episode = {**values, "reward_jct": float(self._jct[i]), "reward_infer": float(self._infer[i])}
            self._jct[i] = self._infer[i] = self._repaired[i] = 0.0
        return True


def censored_jct_mean(workload: Workload, metrics: Any) -> float:
    """Mean JCT where unfinished jobs count (end of simulation - arrival): a lower bound of the
    true mean that penalises runs cut by the time limit; equals ``train_jct_mean`` when all
    jobs finished."""
    if not workload.jobs:
        return float("nan")
    done = metrics.jcts
    end = float(metrics.sim_end)
    total = sum(done[j.name] if j.name in done else max(end - j.arrival, 0.0) for j in workload.jobs)
    return total / len(workload.jobs)


class WorkloadEvalCallback(BaseCallback):
    """Evaluate the model on validation workloads every ``eval_freq`` timesteps.

    Args:
        workloads: ``(label, Workload)`` or ``(label, Scenario)`` pairs (a scenario runs on its
            cluster with its restart model); episode k runs workload ``k % len`` with policy seed
            ``k // len``.
        env_config: the training env's settings (its simulation settings, ``max_rounds`` and
            ``base_policy`` apply to the evaluation episodes).
        eval_freq: period in environment timesteps (all sub-envs together); <= 0 disables the
            periodic evaluation.
        n_episodes: episodes per evaluation (None or 0: one per workload).
        log_dir: folder of ``evaluations.csv`` and ``best_model.zip`` (None: no files).
        deterministic: most likely actions (True) or sampled.
        eval_at_end: evaluate once more when training ends, unless the last evaluation was at
            the final timestep.
        eval_at_start: evaluate before the first update too (a pretrained model's score, so
            ``best_model.zip`` is never worse than the starting point).
        reference: a registered policy name (``"ats"``) run once on every evaluation episode (same
            workload, settings and seed); each episode's score is then its censored JCT divided by
            the reference's (``jct_ratio``), and the model is selected by the mean ratio, so that
            every workload weighs the same whatever its JCT scale. None: selected by the mean
            censored JCT.

    Each episode is cut, as the env's ``max_rounds`` cuts training episodes, at ``last arrival (of a
    job or an inference request) + max_rounds x interval`` of simulated time (its metrics then say ``truncated``).

    Attributes:
        best_score: best score so far (lower is better): the mean ratio to the reference, or
            the mean censored JCT without one.
        history: ``(timesteps, mean train JCT, mean censored JCT)`` per evaluation.
        last_rows: the rows of the latest evaluation.
        eval_seconds: wall time spent evaluating so far.
    """

    def __init__(
        self,
        workloads: Sequence[tuple[str, Workload | Scenario]],
        env_config: EnvConfig,
        eval_freq: int,
        n_episodes: int | None = None,
        log_dir: str | Path | None = None,
        deterministic: bool = True,
        eval_at_end: bool = True,
        eval_at_start: bool = False,
        reference: str | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if not workloads:
            raise ValueError("no evaluation workloads")
        self.workloads = [(label, w if isinstance(w, Scenario) else Scenario(w)) for label, w in workloads]
        self.env_config = env_config
        self.eval_freq = int(eval_freq)
        self.n_episodes = int(n_episodes) if n_episodes else len(self.workloads)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.deterministic = deterministic
        self.eval_at_end = eval_at_end
        self.eval_at_start = eval_at_start
        self.reference = reference
        self._reference_jct: dict[tuple[int, int], float] = {}
        self.best_score = math.inf
        self.history: list[tuple[int, float, float]] = []
        self.last_rows: list[dict[str, Any]] = []
        self._last_eval = -1
        self.eval_seconds = 0.0
        self._next_eval = self.eval_freq

    @property
    def csv_path(self) -> Path | None:
        """``evaluations.csv`` in the log folder."""
        return self.log_dir / "evaluations.csv" if self.log_dir is not None else None

    @property
    def best_model_path(self) -> Path | None:
        """``best_model.zip`` in the log folder."""
        return self.log_dir / "best_model.zip" if self.log_dir is not None else None

    def _init_callback(self) -> None:
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        # on resume, count the period from where training restarts
        if self.eval_freq > 0:
            self._next_eval = self.num_timesteps + self.eval_freq

    def _config_for(self, scenario: Scenario) -> SimConfig:
        sim = scenario.configure(self.env_config.sim)
        workload = scenario.workload
        # every arrival (jobs and inference requests) must fall within the horizon
        last = max([j.arrival for j in workload.jobs] + [r.arrival for r in workload.requests], default=0.0)
        limit = last + self.env_config.max_rounds * sim.interval
        return replace(sim, max_time=min(sim.max_time, limit))

    def reference_jct(self, index: int, seed: int) -> float:
        """The reference policy's censored JCT on workload ``index`` with policy seed ``seed``
        (run once, then cached); NaN without a reference."""
        if self.reference is None:
            return math.nan
        key = (index, seed)
        if key not in self._reference_jct:
            from deepboot_env.evaluation import run_episode
            from deepboot_env.policy import make_policy

            scenario = self.workloads[index][1]
            metrics = run_episode(make_policy(self.reference), scenario.workload, self._config_for(scenario), seed=seed)
            self._reference_jct[key] = censored_jct_mean(scenario.workload, metrics)
        return self._reference_jct[key]

    def evaluate(self) -> list[dict[str, Any]]:
        """Run the evaluation episodes now; returns the rows (also logged and written)."""
        from agents.policy_adapter import AgentPolicy
        from deepboot_env.evaluation import run_episode

        start = time.perf_counter()
        policy = AgentPolicy(
            self.model, deterministic=self.deterministic, name="eval", base_policy=self.env_config.base_policy
        )
        rows = []
        for k in range(self.n_episodes):
            label, scenario = self.workloads[k % len(self.workloads)]
            workload = scenario.workload
            seed = k // len(self.workloads)
            reference = self.reference_jct(k % len(self.workloads), seed)
            t0 = time.perf_counter()
            metrics = run_episode(policy, workload, self._config_for(scenario), seed=seed)
            censored = censored_jct_mean(workload, metrics)
            rows.append(
                {
                    "timesteps": self.num_timesteps,
                    "workload": label,
                    "seed": seed,
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
                    "repaired_gpus": policy.repaired_gpus,
                    "wall_seconds": round(time.perf_counter() - t0, 3),
                    "reference_censored_jct": reference if self.reference is not None else "",
                    "jct_ratio": censored / reference if self.reference is not None and reference > 0 else "",
                }
            )
        self.eval_seconds += time.perf_counter() - start
        self._record(rows)
        return rows

    def _record(self, rows: list[dict[str, Any]]) -> None:
        self.last_rows = rows
        self._last_eval = self.num_timesteps

        def mean(key: str) -> float:
            vals = [float(r[key]) for r in rows if _finite(r[key]) is not None]
            return float(np.mean(vals)) if vals else float("nan")

        jct = mean("train_jct_mean")
        score = mean("jct_ratio") if self.reference is not None else mean("censored_jct_mean")
        self.history.append((self.num_timesteps, jct, score))
        for key in (
            "train_jct_mean",
            "censored_jct_mean",
            "train_jct_p99",
            "makespan",
            "infer_latency_p99",
            "lent_gpu_hours",
            "reclaims",
            "restarts",
            "repaired_gpus",
            "jct_ratio",
        ):
            value = mean(key)
            if math.isfinite(value):
                self.logger.record(f"eval/{key}", value)
        done = sum(int(r["train_jobs_done"]) for r in rows)
        total = sum(int(r["train_jobs"]) for r in rows)
        self.logger.record("eval/train_jobs_done_frac", done / total if total else 0.0)
        improved = math.isfinite(score) and score < self.best_score
        if improved:
            self.best_score = score
        self.logger.record("eval/best_score", self.best_score if math.isfinite(self.best_score) else score)
        if self.csv_path is not None:
            new = not self.csv_path.exists()
            with open(self.csv_path, "a", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(EVAL_COLUMNS))
                if new:
                    writer.writeheader()
                writer.writerows(rows)
        if improved and self.best_model_path is not None:
            self.model.save(self.best_model_path)
        if self.verbose >= 1:
            flag = " (new best)" if improved else ""
            measure = f"{score:.4f} x {self.reference}" if self.reference is not None else f"censored {score:,.0f} s"
            print(f"eval @ {self.num_timesteps} steps: val JCT mean {jct:,.0f} s, {measure}{flag}")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(self.num_timesteps)

    def _on_training_start(self) -> None:
        if self.eval_at_start:
            self.evaluate()

    def _on_step(self) -> bool:
        if self.eval_freq > 0 and self.num_timesteps >= self._next_eval:
            self.evaluate()
            while self._next_eval <= self.num_timesteps:
                self._next_eval += self.eval_freq
        return True

    def _on_training_end(self) -> None:
        if self.eval_at_end and self.eval_freq > 0 and self._last_eval != self.num_timesteps:
            self.evaluate()
