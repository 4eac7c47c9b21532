"""``mpc``, the non-clairvoyant lookahead over the experts (docs/policies.md §16).

Its decisions before a time T are the same for two workloads that agree up to T (the clairvoyant
oracle's are not); the simulator it plays each candidate on holds no job or request of the future;
its arrival forecast learns the rate it sees; it is deterministic under a seed, is exactly its one
candidate when it has one, runs through the evaluation loop and the CLI, and refuses bad settings.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from builders import drive, episode_json, fast_lookahead

from baselines.lookahead import DEFAULT_CANDIDATES, LookaheadSettings
from baselines.mpc import ArrivalForecast, MpcPolicy
from baselines.oracle_lookahead import OracleLookaheadPolicy
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.workload import InferenceRequestSpec, Workload
from traces.generate import generate_workload

CONFIG = sim_config(dynamics="v1")
FAST = fast_lookahead()
"""A cheap mpc for most tests: three candidates (one stateful), ten minutes ahead."""
T_CUT = 13_000.0
"""In the test workload: three jobs arrive before, seven after (the fourth at 14,305 s); inference
requests until 4 h (14,400 s)."""


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate_workload("tiny", 1, train={"num_jobs": 10}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 8.0})


def _cut(workload: Workload, t: float) -> Workload:
    """``workload`` without the jobs and requests arriving after ``t``."""
    return dataclasses.replace(
        workload,
        jobs=tuple(j for j in workload.jobs if j.arrival <= t),
        requests=tuple(r for r in workload.requests if r.arrival <= t),
    )


def _decisions_before(policy: MpcPolicy | OracleLookaheadPolicy, workload: Workload, t: float) -> tuple[list, list]:
    """The decisions (time, GPUs per node per job) and choice points of ``policy`` before ``t``
    (the episode is driven as run_episode does, seed 7, and stopped at ``t``)."""
    policy.reset(7)
    sim = Simulator(workload, CONFIG, policy)
    decisions = []
    while not sim.done and sim.now < t:
        state = sim.observe()
        allocation = policy.decide(state)
        decisions.append((state.time, {job: arr.tolist() for job, arr in sorted(allocation.gpus.items())}))
        sim.apply(allocation, state)
        sim.advance()
    return decisions, [(c.time, c.scores, c.chosen) for c in policy.choices if c.time < t]


def test_decisions_before_t_do_not_depend_on_what_arrives_after_t(workload: Workload) -> None:
    """Two workloads identical up to T (the second has nothing after T) get exactly the same
    decisions and lookahead scores before T from mpc; the scores of the clairvoyant oracle, and of
    an mpc that would play the true future requests (no future jobs), differ: the test sees leaks."""
    cut = _cut(workload, T_CUT)
    assert len(cut.jobs) < len(workload.jobs) and len(cut.requests) < len(workload.requests)
    settings = fast_lookahead(horizon_s=1800.0, every=5)
    full, short = (_decisions_before(MpcPolicy(settings), wl, T_CUT) for wl in (workload, cut))
    assert len(full[0]) > 10 and len(full[1]) > 3
    assert full == short
    full, short = (
        _decisions_before(OracleLookaheadPolicy(settings, hindsight=False), wl, T_CUT) for wl in (workload, cut)
    )
    assert full[1] != short[1]
    full, short = (_decisions_before(_LeakyMpc(settings), wl, T_CUT) for wl in (workload, cut))
    assert full[1] != short[1]


class _LeakyMpc(MpcPolicy):
    """An mpc that would cheat: it plays the true future inference requests."""

    def lookahead_root(self, sim: Simulator) -> Simulator:
        root = sim.fork()
        root.forget_future(sim.workload.requests[sim.requests_arrived :])
        return root


def test_the_lookahead_root_holds_the_past_and_a_forecast_only(workload: Workload) -> None:
    mpc = MpcPolicy(FAST)
    mpc.reset(3)
    sim = Simulator(workload, CONFIG, mpc)
    drive(sim, mpc, 40)
    arrived, admitted = sim.requests_arrived, len([j for j in workload.jobs if j.arrival <= sim.now])
    assert 0 < arrived < len(workload.requests) and admitted < len(workload.jobs)
    marks = (sim.now, sim.num_events, len(sim.timeline), sim.waiting_seconds, len(sim.jobs), len(sim.requests))
    root = mpc.lookahead_root(sim)
    assert (sim.now, sim.num_events, len(sim.timeline), sim.waiting_seconds, len(sim.jobs), len(sim.requests)) == marks
    assert root.workload.jobs == workload.jobs[:admitted] and len(root.jobs) == admitted
    assert root.workload.requests[:arrived] == workload.requests[:arrived]
    future = root.workload.requests[arrived:]
    assert future and len(future) == mpc.drawn[-1]
    true_future = {(r.name, r.arrival) for r in workload.requests[arrived:]}
    assert all(r.name.startswith("forecast-") and (r.name, r.arrival) not in true_future for r in future)
    assert all(sim.now <= r.arrival < sim.now + mpc.settings.horizon_s for r in future)
    seen = {(r.instance, r.app, r.duration) for r in workload.requests[:arrived]}
    assert all((r.instance, r.app, r.duration) in seen for r in future)  # resampled from the past


def test_the_arrival_forecast_learns_a_constant_rate() -> None:
    rng = np.random.default_rng(0)
    rate = 0.5
    times = np.sort(rng.uniform(0.0, 6 * 3600.0, rng.poisson(rate * 6 * 3600.0)))
    past = tuple(InferenceRequestSpec(f"r{i}", float(t), "infer-bert-1", "bert", 30.0) for i, t in enumerate(times))
    forecast = ArrivalForecast()
    for now in (1800.0, 3 * 3600.0, 6 * 3600.0):  # fed in pieces, as at choice points
        forecast.observe(past, int(np.searchsorted(times, now, side="right")), now)
    assert forecast.seen == len(past) and forecast.rate.closed_bins == 35
    assert forecast.rate.predict(np.array([6 * 3600.0 + 900.0]))[0] == pytest.approx(rate, rel=0.1)
    drawn = forecast.synthesize(past, len(past), 6 * 3600.0, 9 * 3600.0, 60.0, np.random.default_rng(1))
    arrivals = [r.arrival for r in drawn]
    assert arrivals == sorted(arrivals) and 6 * 3600.0 <= arrivals[0] and arrivals[-1] < 9 * 3600.0
    assert len(drawn) == pytest.approx(rate * 3 * 3600.0, rel=0.1)
    assert forecast.synthesize(past, 0, 0.0, 600.0, 60.0, np.random.default_rng(1)) == ()  # nothing seen


def test_deterministic_under_a_seed(workload: Workload) -> None:
    runs = []
    short = _cut(workload, T_CUT)
    for seed in (4, 4, 5):
        mpc = MpcPolicy(FAST)
        metrics = episode_json(mpc, short, CONFIG, seed)
        runs.append((metrics, [(c.time, c.scores, c.chosen) for c in mpc.choices], mpc.drawn))
    assert runs[0] == runs[1]
    assert runs[0][2] != runs[2][2]  # another seed draws other synthetic futures


@pytest.mark.parametrize("name", ["ats", "ones-lend"])
def test_one_candidate_is_followed_exactly(workload: Workload, name: str) -> None:
    settings = LookaheadSettings(candidates=(name,), horizon_s=300.0, every=2)
    assert episode_json(MpcPolicy(settings), workload, CONFIG, 5) == episode_json(name, workload, CONFIG, 5)


def test_registered_and_runs_through_run_episode(workload: Workload) -> None:
    policy = make_policy("mpc", settings=LookaheadSettings(horizon_s=600.0))
    assert isinstance(policy, MpcPolicy) and policy.name == "mpc"
    assert [c.label for c in policy.candidates] == list(DEFAULT_CANDIDATES)
    metrics = run_episode(policy, workload, CONFIG, seed=1)
    assert metrics.train_jobs_done == len(workload.jobs) and not metrics.truncated
    assert policy.choices and all(len(c.scores) == len(DEFAULT_CANDIDATES) for c in policy.choices)
    assert len(policy.drawn) == len(policy.choices) and sum(policy.drawn) > 0


def test_bad_settings_are_refused() -> None:
    for kwargs, message in (
        ({"every": 0}, "every must be an integer >= 1"),
        ({"every": 2.0}, "every must be an integer >= 1"),
        ({"horizon_s": 0.0}, "horizon_s must be a finite number > 0"),
        ({"horizon_s": float("inf")}, "horizon_s must be a finite number > 0"),
        ({"infer_weight": -1.0}, "infer_weight must be a number >= 0"),
        ({"candidates": ()}, "at least one candidate"),
        ({"candidates": "ats"}, "at least one candidate"),
    ):
        with pytest.raises(ValueError, match=message):
            LookaheadSettings(**kwargs)  # type: ignore[arg-type]
    for bin_s in (0.0, "600"):
        with pytest.raises(ValueError, match="bin_s must be a finite number > 0"):
            MpcPolicy(bin_s=bin_s)  # type: ignore[arg-type]
    for candidates, message in (
        (("no-such-policy",), "unknown policy"),
        (("ats", "oracle-lookahead"), "looks into the simulator"),
    ):
        with pytest.raises(ValueError, match=message):
            MpcPolicy(LookaheadSettings(candidates=candidates))


def test_simulate_cli_runs_it(workload: Workload, tmp_path: Path) -> None:
    from deepboot_harness.cli import main
    from traces.generate import write_workload_csv

    small = _cut(workload, workload.jobs[3].arrival)
    path = write_workload_csv(small, tmp_path / "small.csv")
    out = tmp_path / "m.json"
    argv = ["simulate", "--workload", str(path), "--policy", "mpc", "--json", str(out), "--quiet"]
    assert main(argv) == 0
    assert json.loads(out.read_text())["train_jobs_done"] == len(small.jobs)
