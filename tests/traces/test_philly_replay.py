"""The Philly-scale replay (traces/philly_replay.py, docs/workloads.md §9) and ATS's knapsack bound
(docs/policies.md §8.5).

The replay tests read the raw trace from ../shared and skip without it; the bound tests need nothing.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from builders import SHARED_DATA

from baselines.ats import MAX_KNAPSACK_CELLS, AtsPolicy, knapsack_matrix, knapsack_prefix
from deepboot_env.sim.apps import COLD_START_DELAY_S
from deepboot_harness.cli import main
from traces.generate import TUNED_JOBS, job_specs
from traces.loaders import load_philly, load_workload
from traces.philly import filter_mask, gpu_time_bucket
from traces.philly_replay import INFERENCE_LOAD, peak_concurrent_gpus, philly_replay, replay_cluster

PHILLY = SHARED_DATA / "philly" / "philly.csv"
needs_philly = pytest.mark.skipif(not PHILLY.is_file(), reason="raw Philly trace absent")


@pytest.fixture(scope="module")
def trace():
    return load_philly(PHILLY)


@needs_philly
def test_the_replay_holds_every_filtered_job_at_its_own_arrival(trace) -> None:
    replay = philly_replay(trace, inference=False)
    jobs = replay.workload.jobs
    assert len(jobs) == int(filter_mask(trace).sum()) == 74_428  # docs/workloads.md §3
    stamps = np.sort(trace.timestamp[filter_mask(trace)])
    arrivals = np.array([j.arrival for j in jobs])
    assert arrivals[0] == 0.0 and np.array_equal(arrivals, (stamps - stamps[0]).astype(float))
    assert replay.peak_gpus == 1061 and replay.cluster.describe() == "266x4+266x4"
    assert replay.span_s == float(stamps[-1] - stamps[0])


@needs_philly
def test_the_replay_maps_applications_as_the_generator(trace) -> None:
    replay = philly_replay(trace, num_jobs=2000, seed=5, inference=False)
    rows = np.flatnonzero(filter_mask(trace))
    rows = rows[np.argsort(trace.timestamp[rows], kind="stable")][:2000]
    bucket = gpu_time_bucket(trace.gpu_time[rows])
    expected = job_specs(
        (trace.timestamp[rows] - trace.timestamp[rows[0]]).astype(float),
        bucket,
        np.random.Generator(np.random.PCG64(5)),
    )
    assert replay.workload.jobs == tuple(expected)
    by_bucket = {0: {"cifar10", "ncf"}, 1: {"deepspeech2", "bert"}, 2: {"yolov3"}, 3: {"imagenet"}}
    for job, b in zip(replay.workload.jobs, bucket.tolist(), strict=True):
        assert job.app in by_bucket[b] and (job.num_replicas, job.batch_size) in TUNED_JOBS[job.app]
    assert {j.app for j in replay.workload.jobs} == set(TUNED_JOBS)


@needs_philly
def test_the_replay_inference_has_the_default_relative_load(trace) -> None:
    replay = philly_replay(trace, num_jobs=300)
    requests = replay.workload.requests
    gpus = replay.cluster.infer_nodes * replay.cluster.gpus_per_node
    assert replay.cluster.train_nodes == replay.cluster.infer_nodes
    assert requests and requests[-1].arrival < replay.span_s
    scale = gpus / 32  # the default service scale
    durations = np.array([r.duration for r in requests])
    assert durations.min() >= round(30 * scale) and durations.max() <= round(480 * scale)
    busy = sum(r.duration + COLD_START_DELAY_S[r.app] for r in requests)  # the generator's offered load
    offered = busy / replay.span_s
    assert offered == pytest.approx(INFERENCE_LOAD * gpus, rel=0.1)


def test_the_cluster_holds_the_peak_demand_in_two_equal_halves() -> None:
    start = np.array([0, 10, 10, 30])
    duration = np.array([20.0, 5.0, 30.0, 1.0])
    gpus = np.array([3, 4, 2, 8])
    assert peak_concurrent_gpus(start, duration, gpus) == 10  # a release at 30 precedes the start at 30
    assert replay_cluster(1061).describe() == "266x4+266x4"
    assert replay_cluster(10).describe() == "12x4+12x4"  # imagenet's 48 GPUs always fit


@needs_philly
def test_generate_philly_replay_then_simulate_shows_progress(tmp_path: Path, capsys, monkeypatch) -> None:
    import deepboot_harness.cli as cli

    out = tmp_path / "philly-300.csv"
    assert main(["generate", "--philly-replay", str(PHILLY), "--jobs", "300", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    hint = next(line for line in printed.splitlines() if "deepboot simulate" in line)
    assert "--cluster 22x4+22x4 --max-days 48" in hint
    assert len(load_workload(out).jobs) == 300
    with open(out, newline="") as fh:
        assert sum(1 for row in csv.DictReader(fh) if not row["application"].startswith("infer")) == 300
    monkeypatch.setattr(cli, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(cli, "PROGRESS_EVERY", 1000)
    argv = ["simulate", "--workload", str(out), "--cluster", "22x4+22x4", "--max-days", "48", "--policy", "fifo"]
    assert main(argv) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and all("jobs done" in line for line in lines)
    assert lines[-1].startswith("done: day ") and "of 48, 300/300 jobs done" in lines[-1]


def test_replay_flags_are_checked(capsys) -> None:
    assert main(["generate", "--jobs", "10"]) == 2
    assert "--jobs: only with --philly-replay" in capsys.readouterr().err
    assert main(["generate", "--philly-replay", "nowhere.csv", "--load", "2"]) == 2
    assert "drop --load" in capsys.readouterr().err
    assert main(["simulate", "--max-days", "0"]) == 2
    assert capsys.readouterr().err.strip() == "deepboot simulate: error: --max-days must be > 0, got 0"


@needs_philly
def test_replay_job_count_out_of_range_is_one_line(capsys) -> None:
    assert main(["generate", "--philly-replay", str(PHILLY), "--jobs", "100000"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "deepboot generate: error: --jobs must be between 1 and 74428 (the jobs after the filters), got 100000"
    )


# ----------------------------------------------------------------------------------------------
# ATS's bound


def test_the_prefix_is_every_job_while_the_programme_is_small() -> None:
    budget = 1 << 22
    assert knapsack_prefix([64] * 900, [64] * 900, 64, budget) == 900  # 900 x 65 x 65 cells: under the budget
    assert knapsack_prefix([64] * 30, [64] * 30, 2128, budget) == 30  # the widths fit the capacity: no bound
    assert knapsack_prefix([], [], 2000) == 0
    # the budget binds: as many jobs as it holds (64 x 64 GPUs of useful widths for 1,000)
    assert knapsack_prefix([64] * 500, [64] * 500, 1000, budget) == budget // (65 * 1001) == 64
    # the budget's 30 jobs could use 1,920 GPUs of 2,128: the 34 that cover them
    assert budget // (65 * 2129) == 30 and knapsack_prefix([64] * 500, [64] * 500, 2128, budget) == 34
    # jobs that can use 16 of their 64 GPUs: counted by what they can use
    assert knapsack_prefix([64] * 500, [16] * 500, 2128, budget) == 133  # 133 x 16 = 2,128
    assert knapsack_prefix([1] * 5000, [1] * 5000, 2128, budget) == 2128
    # the default bound: all of 3,000 full-width jobs at the default capacity (64 GPUs)
    assert knapsack_prefix([64] * 3000, [64] * 3000, 64) == 3000 and 3000 * 65 * 65 < MAX_KNAPSACK_CELLS


@pytest.mark.parametrize("seed", range(6))
def test_a_smaller_programme_capacity_gives_the_same_choice(seed: int) -> None:
    """ATS runs its programme over min(capacity, sum of caps) GPUs: the same choice, bit for bit."""
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(100, 300))
    widths = [int(w) for w in rng.integers(0, 30, size=int(rng.integers(1, 8)))]
    values = np.zeros((len(widths), max(widths) + 1))
    for row, w in zip(values, widths, strict=True):
        row[1 : w + 1] = np.sqrt(np.arange(1, w + 1)) * rng.uniform(0.1, 1.0)
    assert sum(widths) < capacity
    full = knapsack_matrix(values, widths, capacity)
    assert knapsack_matrix(values, widths, sum(widths)) == full
    assert full == widths  # nothing is scarce: every job takes its cap (values increase)


def _queued_state(jobs: int, cluster: str = "266x4+266x4"):
    """``jobs`` queued jobs (none holding GPUs, caps of 1 to 64 GPUs) on ``cluster``."""
    from builders import cluster_state, job_view

    rng = np.random.default_rng(jobs)
    apps = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")
    nodes = sum(int(part.split("x")[0]) for part in cluster.split("+"))
    views = [
        job_view(
            i, apps[i % len(apps)], np.zeros(nodes, dtype=np.int64), max_replicas=int(rng.choice([1, 2, 4, 16, 64]))
        )
        for i in range(jobs)
    ]
    return cluster_state(cluster, views)


def _unbounded_counts(state) -> dict[int, int]:
    """ATS's counts as the knapsack over every job and the whole capacity gives them."""
    import math

    from baselines.ats import job_priority_key, option_matrix

    jobs = sorted(state.jobs, key=job_priority_key)
    capacity = int(state.training_capacity(lend=True).sum())
    caps = [min(j.max_replicas, capacity) for j in jobs]
    values = option_matrix(jobs, math.ceil(capacity / len(jobs)), state.gpus_per_node, caps)
    return {j.id: w for j, w in zip(jobs, knapsack_matrix(values, caps, capacity), strict=True)}


@pytest.mark.parametrize(
    ("jobs", "cluster", "bound_binds"),
    [(12, "266x4+266x4", False), (300, "8x4+8x4", False), (2000, "266x4+266x4", True)],
)
def test_ats_decisions_with_and_without_the_bound(monkeypatch, jobs: int, cluster: str, bound_binds: bool) -> None:
    """Where the bound does not bind ATS decides exactly as the unbounded knapsack (GPUs plentiful:
    12 jobs on 2,128 GPUs; scarce: 300 jobs on 64); where it binds the programme it solves stays
    within the bound and the jobs beyond the prefix get nothing."""
    import baselines.ats as ats

    state = _queued_state(jobs, cluster)
    sizes: list[tuple[int, int, int]] = []
    real = ats.knapsack_options

    def spy(options, capacity):
        widths = options.widths.tolist()
        sizes.append((len(widths), sum(widths), capacity))
        return real(options, capacity)

    monkeypatch.setattr(ats, "knapsack_options", spy)
    counts = AtsPolicy().propose_counts(state)
    capacity = int(state.training_capacity(lend=True).sum())
    if bound_binds:
        considered = sum(n for n, _, _ in sizes)
        assert considered < jobs and sizes[0][2] == capacity
        for n, width_sum, dp_capacity in sizes:  # each pass within the bound
            assert (width_sum + n) * (dp_capacity + 1) <= max(
                MAX_KNAPSACK_CELLS, (2 * dp_capacity + 65) * (dp_capacity + 1)
            )
        assert sum(counts.values()) == capacity  # every GPU is used
        order = sorted(state.jobs, key=ats.job_priority_key)
        assert all(counts[j.id] == 0 for j in order[considered:])
    else:
        assert [n for n, _, _ in sizes] == [jobs]
        assert counts == _unbounded_counts(state)
