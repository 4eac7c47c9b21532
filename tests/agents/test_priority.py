"""The learned priority (agents.models.priority) and its evolution-strategies training (agents.trainers.evolution)."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from builders import REPO, es_smoke_argv, job_view

import train_policy
from agents.models.priority import (
    FEATURES,
    KNOWN_FEATURES,
    PriorityModel,
    PriorityModelError,
    PriorityPolicy,
    job_features,
    srpt_theta,
)
from agents.runs.validation import EVAL_COLUMNS
from agents.trainers.evolution import EsSettings, EsState, Subject, adam_step, centered_ranks
from deepboot_env.config import sim_config
from deepboot_env.es import antithetic_gradient
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from traces.families import sample_scenario

SHIPPED = REPO / "agents" / "pretrained" / "deepboot-priority-v1.json"


def _jobs():
    return [
        job_view(0, "cifar10", [2, 0], 8, epoch=10),
        job_view(1, "bert", [0, 0], 8, epoch=0),
        job_view(2, "ncf", [0, 1], 4, epoch=3),
        job_view(3, "imagenet", [0, 0], 16, epoch=50),
    ]


def _weights(theta, jobs, fair: int = 2, capacity: int = 8) -> np.ndarray:
    return PriorityPolicy(theta).job_weights(jobs, fair, capacity)


def _short_period():
    scenario = sample_scenario("short-period", 1_000_000)
    return scenario.workload, scenario.configure(sim_config(dynamics="v1"))


def test_the_warm_start_is_ats_srpt() -> None:
    """theta = (-0.25, 0, ...) weights the jobs as ats-srpt does up to a common factor (which
    leaves the knapsack's choice as it is), so an episode ends alike."""
    jobs = _jobs()
    ours = _weights(srpt_theta(), jobs)
    theirs = make_policy("ats-srpt").job_weights(jobs, 2, 8)
    assert theirs is not None
    np.testing.assert_allclose(ours / ours[0], theirs / theirs[0], rtol=1e-12)
    workload, config = _short_period()
    a = run_episode(PriorityPolicy(srpt_theta()), workload, config)
    b = run_episode(make_policy("ats-srpt"), workload, config)
    assert a.train_jct_mean == pytest.approx(b.train_jct_mean, rel=1e-9)


def test_arrival_rank_at_015_is_ats_srpt_fcfs() -> None:
    """The warm start with ``arrival_tilt`` 0.15 weights the jobs as ``ats-srpt-fcfs`` does (up to
    a common factor) and plays the same episode."""
    jobs = [dataclasses.replace(j, arrival=a) for j, a in zip(_jobs(), [300.0, 0.0, 300.0, 100.0], strict=True)]
    features = (*FEATURES, "arrival_rank")
    theta = srpt_theta(0.25, features, arrival_tilt=0.15)
    ours = PriorityPolicy(theta, features=features).job_weights(jobs, 2, 8)
    theirs = make_policy("ats-srpt-fcfs").job_weights(jobs, 2, 8)
    assert theirs is not None
    np.testing.assert_allclose(ours / ours[0], theirs / theirs[0], rtol=1e-12)
    ranks = job_features(jobs, 2, 8, features)[:, -1]
    np.testing.assert_allclose(ranks, [-1 / 3, 1, -1, 1 / 3])  # by arrival; the id breaks the tie at 300 s
    workload, config = _short_period()
    a = run_episode(PriorityPolicy(theta, features=features), workload, config)
    b = run_episode(make_policy("ats-srpt-fcfs"), workload, config)
    assert a.train_jct_mean == pytest.approx(b.train_jct_mean, rel=1e-9)


def test_an_application_feature_scales_that_applications_jobs_only() -> None:
    jobs = _jobs()
    features = (*FEATURES, "app_bert", "app_ncf")
    base = srpt_theta(0.25, features)
    lifted = base.copy()
    lifted[features.index("app_bert")] = 0.5
    before = PriorityPolicy(base, features=features).job_weights(jobs, 2, 8)
    after = PriorityPolicy(lifted, features=features).job_weights(jobs, 2, 8)
    ratio = (after / after[0]) / (before / before[0])  # relative to cifar10's job 0
    np.testing.assert_allclose(ratio, [1.0, np.exp(0.5), 1.0, 1.0], rtol=1e-12)
    phi = job_features(jobs, 2, 8, features)
    np.testing.assert_array_equal(phi[:, : len(FEATURES)], job_features(jobs, 2, 8))
    np.testing.assert_array_equal(phi[:, -2:], [[0, 0], [1, 0], [0, 1], [0, 0]])


@pytest.mark.parametrize(
    "features",
    [
        FEATURES[:-1],
        (*FEATURES, "app_nope"),
        (*FEATURES, "app_ncf", "app_bert"),
        (*FEATURES, "app_bert", "app_bert"),
        ("arrival_rank", *FEATURES),
    ],
)
def test_bad_feature_lists_are_refused(features, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="features must be"):
        PriorityPolicy([0.0] * len(features), features=features)
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps({"format": "deepboot-priority/1", "features": list(features), "theta": [0.0] * len(features)})
    )
    with pytest.raises(PriorityModelError, match="field 'features'") as err:
        PriorityModel.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_features_ignore_the_oracle_and_follow_the_jobs_when_permuted() -> None:
    jobs = _jobs()
    phi = job_features(jobs, 2, 8)
    assert phi.shape == (4, len(FEATURES)) and np.isfinite(phi).all()
    blind = [dataclasses.replace(j, remaining_work=1.0) for j in jobs]
    np.testing.assert_array_equal(job_features(blind, 2, 8), phi)
    order = [2, 0, 3, 1]
    np.testing.assert_array_equal(job_features([jobs[i] for i in order], 2, 8), phi[order])
    theta = np.linspace(-0.4, 0.3, len(FEATURES))
    np.testing.assert_array_equal(_weights(theta, [jobs[i] for i in order]), _weights(theta, jobs)[order])
    column = dict(zip(FEATURES, phi.T, strict=True))
    np.testing.assert_array_equal(column["untrained"], [0, 0, 0, 0])


def test_a_higher_weight_on_short_jobs_gives_the_job_near_its_end_more_gpus() -> None:
    """Learned coefficients change decisions the way they say: with a steeper short-job
    preference the knapsack gives a job near its end at least as many GPUs."""
    from builders import cluster_state

    state = cluster_state("1x4", [job_view(0, "cifar10", [0], 4, epoch=0), job_view(1, "cifar10", [0], 4, epoch=99)])
    mild = PriorityPolicy(srpt_theta(0.1)).propose_counts(state)
    steep = PriorityPolicy(srpt_theta(1.0)).propose_counts(state)
    assert steep[1] >= mild[1] and steep[1] > steep[0]
    assert sum(steep.values()) == sum(mild.values()) == 4


def test_weights_are_relative_to_the_heaviest_job_and_floored() -> None:
    """Whatever theta, the heaviest job weighs 1 and none less than e^-12 of it, so every value
    stays above the knapsack's tie tolerance."""
    theta = np.full(len(FEATURES), 40.0)
    weights = _weights(theta, _jobs())
    assert weights.max() == 1.0 and weights.min() >= np.exp(-12.0) and weights.min() < 1e-4


def test_a_stalled_candidate_ranks_last(monkeypatch) -> None:
    """An episode the watchdog stops is an infinite JCT for ES, not an error that ends the run."""
    import agents.trainers.evolution
    from deepboot_env.evaluation import StalledEpisodeError

    def stall(*args, **kwargs):
        raise StalledEpisodeError("no progress")

    monkeypatch.setattr(agents.trainers.evolution, "run_episode", stall)
    item = (tuple(srpt_theta()), "short-period", 1_000_000, Subject(FEATURES))
    assert agents.trainers.evolution.episode_jct(item) == float("inf")


def test_bad_theta_is_refused() -> None:
    with pytest.raises(ValueError, match="theta must be 7 finite numbers"):
        PriorityPolicy([0.0] * 3)
    with pytest.raises(ValueError, match="finite"):
        PriorityPolicy([float("nan")] * len(FEATURES))


def test_a_model_round_trips_and_bad_files_fail_in_one_line(tmp_path: Path) -> None:
    model = PriorityModel(tuple(np.linspace(-0.3, 0.2, len(FEATURES)).tolist()), info={"command": "x"})
    path = tmp_path / "m.json"
    model.save(path)
    assert PriorityModel.load(path) == model
    policy = make_policy(f"priority:{path}")
    assert isinstance(policy, PriorityPolicy) and policy.name == f"priority:{path}"
    wide = PriorityModel(tuple(np.linspace(-0.3, 0.2, len(KNOWN_FEATURES)).tolist()), KNOWN_FEATURES)
    wide.save(tmp_path / "wide.json")
    assert PriorityModel.load(tmp_path / "wide.json") == wide
    assert make_policy(f"priority:{tmp_path / 'wide.json'}").features == KNOWN_FEATURES  # type: ignore[attr-defined]
    good = json.loads(path.read_text())
    cases = {
        "not json": ("{", "not a JSON priority model"),
        "list": ("[1, 2]", "expected a JSON object"),
        "format": (json.dumps({**good, "format": "pickle"}), "field 'format'"),
        "features": (json.dumps({**good, "features": ["a"]}), "field 'features'"),
        "short theta": (json.dumps({**good, "theta": [1.0]}), "field 'theta'"),
        "bool theta": (json.dumps({**good, "theta": [True] * len(FEATURES)}), "field 'theta'"),
        "nan theta": (json.dumps({**good, "theta": [float("nan")] * len(FEATURES)}), "field 'theta'"),
        "info": (json.dumps({**good, "info": [1]}), "field 'info'"),
    }
    for name, (text, message) in cases.items():
        bad = tmp_path / f"{name}.json"
        bad.write_text(text)
        with pytest.raises(PriorityModelError, match=message) as err:
            PriorityModel.load(bad)
        assert str(bad) in str(err.value) and "\n" not in str(err.value), name
    with pytest.raises(PriorityModelError, match="no such priority model file"):
        make_policy(f"priority:{tmp_path / 'missing.json'}")


def test_es_settings_are_checked() -> None:
    assert EsSettings.of({"pairs": 3, "sigma": 0.1}).pairs == 3
    assert EsSettings().features == FEATURES
    assert EsSettings.of({"arrival_tilt": 0.15, "app_features": 1}).features == KNOWN_FEATURES
    start = EsState.start(EsSettings(arrival_tilt=0.15, app_features=1), seed=0)
    assert start.theta == srpt_theta(0.25, KNOWN_FEATURES, 0.15).tolist() and len(start.m) == len(KNOWN_FEATURES)
    for values, message in [
        ({"pair": 3}, "unknown ES settings"),
        ({"pairs": 0}, "pairs must be >= 1"),
        ({"pairs": 2.5}, "whole"),
        ({"sigma": -1.0}, "sigma must be > 0"),
        ({"learning_rate": "fast"}, "must be a number"),
        ({"arrival_tilt": -0.1}, "arrival_tilt must be >= 0"),
        ({"app_features": 2}, "app_features must be 0 or 1"),
        ({"p99_weight": -0.002}, "p99_weight must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            EsSettings.of(values)


def test_the_antithetic_gradient_and_adam_descend_a_quadratic() -> None:
    """On f(x) = |x - c|^2 the estimate points along the true gradient and Adam's steps reach c."""
    rng = np.random.default_rng(0)
    target = np.linspace(-1, 1, len(FEATURES))

    def estimate(theta: np.ndarray, pairs: int) -> np.ndarray:
        eps = rng.standard_normal((pairs, len(FEATURES)))
        plus = ((theta + 0.05 * eps - target) ** 2).sum(axis=1)
        minus = ((theta - 0.05 * eps - target) ** 2).sum(axis=1)
        return antithetic_gradient(plus, minus, eps, 0.05)

    state = EsState.start(EsSettings(), seed=0)
    start = np.asarray(state.theta)
    grad, true = estimate(start, 400), 2 * (start - target)
    assert grad @ true / np.linalg.norm(grad) / np.linalg.norm(true) > 0.95
    for _ in range(300):
        adam_step(state, estimate(np.asarray(state.theta), 16), 0.02)
        state.generation += 1
    np.testing.assert_allclose(state.theta, target, atol=0.05)


def test_centred_ranks_bound_a_catastrophic_candidate() -> None:
    shaped = centered_ranks(np.array([0.9, 7.0, 0.85, 0.95]))
    np.testing.assert_allclose(shaped, [-1 / 6, 0.5, -0.5, 1 / 6])
    assert centered_ranks(np.array([1.0])).tolist() == [-0.5]


def _es_argv(runs: Path, *extra: str) -> list[str]:
    return es_smoke_argv("priority-es", runs, *extra)


def test_es_smoke_run_selects_on_val_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    """Two generations in one go equal one generation and a resumed one (theta, Adam, the random
    generator and the ATS cache come back from state.json); the files a run promises are there."""
    whole = train_policy.run(_es_argv(tmp_path / "a", "-n", "2"))
    first = train_policy.run(_es_argv(tmp_path / "b", "-n", "1"))
    resumed = train_policy.run(_es_argv(tmp_path / "b", "--resume", str(first), "-n", "1"))
    assert resumed == first
    a = json.loads((whole / "state.json").read_text())
    b = json.loads((resumed / "state.json").read_text())
    assert a["generation"] == b["generation"] == 2 and a["episodes"] == b["episodes"] == 6
    np.testing.assert_allclose(a["theta"], b["theta"], rtol=0, atol=1e-12)
    assert a["theta"] != srpt_theta().tolist()
    for name in ("config.yml", "final_model.json", "best_model.json", "evaluations.csv", "generations.csv"):
        assert (whole / name).is_file(), name
    with (whole / "evaluations.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == EVAL_COLUMNS and [int(r["iteration"]) for r in rows] == [0, 1, 2]
    best = PriorityModel.load(whole / "best_model.json")
    assert best.info["val_jct_ratio_to_ats"] == min(float(r["jct_ratio"]) for r in rows)
    assert all(float(r["prior_ratio"]) > 0 for r in rows)  # against ats-srpt, the warm start
    assert list((whole / "tb").iterdir())


def test_es_with_extra_features_writes_them_and_resumes_with_its_own_settings(tmp_path: Path, capsys) -> None:
    """A resume goes on with the settings the run recorded, whatever the preset; a ``-params``
    that changes the features it trains is refused in one line."""
    extra = ["-params", "pairs:1", "seeds_per_family:1", "eval_freq:1", "arrival_tilt:0.15", "app_features:1"]
    run = train_policy.run(_es_argv(tmp_path, "-n", "1", *extra))
    header = (run / "generations.csv").read_text().splitlines()[0].split(",")
    assert header[-len(KNOWN_FEATURES) :] == list(KNOWN_FEATURES)
    model = PriorityModel.load(run / "final_model.json")
    assert model.features == KNOWN_FEATURES and len(model.theta) == len(KNOWN_FEATURES)
    resume = ["--algo", "es", "--workload", "family:short-period", "--eval-workload", "family:short-period"]
    train_policy.run([*resume, "--eval-episodes", "1", "--verbose", "0", "--resume", str(run), "-n", "1"])
    state = json.loads((run / "state.json").read_text())
    assert state["generation"] == 2 and len(state["theta"]) == len(KNOWN_FEATURES)
    assert state["episodes"] == 6  # pairs:1 and one scenario kept: 3 episodes a generation
    with pytest.raises(SystemExit):
        train_policy.main(_es_argv(tmp_path, "--resume", str(run), "-n", "1", "-params", "app_features:0"))
    err = capsys.readouterr().err  # a resume that would change what the run trains: one line
    assert len(err.strip().splitlines()) == 1 and "-params ['app_features:0'" in err and "differs from the run's" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workload", "train"], "takes workload families"),
        (["--workload", "family:nope"], "takes workload families"),
        (["-params", "pairs:0"], "pairs must be >= 1"),
    ],
)
def test_bad_es_flags_give_one_line_errors(flags, message, tmp_path, capsys) -> None:
    argv = _es_argv(tmp_path) + flags
    with pytest.raises(SystemExit) as stop:
        train_policy.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err


@pytest.mark.skipif(not SHIPPED.is_file(), reason="no shipped priority model")
def test_the_shipped_model_loads_and_runs_deepboot_simulate(tmp_path: Path, capsys) -> None:
    from deepboot_harness.cli import main

    model = PriorityModel.load(SHIPPED)
    assert model.info["command"].startswith("python train_policy.py --algo es")
    assert main(["simulate", "--workload", "test/test-01", "--policy", f"priority:{SHIPPED}"]) == 0
    assert "priority:" in capsys.readouterr().out
