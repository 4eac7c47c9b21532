"""Workload families: seeded scenarios, disjoint seed ranges, the env on a distribution, and
``deepboot generate --family`` writing exactly what the env draws."""

from __future__ import annotations

import json

import numpy as np
import pytest
from builders import REPO

from deepboot_env.env import DeepBootEnv
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.scenario import Scenario
from deepboot_env.workload_sources import scenario_sampler
from deepboot_harness.cli import main
from traces.families import (
    FAMILIES,
    PARAMETERS,
    SPLIT_SEEDS,
    FamilyError,
    FamilySampler,
    Integers,
    Uniform,
    family_sampler,
    sample_scenario,
    service_times,
    split_of,
)
from traces.generate import generate_periodic_inference
from traces.loaders import load_workload
from traces.make_shipped import SPLIT_SEEDS as SHIPPED_SEEDS

TEST_SEED = SPLIT_SEEDS["test"][0]


def test_at_least_five_named_families_each_with_its_own_draw() -> None:
    assert len(FAMILIES) >= 5
    draws = {name: tuple(sorted(family.draw(TEST_SEED).items())) for name, family in FAMILIES.items()}
    assert len(set(draws.values())) == len(FAMILIES)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_same_family_and_seed_give_an_identical_scenario(family: str) -> None:
    first, again = sample_scenario(family, TEST_SEED + 3), sample_scenario(family, TEST_SEED + 3)
    assert first == again
    assert first.workload.jobs == again.workload.jobs and first.workload.requests == again.workload.requests
    other = sample_scenario(family, TEST_SEED + 4)
    assert other.workload.jobs != first.workload.jobs or other.workload.requests != first.workload.requests


def test_split_seed_ranges_never_overlap_and_avoid_the_shipped_seeds() -> None:
    ranges = list(SPLIT_SEEDS.values())
    for i, a in enumerate(ranges):
        for b in ranges[i + 1 :]:
            assert a.stop <= b.start or b.stop <= a.start
    shipped = {seed for seeds in SHIPPED_SEEDS.values() for seed in seeds}
    assert all(split_of(seed) is None for seed in shipped)
    assert split_of(SPLIT_SEEDS["val"][0]) == "val" and split_of(SPLIT_SEEDS["test"][-1]) == "test"


def test_a_sampler_draws_its_seeds_from_its_own_split_only() -> None:
    rng = np.random.default_rng(0)
    for split, seeds in SPLIT_SEEDS.items():
        sampler = FamilySampler("mixed", split)
        assert all(sampler.draw_seed(rng) in seeds for _ in range(200))


def test_philly_periodic_is_the_shipped_setting() -> None:
    """philly-periodic draws with the shipped generator settings: seed 101 is train-01."""
    scenario = sample_scenario("philly-periodic", 101)
    shipped = load_workload("train-01")
    assert scenario.workload.jobs == shipped.jobs and scenario.workload.requests == shipped.requests
    assert scenario.cluster == ClusterConfig() and scenario.restart == "afe"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_scenarios_follow_their_drawn_parameters(family: str) -> None:
    fam = FAMILIES[family]
    for seed in range(TEST_SEED, TEST_SEED + 4):
        scenario = sample_scenario(family, seed)
        params = dict(scenario.params)
        assert list(params) == list(PARAMETERS)
        for name, value in params.items():
            rng = fam.param(name)
            if isinstance(rng, Uniform | Integers):
                assert rng.low <= value <= rng.high, (name, value)
        cluster = scenario.cluster
        assert cluster is not None
        assert (cluster.train_nodes, cluster.infer_nodes, cluster.gpus_per_node) == (
            params["train_nodes"],
            params["infer_nodes"],
            params["gpus_per_node"],
        )
        train_gpus = cluster.train_nodes * cluster.gpus_per_node
        at_load_1 = round(20.0 * params["window_hours"] * train_gpus / 32.0)
        assert len(scenario.workload.jobs) == round(at_load_1 * params["load"])
        assert max(j.arrival for j in scenario.workload.jobs) < params["window_hours"] * 3600
        bounds = service_times(params["service_scale"])
        for request in scenario.workload.requests:
            lo, hi = bounds[request.app]
            assert lo <= request.duration <= hi
        instances = {r.instance for r in scenario.workload.requests}
        assert len(instances) == 6 * params["instances_per_app"]


def test_heavy_inference_peaks_beyond_the_shipped_setting() -> None:
    """The heavy-inference family's offered load at its peak is above the shipped setting's."""

    def peak_share(scenario: Scenario) -> float:
        params = dict(scenario.params)
        return params["inference_load"] * (1 + params["amplitude"])

    shipped = peak_share(sample_scenario("philly-periodic", TEST_SEED))
    heavy = [peak_share(sample_scenario("heavy-inference", s)) for s in range(TEST_SEED, TEST_SEED + 10)]
    assert min(heavy) > shipped and max(heavy) > 0.9


def test_bursts_add_arrivals_inside_the_bursts_only() -> None:
    base = generate_periodic_inference(horizon_s=86400.0, mean_gpus=8.0, seed=3)
    assert generate_periodic_inference(horizon_s=86400.0, mean_gpus=8.0, seed=3, bursts=0) == base
    bursty = generate_periodic_inference(
        horizon_s=86400.0, mean_gpus=8.0, seed=3, bursts=2, burst_s=1200.0, burst_factor=5.0
    )
    assert len(bursty) > len(base)
    hist = np.bincount([int(r.arrival // 1200) for r in bursty], minlength=72)
    quiet = np.bincount([int(r.arrival // 1200) for r in base], minlength=72)
    assert (hist >= quiet).all() and (hist - quiet).max() > 3 * quiet.max() / 2
    with pytest.raises(ValueError, match="burst"):
        generate_periodic_inference(horizon_s=3600.0, bursts=1, burst_s=7200.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sample_scenario("no-such-family", 1), "unknown workload family 'no-such-family'; known: philly"),
        (lambda: sample_scenario("mixed", -1), "integer >= 0"),
        (lambda: family_sampler("family:mixed:holdout"), "unknown split 'holdout'"),
        (lambda: family_sampler("family:"), "expected family:<name>"),
    ],
)
def test_bad_family_input_gets_a_clear_error(call, message: str) -> None:
    with pytest.raises(FamilyError, match=message):
        call()


# ----------------------------------------------------------------------------------------------
# the env on a distribution


def test_the_env_draws_a_scenario_per_reset_deterministically_from_the_reset_seed() -> None:
    env = DeepBootEnv(workload="family:short-period", max_jobs=8)
    _, info = env.reset(seed=11)
    first = info["scenario_seed"]
    assert info["family"] == "short-period" and first in SPLIT_SEEDS["train"]
    _, info = env.reset()
    assert info["scenario_seed"] != first
    _, info = env.reset(seed=11)
    assert info["scenario_seed"] == first
    other = DeepBootEnv(workload="family:short-period", max_jobs=8)
    _, info = other.reset(seed=11)
    assert info["scenario_seed"] == first


def test_the_env_runs_the_scenario_on_its_cluster_with_its_restart_model() -> None:
    env = DeepBootEnv(workload="family:mixed:val", max_jobs=8)
    seed = next(s for s in SPLIT_SEEDS["val"] if sample_scenario("mixed", s).cluster != ClusterConfig())
    _, info = env.reset(options={"scenario_seed": seed})
    scenario = sample_scenario("mixed", seed)
    assert env.scenario == scenario
    assert env.sim is not None and env.sim.config.cluster == scenario.cluster
    assert env.sim.config.restart == scenario.restart and info["cluster"] == scenario.cluster.describe()
    obs, *_ = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs)


def test_reset_options_are_checked() -> None:
    env = DeepBootEnv(workload="family:bursty", max_jobs=8)
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"scenario": 3})
    plain = DeepBootEnv(workload=sample_scenario("bursty", TEST_SEED).workload, max_jobs=8)
    with pytest.raises(ValueError, match="scenario_seed needs a scenario sampler"):
        plain.reset(options={"scenario_seed": 3})


def test_family_names_resolve_to_samplers() -> None:
    sampler = scenario_sampler("family:heavy-inference:test")
    assert sampler == FamilySampler("heavy-inference", "test")
    assert scenario_sampler("test-01") is None


def test_the_scenario_the_env_draws_is_the_one_deepboot_generate_writes(tmp_path, capsys) -> None:
    family, seed = "mixed", SPLIT_SEEDS["test"][5]
    out = tmp_path / "scenario.csv"
    assert main(["generate", "--family", family, "--seed", str(seed), "--out", str(out)]) == 0
    written = load_workload(out)
    sidecar = json.loads((tmp_path / "scenario.scenario.json").read_text())
    env = DeepBootEnv(workload=f"family:{family}:test", max_jobs=8)
    env.reset(options={"scenario_seed": seed})
    drawn = env.scenario
    assert drawn is not None and drawn.cluster is not None
    assert drawn.workload.jobs == written.jobs and drawn.workload.requests == written.requests
    assert sidecar == json.loads(json.dumps(drawn.describe()))
    assert sidecar["cluster"] == drawn.cluster.describe() and sidecar["restart"] == drawn.restart


def test_generate_refuses_generator_flags_with_a_family(capsys) -> None:
    assert main(["generate", "--family", "mixed", "--seed", "5", "--load", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "deepboot generate: error: --family draws every generator parameter itself; drop --load"
    assert main(["generate", "--family", "nope", "--seed", "5"]) == 2
    assert "unknown workload family 'nope'" in capsys.readouterr().err


def test_generate_without_out_writes_the_csv_to_standard_output(capsys) -> None:
    assert main(["generate", "--seed", "4", "--num-jobs", "5", "--horizon-hours", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("name,time,application") and len(lines) > 6


def test_the_docs_tabulate_the_families_as_the_code_defines_them() -> None:

    from traces.families import family_table_markdown

    docs = (REPO / "docs" / "workloads.md").read_text(encoding="utf-8")
    assert family_table_markdown() in docs


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_job_fits_its_scenario_cluster_for_gang_policies(family: str) -> None:
    """Fixed-batch policies gang-schedule the requested GPUs: no job may ask for more than the
    scenario's cluster holds (small mixed clusters draw among the options that fit)."""
    for seed in range(TEST_SEED, TEST_SEED + 10):
        scenario = sample_scenario(family, seed)
        assert scenario.cluster is not None
        total = scenario.cluster.total_gpus
        scenario.workload.check_fits(total, scenario.cluster.describe())
        assert max(j.num_replicas for j in scenario.workload.jobs) <= total
