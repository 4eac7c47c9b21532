"""Golden runs on tiny hand-checkable workloads: JCTs asserted exactly against a first-principles
computation from the calibrated model (not against earlier simulator output)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from deepboot_env.evaluation import run_episode
from deepboot_env.sim.apps import get_app
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.goodput import iteration_time, split_batch, statistical_gain
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import TrainingJobSpec, Workload


def work_seconds(app_name: str, replicas: int, total_batch: int) -> int:
    """Seconds to run every epoch on ``replicas`` GPUs of one node with a fixed total batch.

    Each epoch takes round(progress of the epoch / rate), rate = gain / iteration time, and starts
    exactly at the previous epoch's end (the simulator's rule).
    """
    app = get_app(app_name)
    m, s = split_batch(app, np.array([replicas]), np.array([total_batch]))
    t_iter = iteration_time(app.throughput_params, np.array([1]), np.array([replicas]), m, s)[0]
    used = replicas * m[0] * (s[0] + 1)
    total, prev = 0, 0.0
    for epoch, target in enumerate(app.epoch_progress):
        sqr, var = app.grad_stats(epoch, used)
        rate = statistical_gain(used, app.init_batch_size, sqr, var) / t_iter
        total += round((target - prev) / rate)
        prev = float(target)
    return total


def boundary_after(t: float, interval: float = 60.0) -> float:
    return math.ceil(t / interval) * interval


def golden_run(
    policy: str, app: str, batch: int, arrivals: dict[str, float], restart: str = "afe"
) -> tuple[EpisodeMetrics, float, int]:
    """``policy``'s episode of one-GPU ``app`` jobs with a total batch of ``batch``, arriving at
    ``arrivals`` (name -> s), on one node with one GPU; with the application's full restart delay
    and one job's :func:`work_seconds`."""
    jobs = tuple(TrainingJobSpec(name, arrival, app, 1, batch) for name, arrival in arrivals.items())
    config = SimConfig(cluster=ClusterConfig(train_nodes=1, infer_nodes=0, gpus_per_node=1), restart=restart)
    metrics = run_episode(policy, Workload(f"golden-{policy}", jobs), config)
    return metrics, get_app(app).full_restart_delay, work_seconds(app, 1, batch)


def test_fifo_two_jobs_on_one_gpu_run_one_after_the_other() -> None:
    metrics, delay, work = golden_run("fifo", "cifar10", 128, {"a": 30.0, "b": 40.0})
    end_a = 60.0 + delay + work
    start_b = boundary_after(end_a)
    end_b = start_b + delay + work
    assert metrics.jcts == {"a": end_a - 30.0, "b": end_b - 40.0}
    assert metrics.makespan == end_b
    assert metrics.restarts == 0


def test_ats_tie_rule_gives_the_gpu_to_the_later_job_first() -> None:
    """Two ncf jobs arrive together at a boundary on a 1-GPU cluster. Both are worth 0 (age 0), and
    ATS's trace-back takes the smallest w attaining the optimum for the *last* job in its order
    first, so the later job runs first; the other waits until the GPU is free at a boundary."""
    metrics, delay, work = golden_run("ats", "ncf", 32768, {"first": 0.0, "second": 0.0})
    end_second = 0.0 + delay + work
    assert work < 60, "the golden case assumes an ncf job shorter than one interval"
    start_first = boundary_after(end_second)
    assert metrics.jcts == {"second": end_second, "first": start_first + delay + work}


@pytest.mark.parametrize("restart, stall", [("afe", "full"), ("full", "full"), ("pollux", 30.0)])
def test_first_start_stall_per_restart_model(restart: str, stall: object) -> None:
    metrics, full_delay, work = golden_run("fifo", "cifar10", 128, {"j": 61.0}, restart)
    delay = full_delay if stall == "full" else stall
    assert metrics.jcts["j"] == 120.0 + delay + work - 61.0
