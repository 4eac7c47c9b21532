"""Smoke tests of the ``deepboot`` command line (the README's commands)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import SHARED_DATA, assert_same_calibration

from deepboot_env.sim.apps import load_profiles
from deepboot_harness.cli import main
from traces.loaders import load_workload


def test_simulate_writes_metrics_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    assert main(["simulate", "--workload", "test/test-01", "--policy", "fifo", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "training JCT mean" in printed
    data = json.loads(out.read_text())
    for key in (
        "train_jct_mean",
        "train_jct_p50",
        "train_jct_p95",
        "train_jct_p99",
        "makespan",
        "train_jobs_done",
        "infer_latency_mean",
        "infer_latency_p99",
        "infer_cold_starts",
        "infer_requests",
        "restarts",
        "lent_gpu_seconds",
        "reclaims",
        "gpu_seconds_by_state",
        "jct_lower_bound_mean",
        "sim_events",
        "wall_seconds",
    ):
        assert key in data, key
    assert data["train_jobs_done"] == 160
    assert set(data["gpu_seconds_by_state"]) == {"training", "lent", "inference-running", "protect", "sleep", "idle"}
    assert data["train_jct_mean"] >= data["jct_lower_bound_mean"]


def test_simulate_options_change_the_run(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    common = ["simulate", "--workload", "val/val-01", "--policy", "fifo", "--quiet"]
    assert main([*common, "--shared-pool", "16x4", "--json", str(a)]) == 0
    assert main([*common, "--cluster", "8x4+8x4", "--protect-scale", "8", "--json", str(b)]) == 0
    ma, mb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ma["train_jct_mean"] != mb["train_jct_mean"]
    # P = 8 keeps pods warm 8x longer: more warm hits than with P = 1 on the same cluster.
    c = tmp_path / "c.json"
    assert main([*common, "--json", str(c)]) == 0
    assert mb["infer_warm_hits"] > json.loads(c.read_text())["infer_warm_hits"]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["simulate", "--cluster", "8x0"], "zero GPUs"),
        (["simulate", "--shared-pool", "0x4"], "zero nodes"),
        (["simulate", "--workload", "missing.csv"], "missing.csv"),
        (["simulate", "--policy", "no-such-policy"], "unknown policy"),
        (["simulate", "--cluster", "8x4+8x4", "--shared-pool", "16x4"], "not both"),
        (["simulate", "--cluster", "8x4", "--workload", "test/test-01"], "no inference nodes"),
    ],
)
def test_simulate_bad_input_is_one_clear_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert "Traceback" not in err


def test_generate_writes_a_loadable_workload(tmp_path: Path) -> None:
    out = tmp_path / "g.csv"
    assert main(["generate", "--out", str(out), "--seed", "3", "--load", "0.5", "--horizon-hours", "12"]) == 0
    wl = load_workload(out)
    assert len(wl.jobs) == 80
    assert wl.requests and max(r.arrival for r in wl.requests) < 12 * 3600


def test_calibrate_reports_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--apps", str(tmp_path / "nothing"), "--out", str(tmp_path / "a.json")]) == 2
    assert "nothing" in capsys.readouterr().err


@pytest.mark.skipif(not (SHARED_DATA / "apps").exists(), reason="raw application traces not available")
def test_calibrate_reproduces_the_shipped_profiles(tmp_path: Path) -> None:
    out = tmp_path / "apps.json"
    assert main(["calibrate", "--apps", str(SHARED_DATA / "apps"), "--out", str(out)]) == 0
    assert_same_calibration(load_profiles(out), load_profiles(), SHARED_DATA / "apps")


def test_simulate_reports_progress_on_long_episodes_only(monkeypatch, capsys: pytest.CaptureFixture[str]) -> None:
    import deepboot_harness.cli as cli

    assert main(["simulate", "--workload", "test/test-01", "--policy", "ats"]) == 0
    assert capsys.readouterr().err == ""  # a short episode: no progress lines
    monkeypatch.setattr(cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(cli, "PROGRESS_EVERY", 200)
    assert main(["simulate", "--workload", "test/test-01", "--policy", "ats"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and all("jobs done" in line for line in lines)
    assert lines[0].startswith("day 0.") and "200 decisions" in lines[0]
    assert lines[-1].startswith("done: ") and "160/160 jobs done" in lines[-1]
    assert main(["simulate", "--workload", "test/test-01", "--policy", "ats", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
