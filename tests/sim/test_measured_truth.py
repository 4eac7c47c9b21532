"""The measured truth (``SimConfig(truth="measured")``, docs/goodput.md §9) and its shipped table.

* Golden single jobs: the eleven fixed-configuration jobs of the fidelity trace (Tiresias gang,
  ``--restart pollux``, 16x4 training-only cluster, one job arriving at t = 10 s) reproduce the
  Pollux artifact's JCTs with the measured truth and stay at the fitted model's with the default.
* The shipped ``step_times.json`` against its definition: interpolation at and between traced
  points, rotation-equivalent shapes, the grid beyond 4 nodes, the two trace sets, the fallback.
* Tests that need the raw traces read ``../shared/data/apps`` and skip cleanly when it is absent
  (the shipped table equals what calibration computes; the grid equals a pandas/scipy rebuild).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from builders import REPO, SHARED_DATA, check_completion_bounds

from deepboot_env.config import EnvConfig, EnvConfigError
from deepboot_env.env import DeepBootEnv
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import BasePolicy
from deepboot_env.sim.apps import APP_NAMES, get_app
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.goodput import iteration_time
from deepboot_env.sim.jobs import TrainingJob
from deepboot_env.sim.measured import (
    STEP_TIMES_PATH,
    MeasuredRates,
    barycentric_transforms,
    canonical_shape,
    load_step_times,
    shared_measured_rates,
)
from deepboot_env.sim.rates import shared_rate_table
from deepboot_env.sim.restart import Phase, plan_change
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.state import Allocation
from deepboot_env.sim.workload import TrainingJobSpec, Workload
from deepboot_harness.cli import main
from traces.generate import generate_workload

DATA_APPS = SHARED_DATA / "apps"
SHIPPED = REPO / "deepboot_env" / "sim" / STEP_TIMES_PATH

# The fidelity study's single-job table (d), "Fixed configuration" (docs/goodput.md §9.6):
# (app, GPUs, batch) -> (the Pollux artifact's JCT, the fitted model's JCT).
GOLDEN = {
    ("cifar10", 1, 128): (4080, 4080),
    ("cifar10", 4, 512): (1250, 1251),
    ("cifar10", 8, 1024): (1403, 1104),
    ("deepspeech2", 4, 80): (6450, 6368),
    ("deepspeech2", 8, 320): (3610, 3557),
    ("bert", 4, 48): (3667, 3714),
    ("bert", 8, 96): (4887, 3329),
    ("yolov3", 8, 64): (26222, 18192),
    ("yolov3", 16, 128): (11621, 11890),
    ("ncf", 1, 32768): (127, 131),
    ("imagenet", 16, 3200): (44912, 41556),
}


def _single_job_jct(app: str, gpus: int, batch: int, **config: str) -> float:
    cluster = ClusterConfig(train_nodes=16, infer_nodes=0, gpus_per_node=4)
    workload = Workload("one", (TrainingJobSpec("j", 10.0, app, gpus, batch),))
    return run_episode("tiresias", workload, SimConfig(cluster=cluster, restart="pollux", **config)).jcts["j"]


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}")
def test_fixed_configuration_jobs_match_the_original_with_the_measured_truth(case) -> None:
    original, _ = GOLDEN[case]
    assert abs(_single_job_jct(*case, truth="measured") - original) <= 1.0


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}")
def test_fixed_configuration_jobs_keep_the_fitted_numbers_by_default(case) -> None:
    _, fitted = GOLDEN[case]
    assert _single_job_jct(*case) == fitted
    assert _single_job_jct(*case, truth="fitted", trace_set="deepboot") == fitted


def test_both_trace_sets_agree_on_the_golden_jobs() -> None:
    """The golden jobs run on shapes of at most 4 nodes, which both trace sets measured alike."""
    for case, (original, _) in GOLDEN.items():
        assert abs(_single_job_jct(*case, truth="measured", trace_set="deepboot") - original) <= 1.0


# ------------------------------------------------------------------------------------ the table


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(SHIPPED.read_text())


@pytest.fixture(scope="module", params=["pollux", "deepboot"])
def steps(request):
    return load_step_times(request.param)


def test_shipped_table_is_compact_attributed_and_has_both_sets(shipped) -> None:
    assert SHIPPED.stat().st_size < 400_000
    assert shipped["license"] == "Apache-2.0" and "Petuum" in shipped["source"]
    assert set(shipped["trace_sets"]) == {"pollux", "deepboot"}
    for app in APP_NAMES:
        pollux = shipped["trace_sets"]["pollux"]
        deepboot = shipped["trace_sets"]["deepboot"]
        assert len(pollux["shapes"][app]) == 108 and not pollux["copies"][app]
        # DeepBoot's file repeats every shape with its digits shifted by 4, timed identically
        assert deepboot["shapes"][app] == pollux["shapes"][app]
        shifted = {"".join(str(int(c) + 4) for c in ident): ident for ident in pollux["shapes"][app]}
        assert deepboot["copies"][app] == shifted


def test_interpolation_is_exact_at_traced_points_and_linear_between(shipped, steps) -> None:
    for app in APP_NAMES:
        table = steps[app]
        for ident in ("1", "12", "44", "132", "4444"):
            m, step, sync = (np.asarray(v, dtype=float) for v in shipped["apps"][app]["shapes"][ident])
            got_step, got_sync = table.times(ident, m)
            np.testing.assert_array_equal(got_step, step)
            np.testing.assert_array_equal(got_sync, sync)
            mid = (m[:-1] + m[1:]) / 2
            mid_step, _ = table.times(ident, mid)
            np.testing.assert_allclose(mid_step, (step[:-1] + step[1:]) / 2, rtol=1e-12)
            outside_step, _ = table.times(ident, np.array([m[0] - 1, m[-1] + 1]))
            assert np.isnan(outside_step).all()


def test_traced_points_equal_the_raw_traces() -> None:
    if not DATA_APPS.is_dir():
        pytest.skip(f"raw traces not available at {DATA_APPS}")
    import pandas as pd

    for trace_set, file in (("pollux", "origin_placements.csv"), ("deepboot", "placements.csv")):
        steps = load_step_times(trace_set)
        for app in APP_NAMES:
            raw = pd.read_csv(DATA_APPS / app / file)
            table = steps[app]
            for pid, rows in raw.groupby("placement"):
                step, sync = table.times(str(pid), rows.local_bsz.to_numpy(float))
                np.testing.assert_allclose(step, rows.step_time, rtol=5e-7, err_msg=f"{trace_set} {app} {pid}")
                np.testing.assert_allclose(sync, rows.sync_time, rtol=5e-7, err_msg=f"{trace_set} {app} {pid}")


def test_shapes_are_normalised_by_rotation(steps) -> None:
    assert canonical_shape([0, 2, 0, 1]) == canonical_shape([1, 2]) == (1, 2)
    assert canonical_shape([2, 3, 1]) == canonical_shape([3, 1, 2]) == (1, 2, 3)
    assert canonical_shape([1, 3, 2]) == (1, 3, 2)  # a reflection is another measured shape
    table = steps["cifar10"]
    assert table.placement_class([2, 1, 0, 0]) == table.placement_class([0, 0, 1, 2]) == "12"
    assert table.placement_class([0, 3, 1, 2]) == "123" != table.placement_class([1, 3, 2, 0]) == "132"
    rates = MeasuredRates(shared_rate_table(get_app("cifar10"), 64), table)
    assert rates.rate_column(table.placement_class([2, 1]), 3) == rates.rate_column(table.placement_class([1, 2]), 3)
    assert rates.rate_column("123", 6) != rates.rate_column("132", 6)


def test_a_job_runs_alike_on_rotated_placements() -> None:
    """End to end: a job pinned to (2, 1) or to (1, 2) GPUs per node finishes at the same time."""

    class Pinned(BasePolicy):
        adaptive_batch = False

        def __init__(self, counts: list[int]) -> None:
            self.counts = counts

        def decide(self, state):
            return Allocation({job.id: np.array(self.counts) for job in state.jobs})

    cluster = ClusterConfig(train_nodes=2, infer_nodes=0, gpus_per_node=4)
    workload = Workload("one", (TrainingJobSpec("j", 0.0, "cifar10", 3, 384),))
    config = SimConfig(cluster=cluster, restart="pollux", truth="measured")
    a, b = (run_episode(Pinned(c), workload, config).jcts["j"] for c in ([2, 1], [1, 2]))
    fitted = run_episode(Pinned([2, 1]), workload, SimConfig(cluster=cluster, restart="pollux")).jcts["j"]
    assert a == b != fitted


def test_shapes_beyond_four_nodes_use_the_grid(steps) -> None:
    table = steps["cifar10"]
    assert table.placement_class([4] * 5) == (5, 20)
    assert table.placement_class([4] * 17) == (16, 68)  # nodes capped at 16
    assert table.placement_class([9]) == (1, 9)  # more GPUs on a node than any measured shape
    # at a scalability point the grid returns the measurement itself
    n, k, m, step, sync = table.scalability[0]
    got_step, got_sync = table.times((int(n), int(k)), np.array([m]))
    assert got_step[0] == pytest.approx(step, rel=1e-12) and got_sync[0] == pytest.approx(sync, rel=1e-12)
    # and between the 4-node shapes and the 6-node rows it interpolates
    five, _ = table.times((5, 20), np.array([64.0, 128.0]))
    assert np.all(np.isfinite(five)) and np.all(five > 0)


def test_the_deepboot_copies_move_the_grid_but_not_the_known_shapes() -> None:
    pollux, deepboot = load_step_times("pollux")["cifar10"], load_step_times("deepboot")["cifar10"]
    m = np.array([32.0, 64.0, 128.0])
    np.testing.assert_array_equal(pollux.times("44", m)[0], deepboot.times("44", m)[0])
    assert deepboot.placement_class([5]) == "5" and pollux.placement_class([5]) == (1, 5)
    np.testing.assert_array_equal(deepboot.times("5", m)[0], deepboot.times("1", m)[0])
    a, b = pollux.times((5, 20), m)[0], deepboot.times((5, 20), m)[0]
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and not np.allclose(a, b)


def test_grid_equals_the_originals_interpolation() -> None:
    """Rebuild the originals' interpolator with pandas and scipy from the raw files (three
    applications: the first use of scipy's interpolator can take seconds on a busy machine)."""
    if not DATA_APPS.is_dir():
        pytest.skip(f"raw traces not available at {DATA_APPS}")
    import pandas as pd
    from scipy.interpolate import LinearNDInterpolator

    xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
    for trace_set, file in (("pollux", "origin_placements.csv"), ("deepboot", "placements.csv")):
        steps = load_step_times(trace_set)
        for app in ("cifar10", "deepspeech2", "ncf"):  # scipy's own transforms are slow on a busy machine
            raw = pd.read_csv(DATA_APPS / app / file)
            raw["num_nodes"] = raw.placement.apply(lambda p: len(str(p)))
            raw["num_replicas"] = raw.placement.apply(lambda p: sum(map(int, str(p))))
            grid = raw.groupby(xs)[xs + ys].mean()
            grid = pd.concat([grid, pd.read_csv(DATA_APPS / app / "scalability.csv")], ignore_index=True)
            reference = LinearNDInterpolator(grid[xs].to_numpy(float), grid[ys].to_numpy(float))
            table = steps[app]
            lo, hi = get_app(app).min_local_bsz, get_app(app).max_local_bsz
            for n, k in ((5, 20), (6, 24), (7, 28), (16, 64), (9, 33), (16, 50)):
                m = np.unique(np.geomspace(lo, min(hi, get_app(app).max_batch_size // k), 6).round())
                want = reference(np.column_stack([np.full(len(m), n), np.full(len(m), k), m]))
                step, sync = table.times((n, k), m)
                np.testing.assert_allclose(step, want[:, 0], rtol=1e-6, err_msg=f"{trace_set} {app} {n},{k}")
                np.testing.assert_allclose(sync, want[:, 1], rtol=1e-6, err_msg=f"{trace_set} {app} {n},{k}")


def test_closed_form_barycentric_transforms_equal_scipys() -> None:
    from scipy.spatial import Delaunay

    points, _ = load_step_times("pollux")["bert"].grid_points()
    tri = Delaunay(points)
    ours = barycentric_transforms(points, tri.simplices)
    theirs = tri.transform  # scipy's own (LAPACK) computation
    flat = np.isnan(theirs[:, 0, 0])
    assert flat.any() and np.array_equal(np.isnan(ours[:, 0, 0]), flat)
    np.testing.assert_allclose(ours[~flat], theirs[~flat], rtol=1e-9, atol=1e-12)


def test_outside_the_measurements_the_fitted_time_is_used() -> None:
    app = get_app("cifar10")
    rates = shared_measured_rates(shared_rate_table(app, 64), "pollux")
    m, s = np.array([16.0, 128.0]), np.array([0.0, 1.0])  # 16 is below the smallest traced micro-batch
    got = rates.iteration_times("1", m, s)
    fitted = iteration_time(app.throughput_params, np.ones(2), np.ones(2), m, s)
    assert got[0] == fitted[0]
    step, sync = rates.steps.times("1", m[1:])
    assert got[1] == pytest.approx(step[0] + (step[0] - sync[0]))
    assert np.isnan(rates.steps.times((1, 40), m)[0]).all()  # 40 GPUs on one node: outside the hull


def test_shipped_table_is_what_calibration_computes(shipped) -> None:
    if not DATA_APPS.is_dir():
        pytest.skip(f"raw traces not available at {DATA_APPS}")
    from traces.json_text import table_json
    from traces.step_times import build_step_times

    assert table_json(build_step_times(DATA_APPS)) + "\n" == SHIPPED.read_text()


# ---------------------------------------------------------------------------- options and runs


@pytest.mark.parametrize(
    "kwargs, needle",
    [({"truth": "exact"}, "unknown truth 'exact'"), ({"trace_set": "philly"}, "unknown trace set 'philly'")],
)
def test_bad_truth_or_trace_set_is_a_one_line_error(kwargs, needle, capsys) -> None:
    with pytest.raises(ValueError, match=needle) as info:
        SimConfig(**kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(EnvConfigError, match=needle):
        EnvConfig.from_options(**kwargs)
    if "trace_set" in kwargs:
        with pytest.raises(ValueError, match=needle):
            load_step_times(kwargs["trace_set"])
    flag = "--truth" if "truth" in kwargs else "--trace-set"
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", flag, next(iter(kwargs.values())), "--quiet"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_env_and_cli_take_the_options(tmp_path: Path, capsys) -> None:
    config = EnvConfig.from_options(truth="measured", trace_set="deepboot")
    assert (config.sim.truth, config.sim.trace_set) == ("measured", "deepboot")
    assert (SimConfig().truth, SimConfig().trace_set) == ("fitted", "pollux")
    out = {}
    for truth in ("fitted", "measured"):
        path = tmp_path / f"{truth}.json"
        argv = ["simulate", "--workload", "val/val-01", "--policy", "ats", "--truth", truth, "--json", str(path)]
        assert main(argv) == 0
        out[truth] = json.loads(path.read_text())
    assert "truth=measured" in capsys.readouterr().out
    assert out["fitted"]["train_jobs_done"] == out["measured"]["train_jobs_done"] == 160
    assert out["fitted"]["train_jct_mean"] != out["measured"]["train_jct_mean"]


def test_restart_plans_carry_the_shape_of_the_workers_that_train() -> None:
    plan = plan_change("stopfree", get_app("bert"), np.array([2, 1, 0]), np.array([2, 2, 2]), True)
    training = [p for p in plan.phases if p.replicas]
    assert len(training) == 1 and training[0].counts == (2, 1, 0) and training[0].multi_node
    rates = shared_measured_rates(shared_rate_table(get_app("bert"), 64), "pollux")
    assert rates.phase_class(training[0]) == "12"
    with pytest.raises(ValueError, match="needs their GPUs per node"):
        rates.phase_class(Phase(10.0, 3, True))  # a training phase that does not say where


@pytest.fixture(scope="module")
def workload():
    return generate_workload(
        "measured", 11, train={"num_jobs": 14}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )


@pytest.mark.parametrize("policy", ["ats", "optimus"])
@pytest.mark.parametrize(
    "config",
    [
        SimConfig(truth="measured"),
        SimConfig(restart="stopfree", truth="measured", trace_set="deepboot"),
        SimConfig(cluster=ClusterConfig.parse_shared("16x4"), restart="pollux", truth="measured", interference=0.3),
    ],
    ids=["afe", "stopfree-deepboot", "pollux-shared-interference"],
)
def test_measured_episodes_project_completions_as_an_eager_run(workload, policy, config, monkeypatch) -> None:
    lazy = run_episode(policy, workload, config)
    assert lazy.train_jobs_done == len(workload.jobs)
    monkeypatch.setattr(TrainingJob, "completion_lower_bound", lambda self: -np.inf)  # project at once
    eager = run_episode(policy, workload, config)
    assert json.dumps(lazy.deterministic_dict(), sort_keys=True) == json.dumps(
        eager.deterministic_dict(), sort_keys=True
    )


@pytest.mark.parametrize("restart", ["afe", "stopfree"])
def test_measured_completion_bounds_never_exceed_the_projection(workload, restart: str) -> None:
    env = DeepBootEnv(workload=workload, restart=restart, max_jobs=8, truth="measured", shared_pool="16x4")
    env.reset(seed=4)
    assert check_completion_bounds(env, 300) > 100


def test_compare_records_the_truth(workload, tmp_path: Path) -> None:
    from deepboot_harness.compare import compare
    from traces.generate import write_workload_csv

    csv = write_workload_csv(workload, tmp_path / "measured-gen.csv")
    frame = compare(["fifo"], [str(csv)], config=SimConfig(truth="measured"), out_dir=tmp_path / "out", progress=False)
    assert list(frame["truth"]) == ["measured (pollux)"]
    assert "truth: measured (pollux traces)" in (tmp_path / "out" / "results.md").read_text()
    assert "truth" not in compare(["fifo"], [str(csv)], progress=False).columns
