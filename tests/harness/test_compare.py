"""Tests of ``deepboot compare`` (deepboot_harness.compare, deepboot_harness.plots)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from builders import interrupt_when

from deepboot_env.sim.metrics import GPU_STATES
from deepboot_harness.cli import main
from deepboot_harness.compare import compare
from deepboot_harness.compare_grid import RUN_COLUMNS, expand_workloads, run_comparison
from deepboot_harness.plots import plot_timeline
from deepboot_harness.run_log import RUNS_FILE, read_runs
from traces.generate import generate_workload, write_workload_csv
from traces.loaders import list_shipped_workloads

POLICIES = ["fifo", "ats"]
SEEDS = [0, 1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
OUTPUTS = (
    "results.csv",
    "results.md",
    "jcts.csv",
    "timeline.csv",
    "jct_cdf.png",
    "avg_jct.png",
    "jct_ratio.png",
    "timeline.png",
)


@pytest.fixture(scope="module")
def workload_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workload = generate_workload("t", 1, train={"num_jobs": 20}, inference={"horizon_s": 6 * 3600, "mean_gpus": 4})
    return write_workload_csv(workload, tmp_path_factory.mktemp("wl") / "small-gen.csv")


@pytest.fixture(scope="module")
def two_small_csvs(workload_csv: Path) -> list[str]:
    """Two small generated workloads: a grid of the CLI's resume tests that runs in seconds."""
    other = generate_workload("u", 2, train={"num_jobs": 20}, inference={"horizon_s": 6 * 3600, "mean_gpus": 4})
    return [str(workload_csv), str(write_workload_csv(other, workload_csv.parent / "small-gen-2.csv"))]


@pytest.fixture(scope="module")
def serial(workload_csv: Path) -> pd.DataFrame:
    return compare(POLICIES, [str(workload_csv)], SEEDS, jobs=1, progress=False)


@pytest.fixture(scope="module")
def parallel_dir(workload_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    out = tmp_path_factory.mktemp("cmp")
    frame = compare(POLICIES, [str(workload_csv)], SEEDS, jobs=2, out_dir=out, progress=False)
    return frame, out


def test_frame_has_one_row_per_run_and_every_metric(serial: pd.DataFrame) -> None:
    assert len(serial) == len(POLICIES) * len(SEEDS)
    assert list(serial.columns[: len(RUN_COLUMNS)]) == list(RUN_COLUMNS)
    assert list(zip(serial["policy"], serial["seed"], strict=True)) == [(p, s) for p in POLICIES for s in SEEDS]
    assert set(serial["workload"]) == {"small-gen"}
    for key in ("train_jct_mean", "train_jct_p99", "makespan", "infer_latency_p99", "restarts", "reclaims"):
        assert key in serial.columns
    for key in ("lent_gpu_seconds", "jct_lower_bound_mean", "sim_events", "wall_seconds", "truncated"):
        assert key in serial.columns
    assert {f"gpu_s_{s}" for s in GPU_STATES} <= set(serial.columns)
    assert "jcts" not in serial.columns and "gpu_seconds_by_state" not in serial.columns
    assert (serial["train_jobs_done"] == 20).all()
    assert (serial["train_jct_mean"] >= serial["jct_lower_bound_mean"]).all()


def test_parallel_equals_serial(serial: pd.DataFrame, parallel_dir: tuple[pd.DataFrame, Path]) -> None:
    frame, _ = parallel_dir
    pd.testing.assert_frame_equal(serial.drop(columns="wall_seconds"), frame.drop(columns="wall_seconds"))


def test_files_written(parallel_dir: tuple[pd.DataFrame, Path]) -> None:
    frame, out = parallel_dir
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0, name
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == len(frame)
    pd.testing.assert_series_equal(csv["train_jct_mean"], frame["train_jct_mean"])
    md = (out / "results.md").read_text(encoding="utf-8")
    for policy in POLICIES:
        assert re.search(rf"^\| {policy} +\|", md, re.MULTILINE), policy
    assert "JCT ÷ lower bound" in md and "small-gen" in md
    jcts = pd.read_csv(out / "jcts.csv")
    assert len(jcts) == 20 * len(frame)
    timeline = pd.read_csv(out / "timeline.csv")
    assert len(timeline) > 10
    assert np.allclose(timeline[list(GPU_STATES)].sum(axis=1), 64)  # default 8x4 + 8x4 cluster


def test_pngs_are_real_images(parallel_dir: tuple[pd.DataFrame, Path]) -> None:
    _, out = parallel_dir
    for name in ("jct_cdf.png", "avg_jct.png", "jct_ratio.png", "timeline.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC, name
        assert 10_000 < len(data) < 2_000_000, (name, len(data))


def test_timeline_choice_and_plot_of_raw_rows(workload_csv: Path, tmp_path: Path) -> None:
    comparison = run_comparison(POLICIES, [str(workload_csv)], [3], progress=False, timeline_policy="ats")
    assert comparison.timeline_run == ("ats", "small-gen", 3)
    rows = [tuple(r) for r in comparison.timeline.itertuples(index=False)]
    path = plot_timeline(rows, tmp_path / "t.png", "raw rows", train_gpus=32)
    assert path.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="timeline policy"):
        run_comparison(POLICIES, [str(workload_csv)], [0], progress=False, timeline_policy="tiresias")


def test_expand_workloads(workload_csv: Path) -> None:
    test_split = [n for n in list_shipped_workloads() if n.startswith("test/")]
    refs = expand_workloads(["test"])
    assert [r.source for r in refs] == test_split and [r.label for r in refs] == test_split
    from_dir = expand_workloads([workload_csv.parent, str(workload_csv)])  # directory + the same file: once
    assert [r.label for r in from_dir] == ["small-gen"]
    empty = workload_csv.parent / "empty"
    empty.mkdir(exist_ok=True)
    with pytest.raises(ValueError, match="holds no"):
        expand_workloads([empty])


def test_cli_compare_end_to_end(workload_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    argv = ["compare", "--workloads", str(workload_csv), "--policies", "fifo", "ats", "--seeds", "0"]
    assert main([*argv, "--shared-pool", "16x4", "--timeline-policy", "ats", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "policy comparison" in printed and "ats" in printed
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0, name
    frame = pd.read_csv(out / "results.csv")
    assert set(frame["cluster"]) == {"shared 16x4"}
    assert "for ats on small-gen" in (out / "results.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policies", "fifo", "no-such-policy"], "unknown policy 'no-such-policy'"),
        (["--policies", "fifo", "--jobs", "0"], "jobs must be >= 1"),
        (["--policies", "fifo", "--timeline-policy", "ats"], "timeline policy 'ats'"),
        (["--policies", "fifo", "ats", "--reference", "pollux"], "reference policy 'pollux'"),
    ],
)
def test_cli_user_errors_exit_2(
    extra: list[str], message: str, workload_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["compare", "--workloads", str(workload_csv), *extra, "--out", str(tmp_path / "x")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("deepboot compare: error:") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_cli_missing_workload_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", "--workloads", str(tmp_path / "missing.csv"), "--policies", "fifo", "--out", str(tmp_path)])
    assert code == 2
    assert "missing.csv" in capsys.readouterr().err


def test_results_md_pairs_runs_with_the_reference(parallel_dir: tuple[pd.DataFrame, Path]) -> None:
    frame, out = parallel_dir
    md = (out / "results.md").read_text(encoding="utf-8")
    section = md.split("## Paired with ats")[1].split("\n## ")[0]
    ats = frame[frame["policy"] == "ats"].set_index("seed")["train_jct_mean"]
    fifo = frame[frame["policy"] == "fifo"].set_index("seed")["train_jct_mean"]
    ratios = (fifo / ats).to_numpy()
    row = next(line for line in section.splitlines() if line.startswith("| fifo "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].startswith(f"{ratios.mean():.3f} [")  # mean ratio with its bootstrap interval
    assert cells[4] == f"{int((ratios < 1).sum())}/{len(ratios)}"
    assert "| ats " not in section  # the reference is not compared with itself


def test_timeline_per_policy_and_reference_choice(workload_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "per-policy"
    argv = ["compare", "--workloads", str(workload_csv), "--policies", "fifo", "ats", "--seeds", "0"]
    assert main([*argv, "--timeline-per-policy", "--reference", "fifo", "--quiet", "--out", str(out)]) == 0
    for name in ("timeline.png", "timeline-fifo.png", "timeline-ats.png", "jct_ratio.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC, name
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "## Paired with fifo" in md and "timeline-<policy>.png" in md
    comparison = run_comparison(["fifo", "ats"], [str(workload_csv)], [0], progress=False, timeline_per_policy=True)
    assert list(comparison.timelines) == ["fifo", "ats"]
    pd.testing.assert_frame_equal(comparison.timelines["fifo"], comparison.timeline)
    ratios = comparison.job_ratios("ats")["fifo"]
    assert len(ratios) == 20 and np.all(ratios > 0)


def test_no_reference_no_ratio_plot(workload_csv: Path, tmp_path: Path) -> None:
    compare(["fifo"], [str(workload_csv)], [0], progress=False, out_dir=tmp_path)
    assert not (tmp_path / "jct_ratio.png").exists()
    assert "## Paired with" not in (tmp_path / "results.md").read_text(encoding="utf-8")


def test_timeline_bands_split_the_clusters_despite_float_noise() -> None:
    from deepboot_harness.plots import _splits

    counts = {"training": np.array([32.0, 0.0]), "idle": np.array([-1e-12, 32.0 - 1e-12])}
    assert _splits(counts, 32)
    assert not _splits({"training": np.array([20.0]), "idle": np.array([5.0])}, 32)  # 7 training-cluster GPUs elsewhere


def _compare_argv(out: Path, workloads: list[str]) -> list[str]:
    import sys

    argv = [sys.executable, "-m", "deepboot_harness.cli", "compare", "--workloads", *workloads]
    return argv + [
        "--policies",
        "fifo",
        "ats",
        "tiresias",
        "--seeds",
        "0",
        "1",
        "--jobs",
        "2",
        "--quiet",
        "--out",
        str(out),
    ]


def test_resume_reuses_saved_runs_and_gives_the_same_results(
    two_small_csvs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A comparison resumed from some saved runs (and a line cut short) writes the results of an
    uninterrupted one; only the missing runs run again."""
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(_compare_argv(full, two_small_csvs)[3:]) == 0
    lines = (full / RUNS_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 12
    part.mkdir()
    (part / "comparison.json").write_text((full / "comparison.json").read_text(encoding="utf-8"), encoding="utf-8")
    (part / RUNS_FILE).write_text("".join(lines[:5]) + lines[5][:40], encoding="utf-8")  # the 6th cut short
    assert main([*_compare_argv(part, two_small_csvs)[3:], "--resume"]) == 0
    resumed = read_runs(part / RUNS_FILE)
    assert resumed[:5] == read_runs(full / RUNS_FILE)[:5] and len(resumed) == 12
    drop = ["wall_seconds"]
    pd.testing.assert_frame_equal(
        pd.read_csv(part / "results.csv").drop(columns=drop), pd.read_csv(full / "results.csv").drop(columns=drop)
    )
    for name in ("jcts.csv", "timeline.csv", "results.md"):
        assert (part / name).read_bytes() == (full / name).read_bytes(), name
    # another grid in the same folder: refused with --resume, started over without it
    other = [*_compare_argv(part, two_small_csvs)[3:], "--seeds", "3"]
    assert main([*other, "--resume"]) == 2
    assert "(seeds [0, 1], not [3]); use another --out" in capsys.readouterr().err
    assert main(other) == 0 and len(read_runs(part / RUNS_FILE)) == 6


def test_ctrl_c_keeps_the_finished_runs(workload_csv: Path, tmp_path: Path) -> None:
    """Ctrl-C: one line, exit 130, no traceback; the runs done so far are saved for --resume.

    The small workload's runs finish in a fraction of a second and the shipped one's take
    seconds, so Ctrl-C (sent once a run is saved) lands mid-grid."""
    out = tmp_path / "cmp"
    argv = [*_compare_argv(out, [str(workload_csv), "test/test-01"]), "--policies", "fifo", "ats"]
    code, err = interrupt_when(argv, lambda: len(read_runs(out / RUNS_FILE)) >= 1)
    assert code == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith("continue with --resume"), err
    saved = read_runs(out / RUNS_FILE)
    assert 1 <= len(saved) < 8
    assert main([*argv[3:], "--resume"]) == 0
    assert read_runs(out / RUNS_FILE)[: len(saved)] == saved and len(read_runs(out / RUNS_FILE)) == 8


def test_models_are_labelled_by_their_run_folder() -> None:
    from deepboot_harness.plots import display_name

    assert display_name("ppo:runs/foo/best_model.zip") == "ppo:foo"
    assert display_name("ppo:runs/foo/final_model.zip") == "ppo:foo/final_model"
    assert display_name("priority:runs/es_2/best_model.json") == "priority:es_2"
    assert display_name("ppo:models/wide.zip") == "ppo:wide"
    assert display_name("ppo:deepboot-v0") == "ppo:deepboot-v0"  # a shipped short name
    assert display_name("ats") == "ats"


def test_two_models_never_share_a_label_and_user_labels_must_differ() -> None:
    from deepboot_harness.plots import display_names

    same_folder = ["ppo:a/run/best_model.zip", "ppo:b/run/best_model.zip", "ats"]
    labels = display_names(same_folder)
    assert len(set(labels.values())) == 3 and labels["ats"] == "ats"
    assert display_names(same_folder, {"ppo:a/run/best_model.zip": "mine"})["ppo:b/run/best_model.zip"] == "ppo:run"
    with pytest.raises(ValueError, match="labels must differ"):
        display_names(same_folder, {p: "x" for p in same_folder[:2]})
    with pytest.raises(ValueError, match="labels must differ"):
        display_names(same_folder, {"ppo:a/run/best_model.zip": "ats"})  # a label that is another policy's name
    with pytest.raises(ValueError, match="not among the policies"):
        display_names(same_folder, {"fifo": "x"})


def test_compare_plots_name_each_run_by_its_folder_or_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs' best models (same file name) get their run folders' names, or a --label."""
    import shutil

    from agents.saved.shipped import PRETRAINED_DIR
    from deepboot_harness import plots

    runs = {}
    for name in ("es_1", "es_2"):
        (tmp_path / name).mkdir()
        model = shutil.copy(PRETRAINED_DIR / "deepboot-priority-v1.json", tmp_path / name / "best_model.json")
        runs[name] = f"priority:{model}"
    seen: list[dict[str, str]] = []
    real = plots.plot_avg_jct_bars
    monkeypatch.setattr(plots, "plot_avg_jct_bars", lambda *a, **k: seen.append(dict(k["labels"])) or real(*a, **k))
    out = tmp_path / "out"
    argv = ["compare", "--workloads", "tiny", "--policies", "ats", *runs.values(), "--quiet", "--out", str(out)]
    assert main([*argv, "--timeline-per-policy"]) == 0
    assert seen[-1] == {"ats": "ats", runs["es_1"]: "priority:es_1", runs["es_2"]: "priority:es_2"}
    assert {"timeline-priority-es_1.png", "timeline-priority-es_2.png"} <= {p.name for p in out.iterdir()}
    assert main([*argv, "--label", f"{runs['es_2']}=tuned"]) == 0
    assert seen[-1][runs["es_2"]] == "tuned"
