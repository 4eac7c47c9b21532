"""What the two lookahead benchmarks (``benchmarks/bench_mpc.py``, ``benchmarks/bench_oracle.py``)
share: the switching flags and the settings they make, one timed episode, a report line, and what a
switcher followed at its choice points."""

from __future__ import annotations

import argparse
import collections
import time

from baselines.lookahead import (
    DEFAULT_CANDIDATES,
    DEFAULT_EVERY,
    DEFAULT_HORIZON_S,
    LookaheadSettings,
    LookaheadSwitcher,
)
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import Policy
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import Workload


def add_switching_arguments(parser: argparse.ArgumentParser) -> None:
    """``--every``, ``--horizon``, ``--candidates`` and ``--infer-weight``, in this order."""
    parser.add_argument("--every", type=int, default=DEFAULT_EVERY)
    parser.add_argument("--horizon", type=float, default=DEFAULT_HORIZON_S, help="seconds played ahead")
    parser.add_argument("--candidates", nargs="+", default=list(DEFAULT_CANDIDATES))
    parser.add_argument("--infer-weight", type=float, default=1.0)


def switching_settings(args: argparse.Namespace) -> LookaheadSettings:
    """The settings the flags of :func:`add_switching_arguments` give."""
    return LookaheadSettings(tuple(args.candidates), args.every, args.horizon, args.infer_weight)


def timed_episode(policy: Policy, workload: Workload, config: SimConfig, seed: int) -> tuple[EpisodeMetrics, float]:
    """One episode's metrics and CPU seconds (``time.process_time``)."""
    t0 = time.process_time()
    metrics = run_episode(policy, workload, config, seed)
    return metrics, time.process_time() - t0


def report_row(label: str, metrics: EpisodeMetrics, cpu: float, note: str = "", width: int = 12) -> str:
    """One line of a report: ``label`` (padded to ``width``), training JCT, inference latency,
    restarts and CPU seconds, then ``note``."""
    return (
        f"  {label:<{width}} JCT {metrics.train_jct_mean:9,.1f} s  "
        f"inference latency {metrics.infer_latency_mean:6.2f} s  restarts {metrics.restarts:5d}  CPU {cpu:7.1f} s{note}"
    )


def followed_and_ties(switcher: LookaheadSwitcher) -> tuple[collections.Counter[str], int]:
    """How often ``switcher`` followed each candidate (by label), and at how many choice points
    more than one candidate had the lowest score."""
    followed = collections.Counter(switcher.candidates[c.chosen].label for c in switcher.choices)
    ties = sum(1 for c in switcher.choices if c.scores.count(min(c.scores)) > 1)
    return followed, ties
