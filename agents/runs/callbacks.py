"""Training callbacks: scheduling metrics to TensorBoard, evaluation on held-out workloads.

* :class:`SchedMetricsCallback` logs, after every rollout, the means over the rollout's steps of
  the reward terms and scheduling quantities the env puts in each step's ``info``
  (``reward/step_*``, ``sched/step_*``, from the first rollout on), and for every training episode
  that ends the cluster metrics of ``info["episode_metrics"]`` under ``sched/*`` and the episode
  sums of the reward terms under ``reward/*`` (means over the episodes that ended since the last
  dump).
* :class:`WorkloadEvalCallback` periodically runs the current model deterministically (with
  masks for MaskablePPO) through :func:`deepboot_env.evaluation.run_episode` on validation
  workloads, as ``ppo:<snapshot>``, i.e. exactly as ``deepboot compare`` runs it, in the same
  worker pool (:func:`deepboot_env.pool.run_pool`, with a progress bar); it logs
  ``eval/*``, appends to ``evaluations.csv`` and saves ``best_model.zip`` when the selection
  score (mean ratio of censored JCT to a reference policy's) improves.
* :class:`StopOnSignal` ends training at the next step once a SIGINT or SIGTERM came
  (:mod:`agents.runs.interrupt`); :class:`AtomicCheckpointCallback` saves checkpoints atomically.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import random
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, ProgressBarCallback

from agents.runs.selection import NO_P99_EXCESS, P99_MARGIN_S, p99_verdict
from agents.runs.validation import Evaluation, Validator, column_mean
from agents.saved.checkpoint import save_model
from agents.saved.policy_adapter import METADATA_FILE
from deepboot_env.config import EnvConfig
from deepboot_env.evaluation import run_episode
from deepboot_env.pool import process_pool, stop_pool
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.workload import Workload
from deepboot_env.stops import StopSignals, stop_requested
from deepboot_env.workload_sources import load_scenarios
from traces.families import cached_scenario

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

STEP_KEYS: dict[str, str] = {
    "reward/step_jct": "reward_jct",
    "reward/step_infer": "reward_infer",
    "sched/step_active_jobs": "active_jobs",
    "sched/step_repaired_gpus": "repaired_gpus",
}
"""Tags logged per rollout (mean over its steps and sub-envs) and the step ``info`` key of each;
``reward/step_total`` is the sum of the two reward terms. ``reward_jct`` is minus the training
job-seconds of the step over ``interval x jct_scale`` and ``active_jobs`` the training jobs in the
system at the decision: by Little's law their means move with the mean JCT."""

EVAL_MEANS: tuple[str, ...] = (
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
    "prior_ratio",
)
"""Columns of ``evaluations.csv`` whose mean over an evaluation's episodes is logged as ``eval/<column>``."""

PRIOR_MODES: tuple[str, ...] = ("score", "residual")
"""Action modes whose actions start from the env's base policy: that policy is the run's prior."""


@contextlib.contextmanager
def kept_global_generators() -> Iterator[None]:
    """Python's, numpy's and torch's global generators (CUDA's where there is one) as they were
    before the block: SB3 seeds them all when it loads a model, and training draws from them."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


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


def reference_jct_mean(policy: str, scenario_key: Mapping[str, Any], config: EnvConfig) -> float:
    """``policy``'s mean JCT on the scenario an env's ``episode_scenario`` names (a family's seed,
    or a named workload), under the simulation settings of ``config`` (the scenario's cluster and
    restart model applied): the reference of a training episode's ratio."""
    family = str(scenario_key.get("family") or "")
    if family:
        scenario = cached_scenario(family, int(scenario_key["seed"]))
    else:
        scenario = load_scenarios(str(scenario_key["workload"]))[0]
    return run_episode(policy, scenario.workload, scenario.configure(config.sim)).train_jct_mean


class TrainingRatios:
    """Each finished training episode's mean JCT over a reference policy's on the same scenario,
    the reference run in one background process and cached per scenario (off the training loop:
    a ratio is logged when its reference is ready, a few steps later).

    Args:
        config: the training env's settings.
        reference: the reference policy (a registry name).
    """

    def __init__(self, config: EnvConfig, reference: str = "ats") -> None:
        self.config = config
        self.reference = reference
        self._references: dict[tuple[str, int, str], Future[float]] = {}
        """The reference's mean JCT per scenario, computed or on its way (one run per scenario)."""
        self._queued: list[tuple[tuple[str, int, str], float]] = []
        """Finished episodes whose ratio is not logged yet: (scenario, their mean JCT)."""
        self._pool: ProcessPoolExecutor | None = None

    def add(self, scenario_key: Mapping[str, Any], jct_mean: float) -> None:
        """Queue one finished episode's mean JCT on ``scenario_key``."""
        key = (str(scenario_key.get("family") or ""), int(scenario_key.get("seed", -1)), str(scenario_key["workload"]))
        if key not in self._references:
            if self._pool is None:
                self._pool = process_pool(1, multiprocessing.get_context("spawn"))
            self._references[key] = self._pool.submit(
                reference_jct_mean, self.reference, dict(scenario_key), self.config
            )
        self._queued.append((key, jct_mean))

    def ready(self) -> list[float]:
        """The ratios whose reference has been computed since the last call."""
        out, still = [], []
        for key, jct in self._queued:
            reference = self._references[key]
            if reference.done():
                out.append(jct / reference.result())
            else:
                still.append((key, jct))
        self._queued = still
        return out

    def finish(self, timeout_s: float = 120.0) -> list[float]:
        """The ratios still owed, waiting up to ``timeout_s`` for their references (not after a
        SIGINT or SIGTERM: :func:`deepboot_env.stops.stop_requested`); then stop."""
        if not stop_requested():
            wait([self._references[key] for key, _ in self._queued], timeout=timeout_s)
        out = self.ready()
        self.close()
        return out

    def close(self) -> None:
        """Stop the background process (references still running are dropped)."""
        if self._pool is not None:
            stop_pool(self._pool)
            self._pool = None


class SchedMetricsCallback(BaseCallback):
    """Log reward terms and scheduling metrics per rollout and per finished training episode.

    Reads ``self.locals["infos"]`` at each step. Per rollout: the mean of every
    :data:`STEP_KEYS` info value over the rollout's steps, recorded at the rollout's end (SB3
    writes it right after, at the rollout's last timestep), so a run shows them from its first
    rollout although its episodes last thousands of decisions. Per episode: sums ``reward_jct``,
    ``reward_infer`` and ``repaired_gpus`` per sub-env, and when an info carries
    ``episode_metrics`` (terminated or truncated) records ``sched/<key>`` for :data:`SCHED_KEYS`
    and ``reward/jct``, ``reward/infer``, ``reward/total`` with ``logger.record_mean``.
    ``sched/episodes`` counts finished episodes.

    The question a training run asks, "is the sampled policy better than ATS yet?", gets its own
    curves from the first episodes on: ``sched/jct_ratio_ats``, each finished episode's mean JCT
    over ATS's on the same scenario (:class:`TrainingRatios`, given ``config``), and with
    ``relative_reward`` ``sched/jct_ratio_base``, over the base policy's (the env's cached
    reference episode).
    """

    def __init__(self, verbose: int = 0, config: EnvConfig | None = None, reference: str = "ats") -> None:
        super().__init__(verbose)
        self.ratios = TrainingRatios(config, reference) if config is not None else None
        self.episodes = 0
        self.rollouts = 0
        self._jct = np.zeros(0)
        self._infer = np.zeros(0)
        self._repaired = np.zeros(0)
        self._step_sums = dict.fromkeys(STEP_KEYS, 0.0)
        self._steps = 0
        self.last_episode: dict[str, float] = {}
        self.last_rollout: dict[str, float] = {}

    def _init_callback(self) -> None:
        n = self.training_env.num_envs if self.training_env is not None else 1
        self._jct = np.zeros(n)
        self._infer = np.zeros(n)
        self._repaired = np.zeros(n)

    def _on_rollout_start(self) -> None:
        self._step_sums = dict.fromkeys(STEP_KEYS, 0.0)
        self._steps = 0

    def _on_rollout_end(self) -> None:
        if not self._steps:
            return
        means = {tag: total / self._steps for tag, total in self._step_sums.items()}
        means["reward/step_total"] = means["reward/step_jct"] + means["reward/step_infer"]
        for tag, value in means.items():
            self.logger.record(tag, value)
        self.rollouts += 1
        self.last_rollout = means

    def _on_step(self) -> bool:
        infos = self.locals.get("infos") or ()
        for i, info in enumerate(infos):
            if i >= len(self._jct):  # env count changed (not expected)
                self._init_callback()
            for tag, key in STEP_KEYS.items():
                self._step_sums[tag] += float(info.get(key, 0.0))
            self._steps += 1
            self._jct[i] += float(info.get("reward_jct", 0.0))
            self._infer[i] += float(info.get("reward_infer", 0.0))
            self._repaired[i] += float(info.get("repaired_gpus", 0.0))
            metrics = info.get("episode_metrics")
            if metrics is None:
                continue
            self._episode_ratios(info, metrics)
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
        if self.ratios is not None:
            for ratio in self.ratios.ready():
                self.logger.record_mean("sched/jct_ratio_ats", ratio)
        return True

    def _episode_ratios(self, info: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
        """Queue (or log) the finished episode's ratios to ATS and to the base policy; a
        truncated episode has no comparable mean JCT and is skipped."""
        jct = _finite(metrics.get("train_jct_mean"))
        if jct is None or metrics.get("truncated"):
            return
        base = _finite(info.get("reference_jct_mean"))
        if base:
            self.logger.record_mean("sched/jct_ratio_base", jct / base)
        if self.ratios is not None and "episode_scenario" in info:
            self.ratios.add(info["episode_scenario"], jct)

    def _on_training_end(self) -> None:
        if self.ratios is not None:
            for ratio in self.ratios.finish():
                self.logger.record_mean("sched/jct_ratio_ats", ratio)


class AtomicCheckpointCallback(CheckpointCallback):
    """SB3's :class:`CheckpointCallback` (``<save_path>/<prefix>_<steps>_steps.zip`` every
    ``save_freq`` calls) whose models are written with :func:`save_model` (no replay buffer or
    VecNormalize statistics: PPO here has neither)."""

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            save_model(self.model, self._checkpoint_path(extension="zip"))
        return True


class WorkloadEvalCallback(BaseCallback):
    """Validate the model every ``eval_freq`` timesteps through the run's
    :class:`~agents.runs.validation.Validator` (the one every trainer uses).

    Args:
        workloads: ``(label, Workload)`` or ``(label, Scenario)`` pairs (a scenario runs on its
            cluster with its restart model); episode k runs workload ``k % len`` with policy seed
            ``k // len``.
        env_config: the training env's settings (its simulation settings, ``max_rounds`` and
            ``base_policy`` apply to the evaluation episodes; the base policy of a score or
            residual env is the prior the ``prior_ratio`` columns compare with).
        eval_freq: period in environment timesteps (all sub-envs together); <= 0 disables the
            periodic evaluation.
        n_episodes: episodes per evaluation (None or 0: one per workload).
        log_dir: folder of ``evaluations.csv`` and ``best_model.zip`` (None: no files).
        eval_at_end: evaluate once more when training ends, unless the last evaluation was at
            the final timestep.
        eval_at_start: evaluate before the first update too (a pretrained model's score, so
            ``best_model.zip`` is never worse than the starting point).
        reference: a registered policy name (``"ats"``) run once on every evaluation episode; the
            model is selected by the mean ratio of censored JCT to it, preferring models whose
            mean inference p99 is within the reference's + ``p99_margin`` on every family
            (:mod:`agents.runs.selection`). None: selected by the mean censored JCT.
        p99_margin: seconds (see ``reference``; None: no p99 condition).
        jobs: worker processes for the episodes (0 or None: one per available CPU; 1: in this
            process). Training waits meanwhile, so the workers have the CPUs to themselves.
        progress: show a progress bar (one step per episode) on stderr.
        on_evaluation: called after each evaluation with the timesteps and the score (a Ray
            Tune trial reports it: :mod:`agents.trainers.sweep`).

    The model runs as ``ppo:<snapshot>`` (a copy saved for the evaluation, with the env's base
    policy), deterministically, as ``deepboot compare`` runs it. Each episode is cut where the
    env's ``max_rounds`` cuts training episodes, but never before the last job has arrived, so
    that every job counts in the censored JCT.

    Attributes:
        validator: the episodes, the baselines' results and the best score so far.
        p99_excess: the latest evaluation's largest mean p99 excess over the reference on one family.
        history: ``(timesteps, mean train JCT, score)`` per evaluation.
        eval_seconds: wall time spent evaluating so far.
    """

    def __init__(
        self,
        workloads: Sequence[tuple[str, Workload | Scenario]],
        env_config: EnvConfig,
        eval_freq: int,
        n_episodes: int | None = None,
        log_dir: str | Path | None = None,
        eval_at_end: bool = True,
        eval_at_start: bool = False,
        reference: str | None = None,
        jobs: int | None = 1,
        progress: bool = False,
        verbose: int = 0,
        on_evaluation: Callable[[int, float], None] | None = None,
        p99_margin: float | None = P99_MARGIN_S,
    ) -> None:
        super().__init__(verbose)
        self.on_evaluation = on_evaluation
        self.log_dir = Path(log_dir) if log_dir is not None else None
        prior = env_config.base_policy if env_config.action_mode in PRIOR_MODES else None
        self.validator = Validator(
            [(label, w if isinstance(w, Scenario) else Scenario(w)) for label, w in workloads],
            env_config,
            n_episodes=n_episodes or 0,
            csv_path=self.log_dir / "evaluations.csv" if self.log_dir is not None else None,
            reference=reference,
            prior=prior,
            p99_margin=p99_margin,
            jobs=jobs or 0,
            progress=progress,
        )
        self.env_config = env_config
        self.eval_freq = int(eval_freq)
        self.eval_at_end = eval_at_end
        self.eval_at_start = eval_at_start
        self.reference = reference
        self.p99_margin = p99_margin
        self.p99_excess = NO_P99_EXCESS
        self.history: list[tuple[int, float, float]] = []
        self._last_eval = -1
        self.eval_seconds = 0.0
        self._next_eval = self.eval_freq

    @property
    def best_score(self) -> float:
        """The best score so far (lower is better; inf before the first evaluation)."""
        return self.validator.best_score

    @property
    def best_within(self) -> bool:
        """Whether the best model's inference p99 was within the margin."""
        return self.validator.best_within

    @property
    def best_model_path(self) -> Path | None:
        """``best_model.zip`` in the log folder."""
        return self.log_dir / "best_model.zip" if self.log_dir is not None else None

    @property
    def selected_by(self) -> str:
        """What the score is, in words."""
        return f"mean censored JCT / {self.reference}'s" if self.reference else "mean censored JCT (s)"

    def _init_callback(self) -> None:
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        # on resume, count the period from where training restarts
        if self.eval_freq > 0:
            self._next_eval = self.num_timesteps + self.eval_freq

    def progress(self) -> tuple[int, int]:
        """(env steps, rollouts trained on) so far (:class:`~agents.runs.validation.Trainer`)."""
        return self.num_timesteps, getattr(self.model, "_n_updates", 0) // max(1, getattr(self.model, "n_epochs", 1))

    def snapshot(self, folder: Path) -> str:
        """Save the model to ``folder`` for the workers; its ``ppo:`` policy name
        (:class:`~agents.runs.validation.Trainer`)."""
        path = folder / "model.zip"
        save_model(self.model, path)
        with zipfile.ZipFile(path, "a") as zf:
            zf.writestr(METADATA_FILE, json.dumps({"env_kwargs": {"base_policy": self.env_config.base_policy}}))
        return f"ppo:{path}"

    def evaluate(self) -> Evaluation:
        """Validate the model now; its :class:`~agents.runs.validation.Evaluation` (also logged
        and written)."""
        start = time.perf_counter()
        threads = torch.get_num_threads()  # loading ppo:<path> in this process sets 1
        # ... and seeds the global generators with the run's seed: training goes on as if the
        # episodes had run in workers, whatever --eval-jobs says
        with kept_global_generators():
            try:
                evaluation = self.validator.validate(self, f"eval @ {self.num_timesteps:,}")
            finally:
                torch.set_num_threads(threads)
        seconds = time.perf_counter() - start
        self.eval_seconds += seconds
        self._record(evaluation, seconds)
        return evaluation

    def _record(self, evaluation: Evaluation, seconds: float) -> None:
        """Log the evaluation (``eval/*``), keep the best model, report."""
        rows, score = evaluation.rows, evaluation.score
        self._last_eval = self.num_timesteps
        self.p99_excess = evaluation.p99_excess
        self.history.append((self.num_timesteps, evaluation.train_jct, score))
        for key in EVAL_MEANS:
            value = column_mean(rows, key)
            if math.isfinite(value):
                self.logger.record(f"eval/{key}", value)
        done = sum(int(r["train_jobs_done"]) for r in rows)
        total = sum(int(r["train_jobs"]) for r in rows)
        self.logger.record("eval/train_jobs_done_frac", done / total if total else 0.0)
        self.logger.record("eval/truncated_frac", evaluation.truncated / len(rows))
        if math.isfinite(self.p99_excess.mean):
            self.logger.record("eval/p99_excess", self.p99_excess.mean)
            self.logger.record("eval/p99_excess_median", self.p99_excess.median)
        self.logger.record("eval/best_score", self.best_score if math.isfinite(self.best_score) else score)
        if evaluation.improved and self.best_model_path is not None:
            save_model(self.model, self.best_model_path)
        if self.verbose >= 1:
            print(
                self.summary(len(rows), evaluation.truncated, seconds, evaluation.train_jct, score, evaluation.improved)
            )
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(self.num_timesteps)
        if self.on_evaluation is not None:
            self.on_evaluation(self.num_timesteps, score)

    def summary(self, episodes: int, truncated: int, seconds: float, jct: float, score: float, improved: bool) -> str:
        """The evaluation's log line: what ran, how many episodes the cap truncated, the score
        that selects the best model and what it is."""
        cap = f"{self.env_config.max_rounds:,} decisions, not before the last job arrival"
        value = f"{score:.4f}" if self.reference is not None else f"{score:,.0f} s"
        p99 = ""
        if self.reference is not None and self.p99_margin is not None and math.isfinite(self.p99_excess.mean):
            p99 = "; " + p99_verdict(self.p99_excess, self.reference, self.p99_margin)
        return (
            f"eval @ {self.num_timesteps:,} steps: {episodes} val episodes in {seconds:.1f} s, {truncated} truncated "
            f"(cut at {cap}; unfinished jobs count to the cut); mean JCT of finished jobs {jct:,.0f} s; "
            f"selection score {value} = {self.selected_by} (lower is better){p99}{', new best' if improved else ''}"
        )

    def _on_training_start(self) -> None:
        if self.eval_at_start:
            self.evaluate()
        self.validator.prefetch_baselines()

    def _on_step(self) -> bool:
        if self.eval_freq > 0 and self.num_timesteps >= self._next_eval:
            self.evaluate()
            while self._next_eval <= self.num_timesteps:
                self._next_eval += self.eval_freq
        return True

    def _on_training_end(self) -> None:
        try:
            if self.eval_at_end and self.eval_freq > 0 and self._last_eval != self.num_timesteps:
                self.evaluate()
        finally:
            self.close()

    def close(self) -> None:
        """Stop the baselines' background worker (episodes still running are dropped)."""
        self.validator.close()


class EnvStepProgressBar(ProgressBarCallback):
    """SB3's progress bar, advanced by the env steps the model counts. SB3's own adds every env
    at every call; GroupPPO steps only the envs whose episode goes on, so the bar overcounted
    (341,280 of 200,000 for 204,206 steps)."""

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self.counted = self.model.num_timesteps

    def _on_step(self) -> bool:
        self.pbar.update(self.model.num_timesteps - self.counted)
        self.counted = self.model.num_timesteps
        return True


class StopOnSignal(BaseCallback):
    """Ends ``model.learn`` at the next step once ``stops`` has recorded a signal.

    Args:
        stops: the run's :class:`~deepboot_env.stops.StopSignals` (entered by the caller).
        on_stop: called once when training stops on a signal (e.g. to skip a final evaluation).
    """

    def __init__(self, stops: StopSignals, on_stop: Callable[[], None] | None = None) -> None:
        super().__init__(verbose=0)
        self.stops = stops
        self._on_stop = on_stop

    @property
    def signum(self) -> int | None:
        """The first signal received, or None."""
        return self.stops.signum

    def _on_step(self) -> bool:
        if self.stops.signum is None:
            return True
        if self._on_stop is not None:
            self._on_stop()
            self._on_stop = None
        return False
