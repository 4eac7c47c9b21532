"""Bad input to the simulation core fails early with a clear error naming the culprit."""

from __future__ import annotations

import re

import numpy as np
import pytest

from deepboot_env.policy import BasePolicy, make_policy
from deepboot_env.sim.apps import UnknownApplicationError, get_app, inference_model_of
from deepboot_env.sim.cluster import ClusterConfig, ClusterConfigError
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import Allocation, AllocationError, GpuRef
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload, WorkloadError

# ---------------------------------------------------------------------------------------------
# cluster and simulation settings


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("8x0", "zero GPUs per node"),
        ("0x4", "training cluster has zero nodes"),
        ("8x4+8x2", "same GPUs per node"),
        ("abc", "'abc' is not of the form NxG"),
        ("8x4+8x4+8x4", "expected 'NxG' or 'NxG+MxG'"),
        ("", "is not of the form NxG"),
        ("8x4+", "is not of the form NxG"),
        ("8*4", "is not of the form NxG"),
        ("-1x4", "is not of the form NxG"),
        ("8x10", "gpus_per_node must be <= 9"),
    ],
)
def test_malformed_cluster_specs(spec: str, fragment: str) -> None:
    with pytest.raises(ClusterConfigError, match=re.escape(fragment)) as err:
        ClusterConfig.parse(spec)
    if spec and "gpus_per_node" not in fragment:
        assert repr(spec) in str(err.value)  # the message quotes the offending text


@pytest.mark.parametrize("spec", ["0x4", "4x0", "4x", "x4", "4x4+4x4"])
def test_malformed_shared_pool_specs(spec: str) -> None:
    with pytest.raises(ClusterConfigError, match=re.escape(repr(spec))):
        ClusterConfig.parse_shared(spec)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"train_nodes": 0, "infer_nodes": 0}, "training cluster needs >= 1 node"),
        ({"gpus_per_node": 0}, "gpus_per_node must be >= 1"),
        ({"train_nodes": -1}, "non-negative"),
        ({"infer_nodes": -2}, "non-negative"),
        ({"train_nodes": 0, "infer_nodes": 0, "shared_pool": True}, "shared pool needs >= 1 node"),
        ({"train_nodes": 4, "infer_nodes": 4, "shared_pool": True}, "no separate inference nodes"),
    ],
)
def test_zero_gpu_and_impossible_clusters(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ClusterConfigError, match=re.escape(fragment)):
        ClusterConfig(**kwargs)


def test_unknown_restart_model() -> None:
    with pytest.raises(ValueError, match=r"unknown restart model 'nope'.*full, afe, stopfree"):
        SimConfig(restart="nope")


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_non_positive_or_non_finite_protect_scale(scale: float) -> None:
    with pytest.raises(ValueError, match="protect_scale"):
        SimConfig(protect_scale=scale)


@pytest.mark.parametrize("interval", [0.0, -60.0, float("nan"), float("inf")])
def test_bad_interval(interval: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        SimConfig(interval=interval)


# ---------------------------------------------------------------------------------------------
# workloads


def job(name: str = "a", t: float = 0.0, app: str = "bert", replicas: int = 1, batch: int = 12) -> TrainingJobSpec:
    return TrainingJobSpec(name, t, app, replicas, batch)


def request(t: float = 0.0, model: str = "bert", duration: float = 1.0, name: str = "r") -> InferenceRequestSpec:
    return InferenceRequestSpec(name, t, f"infer-{model}-1", model, duration)


@pytest.mark.parametrize(
    ("jobs", "requests", "fragments"),
    [
        ((job(app="gpt"),), (), ["training job 1 ('a')", "field 'application'", "'gpt'"]),
        ((job("a"), job("a", 1.0)), (), ["training job 2 ('a')", "field 'name'", "duplicate"]),
        ((job("a", 5.0), job("b", 1.0)), (), ["training job 2 ('b')", "field 'time'", "not sorted"]),
        ((job("a", -5.0),), (), ["training job 1 ('a')", "field 'time'", "negative time"]),
        ((job("a", float("nan")),), (), ["training job 1 ('a')", "field 'time'", "not a finite number"]),
        ((job(replicas=0),), (), ["training job 1 ('a')", "field 'num_replicas'"]),
        ((job(batch=0),), (), ["training job 1 ('a')", "field 'batch_size'"]),
        ((), (request(duration=0.0),), ["inference request 1 ('r')", "field 'duration'", "> 0"]),
        ((), (request(duration=-3.0),), ["inference request 1 ('r')", "field 'duration'"]),
        ((), (request(duration=float("inf")),), ["inference request 1 ('r')", "field 'duration'"]),
        ((), (request(model="gpt"),), ["inference request 1 ('r')", "field 'application'", "'gpt'"]),
        ((), (request(5.0), request(1.0, name="s")), ["inference request 2 ('s')", "field 'time'", "not sorted"]),
        ((), (request(-1.0),), ["inference request 1 ('r')", "negative time"]),
        ((), (), ["no training jobs and no inference requests"]),
    ],
)
def test_bad_workloads(jobs: tuple, requests: tuple, fragments: list[str]) -> None:
    with pytest.raises(WorkloadError) as err:
        Workload("bad", jobs, requests, source="bad.csv")
    text = str(err.value)
    assert text.startswith("bad.csv: ")
    for fragment in fragments:
        assert fragment in text


def test_unknown_application_lookups() -> None:
    with pytest.raises(UnknownApplicationError, match="unknown application 'gpt'.*bert, cifar10") as err:
        get_app("gpt")
    assert isinstance(err.value, KeyError)
    assert str(err.value).startswith("unknown application")  # readable, not KeyError's repr
    with pytest.raises(UnknownApplicationError, match="'infer-gpt-1' does not name a known model"):
        inference_model_of("infer-gpt-1")
    assert inference_model_of("infer-ncf-12") == "ncf"


def test_inference_requests_need_an_inference_cluster() -> None:
    workload = Workload("w", (job(),), (request(), request(3.0)))
    with pytest.raises(ValueError, match=r"'w' has 2 inference requests .* 2x4\+0x4 has no inference nodes"):
        Simulator(workload, SimConfig(cluster=ClusterConfig.parse("2x4")))
    # a training-only workload is fine there, and inference is fine on a shared pool
    Simulator(Workload("t", (job(),)), SimConfig(cluster=ClusterConfig.parse("2x4")))
    Simulator(workload, SimConfig(cluster=ClusterConfig.parse_shared("2x4")))


def test_unknown_policy_name_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'") as err:
        make_policy("nope")
    assert "fifo" in str(err.value) and "ppo:<path>" in str(err.value)


def test_policy_registry_rejects_non_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    import deepboot_env.policy as policy_module

    monkeypatch.setattr(policy_module, "_REGISTRY", dict(policy_module._REGISTRY))
    policy_module.register_policy("not-a-policy-test", lambda: object())
    with pytest.raises(TypeError, match="'not-a-policy-test' does not implement the Policy protocol"):
        make_policy("not-a-policy-test")
    with pytest.raises(ValueError, match="unknown policy prefix 'nope'.*ppo:<path>"):
        make_policy("nope:x")
    with pytest.raises(ValueError, match="no ':'"):
        policy_module.register_policy("a:b", "x:y")


def test_registered_entry_points_are_imported_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``"module:attr"`` entry point is imported when the policy is first built, with the
    registered keyword arguments updated by the caller's."""
    import sys

    import deepboot_env.policy as policy_module

    monkeypatch.setattr(policy_module, "_REGISTRY", dict(policy_module._REGISTRY))
    monkeypatch.delitem(sys.modules, "baselines.tiresias", raising=False)
    policy_module.register_policy("tiresias-lend-test", "baselines.tiresias:TiresiasPolicy", lend=True)
    assert "baselines.tiresias" not in sys.modules
    policy = make_policy("tiresias-lend-test")
    assert "baselines.tiresias" in sys.modules and policy.lend is True
    assert make_policy("tiresias-lend-test", lend=False).lend is False


# ---------------------------------------------------------------------------------------------
# allocations


def _sim(cluster: str = "1x4+1x4", requests: tuple = (), policy=None) -> Simulator:
    """Two jobs (ids 0 and 1) at the 0-s boundary; job 'b' may have 1 GPU (new jobs start at 1)."""
    workload = Workload("alloc", (job("a", app="cifar10", batch=128), job("b", app="bert")), requests)
    return Simulator(workload, SimConfig(cluster=ClusterConfig.parse(cluster)), policy)


def test_allocation_over_node_capacity_names_the_node() -> None:
    sim = _sim(cluster="2x1+1x1")  # nodes of 1 GPU
    state = sim.observe()
    with pytest.raises(AllocationError, match=r"node 1: training wants 2 GPUs but only 1") as err:
        sim.apply(Allocation({0: np.array([0, 1, 0]), 1: np.array([0, 1, 0])}), state)
    assert "'a':1" in str(err.value) and "'b':1" in str(err.value)


def test_allocation_cannot_take_gpus_of_running_pods() -> None:
    sim = _sim(cluster="1x1+1x1", requests=(request(0.0, duration=500.0),))
    state = sim.observe()
    assert state.running.tolist() == [0, 1]
    with pytest.raises(AllocationError, match=r"node 1: training wants 1 GPUs but only 0 are free of RUNNING/PROTECT"):
        sim.apply(Allocation({1: np.array([0, 1])}), state)


def test_allocation_over_max_replicas_names_the_job() -> None:
    sim = _sim()
    state = sim.observe()
    assert state.job(1).max_replicas == 1
    with pytest.raises(AllocationError, match=r"job 'b' \(id 1\): 2 GPUs exceed its limit of 1"):
        sim.apply(Allocation({1: np.array([2, 0])}), state)


@pytest.mark.parametrize("bad_id", [7, -1])
def test_allocation_for_unknown_job(bad_id: int) -> None:
    sim = _sim()
    with pytest.raises(AllocationError, match=rf"job id {bad_id}: not an active training job at t=0s"):
        sim.apply(Allocation({bad_id: np.array([1, 0])}))


def test_allocation_for_a_job_not_yet_arrived() -> None:
    workload = Workload("late", (job("a"), job("later", 500.0)))
    sim = Simulator(workload, SimConfig(cluster=ClusterConfig.parse("1x4+1x4")))
    with pytest.raises(AllocationError, match="job id 1: not an active training job"):
        sim.apply(Allocation({1: np.array([1, 0])}))


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (np.array([-1, 0]), "job 'a' (id 0): negative GPU count -1 on node 0"),
        (np.array([0, -2]), "job 'a' (id 0): negative GPU count -2 on node 1"),
        (np.array([0.5, 0.0]), "job 'a' (id 0): GPU counts must be whole numbers, got [0.5, 0.0]"),
        (np.array([np.nan, 0.0]), "job 'a' (id 0): GPU counts must be whole numbers"),
        (np.array([True, False]), "job 'a' (id 0): GPU counts must be whole numbers"),
        (np.array(["1", "0"]), "job 'a' (id 0): GPU counts must be whole numbers"),
        (np.array([1, 0, 0]), "job 'a' (id 0): expected GPUs for each of 2 nodes, got shape (3,)"),
        (np.array([[1, 0]]), "job 'a' (id 0): expected GPUs for each of 2 nodes, got shape (1, 2)"),
        (1, "job 'a' (id 0): expected GPUs for each of 2 nodes, got shape ()"),
    ],
)
def test_malformed_gpu_counts(value, fragment: str) -> None:
    sim = _sim()
    with pytest.raises(AllocationError, match=re.escape(fragment)):
        sim.apply(Allocation({0: value}))


def test_whole_float_counts_are_accepted() -> None:
    sim = _sim()
    sim.apply(Allocation({0: np.array([1.0, 0.0])}))
    assert sim.jobs[0].alloc.tolist() == [1, 0] and sim.jobs[0].alloc.dtype == np.int64


def test_rejected_allocation_changes_nothing() -> None:
    sim = _sim()
    sim.apply(Allocation({0: np.array([1, 0])}))
    before = (sim.ledger.train.copy(), sim.jobs[0].alloc.copy(), sim.restarts)
    with pytest.raises(AllocationError):
        sim.apply(Allocation({0: np.array([0, 1]), 1: np.array([5, 0])}))
    assert np.array_equal(sim.ledger.train, before[0]) and np.array_equal(sim.jobs[0].alloc, before[1])
    assert sim.restarts == before[2]


def test_apply_after_the_episode_is_over() -> None:
    sim = Simulator(Workload("w", (), (request(),)), SimConfig(cluster=ClusterConfig.parse("1x1+1x1")))
    assert sim.done
    with pytest.raises(RuntimeError, match="episode is over"):
        sim.apply(Allocation({}))


# ---------------------------------------------------------------------------------------------
# reclaim hooks


class _Lender(BasePolicy):
    """Lends every inference GPU to job 0 at the 0-s boundary; its reclaim hook is ``hook``."""

    adaptive_batch = False

    def __init__(self, hook) -> None:
        self.hook = hook

    def decide(self, state):
        return Allocation({j.id: j.alloc for j in state.jobs})

    def choose_reclaim(self, state, request):  # noqa: ARG002
        return self.hook(state)


def _lent_sim(hook) -> Simulator:
    """Job 'a' (fixed batch: may take 8 GPUs at once) holds 4 training + 4 lent GPUs at t=0; an
    inference request arrives at t=10 and asks the hook for a victim."""
    workload = Workload(
        "reclaim",
        (TrainingJobSpec("a", 0.0, "cifar10", 8, 4096), TrainingJobSpec("b", 0.0, "cifar10", 1, 128)),
        (request(10.0),),
    )
    policy = _Lender(hook)
    sim = Simulator(workload, SimConfig(cluster=ClusterConfig.parse("1x4+1x4")), policy)
    sim.apply(Allocation({0: np.array([4, 4])}))
    return sim


def test_reclaim_hook_returning_a_training_node_gpu() -> None:
    sim = _lent_sim(lambda state: GpuRef(0, 0))
    with pytest.raises(AllocationError, match="reclaim: node 0 is a training node; inference may not take it"):
        sim.advance()


def test_reclaim_hook_returning_a_gpu_the_job_does_not_hold() -> None:
    sim = _lent_sim(lambda state: GpuRef(1, 1))  # job 'b' holds nothing
    with pytest.raises(AllocationError, match=r"reclaim: job 'b' holds no GPU on node 1"):
        sim.advance()


@pytest.mark.parametrize("node", [2, -1])
def test_reclaim_hook_returning_a_node_that_does_not_exist(node: int) -> None:
    sim = _lent_sim(lambda state: GpuRef(0, node))
    with pytest.raises(AllocationError, match=rf"reclaim: job 'a' holds no GPU on node {node}"):
        sim.advance()


@pytest.mark.parametrize("job_id", [5, -1])
def test_reclaim_hook_returning_an_unknown_job(job_id: int) -> None:
    sim = _lent_sim(lambda state: GpuRef(job_id, 1))
    with pytest.raises(AllocationError, match=rf"reclaim: job id {job_id} is not an active training job"):
        sim.advance()


def test_valid_reclaim_hook_passes() -> None:
    sim = _lent_sim(lambda state: GpuRef(0, 1))
    sim.advance()
    assert sim.jobs[0].alloc.tolist() == [4, 3] and sim.reclaims == 1


# ---------------------------------------------------------------------------------------------
# workloads that do not fit the application, the horizon or the cluster


def test_batch_size_beyond_the_application_maximum() -> None:
    Workload("ok", (job(batch=384),))  # bert's largest total batch
    with pytest.raises(WorkloadError) as err:
        Workload("bad", (job(), job("b", 1.0, batch=10**11)), source="bad.csv")
    assert str(err.value) == (
        "bad.csv: training job 2 ('b'): field 'batch_size': batch size 100000000000 exceeds the largest total "
        "batch of bert (384)"
    )


@pytest.mark.parametrize("kind", ["job", "request"])
def test_arrival_after_max_time_names_the_culprit(kind: str) -> None:
    config = SimConfig(cluster=ClusterConfig.parse("1x4+1x4"), max_time=86400.0)
    late = 1e12
    if kind == "job":
        workload = Workload("w", (job(), job("b", 10.0), job("late", late), job("later", late)), source="w.csv")
        fragment = "w.csv: training job 3 ('late'): field 'time': arrives at 1e+12 s"
        count = "2 of 4 training jobs arrive after it"
    else:
        workload = Workload("w", (job(),), (request(5.0), request(late, name="late")), source="w.csv")
        fragment = "w.csv: inference request 2 ('late'): field 'time': arrives at 1e+12 s"
        count = "1 of 2 inference requests arrive after it"
    with pytest.raises(WorkloadError) as err:
        Simulator(workload, config)
    text = str(err.value)
    assert fragment in text and "after the end of the simulation (max_time 86400 s, 1 day)" in text
    assert count in text and "\n" not in text
    # arriving exactly at max_time is allowed (admitted at the last boundary, then truncated)
    edge = Workload("edge", (job(), job("b", 86400.0)), (request(86400.0),))
    assert Simulator(edge, config, make_policy("fifo")).workload is edge


def test_gang_job_larger_than_the_whole_cluster() -> None:
    cluster = ClusterConfig.parse("4x4+4x4")  # 32 GPUs, 16 of them training GPUs
    huge = Workload("w", (job(), TrainingJobSpec("gang", 5.0, "imagenet", 1000, 6400)), source="w.csv")
    for name in ("fifo", "tiresias", "optimus"):  # the policies that keep the submitted size
        with pytest.raises(WorkloadError) as err:
            Simulator(huge, SimConfig(cluster=cluster), make_policy(name))
        assert str(err.value) == (
            "w.csv: training job 2 ('gang'): field 'num_replicas': requests 1000 GPUs but the cluster "
            "4x4+4x4 has only 32 GPUs in all"
        )
    # adaptive policies choose the GPU count themselves: the request is only a hint there
    Simulator(huge, SimConfig(cluster=cluster), make_policy("pollux"))
    # the bound is all GPUs, not the training cluster's: 32 passes (FIFO caps it at what it can place)
    fits = Workload("w", (TrainingJobSpec("gang", 0.0, "imagenet", 32, 6400),))
    Simulator(fits, SimConfig(cluster=cluster), make_policy("fifo"))


# ---------------------------------------------------------------------------------------------
# the evaluation loop: progress and the watchdog


class _Starver(BasePolicy):
    """Never gives any job a GPU."""

    name = "starver"
    adaptive_batch = True

    def reset(self, seed=None) -> None:  # noqa: ARG002
        pass

    def decide(self, state):  # noqa: ARG002
        return Allocation({})

    def choose_reclaim(self, state, request):  # noqa: ARG002
        return None


def test_watchdog_stops_a_policy_that_never_gives_a_gpu() -> None:
    from deepboot_env.evaluation import STALL_LIMIT_S, StalledEpisodeError, run_episode

    workload = Workload("w", (job("a", 120.0), job("b", 180.0, app="ncf", batch=32768)))
    with pytest.raises(StalledEpisodeError) as err:
        run_episode(_Starver(), workload, SimConfig(cluster=ClusterConfig.parse("1x4+1x4")))
    text = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in text
    assert text.startswith("policy 'starver' made no training progress for 7.0 simulated days (t = 120 s to ")
    assert "2 of 2 active jobs hold no GPU ('a', 'b')" in text and "watchdog (stall_limit_s)" in text
    # a tighter bound fires sooner; None turns the watchdog off (the episode then runs to max_time)
    with pytest.raises(StalledEpisodeError, match=r"for 0\.1 simulated days"):
        run_episode(_Starver(), workload, SimConfig(cluster=ClusterConfig.parse("1x4+1x4")), stall_limit_s=7200.0)
    metrics = run_episode(
        _Starver(),
        workload,
        SimConfig(cluster=ClusterConfig.parse("1x4+1x4"), max_time=STALL_LIMIT_S + 3600),
        stall_limit_s=None,
    )
    assert metrics.truncated and metrics.train_jobs_done == 0
    with pytest.raises(ValueError, match="stall_limit_s must be > 0"):
        run_episode("fifo", workload, stall_limit_s=0.0)


def test_progress_callback_reports_every_n_decisions_and_at_the_end() -> None:
    from deepboot_env.evaluation import EpisodeProgress, run_episode

    workload = Workload("w", (job("a", 0.0, app="cifar10", batch=128), job("b", 30.0, app="ncf", batch=32768)))
    seen: list[EpisodeProgress] = []
    metrics = run_episode(
        "fifo", workload, SimConfig(cluster=ClusterConfig.parse("1x4+1x4")), progress=seen.append, progress_every=7
    )
    assert len(seen) >= 2 and seen[-1].done and not any(p.done for p in seen[:-1])
    assert [p.decisions for p in seen[:-1]] == [7 * (k + 1) for k in range(len(seen) - 1)]
    assert all(a.sim_time <= b.sim_time and a.jobs_done <= b.jobs_done for a, b in zip(seen, seen[1:], strict=False))
    assert seen[-1].jobs_done == seen[-1].jobs_total == 2 == metrics.train_jobs_done
    assert seen[-1].active_jobs == 0 and seen[0].max_time == 30 * 86400.0
    assert seen[0].line().startswith("day 0.") and "/2 jobs done" in seen[0].line()
    with pytest.raises(ValueError, match="progress_every must be >= 1"):
        run_episode("fifo", workload, progress=seen.append, progress_every=0)


@pytest.mark.parametrize("loader", ["profiles", "step_times"])
@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON (nested too deeply)"),
        (b"{'apps': 1}", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
    ],
    ids=["deep", "not-json", "not-utf8", "a-list"],
)
def test_named_sim_tables_fail_in_one_line(tmp_path, loader, content, fragment) -> None:
    from deepboot_env.sim.apps import load_profiles
    from deepboot_env.sim.measured import load_step_times

    path = tmp_path / "table.json"
    path.write_bytes(content)
    load = (lambda p: load_profiles(p)) if loader == "profiles" else (lambda p: load_step_times("pollux", p))
    with pytest.raises(ValueError, match=re.escape(fragment)) as info:
        load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_named_sim_table_is_read_with_a_bound(tmp_path, monkeypatch) -> None:
    from deepboot_env.sim import files
    from deepboot_env.sim.apps import load_profiles

    monkeypatch.setattr(files, "MAX_TABLE_BYTES", 1_000)
    path = tmp_path / "big.json"
    path.write_text('{"apps": "' + "x" * 5_000 + '"}')
    with pytest.raises(ValueError, match="larger than the limit of 1,000 bytes"):
        load_profiles(path)
    with pytest.raises(OSError, match="is a character device, not a regular file"):
        load_profiles("/dev/zero")  # refused, never read: it has no end
