"""Two rules of the original DeepBoot simulator behind ATS options (docs/policies.md §8.4).

* ``linear_untrained``: a job that has not trained yet is worth ``w / fair`` (``JobView.trained``).
* ``relist_restarts``: a job whose best-fit takes were out of node order restarts once more at the
  next inference event (``Allocation.relist``; the original's ATS-I rewrites its GPU list).

Plus the small.csv anchor of ``ats-deepboot`` against the original's per-run means; it reads
``../shared/data`` and skips cleanly when that is absent.
"""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest
from builders import SHARED_DATA, cluster_state, job_view

from baselines.ats import AtsPolicy, Options, option_values, restart_factor
from baselines.job_order import job_priority_key
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.placement import place_counts
from deepboot_env.policy import BasePolicy, make_policy
from deepboot_env.sim.apps import FAST_RESTART_DELAY_S, FULL_RESTART_DELAY_S
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.state import Allocation, ClusterState
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload

SMALL = SHARED_DATA / "workloads" / "deepboot" / "small.csv"
ANCHORS = SHARED_DATA / "reference-runs" / "anchors.csv"


# --------------------------------------------------------------------------- placement order


def test_place_counts_reports_the_order_of_the_takes() -> None:
    """5 GPUs on free [1, 4, 4]: best fit takes node 1 whole (most free, first), then the 1 GPU
    from node 0 (the fewest free that fit): node order [1, 0], out of node order."""
    job = job_view(0, "cifar10", [0, 0, 0])
    state = cluster_state("3x4", [job], running=[3, 0, 0])
    order: dict[int, list[int]] = {}
    placed = place_counts(state, {0: 5}, [1, 4, 4], order=order)
    assert placed[0].tolist() == [1, 4, 0]
    assert order == {0: [1, 0]}
    assert place_counts(state, {0: 5}, [1, 4, 4])[0].tolist() == [1, 4, 0]  # the same without ``order``


def test_kept_jobs_report_no_order() -> None:
    job = job_view(0, "cifar10", [0, 2, 0])
    order: dict[int, list[int]] = {}
    place_counts(cluster_state("3x4", [job]), {0: 2}, [4, 4, 4], order=order)
    assert order == {}


# --------------------------------------------------------------------------- ATS options


def _state_for_relist() -> ClusterState:
    # RUNNING pods leave the capacity [1, 2, 0]: the job takes 3 GPUs, node 1 (most free) first
    return cluster_state("3x4", [job_view(0, "cifar10", [0, 0, 0], max_replicas=8)], running=[3, 2, 4])


def test_ats_lists_out_of_order_placements_only_when_asked() -> None:
    state = _state_for_relist()
    default = AtsPolicy().decide(state)
    asked = AtsPolicy(relist_restarts=True).decide(state)
    assert default.gpus[0].tolist() == asked.gpus[0].tolist() == [1, 2, 0]
    assert default.relist == frozenset()
    assert asked.relist == frozenset({0})


def test_ats_does_not_list_placements_in_node_order() -> None:
    state = cluster_state("3x4", [job_view(0, "cifar10", [0, 0, 0], max_replicas=8)], running=[2, 2, 4])
    alloc = AtsPolicy(relist_restarts=True).decide(state)  # capacity [2, 2, 0]: nodes 0 then 1
    assert alloc.gpus[0].tolist() == [2, 2, 0]
    assert alloc.relist == frozenset()


def test_linear_untrained_values_a_new_job_at_w_over_fair() -> None:
    trained = job_view(0, "cifar10", [0, 0], age=30.0, restarts=0)
    new = dataclasses.replace(trained, trained=False)
    phi = restart_factor(new)
    np.testing.assert_allclose(option_values(new, 4, 4, 3, linear_untrained=True), np.arange(4) / 4 * phi)
    # a trained job, or the option off, keeps the rate-table values
    for view, linear in ((trained, True), (new, False)):
        np.testing.assert_array_equal(option_values(view, 4, 4, 3, linear), option_values(trained, 4, 4, 3))


def test_options_hold_each_jobs_restart_factor_gpus_and_priority_order() -> None:
    """Options.of's restart factors are restart_factor's, clipped at 0 by many restarts, in
    both valuations; the priority key is (attained service, arrival, id)."""
    jobs = [
        job_view(0, "cifar10", [2, 0], age=30.0, restarts=0),
        job_view(1, "bert", [0, 1], age=25.0, restarts=3, service=0.0),  # 25 - 30 < 0: phi 0
        job_view(2, "ncf", [0, 0], age=0.0, restarts=0, service=0.0, arrival=102.0),
    ]
    for linear in (False, True):
        options = Options.of(jobs, 2, 4, [3, 3, 3], linear)
        assert options.phi.tolist() == [restart_factor(job) for job in jobs] and options.phi[1] == 0.0
        assert options.held.tolist() == [2, 1, 0]
    assert [job_priority_key(job) for job in jobs] == [(0.0, 100.0, 0), (0.0, 101.0, 1), (0.0, 102.0, 2)]
    assert sorted(reversed(jobs), key=job_priority_key) == jobs


def test_linear_untrained_keeps_the_held_count_without_restart_factor() -> None:
    view = dataclasses.replace(job_view(0, "bert", [1, 0], age=100.0, restarts=3), trained=False)
    values = option_values(view, 8, 4, 4, linear_untrained=True)
    assert values[1] == pytest.approx(1 / 8)
    assert values[2] == pytest.approx(2 / 8 * restart_factor(view))


def test_ncf_waits_for_a_gpu_under_linear_untrained() -> None:
    """One node held by an elastic job with many restarts (phi = 0.6): by default a new ncf job is
    worth 1 x phi_ncf and takes a GPU from it; valued at 1 / fair = 1/2, it waits."""
    big = job_view(0, "cifar10", [4], max_replicas=4, age=5000.0, restarts=200)
    ncf = dataclasses.replace(job_view(1, "ncf", [0], max_replicas=1, age=50.0), trained=False)
    state = cluster_state("1x4", [big, ncf])
    assert AtsPolicy().decide(state).gpus[1].tolist() == [1]
    linear = AtsPolicy(linear_untrained=True).decide(state)
    assert linear.replicas(1) == 0 and linear.gpus[0].tolist() == [4]


def test_ats_deepboot_is_registered_with_both_rules() -> None:
    policy = make_policy("ats-deepboot")
    assert isinstance(policy, AtsPolicy)
    assert policy.name == "ats-deepboot" and policy.lend
    assert policy.linear_untrained and policy.relist_restarts
    plain = make_policy("ats")
    assert plain.name == "ats" and not plain.linear_untrained and not plain.relist_restarts


# --------------------------------------------------------------------------- the simulator


class _Fixed(BasePolicy):
    """Gives job 0 ``counts`` at every decision, listing it in ``relist`` at the first one."""

    name = "fixed"
    adaptive_batch = False  # the spec's batch: max_replicas is not the exploration cap 1, 2, 4, ...

    def __init__(self, counts: list[int], relist: bool) -> None:
        self.counts = counts
        self.relist = relist
        self.seen: dict[float, object] = {}

    def decide(self, state: ClusterState) -> Allocation:
        self.seen[state.time] = state.jobs[0] if state.jobs else None
        first = not any(self.seen[t] is not None and self.seen[t].replicas for t in self.seen)
        relist = frozenset({0}) if self.relist and first else frozenset()
        return Allocation({0: np.array(self.counts)}, relist=relist)


def _run(counts: list[int], relist: bool, requests: tuple[InferenceRequestSpec, ...], restart: str = "afe"):
    workload = Workload("relist", (TrainingJobSpec("bert-0", 10.0, "bert", 4, 48),), requests)
    policy = _Fixed(counts, relist)
    sim = Simulator(workload, sim_config(shared_pool=f"{len(counts)}x4", restart=restart), policy)
    while not sim.done and sim.now < 400:
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        sim.advance()
    return policy.seen


def _request(t: float) -> InferenceRequestSpec:
    return InferenceRequestSpec("r", t, "infer-ncf-1", "ncf", 5.0)


@pytest.mark.parametrize("restart", ["afe", "full"])
def test_relisted_job_restarts_at_the_next_inference_event(restart: str) -> None:
    """Placed at t = 60 (first start, 103 s for bert); the request at t = 75 rewrites its list:
    one restart, the full delay again from 75 (ends at 178 instead of 163)."""
    full = FULL_RESTART_DELAY_S["bert"]
    seen = _run([2, 2], True, (_request(75.0),), restart)
    assert seen[60.0].trained is False
    assert seen[120.0].num_restarts == 1
    assert seen[120.0].stalled_seconds == 75.0 + full - 120.0
    assert seen[120.0].trained is False
    assert seen[180.0].trained is True
    plain = _run([2, 2], False, (_request(75.0),), restart)
    assert plain[120.0].num_restarts == 0
    assert plain[120.0].stalled_seconds == 60.0 + full - 120.0


def test_relist_waits_for_an_inference_event() -> None:
    """No inference event: the list is never rewritten, so no restart."""
    seen = _run([2, 2], True, ())
    assert all(view is None or view.num_restarts == 0 for view in seen.values())


def test_relist_skips_a_job_changed_first() -> None:
    """One 4-GPU node: the request at t = 75 reclaims a GPU from the relisted job, a scale-in (NEXT
    under AFE) that already rewrote its list: one restart, not two."""
    seen = _run([4], True, (_request(75.0),))
    job = seen[120.0]
    assert job.alloc.tolist() == [3]
    assert job.num_restarts == 1
    assert job.stalled_seconds == max(75.0 + FAST_RESTART_DELAY_S["bert"] - 120.0, 0.0)


# --------------------------------------------------------------------------- small.csv anchor


def _anchor(key: str) -> float:
    with ANCHORS.open() as f:
        return next(float(row["train_jct_mean_s"]) for row in csv.DictReader(f) if row["key"] == key)


@pytest.mark.skipif(not (SMALL.is_file() and ANCHORS.is_file()), reason="needs ../shared/data (small.csv, anchors)")
def test_ats_deepboot_lands_within_5_percent_of_the_original_on_small_csv() -> None:
    from traces.loaders import load_workload

    workload = load_workload(str(SMALL))
    means = {}
    for restart, key in (("afe", "dp_afe"), ("full", "dp_full")):
        config = sim_config(shared_pool="16x4", restart=restart, truth="measured", trace_set="deepboot")
        metrics = run_episode("ats-deepboot", workload, config)
        means[restart] = metrics.train_jct_mean
        assert abs(metrics.train_jct_mean / _anchor(key) - 1) <= 0.05, (restart, metrics.train_jct_mean)
        assert metrics.train_jobs_done == 160
    assert means["afe"] < means["full"]
