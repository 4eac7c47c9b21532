"""Calibration of the six applications (traces/calibrate.py, app_traces.py, throughput_fit.py) and apps.json.

Tests that need the raw Pollux traces read ``../shared/data/apps`` relative to the repository root
and skip cleanly when it is absent; the others use the shipped profiles, hard-coded reference
numbers from docs/goodput.md §5 and small synthetic files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from builders import SHARED_DATA, assert_same_calibration
from scipy.optimize import approx_fprime

from deepboot_env.sim.apps import APP_NAMES, load_profiles
from deepboot_env.sim.goodput import compute_time, iteration_time, sync_step_time
from traces import app_traces, throughput_fit
from traces import calibrate as cal

DATA_APPS = SHARED_DATA / "apps"

# docs/goodput.md §5: M0, Mmax, mmin, mmax, max_epochs, target progress, 1-GPU step at M0 (s), 1-GPU JCT (h).
REFERENCE = {
    "bert": (12, 384, 4, 12, 2, 14_774.0, 0.9215, 3.78),
    "cifar10": (128, 4096, 32, 1024, 100, 39_062.9, 0.1031, 1.12),
    "deepspeech2": (20, 640, 10, 80, 80, 28_536.0, 0.6812, 5.40),
    "imagenet": (200, 12800, 20, 200, 90, 576_525.6, 0.9235, 147.9),
    "ncf": (256, 32768, 32, 32768, 10, 194_174.0, 0.00744, 0.40),
    "yolov3": (8, 512, 4, 8, 50, 103_444.0, 0.3261, 9.37),
}

TRUE_PARAMS = np.array([0.05, 0.002, 0.3, 0.01, 0.08, 0.02, 1.6])


@pytest.fixture(scope="module")
def shipped():
    return load_profiles()


@pytest.fixture(scope="module")
def raw_traces():
    if not DATA_APPS.is_dir():
        pytest.skip(f"raw traces not available at {DATA_APPS}")
    return {name: app_traces.read_app_traces(DATA_APPS / name) for name in APP_NAMES}


@pytest.fixture(scope="module")
def calibrated(raw_traces):
    return cal.calibrate(DATA_APPS)


# ---------------------------------------------------------------------------------- shipped model


@pytest.mark.parametrize("name", APP_NAMES)
def test_shipped_median_step_time_error_at_most_10_percent(name, shipped, raw_traces):
    table = raw_traces[name].placements
    pred = sync_step_time(shipped[name].throughput_params, table.nodes, table.replicas, table.local_bsz)
    ape = np.abs(pred - table.step_time) / table.step_time
    assert len(ape) == len(table) > 500
    assert np.median(ape) <= 0.10, f"{name}: median APE {np.median(ape):.3f}"


@pytest.mark.parametrize("name", APP_NAMES)
def test_single_gpu_completion_time_within_5_percent(name, shipped):
    prof = shipped[name]
    m0 = REFERENCE[name][0]
    step = float(sync_step_time(prof.throughput_params, np.array(1.0), np.array(1.0), np.array(float(m0))))
    hours = prof.target_progress * step / 3600.0
    assert step == pytest.approx(REFERENCE[name][6], rel=0.05)
    assert hours == pytest.approx(REFERENCE[name][7], rel=0.05)
    assert cal.single_gpu_hours(prof) == pytest.approx(hours)


@pytest.mark.parametrize("name", APP_NAMES)
def test_shipped_constants_match_reference_table(name, shipped):
    m0, mmax, lo, hi, epochs, target, _, _ = REFERENCE[name]
    prof = shipped[name]
    assert (prof.init_batch_size, prof.max_batch_size) == (m0, mmax)
    assert (prof.min_local_bsz, prof.max_local_bsz, prof.max_epochs) == (lo, hi, epochs)
    assert prof.target_progress == pytest.approx(target, rel=1e-3)
    assert prof.traced_batch_sizes[0] == m0 and prof.traced_batch_sizes[-1] == mmax
    assert np.all(np.diff(prof.traced_batch_sizes) > 0)
    assert np.all(np.diff(prof.epoch_progress) > 0)
    assert prof.grad_sqr.shape == prof.grad_var.shape == (epochs, len(prof.traced_batch_sizes))
    assert (prof.fixed_batch_size, prof.max_replicas_cap) == ((32768, 1) if name == "ncf" else (None, None))
    params = prof.throughput_params
    assert np.all(params[:6] >= 1e-8) and 1.0 <= params[6] <= 10.0


@pytest.mark.parametrize("name", APP_NAMES)
def test_shipped_constants_equal_derived(name, shipped, raw_traces):
    prof = shipped[name]
    derived = cal.derive_profile(raw_traces[name], prof.throughput_params)
    for field in ("init_batch_size", "max_batch_size", "min_local_bsz", "max_local_bsz", "max_epochs"):
        assert getattr(prof, field) == getattr(derived, field), field
    assert (prof.fixed_batch_size, prof.max_replicas_cap) == (derived.fixed_batch_size, derived.max_replicas_cap)
    np.testing.assert_array_equal(prof.traced_batch_sizes, derived.traced_batch_sizes)
    np.testing.assert_allclose(prof.epoch_progress, derived.epoch_progress, rtol=1e-3)
    np.testing.assert_allclose(prof.grad_sqr, derived.grad_sqr, rtol=1e-6)
    np.testing.assert_allclose(prof.grad_var, derived.grad_var, rtol=1e-6)


def test_shipped_params_are_what_calibration_computes(shipped, calibrated, raw_traces):
    profiles, report = calibrated
    assert_same_calibration(profiles, shipped, DATA_APPS)
    for name in APP_NAMES:
        assert report[name]["median_ape"] <= 0.10
        assert abs(report[name]["single_gpu_hours_rel_err"]) <= 0.05
        traces = raw_traces[name]
        assert report[name]["n_observations"] == len(traces.placements) + len(traces.scalability)
        assert report[name]["n_eval"] == len(traces.placements)


def test_deepspeech2_zero_grad_sqr_rows(shipped):
    # docs/goodput.md §5.2: deepspeech2 has grad_sqr = 0 in 12 epochs at B=20 and 1 epoch at B=40.
    sqr = shipped["deepspeech2"].grad_sqr
    assert (sqr[:, 0] <= 0).sum() == 12 and (sqr[:, 1] <= 0).sum() == 1 and (sqr[:, 2:] > 0).all()
    for name in APP_NAMES:
        if name != "deepspeech2":
            assert (shipped[name].grad_sqr > 0).all() and (shipped[name].grad_var > 0).all()


# ---------------------------------------------------------------------------------- the fit


SHAPES = [(1, 1), (1, 2), (1, 3), (1, 4), (2, 2), (2, 3), (2, 4), (2, 6), (2, 8)]
SHAPES += [(3, 3), (3, 6), (3, 9), (3, 12), (4, 4), (4, 8), (4, 12), (4, 16)]


def _synthetic_observations(params: np.ndarray, noise: float = 0.005) -> tuple[np.ndarray, ...]:
    """Times from the model itself on 17 (N, K) shapes x 5 micro-batches, with seeded log-normal noise.

    A little noise matters: on exact data the RMS loss is a cone at zero residual and L-BFGS-B with
    the default tolerances of docs/goodput.md §6.2 stops early ("relative reduction of f").
    """
    cells = [(n, k, m) for n, k in SHAPES for m in (8, 16, 32, 64, 128)]
    nodes, replicas, local = (np.array(v, dtype=float) for v in zip(*cells, strict=True))
    rng = np.random.default_rng(12345)
    t_acc = compute_time(params, local) * np.exp(noise * rng.standard_normal(len(local)))
    t_step = iteration_time(params, nodes, replicas, local, np.zeros_like(local))
    return nodes, replicas, local, t_acc, t_step * np.exp(noise * rng.standard_normal(len(local)))


def test_fit_recovers_known_parameters():
    nodes, replicas, local, t_acc, t_step = _synthetic_observations(TRUE_PARAMS)
    fitted = throughput_fit.fit_throughput(nodes, replicas, local, t_acc, t_step)
    # beta_r (intra-node retrogression, K - 2 <= 2 on one node) is the least determined parameter.
    np.testing.assert_allclose(np.delete(fitted, 5), np.delete(TRUE_PARAMS, 5), rtol=0.03)
    assert fitted[5] == pytest.approx(TRUE_PARAMS[5], rel=0.06)
    exact = iteration_time(TRUE_PARAMS, nodes, replicas, local, np.zeros_like(local))
    assert np.max(np.abs(sync_step_time(fitted, nodes, replicas, local) / exact - 1)) < 0.01


def test_pinned_fit_reproduces_anchor_exactly():
    nodes, replicas, local, t_acc, t_step = _synthetic_observations(TRUE_PARAMS)
    noisy = t_step * (1 + 0.05 * np.sin(np.arange(len(t_step))))
    fitted = throughput_fit.fit_throughput(nodes, replicas, local, t_acc, noisy, pin=(24.0, 0.1))
    assert float(compute_time(fitted, 24.0)) == pytest.approx(0.1, rel=1e-9)
    assert cal.single_gpu_step(fitted, 24.0) == pytest.approx(0.1, rel=1e-6)
    assert np.all(fitted[:6] >= 1e-8 - 1e-15)


def test_fit_loss_gradient_matches_finite_differences():
    nodes, replicas, local, t_acc, t_step = _synthetic_observations(TRUE_PARAMS)
    args = (nodes, replicas, local, np.log(t_acc * 1.1), np.log(t_step * 0.9))
    x = np.array([0.07, 0.003, 0.2, 0.02, 0.05, 0.006, 1.9])
    _, grad = throughput_fit.fit_loss(x, *args)
    numeric = approx_fprime(x, lambda p: throughput_fit.fit_loss(p, *args)[0], 1e-8 * np.maximum(x, 1e-3))
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-6)


def test_freezing_rules_and_post_fit_prior():
    # single node, single local batch, at most 2 GPUs: alpha_c frozen at mean/2, beta_r and inter-node frozen.
    nodes = np.ones(4)
    replicas = np.array([1.0, 1.0, 2.0, 2.0])
    local = np.full(4, 32.0)
    t_acc = np.array([0.1, 0.1, 0.1, 0.1])
    x0, bounds = throughput_fit.fit_start_and_bounds(nodes, replicas, local, t_acc)
    assert bounds[0] == (0.05, 0.05) and x0[0] == 0.05
    for i in (2, 3, 5):
        assert bounds[i] == (1e-8, 1e-8)
    assert bounds[4] == (1e-8, None) and bounds[6] == (1.0, 10.0)
    fitted = throughput_fit.fit_throughput(nodes, replicas, local, t_acc, np.array([0.1, 0.1, 0.13, 0.13]))
    assert fitted[0] == 0.05
    assert fitted[2] == pytest.approx(1.1 * fitted[4]) and fitted[3] == pytest.approx(1.1 * fitted[5])


def test_placement_shape():
    assert app_traces.placement_shape("22") == (2, 4)
    assert app_traces.placement_shape("1") == (1, 1)
    assert app_traces.placement_shape("3444") == (4, 15)
    with pytest.raises(ValueError):
        app_traces.placement_shape("20")


# ---------------------------------------------------------------------------------- reading errors


def _write_app(root: Path) -> Path:
    app = root / "toy"
    app.mkdir()
    (app / "origin_placements.csv").write_text(
        "placement,local_bsz,step_time,sync_time\n1,8,0.10,0.001\n1,16,0.18,0.001\n2,8,0.12,0.02\n11,8,0.2,0.1\n"
    )
    (app / "scalability.csv").write_text(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,6,8,0.3,0.2\n8,16,16,0.5,0.3\n"
    )
    for b in (8, 16):
        (app / f"validation-{b}.csv").write_text(
            "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,2.0,1.0\n20,20,0.6,1.0,1.0\n"
        )
    return app


def test_reads_synthetic_app(tmp_path):
    traces = app_traces.read_app_traces(_write_app(tmp_path))
    assert traces.placement_ids == ("1", "1", "2", "11")
    np.testing.assert_array_equal(traces.placements.nodes, [1, 1, 1, 2])
    np.testing.assert_array_equal(traces.placements.replicas, [1, 1, 2, 2])
    assert [v.batch_size for v in traces.validation] == [8, 16]
    prof = cal.derive_profile(traces, TRUE_PARAMS)
    assert (prof.init_batch_size, prof.max_batch_size, prof.max_epochs) == (8, 16, 2)
    assert (prof.min_local_bsz, prof.max_local_bsz) == (8, 16)
    assert cal.measured_single_gpu_step(traces, 12.0) == pytest.approx(0.14)


def test_missing_column_names_file_and_column(tmp_path):
    app = _write_app(tmp_path)
    (app / "scalability.csv").write_text("num_nodes,local_bsz,step_time,sync_time\n6,8,0.3,0.2\n")
    with pytest.raises(app_traces.TraceFormatError, match=r"scalability\.csv.*num_replicas"):
        app_traces.read_app_traces(app)


def test_missing_file_names_file(tmp_path):
    app = _write_app(tmp_path)
    (app / "origin_placements.csv").unlink()
    with pytest.raises(app_traces.TraceFormatError, match=r"origin_placements\.csv: file not found"):
        app_traces.read_app_traces(app)
    with pytest.raises(app_traces.TraceFormatError, match="not found"):
        app_traces.read_app_traces(tmp_path / "absent")


def test_non_numeric_value_names_file_row_and_column(tmp_path):
    app = _write_app(tmp_path)
    (app / "validation-16.csv").write_text(
        "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,2.0,1.0\n20,20,0.6,oops,1\n"
    )
    with pytest.raises(app_traces.TraceFormatError, match=r"validation-16\.csv: row 3, column 'grad_sqr'.*'oops'"):
        app_traces.read_app_traces(app)


def test_bad_placement_and_epoch_mismatch(tmp_path):
    app = _write_app(tmp_path)
    (app / "validation-16.csv").write_text("progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,2.0,1.0\n")
    with pytest.raises(app_traces.TraceFormatError, match="disagree on the number of epochs"):
        app_traces.read_app_traces(app)
    (app / "origin_placements.csv").write_text("placement,local_bsz,step_time,sync_time\n1,8,0.1,0.001\n1x,8,0.1,0.0\n")
    with pytest.raises(app_traces.TraceFormatError, match=r"origin_placements\.csv: row 3, column 'placement'"):
        app_traces.read_app_traces(app)


# ---------------------------------------------------------------------------------- writing


def test_write_profiles_round_trip_and_deterministic(tmp_path, shipped):
    report = {name: {"median_ape": 0.123456789} for name in APP_NAMES}
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    cal.write_profiles(shipped, report, first)
    cal.write_profiles(shipped, report, second)
    assert first.read_bytes() == second.read_bytes()
    loaded = load_profiles(first)
    for name in APP_NAMES:
        np.testing.assert_allclose(loaded[name].throughput_params, shipped[name].throughput_params, rtol=1e-6)
        np.testing.assert_allclose(loaded[name].grad_var, shipped[name].grad_var, rtol=1e-6)
    assert '"median_ape": 0.1234568' in first.read_text()


def test_cli_writes_file_and_prints_table(tmp_path, calibrated, capsys, monkeypatch):
    monkeypatch.setattr(cal, "calibrate", lambda apps_dir: calibrated)  # no second refit
    out = tmp_path / "apps.json"
    assert cal.main(["--apps", str(DATA_APPS), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in APP_NAMES) and "medAPE" in text
    written = load_profiles(out)
    for name in APP_NAMES:  # the file holds exactly what calibrate() returned
        np.testing.assert_array_equal(written[name].throughput_params, calibrated[0][name].throughput_params)
    assert_same_calibration(written, load_profiles(), DATA_APPS)


def test_cli_reports_format_errors(tmp_path, capsys):
    _write_app(tmp_path)
    assert cal.main(["--apps", str(tmp_path), "--out", str(tmp_path / "apps.json")]) == 2
    assert not (tmp_path / "apps.json").exists()
    assert "not found" in capsys.readouterr().err
