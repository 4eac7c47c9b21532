"""One default world: every front end runs DeepBoot-v1 unless told otherwise, v0 stays reachable by
name, a v0-trained checkpoint says which world it was trained in, and every output names the
dynamics it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.runs.run_config import default_dynamics
from deepboot_env import FRONT_END_DYNAMICS
from deepboot_env.config import EnvConfig, sim_config
from deepboot_harness import plots
from deepboot_harness.cli import build_parser, main
from deepboot_harness.dynamics import dynamics_name, dynamics_title, trained_dynamics_warnings


def test_every_default_is_v1_and_v0_stays_by_name() -> None:
    assert FRONT_END_DYNAMICS == "v1"
    parser = build_parser()
    assert parser.parse_args(["simulate"]).dynamics == "v1"
    assert parser.parse_args(["compare", "--workloads", "tiny", "--policies", "ats", "--out", "x"]).dynamics == "v1"
    assert parser.parse_args(["benchmark", "--out", "x"]).dynamics == "v1"
    assert default_dynamics(None) == "v1"  # deepboot train / train_policy.py (test_conventions: the flags)
    # the library builds what the commands run: run_episode(policy, workload, sim_config()) is `deepboot simulate`
    assert dynamics_name(sim_config()) == dynamics_name(EnvConfig().sim) == "v1"
    assert dynamics_name(EnvConfig.from_options(max_jobs=8).sim) == "v1"
    assert dynamics_name(sim_config(dynamics="v0")) == "v0"
    assert parser.parse_args(["simulate", "--dynamics", "v0"]).dynamics == "v0"


def test_dynamics_are_named_for_each_version_and_for_custom_options() -> None:
    assert dynamics_title(sim_config(dynamics="v1")) == "DeepBoot-v1 dynamics"
    assert dynamics_name(sim_config(dynamics="v1", trace_set="deepboot")) == "v1"  # the trace set is a note
    custom = sim_config(dynamics="v0", truth="measured")
    assert (dynamics_name(custom), dynamics_title(custom)) == ("custom", "custom dynamics")


def test_a_v0_checkpoint_resumes_on_v0_and_warns_in_one_line_on_v1(capsys: pytest.CaptureFixture[str]) -> None:
    assert default_dynamics("deepboot-v0") == "v0"  # --resume of the shipped v0 checkpoint stays in its world
    assert trained_dynamics_warnings(["ats", "ppo:deepboot-v0"], sim_config(dynamics="v0")) == []
    assert main(["simulate", "--workload", "tiny", "--policy", "ppo:deepboot-v0"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert "ppo:deepboot-v0 was trained on DeepBoot-v0 dynamics and runs here on DeepBoot-v1 dynamics" in warnings[0]
    assert "--dynamics v0" in warnings[0]


def test_simulate_names_its_dynamics_in_the_title_and_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.json"
    assert main(["simulate", "--workload", "tiny", "--policy", "fifo", "--json", str(path)]) == 0
    assert "fifo on tiny (DeepBoot-v1 dynamics, 8x4+8x4" in " ".join(capsys.readouterr().out.split())
    assert json.loads(path.read_text())["dynamics"] == "v1"
    assert not list(tmp_path.glob(".*partial")), "the JSON is written atomically"


def test_compare_names_its_dynamics_in_results_rows_and_plot_titles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    titles: list[str] = []
    real_cdf, real_bars = plots.plot_jct_cdf, plots.plot_avg_jct_bars

    def recording(real):
        def plot(*args, **kwargs):
            titles.append(kwargs["title"])
            return real(*args, **kwargs)

        return plot

    monkeypatch.setattr(plots, "plot_jct_cdf", recording(real_cdf))
    monkeypatch.setattr(plots, "plot_avg_jct_bars", recording(real_bars))
    argv = ["compare", "--workloads", "tiny", "--policies", "fifo", "ats", "--quiet", "--dynamics", "v0"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "results.md").read_text().startswith("# Policy comparison on DeepBoot-v0 dynamics\n")
    assert len(titles) == 2 and all("DeepBoot-v0 dynamics" in title for title in titles), titles
    header, *rows = (tmp_path / "results.csv").read_text().splitlines()
    column = header.split(",").index("dynamics")
    assert {row.split(",")[column] for row in rows} == {"v0"}


def test_benchmark_leaderboard_names_its_dynamics(tmp_path: Path) -> None:
    argv = ["benchmark", "--families", "short-period", "--policies", "ats", "--seeds", "1", "--quiet"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    board = (tmp_path / "leaderboard.md").read_text()
    assert board.startswith("## Benchmark leaderboard (DeepBoot-v1 dynamics)\n")
    assert "DeepBoot-v1 dynamics (each scenario sets its cluster" in board


def test_run_episode_without_a_config_runs_the_commands_world() -> None:
    from deepboot_env.evaluation import run_episode
    from traces.generate import generate_workload

    workload = generate_workload("tiny", 3)
    default = run_episode("ats", workload).train_jct_mean
    assert default == run_episode("ats", workload, sim_config(dynamics="v1")).train_jct_mean
    assert default != run_episode("ats", workload, sim_config(dynamics="v0")).train_jct_mean
