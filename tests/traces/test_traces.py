"""Tests of traces/: loaders, Philly statistics, generators, shipped workloads."""

from __future__ import annotations

import functools
import json
from collections import Counter

import numpy as np
import pytest
from builders import SHARED_DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from deepboot_env.sim.apps import APP_NAMES, COLD_START_DELAY_S
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload, WorkloadError
from traces import make_shipped
from traces.generate import (
    DEFAULT_SERVICE_TIME_S,
    TUNED_JOBS,
    generate_periodic_inference,
    generate_training,
    generate_workload,
    write_workload_csv,
)
from traces.generate_cli import generate_main
from traces.loaders import (
    TraceError,
    list_shipped_workloads,
    load_philly,
    load_workload,
    resolve_workload,
)
from traces.philly import (
    PhillyStats,
    compute_philly_stats,
    default_philly_stats,
    default_stats_file,
    load_philly_stats,
    save_philly_stats,
)

WORKLOADS = SHARED_DATA / "workloads"
PHILLY = SHARED_DATA / "philly" / "philly.csv"
needs_workloads = pytest.mark.skipif(not WORKLOADS.is_dir(), reason="reference workloads absent")
needs_philly = pytest.mark.skipif(not PHILLY.is_file(), reason="raw Philly trace absent")

DOC_POOL = 31293
DOC_HOURLY = [3550, 3368, 2240, 3728, 5169, 6585, 3499, 3154]
DOC_FRACTIONS = [78.29, 15.25, 4.60, 1.87]


# ---------------------------------------------------------------------------------------------
# reference workloads


@needs_workloads
def test_small_csv_has_training_and_stationary_inference():
    wl = load_workload(WORKLOADS / "deepboot" / "small.csv")
    assert wl.name == "small"
    assert len(wl.jobs) == 160
    assert len(wl.requests) == 3200
    instances = Counter(r.instance for r in wl.requests)
    assert set(instances) == {f"infer-{m}-1" for m in APP_NAMES}
    assert instances["infer-bert-1"] == 577 and instances["infer-ncf-1"] == 632
    assert all(r.app == r.instance.split("-")[1] for r in wl.requests)
    durs = np.array([r.duration for r in wl.requests])
    assert durs.min() == 1 and durs.max() == 9 and abs(durs.mean() - 4.97) < 0.01
    apps = Counter(j.app for j in wl.jobs)
    assert apps == {"ncf": 68, "cifar10": 66, "deepspeech2": 12, "bert": 7, "imagenet": 4, "yolov3": 3}
    assert sum(j.num_replicas for j in wl.jobs) == 1092
    assert wl.jobs[0].arrival == 107 and wl.jobs[-1].arrival == 27695
    # arrival order kept
    assert [j.arrival for j in wl.jobs] == sorted(j.arrival for j in wl.jobs)
    assert [r.arrival for r in wl.requests] == sorted(r.arrival for r in wl.requests)


@needs_workloads
def test_pure_train_and_pollux_workload1_match_small_training_rows():
    small = load_workload(WORKLOADS / "deepboot" / "small.csv")
    pure = load_workload(WORKLOADS / "deepboot" / "pure_train.csv")
    pollux = load_workload(WORKLOADS / "pollux" / "load-1.0" / "workload-1.csv")
    assert len(pure.jobs) == 160 and pure.requests == ()
    assert pollux.requests == ()
    assert pure.jobs == small.jobs
    assert pollux.jobs == small.jobs


@needs_workloads
@pytest.mark.parametrize("load,n", [("0.5", 80), ("1.0", 160), ("1.5", 240), ("2.0", 320)])
def test_all_pollux_workloads_load(load, n):
    for i in range(1, 5):
        wl = load_workload(WORKLOADS / "pollux" / f"load-{load}" / f"workload-{i}.csv")
        assert len(wl.jobs) == n
        assert all(0 <= j.arrival < 28800 for j in wl.jobs)
        assert all((j.num_replicas, j.batch_size) in TUNED_JOBS[j.app] for j in wl.jobs)


@needs_workloads
def test_reference_workload_round_trips_through_writer(tmp_path):
    small = load_workload(WORKLOADS / "deepboot" / "small.csv")
    back = load_workload(write_workload_csv(small, tmp_path / "small-copy.csv"))
    assert back.jobs == small.jobs and back.requests == small.requests


# ---------------------------------------------------------------------------------------------
# Philly statistics


def test_shipped_philly_stats_match_the_doc():
    stats = default_philly_stats()
    assert stats.total == 74428
    assert stats.provenance["rows_read"] == 82247
    assert stats.provenance["rows_after_duration_filter"] == 74593
    assert stats.window_counts(2, 8).sum() == DOC_POOL
    assert stats.hourly_pool_counts(2, 8).tolist() == DOC_HOURLY
    assert np.round(100 * stats.bucket_fractions(2, 8), 2).tolist() == DOC_FRACTIONS
    obj = json.loads(default_stats_file().read_text())
    assert obj["provenance"]["filters"] == {"min_duration_s": 60.0, "max_gpu_time_s_exclusive": 3600000.0}
    # full day = everything; a window wrapping past midnight is the sum of both parts
    assert stats.window_counts(0, 24).sum() == stats.total
    wrap = stats.window_counts(22, 4).sum()
    assert wrap == stats.counts[22 * 60 :].sum() + stats.counts[: 2 * 60].sum()


@needs_philly
def test_philly_stats_recomputed_from_raw_trace_equal_shipped(tmp_path):
    trace = load_philly(PHILLY)
    assert len(trace) == 82247
    assert len(set(trace.cluster.tolist())) == 15
    assert np.all(trace.gpu_time == trace.duration * trace.num_gpus)
    stats = compute_philly_stats(trace)
    shipped = default_philly_stats()
    assert np.array_equal(stats.counts, shipped.counts)
    assert stats.provenance["source_sha256"] == shipped.provenance["source_sha256"]
    save_philly_stats(stats, tmp_path / "s.json")
    again = load_philly_stats(tmp_path / "s.json")
    assert np.array_equal(again.counts, stats.counts)
    assert again.window_counts(2, 8).sum() == DOC_POOL


def test_philly_stats_reject_bad_shapes_and_windows():
    with pytest.raises(ValueError):
        PhillyStats(counts=np.zeros((10, 4)))
    stats = default_philly_stats()
    for start, window in [(24, 8), (-1, 8), (2, 0), (2, 25), (2.01, 8)]:
        with pytest.raises(ValueError):
            stats.window_counts(start, window)


# ---------------------------------------------------------------------------------------------
# training generator


def test_generate_training_defaults_follow_pollux_semantics():
    jobs = generate_training(seed=1)
    assert len(jobs) == 160
    times = [j.arrival for j in jobs]
    assert times == sorted(times)
    assert all(float(t).is_integer() and 0 <= t < 8 * 3600 for t in times)
    assert [j.name for j in jobs] == [f"{j.app}-{i}" for i, j in enumerate(jobs)]
    assert all((j.num_replicas, j.batch_size) in TUNED_JOBS[j.app] for j in jobs)
    assert len({j.name for j in jobs}) == 160


def test_generated_app_mix_matches_philly_buckets():
    jobs = generate_training(num_jobs=20000, seed=7)
    n = len(jobs)
    apps = Counter(j.app for j in jobs)
    frac = (
        np.array([apps["cifar10"] + apps["ncf"], apps["deepspeech2"] + apps["bert"], apps["yolov3"], apps["imagenet"]])
        / n
    )
    assert np.allclose(100 * frac, DOC_FRACTIONS, atol=0.6)
    assert abs(apps["cifar10"] / (apps["cifar10"] + apps["ncf"]) - 0.5) < 0.02
    assert abs(apps["bert"] / (apps["bert"] + apps["deepspeech2"]) - 0.5) < 0.04
    hourly = np.bincount([int(j.arrival // 3600) for j in jobs], minlength=8)
    expected = np.array(DOC_HOURLY) / DOC_POOL * n
    assert np.all(np.abs(hourly - expected) < 0.08 * expected)
    # every configuration of the TunedJobs table is used
    configs = {(j.app, j.num_replicas, j.batch_size) for j in jobs}
    assert configs == {(a, k, b) for a, opts in TUNED_JOBS.items() for k, b in opts}


def test_generate_training_load_and_window():
    assert len(generate_training(load=0.5, seed=3)) == 80
    assert len(generate_training(load=1.5, seed=3)) == 240
    assert len(generate_training(load=2.0, seed=3)) == 320
    assert generate_training(load=0.0, seed=3) == []
    wrap = generate_training(num_jobs=500, start_hour=20, window_hours=8, seed=3)
    assert all(0 <= j.arrival < 8 * 3600 for j in wrap)
    short = generate_training(num_jobs=50, start_hour=13.5, window_hours=0.5, seed=3)
    assert all(0 <= j.arrival < 1800 for j in short)
    # more jobs than the window's pool: sampled with replacement
    assert len(generate_training(num_jobs=5000, start_hour=3, window_hours=1 / 60, seed=3)) == 5000
    with pytest.raises(ValueError):
        generate_training(load=-1)


def test_generate_training_deterministic_per_seed():
    assert generate_training(seed=5) == generate_training(seed=5)
    assert generate_training(seed=5) != generate_training(seed=6)


# ---------------------------------------------------------------------------------------------
# periodic inference


def test_periodic_inference_shows_day_and_night():
    reqs = generate_periodic_inference(horizon_s=86400, mean_gpus=14, amplitude=0.85, phase_s=8 * 3600, seed=11)
    t = np.array([r.arrival for r in reqs])
    assert np.all(np.diff(t) >= 0) and np.all(t == np.floor(t)) and t.min() >= 0 and t.max() < 86400
    peak = np.sum((t >= 12 * 3600) & (t < 16 * 3600))  # peak at 14 h
    trough = np.sum(t < 4 * 3600)  # trough at 2 h
    assert peak > 5 * trough
    # offered load: mean service + cold start, averaged over the period
    busy = sum(r.duration + COLD_START_DELAY_S[r.app] for r in reqs) / 86400
    assert abs(busy - 14) < 0.7
    assert [r.name for r in reqs] == [f"inference-{r.app}-{i}" for i, r in enumerate(reqs)]
    assert {r.instance for r in reqs} == {f"infer-{m}-1" for m in APP_NAMES}
    for r in reqs:
        lo, hi = DEFAULT_SERVICE_TIME_S[r.app]
        assert lo <= r.duration <= hi and float(r.duration).is_integer()


def test_periodic_inference_flat_without_amplitude_and_instances_dict():
    reqs = generate_periodic_inference(horizon_s=86400, mean_gpus=10, amplitude=0.0, seed=2)
    t = np.array([r.arrival for r in reqs])
    counts = np.histogram(t, bins=4, range=(0, 86400))[0]
    assert counts.max() < 1.15 * counts.min()
    reqs = generate_periodic_inference(
        horizon_s=3600, instances_per_app={"bert": 2, "ncf": 3}, mean_gpus=5, amplitude=0.5, seed=2
    )
    assert {r.instance for r in reqs} == {"infer-bert-1", "infer-bert-2", "infer-ncf-1", "infer-ncf-2", "infer-ncf-3"}
    assert generate_periodic_inference(horizon_s=3600, mean_gpus=0, seed=1) == []
    for bad in [{"amplitude": 1.5}, {"mean_gpus": -1}, {"period_s": 0}, {"instances_per_app": {"gpt": 1}}]:
        with pytest.raises(ValueError):
            generate_periodic_inference(horizon_s=3600, **bad)


# ---------------------------------------------------------------------------------------------
# workloads, CSV writing and the command line


def test_generate_workload_same_seed_same_bytes_different_seed_differs(tmp_path):
    a = write_workload_csv(generate_workload("a", 42, inference={}), tmp_path / "a.csv")
    b = write_workload_csv(generate_workload("a", 42, inference={}), tmp_path / "b.csv")
    c = write_workload_csv(generate_workload("a", 43, inference={}), tmp_path / "c.csv")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_generate_workload_training_part_equals_generate_training():
    wl = generate_workload("w", 9, train={"num_jobs": 40}, inference={"horizon_s": 7200.0})
    assert list(wl.jobs) == generate_training(num_jobs=40, seed=9)
    assert wl.requests and max(r.arrival for r in wl.requests) < 7200
    assert generate_workload("w", 9, inference=None).requests == ()


def test_write_then_load_round_trip_is_exact(tmp_path):
    wl = generate_workload("rt", 3, inference={"instances_per_app": 2})
    back = load_workload(write_workload_csv(wl, tmp_path / "rt.csv"))
    assert back.name == "rt"
    assert back.jobs == wl.jobs and back.requests == wl.requests
    header = (tmp_path / "rt.csv").read_text().splitlines()[0]
    assert header == "name,time,application,num_replicas,batch_size,duration,num_task"


@settings(max_examples=25, deadline=None)
@given(
    times=st.lists(st.floats(0, 1e7, allow_nan=False), min_size=1, max_size=8),
    durs=st.lists(st.floats(1e-3, 1e5, allow_nan=False), min_size=1, max_size=8),
)
def test_round_trip_property_non_integer_values(tmp_path_factory, times, durs):
    times = sorted(times)
    jobs = tuple(TrainingJobSpec(f"j,{i}", t, "cifar10", 6, 2048) for i, t in enumerate(times))
    reqs = tuple(
        InferenceRequestSpec(f"r{i}", t, "infer-yolov3-2", "yolov3", d)
        for i, (t, d) in enumerate(zip(times, durs, strict=False))
    )
    wl = Workload("p", jobs, reqs)
    path = write_workload_csv(wl, tmp_path_factory.mktemp("rt") / "p.csv")
    back = load_workload(path)
    assert back.jobs == wl.jobs and back.requests == wl.requests


def test_generate_main_writes_loadable_workloads(tmp_path, capsys):
    out = tmp_path / "g.csv"
    assert generate_main(["--out", str(out), "--seed", "4", "--num-jobs", "20", "--period-hours", "12"]) == 0
    wl = load_workload(out)
    assert len(wl.jobs) == 20 and len(wl.requests) > 100
    assert "wrote" in capsys.readouterr().out
    out2 = tmp_path / "t.csv"
    assert generate_main(["--out", str(out2), "--no-inference", "--load", "0.5", "--start-hour", "20"]) == 0
    wl2 = load_workload(out2)
    assert len(wl2.jobs) == 80 and wl2.requests == ()
    assert generate_main(["--out", str(tmp_path / "x.csv"), "--inference-amplitude", "2"]) == 2
    assert "amplitude" in capsys.readouterr().err
    assert generate_main(["--num-jobs", "3", "--no-inference"]) == 0
    assert capsys.readouterr().out.startswith("name,time,application")


# ---------------------------------------------------------------------------------------------
# shipped workloads


@functools.cache
def _shipped(name: str) -> Workload:
    return load_workload(name)


def test_shipped_workloads_are_split_and_load():
    names = [n for n in list_shipped_workloads() if n != "smoke/tiny"]
    by_split = Counter(n.split("/")[0] for n in names)
    assert by_split == {"train": 8, "val": 3, "test": 4}
    seeds = [s for seeds in make_shipped.SPLIT_SEEDS.values() for s in seeds]
    assert len(seeds) == len(set(seeds)) == 15
    stems = [n.split("/")[1] for n in names]
    assert len(set(stems)) == len(stems)
    for n in names:
        path = resolve_workload(n)
        assert path.stat().st_size < 1.5e6
        wl = _shipped(n)
        assert len(wl.jobs) == 160
        assert 1000 < len(wl.requests) < 20000
        assert {r.instance for r in wl.requests} == {f"infer-{m}-1" for m in APP_NAMES}
        assert max(r.arrival for r in wl.requests) < make_shipped.INFERENCE_HORIZON_S
    assert load_workload("test-01").jobs == _shipped("test/test-01").jobs
    assert load_workload("val/val-02.csv").name == "val-02"
    with pytest.raises(TraceError, match="shipped"):
        load_workload("no-such-workload")


def test_shipped_workloads_are_what_make_shipped_generates():
    for split, name, seed in make_shipped.shipped_specs():
        wl = _shipped(f"{split}/{name}")
        fresh = make_shipped.build(name, seed)
        assert wl.jobs == fresh.jobs and wl.requests == fresh.requests, name


def test_shipped_inference_is_periodic_and_sized_for_32_gpus():
    wl = _shipped("train/train-01")
    off = make_shipped.hourly_offered_gpus(wl)
    assert off.max() > 3 * off.min() + 10  # day/night pattern in the offered load
    assert off.min() < 5  # troughs leave most of the inference cluster idle
    assert abs(off.mean() - make_shipped.INFERENCE_MEAN_GPUS) < 1.0
    assert np.argmin(off) in (0, 1, 2, 3) and np.argmax(off) in range(11, 18)


def test_trace_error_is_a_workload_error():
    assert issubclass(TraceError, WorkloadError) and issubclass(TraceError, ValueError)


def test_shipped_inference_peaks_nearly_fill_the_inference_cluster_in_simulation():
    """Held (RUNNING + PROTECT) inference GPUs under a non-lending policy: peaks near 32, trough 0."""
    from deepboot_env.policy import make_policy
    from deepboot_env.sim.simulator import SimConfig, Simulator

    wl = _shipped("train/train-01")
    policy = make_policy("fifo")
    sim = Simulator(wl, SimConfig(), policy)
    while not sim.done:
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        sim.advance()
    timeline = np.array(sim.timeline)
    held = timeline[:, 3] + timeline[:, 4]
    assert 24 <= np.percentile(held, 99) <= 32
    assert held[timeline[:, 0] < 6 * 3600].min() == 0
    assert sim.metrics().infer_latency_p99 <= 8 + 60


def test_the_tiny_smoke_workload_is_shipped_and_matches_its_generator():
    wl = load_workload("tiny")
    assert resolve_workload("tiny") == resolve_workload("smoke/tiny")
    assert len(wl.jobs) == make_shipped.TINY_JOBS
    assert max(r.arrival for r in wl.requests) < make_shipped.TINY_HORIZON_S
    assert wl.jobs == make_shipped.build("tiny", make_shipped.TINY_SEED).jobs
