"""Aryl mode (deepboot_env.sim.aryl_mode) and the Aryl/Lyra baselines (baselines.aryl, baselines.lyra).

The anchor tests read the original simulator's reference runs in ``../shared/data`` and skip
cleanly when it is absent.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from builders import SHARED_DATA

from baselines.aryl import ArylDeepBootPolicy, aryl_values
from baselines.lyra import LyraPolicy, extra_values, loanable_capacity
from deepboot_env.config import EnvConfig
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import Allocation, BasePolicy, available_policies, make_policy
from deepboot_env.sim.aryl_mode import (
    ArylInferencePool,
    aryl_inference_nodes,
    aryl_server,
    strip_training,
)
from deepboot_env.sim.cluster import ClusterConfig, ClusterLedger
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import ClusterState, RequestView
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload
from deepboot_harness.cli import build_parser, sim_config_from_args

SMALL = SHARED_DATA / "workloads" / "deepboot" / "small.csv"
ANCHORS = SHARED_DATA / "reference-runs" / "anchors.csv"
needs_reference = pytest.mark.skipif(
    not (SMALL.is_file() and ANCHORS.is_file()), reason="reference workload and runs absent"
)

ARYL_POOL = SimConfig(cluster=ClusterConfig.parse_shared("4x4"), inference_placement="aryl")


def _workload() -> Workload:
    """Eight jobs and a steady stream of inference requests on four app instances."""
    apps = ["cifar10", "bert", "deepspeech2", "cifar10", "yolov3", "cifar10", "bert", "deepspeech2"]
    jobs = tuple(
        TrainingJobSpec(f"j{i}", 30.0 * i, app, 4 + 4 * (i % 3), {"cifar10": 2048, "bert": 384}.get(app, 64))
        for i, app in enumerate(apps)
    )
    models = ["ncf", "bert", "cifar10", "yolov3"]
    requests = tuple(
        InferenceRequestSpec(f"r{i}", 20.0 + 37.0 * i, f"infer-{models[i % 4]}-1", models[i % 4], 5.0 + i % 7)
        for i in range(150)
    )
    return Workload("aryl-test", jobs, requests)


def _check_aryl_invariants(sim: Simulator) -> None:
    ledger = sim.ledger
    half = aryl_inference_nodes(sim.config.cluster)
    pods = ledger.pod_counts()
    train = ledger.counts["train"]
    for node, held in enumerate(pods):
        if held:
            assert node in half, f"pod on node {node} outside the inference half"
            assert train[node] == 0, f"training beside an inference pod on node {node}"
    ledger.check()


@pytest.mark.parametrize("name", ["afs", "aryl-deepboot", "lyra"])
def test_aryl_mode_invariants_hold_after_every_decision(name: str) -> None:
    policy = make_policy(name)
    sim = Simulator(_workload(), ARYL_POOL, policy)
    assert isinstance(sim._pool, ArylInferencePool)
    rounds = 0
    while not sim.done:
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        _check_aryl_invariants(sim)
        sim.advance()
        _check_aryl_invariants(sim)
        rounds += 1
    metrics = sim.metrics()
    assert metrics.train_jobs_done == 8 and rounds > 10
    assert all(rec.finish is not None for rec in sim.requests)


def test_default_placement_is_deepboot_and_unknown_is_refused() -> None:
    assert SimConfig().inference_placement == "deepboot"
    with pytest.raises(ValueError, match="inference_placement"):
        SimConfig(inference_placement="lyra")
    assert EnvConfig.from_options(inference_placement="aryl").sim.inference_placement == "aryl"
    for argv in (["--aryl-mode"], ["--inference-placement", "aryl"]):
        args = build_parser().parse_args(["simulate", *argv])
        assert sim_config_from_args(args).inference_placement == "aryl"
    assert sim_config_from_args(build_parser().parse_args(["simulate"])).inference_placement == "deepboot"


def test_inference_half() -> None:
    assert aryl_inference_nodes(ClusterConfig.parse_shared("16x4")) == list(range(8, 16))
    assert aryl_inference_nodes(ClusterConfig.parse("3x4+2x4")) == [3, 4]


def test_aryl_server_order() -> None:
    counts = {"train": [0, 4, 4, 2], "running": [4, 0, 0, 1], "protect": [0, 0, 0, 0], "sleep": [0, 0, 0, 0]}
    # node 3 has an empty GPU (2 training + 1 running); node 2 is full of training
    assert aryl_server(counts, 4, [2, 3]) == 3
    counts["train"][3] = 3
    counts["train"][2] = 3
    counts["sleep"][2] = 1  # node 2 full: 3 training + 1 SLEEP (cannot happen after a strip, still ordered)
    assert aryl_server(counts, 4, [1, 2, 3]) == 2  # no empty GPU: the first SLEEP pod
    counts["sleep"][2] = 0
    counts["train"][2] = 4
    assert aryl_server(counts, 4, [1, 2, 3]) == 3  # fewest training GPUs (3), node 2 and 1 have 4
    assert aryl_server({"train": [0], "running": [4], "protect": [0], "sleep": [0]}, 4, [0]) is None


def test_strip_training_evicts_displaced_sleepers_then_strips_pod_nodes() -> None:
    ledger = ClusterLedger(ClusterConfig.parse_shared("3x4"))
    ledger.add_pod(1, "sleep", "p")
    ledger.add_pod(2, "sleep", "p")
    ledger.add_pod(2, "running", "p")
    evicted: list[int] = []

    def evict(node: int) -> None:
        evicted.append(node)
        ledger.remove_pod(node, "sleep")

    wanted = {0: [4, 4, 1], 1: [0, 0, 1]}
    out = strip_training(wanted, ledger, evict)
    # node 1: 4 training displace its SLEEP pod, which goes; node 2 keeps a running pod: stripped
    assert evicted == [1]
    assert out == {0: [4, 4, 0], 1: [0, 0, 0]}
    assert strip_training({0: [4, 0, 0]}, ledger, evict) == {0: [4, 0, 0]}


def test_request_lands_on_server_and_evicts_all_its_training() -> None:
    jobs = (TrainingJobSpec("big", 0.0, "cifar10", 16, 4096),)
    requests = (InferenceRequestSpec("r0", 61.0, "infer-ncf-1", "ncf", 5.0),)
    policy = make_policy("afs")
    sim = Simulator(Workload("one", jobs, requests), ARYL_POOL, policy)
    for _ in range(2):  # decisions at 0 and 60 s
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        assert sim.jobs[0].counts == [4, 4, 4, 4]
        sim.advance()
    # the request arrived at 61 s: node 2 (first of the inference half) was emptied for it
    assert sim.now == 120.0 and sim.jobs[0].counts == [4, 4, 0, 4]
    assert sim.ledger.pod_counts() == [0, 0, 1, 0] and sim.reclaims == 4


def _first_decision(
    policy: BasePolicy, name: str, jobs: tuple[TrainingJobSpec, ...], pool: str
) -> tuple[ClusterState, Allocation]:
    """The first state of the workload ``name`` of training ``jobs`` in one shared pool ``pool``
    (e.g. ``"1x4"``) and ``policy``'s decision on it."""
    sim = Simulator(Workload(name, jobs), SimConfig(cluster=ClusterConfig.parse_shared(pool)), policy)
    state = sim.observe()
    return state, policy.decide(state)


def test_aryl_deepboot_values_and_long_jobs_first() -> None:
    np.testing.assert_allclose(aryl_values(100.0, 3), [0.0, 50.0, 200.0 / 3, 75.0])
    np.testing.assert_allclose(aryl_values(100.0, 1), [0.0, 100.0])  # a 1-GPU job gets T
    jobs = (
        TrainingJobSpec("short", 0.0, "cifar10", 1, 2048),
        TrainingJobSpec("long", 0.0, "deepspeech2", 1, 320),
    )
    _, alloc = _first_decision(ArylDeepBootPolicy(), "two", jobs, "1x1")
    # one GPU: the knapsack's value T favours the job with the longer remaining time
    assert alloc.replicas(1) == 1 and alloc.replicas(0) == 0


def test_lyra_base_demand_first_then_extra_by_jct_reduction() -> None:
    jobs = (
        TrainingJobSpec("a", 0.0, "cifar10", 4, 2048),
        TrainingJobSpec("b", 0.0, "deepspeech2", 4, 320),
        TrainingJobSpec("c", 0.0, "ncf", 1, 32768),
    )
    state, alloc = _first_decision(LyraPolicy(), "three", jobs, "1x4")
    counts = [alloc.replicas(i) for i in range(3)]
    assert all(k >= 1 for k in counts) and sum(counts) == 4  # everyone's base, then the rest
    best = int(np.argmax([extra_values(state.job(i), 1, 4)[1] for i in range(2)]))
    assert counts[best] == 2  # the one extra GPU reduces that job's time most


def test_lyra_loans_idle_servers_only_and_reclaims_the_cheapest() -> None:
    jobs = (TrainingJobSpec("a", 0.0, "cifar10", 12, 2048), TrainingJobSpec("b", 0.0, "cifar10", 2, 2048))
    requests = (InferenceRequestSpec("r0", 10.0, "infer-ncf-1", "ncf", 1000.0),)
    sim = Simulator(Workload("loan", jobs, requests), ARYL_POOL, LyraPolicy())
    sim.advance()  # first decision is at 0 s (no one placed): move to 60 s, the pod runs on node 2
    state = sim.observe()
    assert loanable_capacity(state) == [4, 4, 0, 4]
    policy = LyraPolicy()
    sim.apply(policy.decide(state), state)
    _check_aryl_invariants(sim)
    state = sim.observe()
    request = RequestView(1, "infer-bert-1", "bert", state.time, 5.0)
    node = policy.choose_inference_server(state, request)
    # node 2 still has 3 empty GPUs and lends nothing
    assert node == 2
    # with node 2 full, the only lent server is node 3
    counts = dict(zip(("train", "running", "protect", "sleep"), state.node_counts, strict=True))
    assert aryl_server(counts, 4, [2, 3]) == 2


def test_runs_are_deterministic() -> None:
    a = run_episode("lyra", _workload(), ARYL_POOL)
    b = run_episode("lyra", _workload(), ARYL_POOL)
    assert a.jcts == b.jcts and a.restarts == b.restarts and a.reclaims == b.reclaims


def test_registered() -> None:
    names = available_policies()
    assert "lyra" in names and "aryl-deepboot" in names
    assert isinstance(make_policy("lyra"), LyraPolicy)
    assert isinstance(make_policy("aryl-deepboot"), ArylDeepBootPolicy)


def test_compare_runs_lyra_in_aryl_mode(tmp_path: Path) -> None:
    from deepboot_harness.cli import main
    from traces.generate import write_workload_csv

    path = write_workload_csv(_workload(), tmp_path / "aryl.csv")
    out = tmp_path / "out"
    argv = ["compare", "--workloads", str(path), "--policies", "lyra", "aryl-deepboot", "--shared-pool", "4x4"]
    assert main([*argv, "--aryl-mode", "--out", str(out), "--quiet"]) == 0
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["lyra", "aryl-deepboot"]
    assert all(r["inference_placement"] == "aryl" and r["train_jobs_done"] == "8" for r in rows)
    assert "inference placement: aryl" in (out / "results.md").read_text()


def _anchor(key: str) -> float:
    with ANCHORS.open() as f:
        return next(float(row["train_jct_mean_s"]) for row in csv.DictReader(f) if row["key"] == key)


@needs_reference
@pytest.mark.parametrize(
    ("policy", "key", "tolerance"), [("aryl-deepboot", "aryl_afe", 0.10), ("afs", "afs_afe", 0.05)]
)
def test_small_csv_in_aryl_mode_matches_the_original(policy: str, key: str, tolerance: float) -> None:
    from traces.loaders import load_workload

    config = SimConfig(
        cluster=ClusterConfig.parse_shared("16x4"),
        restart="afe",
        truth="measured",
        trace_set="deepboot",
        inference_placement="aryl",
    )
    metrics = run_episode(policy, load_workload(SMALL), config)
    assert metrics.train_jobs_done == 160
    assert abs(metrics.train_jct_mean / _anchor(key) - 1.0) <= tolerance
