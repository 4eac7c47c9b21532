"""Oracles read the truth (issue 19 item 2, docs/policies.md §6, docs/simulator.md).

A policy that is an oracle by definition reads the rates jobs truly progress at, as the
originals' oracles read the traces: ``JobView.oracle_rate`` (Optimus+Oracle's remaining time)
and the JCT lower bound of the episode metrics. Under the fitted truth both are the fitted
model's rates, so nothing changes there.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from builders import cluster_state, job_view

from baselines.optimus import OptimusPolicy, remaining_time
from deepboot_env.evaluation import run_episode
from deepboot_env.sim.apps import get_app
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.measured import shared_measured_rates
from deepboot_env.sim.metrics import lower_bound_seconds
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import packed_counts
from deepboot_env.sim.workload import TrainingJobSpec, Workload


@pytest.mark.parametrize(
    ("replicas", "per_node", "counts"),
    [(1, 4, [1]), (4, 4, [4]), (5, 4, [4, 1]), (10, 4, [4, 4, 2]), (16, 8, [8, 8]), (0, 4, [])],
)
def test_packed_counts_fill_whole_nodes_first(replicas: int, per_node: int, counts: list[int]) -> None:
    assert packed_counts(replicas, per_node) == counts


def test_oracle_rate_is_the_fitted_rate_under_the_fitted_truth() -> None:
    view = job_view(0, "bert", [0, 0], max_replicas=32, epoch=1)
    for k in range(0, 33):
        assert view.oracle_rate(k, 4) == view.rate(-(-k // 4), k)


def _measured_view(app: str, epoch: int, trace_set: str = "pollux"):
    view = job_view(0, app, [0, 0], max_replicas=32, epoch=epoch)
    return dataclasses.replace(view, truth=shared_measured_rates(view.rates, trace_set))


@pytest.mark.parametrize("app", ["bert", "yolov3"])
def test_oracle_rate_reads_the_measured_shape_under_the_measured_truth(app: str) -> None:
    view = _measured_view(app, epoch=0)
    truth = view.truth
    assert truth is not None
    # 8 GPUs packed on nodes of 4 is shape "44", measured directly
    assert view.oracle_rate(8, 4) == truth.rate_column("44", 8)[0]
    # the fitted model is much too fast on "44" for these apps (the fidelity trace's table:
    # model/measured step-time ratios 0.63 and 0.68), so the oracle sees slower progress
    assert view.oracle_rate(8, 4) < 0.85 * view.rate(2, 8)
    # one node of 4 is within a few per cent in both
    assert view.oracle_rate(4, 4) == pytest.approx(view.rate(1, 4), rel=0.12)


def test_oracle_rate_adds_nothing_beyond_the_gpus_a_job_can_use() -> None:
    view = _measured_view("ncf", epoch=0)  # ncf's goodput peaks on one GPU
    assert view.rates.max_replicas == 1
    assert view.oracle_rate(8, 4) == view.oracle_rate(1, 4) > 0


def test_optimus_remaining_time_uses_the_oracle_rate() -> None:
    view = _measured_view("bert", epoch=1)
    for k in (1, 3, 4, 8, 12):
        assert remaining_time(view, k, 4) == view.remaining_work / view.oracle_rate(k, 4)
    assert remaining_time(view, 0, 4) == float("inf")


def test_optimus_decides_with_the_oracle_rates() -> None:
    """bert and deepspeech2 on 3x4: with the fitted oracle deepspeech2 grows to a full node; the
    measured oracle sees it no faster on 3 or 4 GPUs than on 2 (epoch 1), so it stops at 2."""
    counts = {}
    for measured in (False, True):
        views = []
        for i, app in enumerate(("bert", "deepspeech2")):
            view = job_view(i, app, [0, 0, 0], max_replicas=8, epoch=1)
            if measured:
                view = dataclasses.replace(view, truth=shared_measured_rates(view.rates, "pollux"))
            views.append(view)
        allocation = OptimusPolicy().decide(cluster_state("3x4", views))
        counts[measured] = {job_id: int(gpus.sum()) for job_id, gpus in allocation.gpus.items()}
        if measured:
            speech = views[1]
            assert speech.oracle_rate(3, 4) <= speech.oracle_rate(2, 4)
            assert speech.oracle_rate(4, 4) <= speech.oracle_rate(2, 4)
    assert counts == {False: {0: 8, 1: 4}, True: {0: 8, 1: 2}}


def test_lower_bound_reads_the_measured_rates_and_bounds_every_jct() -> None:
    cluster = ClusterConfig(train_nodes=16, infer_nodes=0, gpus_per_node=4)
    jobs = tuple(
        TrainingJobSpec(f"j{i}", 10.0 + 300 * i, app, 4, batch)
        for i, (app, batch) in enumerate([("cifar10", 512), ("bert", 48), ("ncf", 32768), ("deepspeech2", 80)])
    )
    workload = Workload("four", jobs)
    bounds = {}
    for truth in ("fitted", "measured"):
        config = SimConfig(cluster=cluster, restart="afe", truth=truth)
        metrics = run_episode("ats-nolend", workload, config)
        sim = Simulator(workload, config)
        per_app = {}
        for spec in jobs:
            app = get_app(spec.app)
            truth_rates, max_replicas = sim._training.truth_of(app)
            per_app[spec.name] = lower_bound_seconds(app, truth_rates, max_replicas, 4)
            assert metrics.jcts[spec.name] >= per_app[spec.name]
        assert metrics.jct_lower_bound_mean == pytest.approx(np.mean(list(per_app.values())))
        bounds[truth] = per_app
    assert bounds["fitted"] != bounds["measured"]


def test_lower_bound_by_hand_from_the_measured_columns() -> None:
    app = get_app("cifar10")
    view = job_view(0, "cifar10", [0], max_replicas=16)
    truth = shared_measured_rates(view.rates, "pollux")
    best = np.zeros(len(app.epoch_progress))
    for k in range(1, 17):
        counts = packed_counts(k, 4)
        column = truth.rate_column(truth.placement_class(counts, len(counts) > 1), k)
        best = np.maximum(best, column)
    expected = float(np.sum(np.diff(np.concatenate([[0.0], app.epoch_progress])) / best))
    assert lower_bound_seconds(app, truth, 16, 4) == pytest.approx(expected, rel=1e-12)
