"""The JCT lower bounds (docs/bounds.md): their pieces, and bound <= optimum <= every policy.

The property test draws small random scenarios (restart models, truths, lending on and off,
shared pools, Aryl mode, interference) and checks that every bound stays below every policy's mean
JCT; on tiny instances the exhaustive optimum of the simulator sits in between.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from baselines.hesrpt_oracle import HesrptOraclePolicy, hesrpt_shares
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import make_policy
from deepboot_env.sim.apps import APP_NAMES, AppProfile, default_profiles
from deepboot_env.sim.bounds import ceilings, jct_bounds
from deepboot_env.sim.bounds.capacity import StepCurve, inference_floor, inference_gpus, training_capacity
from deepboot_env.sim.bounds.envelope import concave_lines, earliest_progress, fewer_lines, hull_vertices, rate_ceiling
from deepboot_env.sim.bounds.exhaustive import exhaustive_optimum
from deepboot_env.sim.bounds.lp import lp_bound
from deepboot_env.sim.bounds.pooled import most_completed, srpt_completions, srpt_count
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.config import SimConfig
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.training import job_rate_table, progress_truth
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload

POLICIES = ("ats", "ats-nolend", "ats-srpt", "hesrpt-oracle", "fifo", "optimus")
"""Fast policies of both kinds (adaptive and fixed-batch), lending and not."""


def scaled_profiles(factor: float) -> dict[str, AppProfile]:
    """The shipped applications with every epoch's progress times ``factor`` (short jobs)."""
    return {
        name: dataclasses.replace(app, epoch_progress=app.epoch_progress * factor)
        for name, app in default_profiles().items()
    }


SHORT = scaled_profiles(0.02)
TINY = {**default_profiles(), "cifar10": scaled_profiles(0.03)["cifar10"], "bert": scaled_profiles(0.05)["bert"]}


def run(policy: str, workload: Workload, config: SimConfig, profiles: dict[str, AppProfile]) -> float:
    """Mean training JCT of ``policy`` with application ``profiles``."""
    pol = make_policy(policy)
    pol.reset(0)
    sim = Simulator(workload, config, pol, profiles)
    while not sim.done:
        sim.apply(pol.decide(sim.observe()))
        sim.advance()
    metrics = sim.metrics()
    assert metrics.train_jobs_done == metrics.train_jobs
    return metrics.train_jct_mean


def random_scenario(seed: int) -> tuple[Workload, SimConfig]:
    """A small random scenario: 1-2 training nodes, 0-2 inference nodes (or a shared pool),
    2-4 GPUs per node, 2-6 short jobs, up to 30 requests, any restart model and truth."""
    rng = np.random.default_rng(seed)
    g = int(rng.integers(2, 5))
    shared = rng.random() < 0.2
    if shared:
        cluster = ClusterConfig(int(rng.integers(2, 4)), 0, g, shared_pool=True)
    else:
        cluster = ClusterConfig(int(rng.integers(1, 3)), int(rng.integers(0, 3)), g)
    profiles = default_profiles()
    jobs = []
    for i, t in enumerate(np.sort(rng.uniform(0, 900, int(rng.integers(2, 7))))):
        app = str(rng.choice(APP_NAMES))
        batch = int(min(profiles[app].max_batch_size, profiles[app].init_batch_size * 2 ** int(rng.integers(0, 3))))
        jobs.append(TrainingJobSpec(f"j{i}", float(round(t)), app, int(rng.integers(1, cluster.total_gpus + 1)), batch))
    requests = []
    if cluster.infer_nodes or shared:
        for i, t in enumerate(np.sort(rng.uniform(0, 1500, int(rng.integers(0, 31))))):
            app = str(rng.choice(APP_NAMES))
            inst = f"infer-{app}-{int(rng.integers(1, 3))}"
            requests.append(InferenceRequestSpec(f"r{i}", float(round(t)), inst, app, float(rng.integers(5, 300))))
    config = SimConfig(
        cluster=cluster,
        restart=str(rng.choice(["afe", "full", "stopfree", "pollux"])),
        truth=str(rng.choice(["fitted", "measured"])),
        cap_growth=str(rng.choice(["allocated", "trained"])),
        protect_scale=float(rng.choice([0.5, 1.0, 2.0])),
        interference=0.25 if rng.random() < 0.2 else None,
        inference_placement="aryl" if (shared and rng.random() < 0.5) else "deepboot",
    )
    return Workload(f"random-{seed}", tuple(jobs), tuple(requests)), config


# ------------------------------------------------------------------------------------------
# the pieces


def test_concave_lines_are_the_least_concave_majorant():
    slopes, intercepts = concave_lines([0.0, 1.0, 1.8, 2.2, 2.3, 2.3])
    ks = np.arange(6)
    values = (slopes[:, None] * ks + intercepts[:, None]).min(axis=0)
    np.testing.assert_allclose(values, [0.0, 1.0, 1.8, 2.2, 2.3, 2.3])
    assert slopes[0] == 1.0 and intercepts[0] == 0.0 and slopes[-1] == 0.0
    # a point below the chord is lifted to it: (2, 1) lies under the chord from (1, 1) to (3, 3)
    slopes, intercepts = concave_lines([0.0, 1.0, 1.0, 3.0])
    np.testing.assert_allclose((slopes[:, None] * ks[:4] + intercepts[:, None]).min(axis=0), [0, 1, 2, 3])
    k, y = hull_vertices([0.0, 1.0, 1.8, 2.2, 2.3, 2.3])
    np.testing.assert_allclose(k, [1, 2, 3, 4])
    np.testing.assert_allclose(y, [1.0, 1.8, 2.2, 2.3])


def test_fewer_lines_stay_above():
    rng = np.random.default_rng(3)
    curve = np.concatenate([[0.0], np.cumsum(rng.uniform(0, 1, 40) ** 2 * np.linspace(1, 0.05, 40))])
    slopes, intercepts = concave_lines(curve)
    few_s, few_i = fewer_lines(slopes, intercepts, 4, 40)
    ks = np.arange(41)
    exact = (slopes[:, None] * ks + intercepts[:, None]).min(axis=0)
    loose = (few_s[:, None] * ks + few_i[:, None]).min(axis=0)
    assert len(few_s) == 4 < len(slopes)
    assert np.all(loose >= exact - 1e-12) and np.all(exact >= curve - 1e-12)
    assert loose[0] == 0.0 and loose[-1] == pytest.approx(curve.max())


@pytest.mark.parametrize("truth", ["fitted", "measured"])
def test_rate_ceiling_is_above_every_placement(truth):
    """The ceiling is at least the true rate of every placement of every GPU count."""
    config = sim_config(cluster="3x4+2x4", truth=truth)
    rng = np.random.default_rng(0)
    for app in default_profiles().values():
        table = job_rate_table(app, None, config.cluster.total_gpus, config.batch_stats)
        rates = progress_truth(table, "pollux" if truth == "measured" else None)
        ceiling = rate_ceiling(rates, table.max_replicas, config.cluster.num_nodes, 4)
        for _ in range(40):
            counts = rng.integers(0, 5, size=5) * (rng.random(5) < 0.6)
            k = int(counts.sum())
            if not 1 <= k <= table.max_replicas:
                continue
            cls = rates.placement_class(counts.tolist(), int(np.count_nonzero(counts)) > 1)
            column = np.asarray(rates.rate_column(cls, k))
            assert np.all(column <= ceiling[:, k] + 1e-12)
            assert np.all(np.diff(ceiling, axis=1) >= 0)


@pytest.mark.parametrize(
    ("restart", "stall"),
    [("full", 103.0), ("pollux", 30.0), ("afe", 5.0), ("stopfree", 5.0)],
)
def test_earliest_progress(restart, stall):
    bert = default_profiles()["bert"]
    assert earliest_progress(61.0, bert, SimConfig(restart=restart)) == 120.0 + stall
    assert earliest_progress(120.0, bert, SimConfig(restart=restart)) == 120.0 + stall


def test_step_curve_integral():
    curve = StepCurve(np.array([0.0, 10.0, 15.0]), np.array([2.0, 5.0, 1.0]))
    assert float(curve.integral(0.0, 20.0)) == 2 * 10 + 5 * 5 + 1 * 5
    assert float(curve.integral(12.0, 16.0)) == 5 * 3 + 1
    np.testing.assert_allclose(curve.at([0, 9.9, 10, 14, 100]), [2, 2, 5, 5, 1])


def test_inference_floor_counts_running_and_protected_pods():
    """Two requests of one instance overlapping need two GPUs; after one finishes, the instance
    holds at least one GPU for the shortest protect time (30 s at scale 1), counted once per
    instance (the protected pod may be the one serving the next request)."""
    reqs = [
        InferenceRequestSpec("a", 0.0, "infer-bert-1", "bert", 100.0),
        InferenceRequestSpec("b", 50.0, "infer-bert-1", "bert", 100.0),
        InferenceRequestSpec("c", 60.0, "infer-ncf-1", "ncf", 10.0),
    ]
    floor = inference_floor(reqs, 1.0, limit=8)
    np.testing.assert_allclose(floor.at([0, 55, 65, 75, 120, 149, 150, 179, 180]), [1, 2, 3, 3, 1, 1, 1, 1, 0])
    assert float(inference_floor(reqs, 1.0, limit=2).values.max()) == 2


@pytest.mark.parametrize("policy", ["ats", "ats-nolend", "fifo"])
@pytest.mark.parametrize("family", ["heavy-inference", "short-requests"])
def test_inference_floor_below_the_simulated_pods(policy, family):
    """In every interval of the timeline, RUNNING plus PROTECT GPUs are at least the floor's mean."""
    from traces.families import sample_scenario

    scenario = sample_scenario(family, 2_000_003)
    config = scenario.configure(sim_config(dynamics="v1"))
    metrics = run_episode(policy, scenario.workload, config, seed=0)
    floor = inference_floor(scenario.workload.requests, config.protect_scale, inference_gpus(config)[1])
    rows = np.array(metrics.timeline)
    ends = rows[:, 0]
    starts = np.concatenate([[0.0], ends[:-1]])
    keep = ends > starts
    mean_floor = floor.integral(starts[keep], ends[keep]) / (ends[keep] - starts[keep])
    held = rows[keep, 3] + rows[keep, 4]
    assert np.all(held >= mean_floor - 1e-9)
    assert float(np.sum(mean_floor * (ends[keep] - starts[keep]))) > 0.6 * float(
        np.sum(held * (ends[keep] - starts[keep]))
    )


def test_srpt_is_optimal_on_a_constant_machine():
    """Known SRPT schedule: sizes 4, 1, 2 released at 0, 1, 1 on speed 1."""
    capacity = StepCurve(np.array([0.0]), np.array([1.0]))
    done = srpt_completions(np.array([0.0, 1.0, 1.0]), np.array([4.0, 1.0, 2.0]), capacity)
    np.testing.assert_allclose(done, [7.0, 2.0, 4.0])
    # speed 2 from t = 2 on halves what is left
    faster = StepCurve(np.array([0.0, 2.0]), np.array([1.0, 2.0]))
    np.testing.assert_allclose(srpt_completions(np.array([0.0]), np.array([4.0]), faster), [3.0])
    assert srpt_count(np.array([0.0, 1.0, 1.0]), np.array([4.0, 1.0, 2.0]), 4.0) == 2
    assert srpt_count(np.array([0.0, 1.0, 1.0]), np.array([4.0, np.inf, 2.0]), 4.0) == 1


@pytest.mark.parametrize("seed", range(30))
def test_srpt_count_beats_random_schedules(seed):
    """No schedule of a unit machine completes more jobs by t than SRPT (pathwise optimality)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 7))
    release = np.sort(rng.uniform(0, 5, n))
    size = rng.uniform(0.2, 3, n)
    # a random preemptive schedule: in each small step, serve a random released unfinished job
    left, now, dt, done_at = size.copy(), 0.0, 0.01, np.full(n, np.inf)
    while np.isinf(done_at).any():
        ready = np.flatnonzero((release <= now) & np.isinf(done_at))
        if len(ready):
            i = int(rng.choice(ready))
            left[i] -= dt
            if left[i] <= 1e-12:
                done_at[i] = now + dt
        now += dt
    for t in rng.uniform(0, now, 10):
        assert srpt_count(release, size, float(t)) >= int(np.count_nonzero(done_at <= t - 1e-9))


def test_most_completed_is_monotone_and_ends_with_every_job():
    workload, config = random_scenario(11)
    jobs = ceilings(workload, config, True, SHORT)
    capacity = training_capacity(workload.requests, config)
    times = np.linspace(0, 20_000, 60)
    completed = most_completed(jobs, capacity, times)
    assert np.all(np.diff(completed) >= 0)
    assert completed[0] == 0 and completed[-1] == len(jobs)


def test_gpu_time_curve_is_convex_and_decreasing():
    jobs = ceilings(Workload("w", (TrainingJobSpec("a", 0.0, "yolov3", 4, 64),)), sim_config(dynamics="v1"), True)
    times, gpu = jobs[0].gpu_time_curve()
    assert times[0] == pytest.approx(jobs[0].alone_seconds)
    assert gpu[-1] == pytest.approx(jobs[0].gpu_seconds)
    assert np.all(np.diff(times) > 0) and np.all(np.diff(gpu) <= 1e-9)
    slopes = np.diff(gpu) / np.diff(times)  # GPU-seconds per second of time added: increasing
    assert np.all(np.diff(slopes) >= -1e-6 * np.abs(slopes).max())


# ------------------------------------------------------------------------------------------
# the bounds


def test_bounds_on_a_family_scenario_golden():
    """Pinned values on the first test seed of philly-periodic (DeepBoot-v1 dynamics)."""
    from traces.families import sample_scenario

    scenario = sample_scenario("philly-periodic", 2_000_000)
    bounds = jct_bounds(scenario.workload, scenario.configure(sim_config(dynamics="v1")))
    assert bounds.alone == pytest.approx(833.5, abs=1.0)
    assert bounds.pooled == pytest.approx(833.5, abs=1.0)
    assert bounds.pooled_speed == pytest.approx(971.6, abs=0.5)
    assert bounds.best == bounds.pooled_speed and bounds.lp is None
    again = jct_bounds(scenario.workload, scenario.configure(sim_config(dynamics="v1")))
    assert again.as_dict() == bounds.as_dict()


def test_lp_bound_is_a_bound_and_reports_its_size():
    workload, config = random_scenario(5)
    jobs = ceilings(workload, config, True, SHORT)
    capacity = training_capacity(workload.requests, config)
    result = lp_bound(jobs, capacity, slot=60.0, interval=config.interval)
    policies = {p: run(p, workload, config, SHORT) for p in ("ats", "ats-srpt")}
    assert result.bound <= min(policies.values())
    assert result.bound >= np.mean([j.start + j.fastest - j.arrival for j in jobs]) - 1e-6
    assert result.variables > 0 and result.constraints > 0 and result.nonzeros > 0
    assert np.all(result.prices >= -1e-9) and len(result.prices) == len(result.slots)


def test_no_training_jobs_is_one_clear_error():
    workload = Workload("only-inference", (), (InferenceRequestSpec("r", 0.0, "infer-ncf-1", "ncf", 5.0),))
    with pytest.raises(ValueError, match="no training jobs"):
        jct_bounds(workload, SimConfig())


@pytest.mark.parametrize("restart", ["afe", "full", "stopfree"])
@pytest.mark.parametrize("truth", ["fitted", "measured"])
def test_bound_below_the_exhaustive_optimum_below_every_policy(restart, truth):
    """Tiny instance: two short jobs and three requests on one training and one inference node
    of 2 GPUs; every allocation at every boundary is tried."""
    jobs = (TrainingJobSpec("a", 10.0, "cifar10", 2, 256), TrainingJobSpec("b", 70.0, "bert", 2, 24))
    reqs = tuple(InferenceRequestSpec(f"r{i}", 30.0 + 100 * i, "infer-ncf-1", "ncf", 80.0) for i in range(3))
    workload = Workload("tiny", jobs, reqs)
    config = SimConfig(cluster=ClusterConfig(1, 1, 2), restart=restart, truth=truth)
    bounds = jct_bounds(workload, config, lp=True, lp_slot=60.0, profiles=TINY)
    optimum = exhaustive_optimum(workload, config, profiles=TINY)
    adaptive = {p: run(p, workload, config, TINY) for p in ("ats", "ats-srpt", "ats-nolend", "hesrpt-oracle")}
    assert bounds.lp is not None and bounds.lp >= bounds.alone
    assert bounds.best <= optimum.best <= min(adaptive.values())
    assert bounds.best <= run("fifo", workload, config, TINY)
    assert optimum.episodes > 1


def test_exhaustive_optimum_golden():
    """The tiny instance's optimum under AFE and the fitted truth, and how far the bound is."""
    jobs = (TrainingJobSpec("a", 10.0, "cifar10", 2, 256), TrainingJobSpec("b", 70.0, "bert", 2, 24))
    reqs = tuple(InferenceRequestSpec(f"r{i}", 30.0 + 100 * i, "infer-ncf-1", "ncf", 80.0) for i in range(3))
    workload = Workload("tiny", jobs, reqs)
    config = SimConfig(cluster=ClusterConfig(1, 1, 2))
    assert exhaustive_optimum(workload, config, profiles=TINY).best == 329.0
    assert jct_bounds(workload, config, profiles=TINY).best == pytest.approx(192.5, abs=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("block", range(10))
def test_bounds_below_every_policy_on_random_scenarios(block):
    """200 random small scenarios (20 per block): every bound <= every policy's mean JCT."""
    for seed in range(block * 20, block * 20 + 20):
        workload, config = random_scenario(seed)
        bounds = jct_bounds(workload, config, profiles=SHORT)
        for policy in POLICIES:
            jct = run(policy, workload, config, SHORT)
            assert bounds.best <= jct + 1e-6, (seed, policy, bounds.as_dict(), jct)


def test_hesrpt_shares():
    shares = hesrpt_shares([100.0, 10.0, 50.0], 0.5)
    assert shares.sum() == pytest.approx(1.0)
    assert shares[1] > shares[2] > shares[0]  # the shortest gets the most
    np.testing.assert_allclose(hesrpt_shares([5.0, 5.0], 0.5), [0.75, 0.25])  # ties: the earlier counts shorter
    with pytest.raises(ValueError, match="speedup_power"):
        HesrptOraclePolicy(speedup_power=1.0)
    assert math.isfinite(run("hesrpt-oracle", *random_scenario(2), SHORT))
