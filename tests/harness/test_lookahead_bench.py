"""What the lookahead benchmarks share (deepboot_harness.lookahead_bench): the switching flags and
their settings, a report line, what a switcher followed."""

from __future__ import annotations

from types import SimpleNamespace

from baselines.lookahead import DEFAULT_SETTINGS, Choice, LookaheadSettings
from deepboot_env.argparsing import ArgumentParser
from deepboot_harness.lookahead_bench import (
    add_switching_arguments,
    followed_and_ties,
    report_row,
    switching_settings,
)


def test_the_switching_flags_default_to_the_default_settings_and_set_each_one() -> None:
    parser = ArgumentParser()
    add_switching_arguments(parser)
    assert switching_settings(parser.parse_args([])) == DEFAULT_SETTINGS
    args = parser.parse_args(["--every", "3", "--horizon", "600", "--candidates", "ats", "fifo", "--infer-weight", "2"])
    assert switching_settings(args) == LookaheadSettings(("ats", "fifo"), 3, 600.0, 2.0)


def test_a_report_row_pads_the_label_to_its_width() -> None:
    metrics = SimpleNamespace(train_jct_mean=12345.678, infer_latency_mean=1.2345, restarts=42)
    expected = "JCT  12,345.7 s  inference latency   1.23 s  restarts    42  CPU     3.2 s  (note)"
    assert report_row("ats", metrics, 3.21, "  (note)") == f"  {'ats':<12} {expected}"
    assert report_row("ats", metrics, 3.21, "  (note)", width=18) == f"  {'ats':<18} {expected}"


def test_followed_counts_the_chosen_candidates_and_ties_the_shared_lowest_scores() -> None:
    switcher = SimpleNamespace(
        candidates=(SimpleNamespace(label="ats"), SimpleNamespace(label="fifo")),
        choices=[Choice(0.0, (1.0, 1.0), 0), Choice(60.0, (2.0, 1.0), 1), Choice(120.0, (0.5, 3.0), 0)],
    )
    followed, ties = followed_and_ties(switcher)
    assert followed == {"ats": 2, "fifo": 1} and ties == 1
