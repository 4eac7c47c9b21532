"""Model selection within an inference p99 margin (agents/runs/selection.py) and PPO's validation using it."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from stable_baselines3.common.logger import Logger

from agents.runs.callbacks import WorkloadEvalCallback
from agents.runs.selection import P99_MARGIN_S, P99Excess, p99_verdict, replaces, worst_p99_excess
from deepboot_env.config import EnvConfig
from deepboot_env.sim.scenario import Scenario
from traces.families import cached_scenario
from traces.loaders import load_workload


def test_worst_excess_is_the_largest_family_mean() -> None:
    episodes = [
        ("mixed", 30.0, 20.0),  # +10
        ("mixed", 10.0, 12.0),  # -2: mixed's mean is +4
        ("bursty", 9.0, 3.0),  # +6
        ("bursty", math.nan, 1.0),  # left out
        ("quiet", 1.0, math.inf),  # left out: quiet has no finite episode
    ]
    assert worst_p99_excess(episodes) == (6.0, "bursty", 6.0, 1)
    assert worst_p99_excess(episodes[:2]) == (4.0, "mixed", 4.0, 2)
    assert worst_p99_excess([("quiet", 1.0, math.nan)]) == (-math.inf, "", -math.inf, 0)


def test_the_median_beside_the_mean_tells_a_tail_from_a_trend() -> None:
    """One scenario 30 s over and three at 0-1 s make a mean of +7.75 s, past the margin, and a
    median of +0.5 s; four scenarios at +6-7 s make both outside. The verdict names both, and the
    selection's measure stays the mean."""
    tail = worst_p99_excess([("bursty", p99, 10.0) for p99 in (40.0, 10.0, 11.0, 10.0)])
    assert tail == (7.75, "bursty", 0.5, 4)
    trend = worst_p99_excess([("bursty", 16.0 + k % 2, 10.0) for k in range(4)])
    assert trend == (6.5, "bursty", 6.5, 4)
    assert p99_verdict(tail, "ats", P99_MARGIN_S) == (
        "inference p99 +7.8 s over ats's on bursty (outside the 5 s margin; median +0.5 s over 4)"
    )
    # under three episodes the median says nothing the mean does not: it is left out
    two = P99Excess(4.0, "mixed", 4.0, 2)
    assert p99_verdict(two, "ats", P99_MARGIN_S) == "inference p99 +4.0 s over ats's on mixed (within the 5 s margin)"


@pytest.mark.parametrize(
    "score, within, best, best_within, expected",
    [
        (0.95, False, None, False, True),  # the first finite score is the best whatever its p99
        (0.95, False, math.inf, False, True),
        (math.inf, True, None, False, False),  # a score that is not finite never
        (math.nan, True, 0.9, False, False),
        (0.99, True, 0.90, False, True),  # within the margin beats outside it, whatever the score
        (0.80, False, 0.90, True, False),  # outside never replaces within
        (0.89, True, 0.90, True, True),  # both within: the lower score
        (0.91, True, 0.90, True, False),
        (0.89, False, 0.90, False, True),  # both outside: the lower score
        (0.90, False, 0.90, False, False),
    ],
)
def test_replaces(score: float, within: bool, best: float | None, best_within: bool, expected: bool) -> None:
    assert replaces(score, within, best, best_within) is expected


def _rows(ratios: list[float], p99s: list[float]) -> list[dict[str, object]]:
    """Evaluation rows of two episodes (workloads a and b, seed 0), as ``evaluate`` builds them."""
    return [
        {"workload": label, "seed": 0, "train_jct_mean": 100.0, "censored_jct_mean": 100.0 * r, "jct_ratio": r}
        | {"infer_latency_p99": p99, "train_jct_p99": 0.0, "makespan": 0.0, "train_jobs_done": 1, "train_jobs": 1}
        | {"truncated": 0, "lent_gpu_hours": 0.0, "reclaims": 0, "restarts": 0, "repaired_gpus": 0, "prior_ratio": ""}
        for label, r, p99 in zip(("a", "b"), ratios, p99s, strict=True)
    ]


def _callback(**kwargs: object) -> WorkloadEvalCallback:
    """A validation callback over a mixed scenario (workload a) and the tiny workload (b, no
    family), whose reference p99s are 20 s and 3 s, without a model file to write."""
    workloads = [("a", cached_scenario("mixed", 1_000_000)), ("b", Scenario(load_workload("tiny")))]
    callback = WorkloadEvalCallback(workloads, EnvConfig(), eval_freq=0, reference="ats", **kwargs)
    callback.model = SimpleNamespace(logger=Logger(folder=None, output_formats=[]))
    callback.num_timesteps = 0
    for episode, p99 in (((0, 0), 20.0), ((1, 0), 3.0)):  # the reference's episodes, as if run
        callback.validator._kept["ats", episode] = (SimpleNamespace(infer_latency_p99=p99), 0)
    return callback


def _record(callback: WorkloadEvalCallback, rows: list[dict]) -> None:
    """Judge ``rows`` as the validator does after its episodes, and record them as the callback does."""
    callback._record(callback.validator._judge(rows), 0.0)


def test_ppo_validation_prefers_models_within_the_p99_margin() -> None:
    """The callback's selection over four evaluations: the first is the best (outside the margin
    on family mixed), a worse JCT within the margin replaces it, a better JCT outside does not, and
    a better JCT within does; the log line says where the p99 stands."""
    callback = _callback(verbose=1)
    evaluations = [  # (ratios of a and b, p99s of a and b) -> selected, best score after
        (([0.90, 0.90], [20.0 + P99_MARGIN_S + 2.0, 3.0]), True, 0.90),
        (([0.96, 0.96], [20.0 + P99_MARGIN_S, 3.0]), True, 0.96),
        (([0.80, 0.80], [20.0, 3.0 + P99_MARGIN_S + 0.1]), False, 0.96),
        (([0.92, 0.94], [10.0, 3.0]), True, 0.93),
    ]
    lines = []
    for (ratios, p99s), selected, best in evaluations:
        callback.num_timesteps += 1
        before = callback.best_score
        _record(callback, _rows(ratios, p99s))
        assert (callback.best_score != before) is selected and callback.best_score == pytest.approx(best)
        lines.append(callback.summary(2, 0, 0.0, 100.0, sum(ratios) / 2, selected))
    assert callback.best_within
    assert "+7.0 s over ats's on mixed (outside the 5 s margin), new best" in lines[0]
    assert "+5.0 s over ats's on mixed (within the 5 s margin), new best" in lines[1]
    assert "+5.1 s over ats's on b (outside the 5 s margin)" in lines[2] and "new best" not in lines[2]
    assert "-10.0 s over ats's on mixed" not in lines[3] and "+0.0 s over ats's on b" in lines[3]


def test_without_a_margin_ppo_validation_selects_on_the_score_alone() -> None:
    callback = _callback(p99_margin=None)
    _record(callback, _rows([0.9, 0.9], [20.0, 3.0]))
    _record(callback, _rows([0.8, 0.8], [90.0, 3.0]))
    assert callback.best_score == pytest.approx(0.8)


def _fake_episodes(monkeypatch, candidate) -> list[tuple[str, int]]:
    """Replace the ES's episodes: ``ats`` takes a JCT of 100 s and a p99 of 10 s on every
    scenario, a candidate ``candidate(theta)``; returns the list the ``ats`` runs are added to."""
    import agents.trainers.evolution as evolution

    ats_runs: list[tuple[str, int]] = []

    def fake_outcome(item):
        theta, family, seed, _ = item
        if theta is None:
            ats_runs.append((family, seed))
            return 100.0, 10.0
        return candidate(theta)

    monkeypatch.setattr(evolution, "episode_outcome", fake_outcome)
    return ats_runs


def _fake_validation(monkeypatch, candidate) -> list[tuple[str, str]]:
    """Replace the validator's episodes: ``ats`` and the prior take a JCT of 100 s and a p99 of
    10 s on every scenario, a priority model ``candidate(theta)``; returns the list the baselines'
    runs are added to."""
    import agents.runs.validation as validation
    from agents.models.priority import PriorityModel

    baseline_runs: list[tuple[str, str]] = []

    def fake_episode(episode):
        if episode.policy.startswith("priority:"):
            jct, p99 = candidate(PriorityModel.load(Path(episode.policy.partition(":")[2])).theta)
        else:
            baseline_runs.append((episode.policy, episode.label))
            jct, p99 = 100.0, 10.0
        metrics = SimpleNamespace(train_jct_mean=jct, infer_latency_p99=p99, truncated=False, lent_gpu_seconds=0.0)
        metrics.__dict__.update(dict.fromkeys(("train_jct_p99", "makespan", "infer_latency_mean", "wall_seconds"), 0.0))
        metrics.__dict__.update(dict.fromkeys(("train_jobs_done", "train_jobs", "infer_cold_starts", "reclaims"), 1))
        metrics.restarts = 0
        return metrics, 0

    monkeypatch.setattr(validation, "run_eval_episode", fake_episode)
    monkeypatch.setattr(validation, "censored_jct_mean", lambda workload, metrics: metrics.train_jct_mean)
    return baseline_runs


def test_es_validation_prefers_models_within_the_p99_margin(tmp_path, monkeypatch) -> None:
    """The ES's validation is the validator PPO's runs on: a worse JCT within the margin replaces a
    better one outside it, a better one outside does not replace it; ``ats`` and the prior run once
    per scenario, the state keeps the verdict, and evaluations.csv has the one schema."""
    from agents.models.priority import FEATURES, PriorityModel
    from agents.runs.validation import EVAL_COLUMNS
    from agents.trainers.evolution import EsRun, EsSettings, EsState, Subject

    val = [("mixed", 1_000_000), ("bursty", 1_000_000)]
    # theta[0] -> (JCT, p99) on every scenario; ats: JCT 100 s, p99 10 s
    outcomes = {1.0: (90.0, 10.0 + P99_MARGIN_S + 2.0), 2.0: (96.0, 10.0 + P99_MARGIN_S), 3.0: (80.0, 16.0)}
    baseline_runs = _fake_validation(monkeypatch, lambda theta: outcomes[theta[0]])
    state = EsState([1.0] + [0.0] * (len(FEATURES) - 1), [0.0] * len(FEATURES), [0.0] * len(FEATURES))
    lines: list[str] = []
    run = EsRun(tmp_path, ["mixed"], val, EsSettings(), state, Subject(FEATURES), 1, log=lines.append)
    for first, best in ((1.0, 0.90), (2.0, 0.96), (3.0, 0.96)):
        state.theta[0] = first
        run.validate()
        assert state.best_val == pytest.approx(best)
    assert state.best_within and PriorityModel.load(tmp_path / "best_model.json").theta[0] == 2.0
    assert sorted(baseline_runs) == sorted((policy, f"{f}-{s}") for policy in ("ats", "ats-srpt") for f, s in val)
    assert "+7.0 s over ats's on mixed (outside the 5 s margin)" in lines[0]
    assert "+5.0 s over ats's on mixed (within the 5 s margin)" in lines[1]
    with (tmp_path / "evaluations.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == EVAL_COLUMNS and len(rows) == 6
    assert [float(r["prior_ratio"]) for r in rows[:2]] == pytest.approx([0.9, 0.9])


def test_the_p99_penalty_hinges_each_scenario_and_skips_stalled_episodes() -> None:
    from agents.trainers.evolution import p99_penalty

    ats = np.array([10.0, 10.0, 10.0])
    p99s = np.array([[16.0, 4.0, 10.0], [12.0, 12.0, math.nan], [5.0, 5.0, 5.0]])
    # one scenario 6 s over and one 6 s under: 2 s, not 0 (a lower p99 buys nothing back)
    assert p99_penalty(p99s, ats).tolist() == pytest.approx([2.0, 4.0 / 3.0, 0.0])


def test_the_es_fitness_weighs_the_p99_penalty_against_the_jct(tmp_path, monkeypatch) -> None:
    """With ``p99_weight`` a candidate whose p99 is past ``ats``'s ranks behind one with a JCT as
    good; without it the JCT alone ranks them. ``ats``'s p99 on a training scenario is run once."""
    from agents.models.priority import FEATURES
    from agents.trainers.evolution import EsRun, EsSettings, EsState, Subject

    # theta[0] up: 1 % shorter JCT per 0.1, p99 10 s over ats's per 0.1
    ats_runs = _fake_episodes(monkeypatch, lambda theta: (100.0 - 10.0 * theta[0], 10.0 + 100.0 * max(theta[0], 0.0)))
    steps = {}
    for weight in (0.0, 0.01):
        settings = EsSettings(pairs=2, seeds_per_family=1, p99_weight=weight)
        state = EsState.start(settings, seed=0, theta=[0.0] * len(FEATURES))
        run = EsRun(tmp_path / str(weight), ["mixed"], [], settings, state, Subject(FEATURES), 1, log=None)
        run.generation()
        run.writer.close()
        steps[weight] = state.theta[0]
    # JCT alone: theta[0] rises; at 0.01 per second the p99's 1.0 per unit outweighs the JCT's 0.1
    assert steps[0.0] > 0 > steps[0.01]
    assert len(ats_runs) == 2 and len(set(ats_runs)) == 1  # the same draw; ats once in each run


def test_every_trainer_runs_on_the_one_validator() -> None:
    """One lifecycle: PPO's callback and ES's run are both a :class:`Trainer` (progress and a
    snapshot a worker loads) validated by a :class:`Validator`, so they share its episodes, its
    ratios to the reference and the prior, its best-model rule and its evaluations.csv schema."""
    from agents.runs.validation import Trainer, Validator
    from agents.trainers.evolution import EsRun

    callback = _callback()
    assert isinstance(callback, Trainer) and isinstance(callback.validator, Validator)
    assert all(hasattr(EsRun, name) for name in ("progress", "snapshot", "validate"))
    assert callback.validator.prior is None  # the target mode's actions start from no prior
    config = EnvConfig.from_options(action_mode="score", base_policy="ats-srpt")
    score = WorkloadEvalCallback([("a", cached_scenario("mixed", 1_000_000))], config, eval_freq=0, reference="ats")
    assert score.validator.prior == "ats-srpt" and score.validator.baselines == ["ats", "ats-srpt"]
