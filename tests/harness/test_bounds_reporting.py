"""The lower bounds in the benchmark and comparison reports: the check on every run, the
leaderboard's ratio to the bound and share of the gap closed, ``results.md``'s columns."""

from __future__ import annotations

import pandas as pd
import pytest

from deepboot_harness.benchmark import BoundViolation, check_bound, run_one
from deepboot_harness.compare_tables import bound_columns
from deepboot_harness.leaderboard import ALL, leaderboard, leaderboard_markdown


def _row(policy: str, jct: float, bound: float = 50.0, truncated: bool = False) -> dict[str, object]:
    return {
        "policy": policy,
        "family": "f",
        "seed": 1,
        "train_jct_mean": jct,
        "jct_bound": bound,
        "truncated": truncated,
    }


def test_a_run_below_its_bound_stops_the_benchmark():
    check_bound(_row("x", 50.0))
    check_bound(_row("x", 10.0, truncated=True))  # a cut run's mean covers only the jobs done
    check_bound({"policy": "x", "family": "f", "seed": 1, "train_jct_mean": 1.0})  # an older row: no bound
    with pytest.raises(BoundViolation, match=r"x on f seed 1: mean JCT 49\.000 s is below .* 50\.000 s"):
        check_bound(_row("x", 49.0))


def test_a_benchmark_run_carries_and_respects_its_bounds():
    row = run_one("ats", "philly-periodic", 2_000_000, {"dynamics": "v1"})
    assert row["jct_bound"] == max(row["jct_bound_alone"], row["jct_bound_pooled"], row["jct_bound_pooled_speed"])
    assert row["jct_bound_alone"] <= row["jct_bound"] <= row["train_jct_mean"]
    assert row["jct_bound"] == pytest.approx(971.6, abs=0.5)


def _frame() -> pd.DataFrame:
    rows = []
    for family, (ats, x, bound) in {"f": (100.0, 80.0, 60.0), "g": (200.0, 210.0, 100.0)}.items():
        for policy, jct in (("ats", ats), ("x", x)):
            rows.append(
                {
                    "policy": policy,
                    "family": family,
                    "seed": 1,
                    "train_jct_mean": jct,
                    "jct_lower_bound_mean": 10.0,
                    "jct_bound": bound,
                    "infer_latency_p99": 1.0,
                    "cpu_s": 1.0,
                }
            )
    return pd.DataFrame(rows)


def test_the_leaderboard_measures_policies_against_the_bound():
    board = leaderboard(_frame()).set_index(["policy", "family"])
    assert board.loc[("x", "f"), "bound"] == pytest.approx(80 / 60)  # the tightest bound, not the per-job one
    assert board.loc[("x", "f"), "bound_ratio"] == pytest.approx(0.6)
    assert board.loc[("x", "f"), "gap_to_bound"] == pytest.approx(0.5)  # (1 - 0.8) / (1 - 0.6)
    assert board.loc[("x", "g"), "gap_to_bound"] == pytest.approx(-0.1)  # worse than ats: negative
    # over the families: from the mean ratios (0.8 and 1.05) and the mean bound ratio (0.6 and 0.5)
    assert board.loc[("x", ALL), "gap_to_bound"] == pytest.approx((1 - 0.925) / (1 - 0.55))
    assert board.loc[("ats", ALL), "gap_to_bound"] == 0.0
    text = leaderboard_markdown(leaderboard(_frame()), "t")
    section = text.split("### Share of the gap from `ats` to the lower bound")[1].split("###")[0]
    assert "| x " in section and "50%" in section and "lower bound: its ratio to ats" in section
    assert "0.600" in section and "0.550" in section


def test_results_md_columns():
    frame = pd.DataFrame(
        {
            "policy": ["ats", "x", "ats", "x"],
            "workload": ["w", "w", "v", "v"],
            "seed": [0, 0, 0, 0],
            "train_jct_mean": [100.0, 80.0, 300.0, 240.0],
            "jct_bound": [60.0, 60.0, 100.0, 100.0],
        }
    )
    columns = bound_columns(frame, "ats")
    assert columns["JCT ÷ tightest bound"] == {"ats": "2.50", "x": "2.00"}
    # (200 - 160) / (200 - 80)
    assert columns["gap ats → bound closed"] == {"ats": "0%", "x": "33%"}
    assert bound_columns(frame.drop(columns="jct_bound"), "ats") == {}
    assert list(bound_columns(frame, None)) == ["JCT ÷ tightest bound"]
