"""``deepboot benchmark``: runs, resume, the leaderboard's statistics and clear errors."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from builders import interrupt_when

from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_harness.benchmark import RUNS_FILE, BenchmarkSpec, read_runs
from deepboot_harness.cli import main
from deepboot_harness.leaderboard import (
    ALL,
    leaderboard,
    leaderboard_markdown,
    mean_ci,
    results_frame,
    with_ratios,
    write_outputs,
)
from traces.families import SPLIT_SEEDS, sample_scenario

FAMILIES = ["philly-periodic", "short-period"]
ARGS = ["--families", *FAMILIES, "--policies", "ats", "fifo", "--quiet"]


def _bench(out: Path, *extra: str) -> int:
    return main(["benchmark", *ARGS, "--out", str(out), *extra])


def test_a_benchmark_runs_every_policy_on_the_test_seeds_and_writes_its_tables(tmp_path) -> None:
    out = tmp_path / "bench"
    assert _bench(out, "--seeds", "2", "--jobs", "2") == 0
    results = pd.read_csv(out / "results.csv")
    first_two = list(SPLIT_SEEDS["test"][:2])
    assert sorted(zip(results["policy"], results["family"], results["seed"], strict=True)) == sorted(
        (p, f, s) for p in ("ats", "fifo") for f in FAMILIES for s in first_two
    )
    # a row is the run of the scenario on its own cluster under DeepBoot-v1's dynamics
    row = results[(results["policy"] == "ats") & (results["family"] == "short-period")].iloc[0]
    scenario = sample_scenario("short-period", int(row["seed"]))
    expected = run_episode("ats", scenario.workload, scenario.configure(sim_config(dynamics="v1")))
    assert row["train_jct_mean"] == pytest.approx(expected.train_jct_mean, rel=1e-12)
    jobs = pd.read_csv(out / "jobs.csv")
    assert len(jobs) == int(results["train_jobs"].sum())
    board = (out / "leaderboard.md").read_text()
    assert "| fifo " in board and "± " in board and ALL in board and "### Against `ats`" in board
    assert len(pd.read_csv(out / "leaderboard.csv")) == 2 * (len(FAMILIES) + 1)
    for name in ("jct_ratio.png", "jct_aggregate.png", "jct_cdf.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / name).stat().st_size > 10_000


def test_the_ratios_pair_against_the_reference_given(tmp_path) -> None:
    """``--reference fifo``: every ratio is over fifo's JCT on the same scenario (a finished
    benchmark resumed with another reference runs nothing and rewrites its tables)."""
    out = tmp_path / "bench"
    assert _bench(out, "--seeds", "1") == 0
    runs = {(r["policy"], r["family"]): r["train_jct_mean"] for r in read_runs(out / RUNS_FILE)}
    assert _bench(out, "--seeds", "1", "--resume", "--reference", "fifo") == 0
    assert len(read_runs(out / RUNS_FILE)) == len(runs)
    board = pd.read_csv(out / "leaderboard.csv").set_index(["policy", "family"])
    for family in FAMILIES:
        assert board.loc[("fifo", family), "ratio"] == 1.0
        assert board.loc[("ats", family), "ratio"] == pytest.approx(runs["ats", family] / runs["fifo", family])
    assert "over `fifo`'s on the same scenario" in (out / "leaderboard.md").read_text()


def test_skip_seeds_runs_the_seeds_after_the_first_k(tmp_path) -> None:
    spec = BenchmarkSpec(families=("bursty",), policies=("ats", "fifo"), seeds=3, split="val", skip_seeds=8)
    spec.check()
    assert spec.seeds_of("fifo") == list(SPLIT_SEEDS["val"][8:11])
    out = tmp_path / "bench"
    assert _bench(out, "--split", "val", "--skip-seeds", "8", "--seeds", "1") == 0
    assert {r["seed"] for r in read_runs(out / RUNS_FILE)} == {SPLIT_SEEDS["val"][8]}
    assert "val seeds 9 to 9 of each" in (out / "leaderboard.md").read_text()


def test_resume_runs_only_what_is_missing_and_drops_a_cut_line(tmp_path) -> None:
    out = tmp_path / "bench"
    assert _bench(out, "--seeds", "1") == 0
    first = read_runs(out / RUNS_FILE)
    assert len(first) == 4
    # an interrupted write leaves half a line: it is dropped and that run is made again
    with open(out / RUNS_FILE, "a", encoding="utf-8") as fh:
        fh.write('{"policy": "ats", "fam')
    assert _bench(out, "--seeds", "2", "--resume") == 0
    runs = read_runs(out / RUNS_FILE)
    assert runs[:4] == first and len(runs) == 8
    assert len({(r["policy"], r["family"], r["seed"]) for r in runs}) == 8


def test_an_existing_benchmark_is_never_overwritten_without_resume(tmp_path, capsys) -> None:
    out = tmp_path / "bench"
    assert _bench(out, "--seeds", "1") == 0
    capsys.readouterr()
    assert _bench(out, "--seeds", "1") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("deepboot benchmark: error: --out") and "add --resume" in err and "\n" not in err
    assert _bench(out, "--seeds", "1", "--resume", "--dynamics", "v0") == 2
    assert "was run with" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--families", "no-such-family"], "unknown workload family 'no-such-family'"),
        (["--seeds", "0"], "--seeds: the seed range is empty or too long: 0"),
        (["--policies", "no-such-policy"], "--policies no-such-policy: unknown policy"),
        (["--split", "holdout"], "unknown split 'holdout'"),
        (["--policy-seeds", "fifo"], "expected POLICY=N"),
        (["--policy-seeds", "pollux=2"], "--policy-seeds names policies not benchmarked: pollux"),
        (["--policies", "fifo", "ones-lend"], "--policies must include the reference policy 'ats'"),
        (["--skip-seeds", "-1"], "--skip-seeds must be 0 to"),
        (["--split", "val", "--skip-seeds", "8", "--seeds", "10000"], "--seeds: the seed range is empty or too long"),
        (["--reference", "ones-lend"], "--policies must include the reference policy 'ones-lend' (--reference)"),
        (["--seeds", "2", "--policy-seeds", "ats=1"], "the reference policy 'ats' must run every seed"),
        (["--policies", "ats", "fifo", "ats"], "--policies names ats more than once"),
        (["--families", "bursty", "bursty"], "--families names bursty more than once"),
    ],
)
def test_bad_benchmark_input_gets_one_line_and_no_traceback(tmp_path, capsys, extra, message) -> None:
    assert main(["benchmark", *ARGS, "--out", str(tmp_path / "b"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0 and "Traceback" not in err
    assert not (tmp_path / "b" / RUNS_FILE).exists()


def test_an_unwritable_output_folder_is_refused(tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _bench(blocker, "--seeds", "1") == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert _bench(blocker / "below", "--seeds", "1") == 2
    assert "cannot create the folder" in capsys.readouterr().err
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert _bench(locked, "--seeds", "1") == 2
        assert "not writable" in capsys.readouterr().err


def test_fewer_seeds_for_a_slow_policy() -> None:
    spec = BenchmarkSpec(families=("bursty",), policies=("ats", "fifo"), seeds=3, policy_seeds={"fifo": 1})
    runs = spec.runs()
    assert [r for r in runs if r[0] == "fifo"] == [("fifo", "bursty", SPLIT_SEEDS["test"][0])]
    assert len([r for r in runs if r[0] == "ats"]) == 3


def test_the_confidence_interval_is_students_t() -> None:
    mean, half = mean_ci([1.0, 2.0, 3.0, 4.0])
    # t(0.975, 3) = 3.182446; s = 1.290994; n = 4
    assert mean == 2.5 and half == pytest.approx(3.182446 * 1.290994 / 2.0, rel=1e-5)
    assert math.isnan(mean_ci([5.0])[1])


def test_ratios_pair_runs_on_the_same_scenario() -> None:
    frame = pd.DataFrame(
        {
            "policy": ["ats", "ats", "x", "x"],
            "family": ["f", "f", "f", "f"],
            "seed": [1, 2, 1, 2],
            "train_jct_mean": [100.0, 200.0, 50.0, 300.0],
            "jct_lower_bound_mean": [50.0, 50.0, 50.0, 50.0],
            "infer_latency_p99": [8.0, 8.0, 9.0, 9.0],
            "cpu_s": [1.0, 1.0, 2.0, 2.0],
        }
    )
    ratios = with_ratios(frame)
    assert ratios["jct_ratio"].tolist() == [1.0, 1.0, 0.5, 1.5]
    board = leaderboard(frame).set_index(["policy", "family"])
    assert board.loc[("x", "f"), "ratio"] == 1.0 and board.loc[("x", "f"), "jct"] == 175.0
    assert board.loc[("x", "f"), "bound"] == pytest.approx(3.5)
    assert board.loc[("x", ALL), "ratio"] == 1.0 and np.isnan(board.loc[("x", ALL), "ratio_ci"])
    # paired bootstrap statistics of the per-seed ratios 0.5 and 1.5
    x = board.loc[("x", "f")]
    assert (x["ratio_lo"], x["ratio_hi"]) == (0.5, 1.5) and x["iqm"] == 1.0
    assert (x["p_improve"], x["wins"], x["scenarios"]) == (0.5, 1, 2)
    assert board.loc[("ats", "f"), "p_improve"] == 0.5 and board.loc[("ats", "f"), "ratio_hi"] == 1.0


def test_the_aggregate_is_stratified_by_family_and_reproducible(tmp_path) -> None:
    rows = [
        {
            "policy": p,
            "family": f,
            "seed": s,
            "train_jct_mean": jct,
            "jct_lower_bound_mean": 1.0,
            "infer_latency_p99": 1.0,
            "cpu_s": 1.0,
            "jcts": {"j": jct},
        }
        for f, base in (("f", 100.0), ("g", 300.0))
        for s in range(4)
        for p, jct in (("ats", base + s), ("x", (base + s) * (0.9 if f == "f" else 1.2)))
    ]
    board = leaderboard(results_frame(rows)).set_index(["policy", "family"])
    x = board.loc[("x", ALL)]
    # per family the ratio is constant: resampling seeds within families cannot move the mean
    assert x["ratio_lo"] == pytest.approx(1.05) and x["ratio_hi"] == pytest.approx(1.05)
    assert x["p_improve"] == 0.5 and x["wins"] == 4 and x["scenarios"] == 8
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_outputs(rows, tmp_path / "a", "t")
    again = write_outputs(rows, tmp_path / "b", "t")
    for name in ("leaderboard", "leaderboard_csv", "ratio_plot", "aggregate_plot"):
        assert first[name].read_bytes() == again[name].read_bytes(), name


def test_the_markdown_says_how_much_of_the_oracle_gap_each_policy_closes() -> None:
    frame = pd.DataFrame(
        {
            "policy": ["ats", "x", "oracle-lookahead", "ats", "x", "oracle-lookahead"],
            "family": ["f", "f", "f", "g", "g", "g"],
            "seed": [1] * 6,
            "train_jct_mean": [100.0, 95.0, 90.0, 100.0, 110.0, 100.0],
            "jct_lower_bound_mean": [50.0] * 6,
            "infer_latency_p99": [8.0] * 6,
            "cpu_s": [1.0] * 6,
        }
    )
    text = leaderboard_markdown(leaderboard(frame), "t")
    section = text.split("### Share of the gap")[1].split("###")[0]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()[4:] if line]
    rows = {c[0]: c[1:] for c in cells}
    assert rows["x"][:2] == ["50%", "-"]  # half of f's gap; g's reference gains nothing
    assert rows["ats"][0] == "0%" and rows["oracle-lookahead (clairvoyant upper reference)"][0] == "100%"
    assert "### Share of the gap" not in leaderboard_markdown(
        leaderboard(frame[frame["policy"] != "oracle-lookahead"]), "t"
    )


def test_the_markdown_gives_each_policy_s_share_of_the_gap_to_hindsight() -> None:
    frame = pd.DataFrame(
        {
            "policy": ["ats", "x", "hindsight", "ats", "x", "hindsight"],
            "family": ["f", "f", "f", "g", "g", "g"],
            "seed": [1] * 6,
            "train_jct_mean": [100.0, 95.0, 80.0, 100.0, 96.0, 92.0],
            "jct_lower_bound_mean": [50.0] * 6,
            "infer_latency_p99": [8.0] * 6,
            "cpu_s": [1.0] * 6,
        }
    )
    text = leaderboard_markdown(leaderboard(frame), "t")
    assert "to the clairvoyant reference" not in text  # hindsight has its own section
    section = text.split("### Share of the gap from `ats` to `hindsight` closed")[1].split("###")[0]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()[4:] if line]
    rows = {c[0]: c[1:] for c in cells}
    assert rows["x"][:2] == ["25%", "50%"] and rows["hindsight (clairvoyant upper reference)"][:2] == ["100%", "100%"]


def test_the_settings_file_records_the_spec(tmp_path) -> None:
    out = tmp_path / "bench"
    assert _bench(out, "--seeds", "1") == 0
    saved = json.loads((out / "benchmark.json").read_text())
    assert saved["settings"] == {"split": "test", "options": {"dynamics": "v1"}}
    assert saved["spec"]["policies"] == ["ats", "fifo"]


def test_ctrl_c_keeps_the_finished_runs_and_resume_completes_them(tmp_path) -> None:
    """Ctrl-C (SIGINT to the process group, workers included): one line, exit 130, no traceback;
    --resume then runs only what is missing."""
    import sys

    out = tmp_path / "bench"
    argv = [sys.executable, "-m", "deepboot_harness.cli", "benchmark", "--families", "short-period"]
    argv += ["--policies", "ats", "fifo", "--seeds", "2", "--jobs", "2", "--out", str(out)]
    # interrupted once the first run is saved: the benchmark is under way
    code, err = interrupt_when(argv, lambda: (out / RUNS_FILE).is_file() and (out / RUNS_FILE).stat().st_size > 0)
    assert code == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith("continue with --resume"), err
    saved = read_runs(out / RUNS_FILE)
    assert 1 <= len(saved) < 4
    assert main(["benchmark", *argv[4:], "--resume", "--quiet"]) == 0
    runs = read_runs(out / RUNS_FILE)
    assert runs[: len(saved)] == saved and len(runs) == 4
    assert {(r["policy"], r["seed"]) for r in runs} == {(p, s) for p in ("ats", "fifo") for s in (2_000_000, 2_000_001)}


@pytest.mark.parametrize("command", ["benchmark", "compare"])
def test_backend_ray_without_ray_says_in_one_line_how_to_install_it(tmp_path, capsys, monkeypatch, command) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    grid = ARGS if command == "benchmark" else ["--workloads", "test/test-01", "--policies", "fifo", "--quiet"]
    out = tmp_path / "b"
    assert main([command, *grid, "--out", str(out), "--backend", "ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"deepboot {command}: error: --backend ray needs Ray, an optional extra: pip install -e '.[ray]' " + (
        "(pip install 'ray[tune]==2.60.0')"
    )
    assert not (out / RUNS_FILE).exists()
    assert main([command, *grid, "--out", str(out), "--address", "auto"]) == 2
    assert capsys.readouterr().err.strip() == f"deepboot {command}: error: --address is for --backend ray"


def test_an_output_file_name_taken_by_a_folder_is_refused_before_the_first_run(tmp_path, capsys) -> None:
    out = tmp_path / "b"
    (out / "results.csv").mkdir(parents=True)
    assert _bench(out, "--seeds", "1") == 2
    err = capsys.readouterr().err
    assert "results.csv is a folder" in err and err.count("\n") == 1
    assert not (out / RUNS_FILE).exists()
