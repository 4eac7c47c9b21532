"""``hindsight``: the held-score search on the scenario being played (baselines/hindsight.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from baselines.hindsight import Held, HeldScores, HindsightPolicy, HindsightSettings, held_jct, search_held_scores
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import WIDTH_CLASSES, make_policy
from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.sim.simulator import Simulator
from traces.generate import generate_workload

PRIOR = "ats-srpt-fcfs-place-rr-warm"


def test_the_search_descends_a_known_bowl_and_plays_what_it_says() -> None:
    """On a synthetic scenario whose 'JCT' is a bowl around a known vector, ES finds a vector
    better than the prior (all zeros), the curve starts at 1.0, and the plays counted are the
    settings' episodes."""
    target = np.array([0.3, -0.2, 0.1, 0.0, -0.3])
    played: list[dict[int, float]] = []

    def play(held: Held) -> float:
        played.append(held.scores)
        assert not held.widths  # the settings hold no width scores
        x = np.array([held.scores.get(j, 0.0) for j in range(len(target))])
        return 100.0 * (1.0 + float(((x - target) ** 2).sum()))

    sim = SimpleNamespace(workload=SimpleNamespace(jobs=[None] * len(target)))
    settings = HindsightSettings(generations=12, pairs=4, sigma=0.05, learning_rate=0.05)
    found = search_held_scores(sim, settings, play)  # type: ignore[arg-type]
    assert len(played) == settings.episodes == 1 + 12 * 9 and played[0] == {}
    assert found.curve[0] == 1.0 and found.ratio == min(found.curve) < 0.9
    assert found.prior_jct == pytest.approx(100.0 * (1 + (target**2).sum()))
    assert np.abs(np.array(found.scores) - target).sum() < np.abs(target).sum()


def test_width_scores_are_searched_per_application_and_held_by_each_of_its_jobs() -> None:
    """With ``widths`` the vector also holds WIDTH_CLASSES width scores per application: every
    job of an application holds its row, the search descends a bowl over them too, and
    :meth:`Search.held` hands the best vector to a player as it was played."""
    apps = [APP_NAMES[0], APP_NAMES[2], APP_NAMES[0]]
    wanted = np.zeros((len(APP_NAMES), WIDTH_CLASSES))
    wanted[0], wanted[2] = [0.2, -0.1, 0.3], [-0.3, 0.1, 0.0]
    played: list[Held] = []

    def play(held: Held) -> float:
        played.append(held)
        rows = np.zeros_like(wanted)
        for job, app in enumerate(apps):
            assert held.widths.get(job, (0.0,) * WIDTH_CLASSES) == held.widths.get(apps.index(app), (0.0,) * 3)
            rows[APP_NAMES.index(app)] = held.widths.get(job, (0.0,) * WIDTH_CLASSES)
        return 100.0 * (1.0 + float(((rows - wanted) ** 2).sum()))

    sim = SimpleNamespace(workload=SimpleNamespace(jobs=[SimpleNamespace(app=app) for app in apps]))
    settings = HindsightSettings(generations=20, pairs=4, sigma=0.05, learning_rate=0.05, widths=True)
    found = search_held_scores(sim, settings, play)  # type: ignore[arg-type]
    assert played[0] == Held() and len(played[1].widths) == len(apps)
    assert np.shape(found.widths) == (len(APP_NAMES), WIDTH_CLASSES) and found.ratio < 0.95
    held = found.held(sim.workload)  # type: ignore[arg-type]
    assert held.widths[0] == tuple(found.widths[0]) == held.widths[2] and held.widths[1] == tuple(found.widths[2])
    assert play(held) / found.prior_jct == pytest.approx(found.ratio, rel=1e-12)


def test_width_scores_move_a_real_schedule_and_zero_ones_are_the_prior_bit_for_bit() -> None:
    """On a real scenario, width scores of 0 for every job play the prior exactly (a factor
    exp(0) = 1.0 is the same floats), and width scores that favour splitting change it."""
    workload = generate_workload("crowded", 3, train={"num_jobs": 24})
    sim = Simulator(workload, sim_config(), make_policy(PRIOR))
    prior = make_policy(PRIOR)
    base = held_jct(sim, HeldScores(prior, {}), 0)
    zeros = {j: (0.0,) * WIDTH_CLASSES for j in range(len(workload.jobs))}
    assert held_jct(sim, HeldScores(prior, {}, zeros), 0) == base
    split = {j: (-1.0, -1.0, 1.0) for j in range(len(workload.jobs))}
    assert held_jct(sim, HeldScores(prior, {}, split), 0) != base


def test_hindsight_plays_the_schedule_it_searched_and_never_loses_to_its_prior() -> None:
    """On a real scenario: the episode played is the search's best (the same mean JCT), no worse
    than the prior's; with no generation it is the prior exactly; the same settings give the same
    episode."""
    workload = generate_workload("crowded", 3, train={"num_jobs": 24})
    config = sim_config()
    prior = run_episode(make_policy(PRIOR), workload, config).train_jct_mean
    none = HindsightPolicy(generations=0)
    assert run_episode(none, workload, config).train_jct_mean == prior
    assert none.search is not None and none.search.scores == [0.0] * 24 and none.search.episodes == 1
    policy = HindsightPolicy(generations=2, pairs=2)
    played = run_episode(policy, workload, config).train_jct_mean
    found = policy.search
    assert found is not None and found.episodes == 11 and found.cpu_s > 0
    assert policy.settings.widths and np.shape(found.widths) == (len(APP_NAMES), WIDTH_CLASSES)
    assert played == pytest.approx(found.ratio * found.prior_jct, rel=1e-9) and found.prior_jct == pytest.approx(prior)
    assert played <= prior and found.ratio == min(found.curve)
    assert run_episode(HindsightPolicy(generations=2, pairs=2), workload, config).train_jct_mean == played


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"generations": -1}, "generations must be a whole number >= 0"),
        ({"pairs": 0}, "pairs must be a whole number >= 1"),
        ({"sigma": 0.0}, "sigma must be a number in"),
        ({"learning_rate": float("nan")}, "learning_rate must be a number in"),
        ({"prior": "fifo"}, "prior 'fifo' is not one of ATS's variants"),
        ({"widths": 1}, "widths must be true or false"),
    ],
)
def test_bad_settings_are_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        HindsightPolicy(**kwargs)
    assert "\n" not in str(err.value)


def test_hindsight_is_registered() -> None:
    policy = make_policy("hindsight")
    assert isinstance(policy, HindsightPolicy) and policy.settings.prior == PRIOR and policy.settings.episodes == 273


def test_a_sized_hindsight_runs_in_the_benchmark_beside_the_bounds(tmp_path) -> None:
    """``hindsight:1`` (one generation) in ``deepboot benchmark``: it runs, is labelled a
    clairvoyant upper reference, no lower bound lies above it, and the leaderboard gives each
    policy's share of the gap from ``ats`` to it."""
    import csv

    from deepboot_harness.cli import main

    out = tmp_path / "bench"
    argv = ["benchmark", "--families", "mixed", "--seeds", "1", "--policies", "ats", PRIOR, "hindsight:1"]
    assert main([*argv, "--out", str(out), "--quiet", "--jobs", "1"]) == 0
    with open(out / "results.csv", newline="") as fh:
        rows = {r["policy"]: r for r in csv.DictReader(fh)}
    hindsight, prior = rows["hindsight:1"], rows[PRIOR]
    assert float(hindsight["train_jct_mean"]) <= float(prior["train_jct_mean"])
    assert float(hindsight["jct_bound"]) <= float(hindsight["train_jct_mean"])
    text = (out / "leaderboard.md").read_text()
    assert "hindsight:1 (clairvoyant upper reference)" in text
    assert "### Share of the gap from `ats` to `hindsight` closed" in text


def test_the_sized_prefix_names_its_size_and_refuses_others() -> None:
    policy = make_policy("hindsight:3,2")
    assert policy.name == "hindsight:3,2" and (policy.settings.generations, policy.settings.pairs) == (3, 2)
    with pytest.raises(ValueError, match=r"hindsight:<generations>\[,<pairs>\] needs one or two whole numbers"):
        make_policy("hindsight:x")
