"""``oracle-lookahead``, the clairvoyant upper reference (docs/policies.md §15).

It is deterministic, follows at every choice point the candidate whose simulated future scored
lowest (the first of equals), scores a candidate by exactly what then happens when it is followed,
leaves the simulator it looks ahead from untouched, reproduces a single candidate exactly, and runs
through the ordinary evaluation loop and CLI.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from builders import drive, episode_json, fast_lookahead

from baselines.oracle_lookahead import DEFAULT_CANDIDATES, LookaheadSettings, OracleLookaheadPolicy
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.workload import Workload
from traces.generate import generate_workload

CONFIG = sim_config(dynamics="v1")
FAST = fast_lookahead()
"""A cheap oracle for most tests: three candidates (one stateful), ten minutes ahead."""


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate_workload("oracle", 8, train={"num_jobs": 12}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 8.0})


def test_registered_and_runs_through_run_episode(workload: Workload) -> None:
    policy = make_policy("oracle-lookahead")
    assert isinstance(policy, OracleLookaheadPolicy) and policy.name == "oracle-lookahead"
    assert [c.label for c in policy.candidates] == list(DEFAULT_CANDIDATES)
    metrics = run_episode(policy, workload, CONFIG, seed=1)
    assert metrics.train_jobs_done == len(workload.jobs) and not metrics.truncated
    assert policy.choices and all(len(c.scores) == len(DEFAULT_CANDIDATES) for c in policy.choices)


def test_deterministic(workload: Workload) -> None:
    assert episode_json(OracleLookaheadPolicy(FAST), workload, CONFIG, 4) == episode_json(
        OracleLookaheadPolicy(FAST), workload, CONFIG, 4
    )


@pytest.mark.parametrize("name", ["ats", "ones-lend"])
def test_one_candidate_is_followed_exactly(workload: Workload, name: str) -> None:
    """With one candidate the oracle is that candidate: its live instance decides on the real states
    (ones-lend's population and RNG too, reset with the episode's seed)."""
    oracle = OracleLookaheadPolicy(LookaheadSettings(candidates=(name,), horizon_s=300.0, every=2))
    assert episode_json(oracle, workload, CONFIG, 5) == episode_json(name, workload, CONFIG, 5)


def test_the_chosen_candidate_scored_lowest_and_scores_are_what_happens(workload: Workload) -> None:
    """At every choice point the followed candidate is the first with the lowest score; with a
    choice point at every horizon end, the score of the followed candidate is exactly the
    job-seconds plus waiting seconds the real episode then spends over the horizon."""
    interval = CONFIG.interval
    oracle = OracleLookaheadPolicy(fast_lookahead(horizon_s=5 * interval, every=5), hindsight=False)
    oracle.reset(2)
    sim = Simulator(workload, CONFIG, oracle)
    waited: dict[float, float] = {}
    while not sim.done:
        waited[sim.now] = sim.waiting_seconds
        state = sim.observe()
        sim.apply(oracle.decide(state), state)
        sim.advance()
    assert len(oracle.choices) > 3
    checked = 0
    for choice in oracle.choices:
        low = min(choice.scores)
        assert choice.scores[choice.chosen] == low and choice.scores.index(low) == choice.chosen
        end = choice.time + oracle.settings.horizon_s
        if end in waited:  # the real episode reached the end of this horizon at a boundary
            real = sim.job_seconds(choice.time, end) + (waited[end] - waited[choice.time])
            assert choice.scores[choice.chosen] == real
            checked += 1
    assert checked > 3
    assert len({c.chosen for c in oracle.choices}) > 1  # it did switch between candidates


def test_in_hindsight_it_plays_the_best_plan_so_never_loses_to_a_candidate(workload: Workload) -> None:
    """With hindsight (the default) each plan (the lookahead switching, every candidate alone) is
    simulated to the end first; the episode then replays the best: its mean JCT is the lowest plan
    score, each candidate's score is that candidate's own episode, the switching's is the
    hindsight=False oracle's."""
    oracle = OracleLookaheadPolicy(FAST)
    metrics = run_episode(oracle, workload, CONFIG, seed=3)
    assert oracle.plan_labels == ("lookahead", *FAST.candidates)
    assert metrics.train_jct_mean == pytest.approx(min(oracle.plan_scores), rel=1e-12)
    assert oracle.plan == oracle.plan_labels[oracle.plan_scores.index(min(oracle.plan_scores))]
    for label, score in zip(oracle.plan_labels[1:], oracle.plan_scores[1:], strict=True):
        assert score == pytest.approx(run_episode(label, workload, CONFIG, seed=3).train_jct_mean, rel=1e-12)
    switching = run_episode(OracleLookaheadPolicy(FAST, hindsight=False), workload, CONFIG, seed=3)
    assert oracle.plan_scores[0] == pytest.approx(switching.train_jct_mean, rel=1e-12)


def test_looking_ahead_leaves_the_simulator_untouched(workload: Workload) -> None:
    oracle = OracleLookaheadPolicy(FAST)
    oracle.reset(0)
    sim = Simulator(workload, CONFIG, oracle)
    drive(sim, oracle, 12)
    before = sim.fork()
    counts = copy.deepcopy(sim.ledger.counts)
    heap = list(sim.events.heap)
    marks = (sim.now, sim.num_events, len(sim.timeline), sim.waiting_seconds, sim.reclaims, sim.restarts)
    choice = oracle.evaluate(sim)
    assert choice.time == sim.now and len(choice.scores) == 3
    assert (sim.now, sim.num_events, len(sim.timeline), sim.waiting_seconds, sim.reclaims, sim.restarts) == marks
    assert sim.ledger.counts == counts and sim.events.heap == heap
    # and the rest of the episode is the same as from a copy taken before the lookahead
    ats = make_policy("ats")
    for twin in (sim, before):
        while not twin.done:
            state = twin.observe()
            twin.apply(ats.decide(state), state)
            twin.advance()
    assert json.dumps(sim.metrics().deterministic_dict()) == json.dumps(before.metrics().deterministic_dict())
    assert sim.timeline == before.timeline


def test_refuses_a_state_of_another_simulator(workload: Workload) -> None:
    oracle = OracleLookaheadPolicy(FAST)
    with pytest.raises(RuntimeError, match="not bound"):
        oracle.decide(Simulator(workload, CONFIG).observe())
    sim = Simulator(workload, CONFIG, oracle)
    other = Simulator(workload, CONFIG)
    state = sim.observe()
    sim.apply(oracle.decide(state), state)
    sim.advance()
    with pytest.raises(RuntimeError, match="not the current state"):
        oracle.decide(other.observe())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="every"):
        LookaheadSettings(every=0)
    with pytest.raises(ValueError, match="horizon"):
        LookaheadSettings(horizon_s=0.0)
    with pytest.raises(ValueError, match="candidate"):
        LookaheadSettings(candidates=())
    with pytest.raises(ValueError, match="unknown policy"):
        OracleLookaheadPolicy(LookaheadSettings(candidates=("no-such-policy",)))
    with pytest.raises(ValueError, match="hindsight replays decisions, not reclaims"):
        OracleLookaheadPolicy(LookaheadSettings(candidates=("ats", "interference-aware")))
    OracleLookaheadPolicy(LookaheadSettings(candidates=("ats", "interference-aware")), hindsight=False)
    with pytest.raises(ValueError, match="terminal_weight"):
        OracleLookaheadPolicy(terminal_weight=-1.0)


def test_simulate_cli_runs_it(workload: Workload, tmp_path: Path) -> None:
    from deepboot_harness.cli import main
    from traces.generate import write_workload_csv

    path = write_workload_csv(workload, tmp_path / "small.csv")
    out = tmp_path / "m.json"
    argv = ["simulate", "--workload", str(path), "--policy", "oracle-lookahead", "--json", str(out), "--quiet"]
    assert main(argv) == 0
    assert json.loads(out.read_text())["train_jobs_done"] == len(workload.jobs)
