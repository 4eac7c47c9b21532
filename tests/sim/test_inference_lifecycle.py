"""Inference pods (RUNNING -> PROTECT -> SLEEP), warm hits, cold starts, waiting, eviction, reclaim
and restart costs (docs/inference.md §2-§6, docs/restarts.md §4)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import drive

from deepboot_env.placement import best_fit
from deepboot_env.policy import BasePolicy
from deepboot_env.sim.apps import APP_NAMES, COLD_START_DELAY_S, FAST_RESTART_DELAY_S, FULL_RESTART_DELAY_S, get_app
from deepboot_env.sim.cluster import NODE_INFER, ClusterConfig
from deepboot_env.sim.inference import PROTECT, RUNNING, SLEEP, protect_time
from deepboot_env.sim.restart import Phase, plan_change
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import Allocation, ClusterState, GpuRef
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload


def req(name: str, t: float, model: str, duration: float, k: int = 1) -> InferenceRequestSpec:
    return InferenceRequestSpec(name, float(t), f"infer-{model}-{k}", model, float(duration))


def inference_only(requests: list[InferenceRequestSpec], cluster: str = "1x1+1x1", scale: float = 1.0) -> Simulator:
    """A workload with no training: the simulator runs it to the end on construction."""
    sim = Simulator(
        Workload("inference-only", (), tuple(requests)),
        SimConfig(cluster=ClusterConfig.parse(cluster), protect_scale=scale),
    )
    assert sim.done
    return sim


def _episode(sim: Simulator, policy, on_state=None):
    """The metrics of ``sim``'s episode under ``policy`` (:func:`builders.drive`: the evaluation
    loop, ``on_state`` seeing every boundary state)."""
    drive(sim, policy, on_state=on_state)
    return sim.metrics()


# ---------------------------------------------------------------------------------------------
# protect time


def test_protect_time_sequence_p1() -> None:
    assert [protect_time(h) for h in range(10)] == [30, 45, 60, 75, 90, 105, 120, 120, 120, 120]


def test_protect_time_sequence_p8() -> None:
    assert [protect_time(h, 8.0) for h in range(9)] == [240, 360, 480, 600, 720, 840, 960, 960, 960]
    assert all(protect_time(h, 8.0) == 8 * protect_time(h) for h in range(20))


def test_protect_time_fractional_scale_is_floored() -> None:
    assert protect_time(0, 1.5) == 45
    assert protect_time(1, 0.1) == 4  # floor(3 + 1.5)


def _warm_chain(hits: int, scale: float = 1.0, late: bool = False, model: str = "ncf", dur: float = 5.0):
    """One cold request, then ``hits`` requests each arriving on the last second of PROTECT
    (t_c + T_p(h)); with ``late`` one more request arrives one second after that (t_c + T_p + 1)."""
    delay = COLD_START_DELAY_S[model]
    reqs = [req("r0", 0, model, dur)]
    finish = delay + dur
    for h in range(hits):
        t = finish + protect_time(h, scale)
        reqs.append(req(f"r{h + 1}", t, model, dur))
        finish = t + dur
    if late:
        t = finish + protect_time(hits, scale) + 1
        reqs.append(req("late", t, model, dur))
        finish = t + dur
    return reqs, finish


@pytest.mark.parametrize("hits", range(9))
def test_consecutive_warm_hits_grow_protect_time(hits: int) -> None:
    """Each request arriving exactly at t_c + T_p is a warm hit on the PROTECT pod (hits + 1);
    the pod's last PROTECT stint then lasts T_p(hits) + 1 s (ticks t_c .. t_c + T_p)."""
    reqs, last_finish = _warm_chain(hits)
    sim = inference_only(reqs)
    m = sim.metrics()
    assert len(sim.pods) == 1
    recs = sim.requests
    assert recs[0].cold and recs[0].start - recs[0].arrival == COLD_START_DELAY_S["ncf"]
    for rec in recs[1:]:
        assert not rec.cold
        assert rec.start == rec.arrival  # zero start-up delay
        assert rec.pod == recs[0].pod
    assert m.infer_warm_hits == hits and m.infer_cold_starts == 1
    # the final PROTECT stint measures T_p(hits): the pod turns SLEEP at the last event
    assert m.sim_end - last_finish == protect_time(hits) + 1
    # total PROTECT time = every stint: T_p(0) + ... + T_p(hits - 1) + (T_p(hits) + 1)
    expected = sum(protect_time(h) for h in range(hits + 1)) + 1
    assert m.gpu_seconds_by_state["protect"] == pytest.approx(expected)
    assert m.gpu_seconds_by_state["sleep"] == 0.0
    assert m.gpu_seconds_by_state["inference-running"] == pytest.approx(COLD_START_DELAY_S["ncf"] + 5.0 * (hits + 1))
    assert sim.pods[recs[0].pod].status == SLEEP and sim.pods[recs[0].pod].hits == 0


@pytest.mark.parametrize("hits", [0, 1, 3, 6])
def test_request_one_second_late_finds_sleep_and_resets_hits(hits: int) -> None:
    """A request at t_c + T_p + 1 finds the pod SLEEP: still warm (no start-up delay, same pod) but
    the hit counter restarts at 0, so the next PROTECT lasts T_p(0) = 30 s again."""
    reqs, last_finish = _warm_chain(hits, late=True)
    sim = inference_only(reqs)
    m = sim.metrics()
    late = sim.requests[-1]
    assert not late.cold and late.start == late.arrival and late.pod == sim.requests[0].pod
    assert m.sim_end - last_finish == protect_time(0) + 1
    expected = sum(protect_time(h) for h in range(hits)) + (protect_time(hits) + 1) + (protect_time(0) + 1)
    assert m.gpu_seconds_by_state["protect"] == pytest.approx(expected)
    assert m.gpu_seconds_by_state["sleep"] == 0.0  # SLEEP for zero seconds before the hit


@pytest.mark.parametrize("hits", [0, 2, 7])
def test_protect_scale_8_through_the_simulator(hits: int) -> None:
    reqs, last_finish = _warm_chain(hits, scale=8.0)
    sim = inference_only(reqs, scale=8.0)
    m = sim.metrics()
    assert m.infer_warm_hits == hits
    assert m.sim_end - last_finish == protect_time(hits, 8.0) + 1 == 8 * protect_time(hits) + 1
    # with P = 1 the same arrivals come too late after the first stint: only cold/SLEEP hits
    if hits:
        p1 = inference_only(reqs, scale=1.0).metrics()
        assert p1.sim_end - last_finish == protect_time(0) + 1


def test_sleep_pod_after_gap_then_protect_restarts() -> None:
    """A long gap: the pod sleeps (counted as SLEEP GPU-seconds) and is reused warm with hits 0."""
    sim = inference_only([req("a", 0, "bert", 2), req("b", 200, "bert", 3)])
    m = sim.metrics()
    # a: cold 8 s + 2 s, PROTECT [10, 41), SLEEP [41, 200), b warm at 200, PROTECT [203, 234)
    assert [r.start for r in sim.requests] == [8.0, 200.0]
    assert m.gpu_seconds_by_state["sleep"] == pytest.approx(159.0)
    assert m.gpu_seconds_by_state["protect"] == pytest.approx(31.0 + 31.0)
    assert m.sim_end == 234.0


# ---------------------------------------------------------------------------------------------
# cold starts


@pytest.mark.parametrize("model", APP_NAMES)
def test_cold_start_pays_model_delay_warm_hit_pays_nothing(model: str) -> None:
    sim = inference_only([req("cold", 3, model, 7), req("warm", 40, model, 7)])
    cold, warm = sim.requests
    assert cold.cold and cold.start - cold.arrival == COLD_START_DELAY_S[model]
    assert cold.finish == 3 + COLD_START_DELAY_S[model] + 7
    assert not warm.cold and warm.start == 40.0 and warm.finish == 47.0
    m = sim.metrics()
    assert m.infer_latency_mean == pytest.approx(COLD_START_DELAY_S[model] / 2)
    assert m.infer_jct_mean == pytest.approx((COLD_START_DELAY_S[model] + 7 + 7) / 2)


def test_instances_of_one_model_do_not_share_pods() -> None:
    sim = inference_only([req("a", 0, "ncf", 1, k=1), req("b", 20, "ncf", 1, k=2)], cluster="1x2+1x2")
    assert [r.cold for r in sim.requests] == [True, True]
    assert len(sim.pods) == 2


def test_warm_pod_with_most_hits_is_chosen() -> None:
    """Two pods of one instance, both PROTECT: the one with more consecutive hits serves."""
    reqs = [req("a", 0, "ncf", 40), req("b", 1, "ncf", 2)]  # a RUNNING on pod 1 until 44
    # b: cold on pod 2, finishes 7, PROTECT until 38; c at 30 hits pod 2 (hits 1), PROTECT until 78
    reqs.append(req("c", 30, "ncf", 2))
    # at 50: pod 1 PROTECT since 44 with 0 hits, pod 2 PROTECT with 1 hit -> pod 2 (not the lower id)
    reqs.append(req("d", 50, "ncf", 2))
    sim = inference_only(reqs, cluster="1x2+1x2")
    a, b, c, d = sim.requests
    assert a.cold and b.cold and a.pod < b.pod
    assert not c.cold and c.pod == b.pod
    assert not d.cold and d.pod == b.pod
    assert sim.metrics().sim_end == 52 + protect_time(2) + 1


# ---------------------------------------------------------------------------------------------
# eviction and waiting


def test_cold_request_evicts_sleep_pod_of_another_app_when_no_empty_gpu() -> None:
    # bert pod: cold 8 + 2 -> PROTECT [10, 41), SLEEP from 41; ncf arrives at 50 on a 1-GPU inference node
    sim = inference_only([req("bert", 0, "bert", 2), req("ncf", 50, "ncf", 3)])
    bert, ncf = sim.requests
    assert ncf.cold and ncf.start == 54.0  # no wait, only the cold start
    assert ncf.pod != bert.pod
    assert [p.instance for p in sim.pods.values()] == ["infer-ncf-1"]


def test_empty_gpu_is_preferred_to_evicting_a_sleep_pod() -> None:
    sim = inference_only([req("bert", 0, "bert", 2), req("ncf", 50, "ncf", 3)], cluster="1x2+1x2")
    assert sorted(p.instance for p in sim.pods.values()) == ["infer-bert-1", "infer-ncf-1"]


@pytest.mark.parametrize(("arrival", "state"), [(5.0, RUNNING), (20.0, PROTECT)])
def test_request_waits_while_every_inference_gpu_is_pinned(arrival: float, state: str) -> None:
    """RUNNING and PROTECT pods are never pre-empted: the ncf request waits until the bert pod
    sleeps at 41, then evicts it and cold-starts."""
    sim = inference_only([req("bert", 0, "bert", 2), req("ncf", arrival, "ncf", 3)])
    bert, ncf = sim.requests
    assert bert.finish == 10.0 and (arrival < bert.finish) == (state == RUNNING)
    assert ncf.cold and ncf.start == 41.0 + COLD_START_DELAY_S["ncf"]
    m = sim.metrics()
    assert m.infer_requests_done == 2 and not m.truncated
    assert m.infer_latency_mean == pytest.approx((COLD_START_DELAY_S["bert"] + 45.0 - arrival) / 2)


def test_waiting_request_of_same_instance_is_served_warm_when_pod_frees() -> None:
    sim = inference_only([req("a", 0, "bert", 5), req("b", 3, "bert", 5)])
    a, b = sim.requests
    assert a.finish == 13.0
    assert not b.cold and b.start == 13.0 and b.pod == a.pod  # PROTECT hit at once, no cold start


def test_many_waiting_requests_are_all_served_in_fifo_order() -> None:
    models = ["bert", "cifar10", "imagenet", "yolov3", "deepspeech2", "ncf"]
    reqs = [req(f"r{i}", i, m, 3) for i, m in enumerate(models)]
    sim = inference_only(reqs)
    m = sim.metrics()
    assert m.infer_requests_done == len(reqs) and m.infer_cold_starts == len(reqs) and not m.truncated
    starts = [r.start - COLD_START_DELAY_S[models[i]] for i, r in enumerate(sim.requests)]
    assert starts == sorted(starts)
    # each one waits for the previous pod to leave PROTECT (finish + 31 s), then cold-starts
    for i in range(1, len(reqs)):
        assert sim.requests[i].start == sim.requests[i - 1].finish + 31 + COLD_START_DELAY_S[models[i]]


# ---------------------------------------------------------------------------------------------
# lending and reclaim


class LendAll(BasePolicy):
    """Gives its single job every GPU it may hold (training and inference nodes)."""

    name = "lend-all"
    adaptive_batch = True

    def decide(self, state: ClusterState) -> Allocation:
        out = {}
        cap = state.training_capacity(lend=True)
        for job in state.jobs:
            want = min(job.max_replicas, int(cap.sum()))
            if job.replicas == want:
                out[job.id] = job.alloc
            else:
                out[job.id] = best_fit(want, cap)
            cap = cap - out[job.id]
        return Allocation(out)


def _reclaim_run(restart: str, arrival: float, cluster: str = "1x4+1x4"):
    w = Workload(
        "reclaim",
        (TrainingJobSpec("bert-0", 0.0, "bert", 8, 384),),
        (req("infer", arrival, "cifar10", 4),),
    )
    sim = Simulator(w, SimConfig(cluster=ClusterConfig.parse(cluster), restart=restart), LendAll())
    seen: dict[float, object] = {}
    metrics = _episode(sim, LendAll(), on_state=lambda s: seen.__setitem__(s.time, s.jobs[0] if s.jobs else None))
    return sim, seen, metrics


@pytest.mark.parametrize(
    ("restart", "stall"),
    [("afe", FAST_RESTART_DELAY_S["bert"]), ("full", FULL_RESTART_DELAY_S["bert"]), ("stopfree", 5.0)],
)
def test_reclaim_of_lent_gpu_restarts_job_with_model_cost(restart: str, stall: float) -> None:
    """The job holds 4 training + 4 lent inference GPUs; an inference request arriving on the 600-s
    boundary reclaims one lent GPU: one restart, a scale-in costing NEXT (afe, stopfree) or the
    full start-up delay (full)."""
    sim, seen, m = _reclaim_run(restart, 600.0)
    before, after = seen[540.0], seen[600.0]
    assert before.alloc.tolist() == [4, 4]
    assert after.alloc.tolist() == [4, 3]
    lost = before.alloc - after.alloc
    assert int(lost.sum()) == 1 and sim.ledger.kinds[int(np.argmax(lost))] == NODE_INFER
    assert after.num_restarts == before.num_restarts + 1
    assert after.stalled_seconds == stall
    assert sim.reclaims == 1 and m.reclaims == 1
    rec = sim.requests[0]
    assert rec.cold and rec.start == 600.0 + COLD_START_DELAY_S["cifar10"]
    assert m.train_jobs_done == 1 and m.infer_requests_done == 1
    # the pod sleeps at 610 + 31; the 660-s decision lends its GPU again, evicting the SLEEP pod
    assert seen[660.0].alloc.tolist() == [4, 3] and seen[660.0].num_restarts == after.num_restarts
    assert seen[720.0].alloc.tolist() == [4, 4] and seen[720.0].num_restarts == after.num_restarts + 1
    assert sim.pods == {}


@pytest.mark.parametrize(("restart", "left"), [("afe", 0.0), ("full", FULL_RESTART_DELAY_S["bert"] - 50)])
def test_reclaim_between_boundaries_stalls_from_the_reclaim(restart: str, left: float) -> None:
    _, seen, _ = _reclaim_run(restart, 610.0)
    assert seen[600.0].alloc.tolist() == [4, 4]
    assert seen[660.0].alloc.tolist() == [4, 3]
    assert seen[660.0].num_restarts == seen[600.0].num_restarts + 1
    assert seen[660.0].stalled_seconds == left


def test_training_cluster_gpus_are_never_reclaimed() -> None:
    """Two clusters: a job on training nodes only is never a victim; the request waits instead."""
    w = Workload(
        "no-lend",
        (TrainingJobSpec("bert-0", 0.0, "bert", 4, 384),),
        (req("a", 300, "ncf", 50), req("b", 310, "ncf", 5, k=2)),
    )

    class TrainOnly(LendAll):
        def decide(self, state: ClusterState) -> Allocation:
            cap = state.training_capacity(lend=False)
            job = state.jobs[0]
            want = min(job.max_replicas, int(cap.sum()))
            return Allocation({job.id: job.alloc if job.replicas == want else best_fit(want, cap)})

    sim = Simulator(w, SimConfig(cluster=ClusterConfig.parse("1x1+1x1")), TrainOnly())
    m = _episode(sim, TrainOnly())
    assert m.reclaims == 0 and m.restarts == 0 and m.lent_gpu_seconds == 0.0
    a, b = sim.requests
    assert b.start == a.finish + 31 + COLD_START_DELAY_S["ncf"]  # waited for a's pod to sleep


def test_custom_reclaim_hook_choice_is_applied() -> None:
    class Hook(LendAll):
        def choose_reclaim(self, state, request):  # noqa: ARG002
            job = state.jobs[0]
            node = int(np.flatnonzero((job.alloc > 0) & (state.node_kinds == NODE_INFER))[-1])
            self.victim = GpuRef(job.id, node)
            return self.victim

    w = Workload("hook", (TrainingJobSpec("bert-0", 0.0, "bert", 8, 384),), (req("r", 610, "ncf", 3),))
    pol = Hook()
    sim = Simulator(w, SimConfig(cluster=ClusterConfig.parse("1x4+2x4")), pol)
    seen = {}
    drive(sim, pol, on_state=lambda s: seen.__setitem__(s.time, s.jobs[0].alloc.copy() if s.jobs else None))
    assert pol.victim.node == 2
    assert seen[600.0].tolist() == [4, 4, 4] and seen[660.0].tolist() == [4, 4, 3]


def test_waiting_request_served_when_policy_returns_lent_gpus_at_boundary() -> None:
    """A hook may refuse to reclaim (the request waits); once the policy gives the lent GPU back
    at the next boundary the request must start there, not when some later event happens."""

    class Refuse(BasePolicy):
        adaptive_batch = True
        release = False

        def choose_reclaim(self, state, request):  # noqa: ARG002
            self.release = True
            return None

        def decide(self, state: ClusterState) -> Allocation:
            job = state.jobs[0]
            if self.release or job.max_replicas < 2:
                return Allocation({job.id: np.array([1, 0])})
            return Allocation({job.id: np.array([1, 1])})

    w = Workload("refuse", (TrainingJobSpec("bert-0", 0.0, "bert", 2, 384),), (req("r", 130, "ncf", 5),))
    pol = Refuse()
    sim = Simulator(w, SimConfig(cluster=ClusterConfig.parse("1x1+1x1")), pol)
    m = _episode(sim, pol)
    rec = sim.requests[0]
    assert m.reclaims == 0
    assert rec.start == 180.0 + COLD_START_DELAY_S["ncf"]  # served at the 180-s boundary


# ---------------------------------------------------------------------------------------------
# restart cost models


def _plan(model: str, app: str, old: list[int], new: list[int], started: bool = True):
    return plan_change(model, get_app(app), np.array(old), np.array(new), started)


def test_plan_change_afe_golden_values() -> None:
    # scale-out: NEXT + floor((FULL - NEXT) * (r_n - r_o) / r_n): bert 4 -> 8 = 5 + floor(98 * 4 / 8)
    plan = _plan("afe", "bert", [4, 0], [4, 4])
    assert plan.phases == (Phase(54.0, 0, False),) and plan.counts_as_restart
    assert _plan("afe", "bert", [1, 0], [4, 0]).stall_seconds == 5 + 98 * 3 // 4  # 78
    assert _plan("afe", "cifar10", [2, 0], [3, 0]).stall_seconds == 3 + (21 * 1) // 3  # 10
    # scale-in: NEXT
    for app in APP_NAMES:
        assert _plan("afe", app, [4, 4], [4, 3]).stall_seconds == FAST_RESTART_DELAY_S[app]
    # migration (same count, other nodes): FULL
    assert _plan("afe", "bert", [4, 0], [0, 4]).stall_seconds == 103.0
    # first start: FULL, not a restart
    first = _plan("afe", "bert", [0, 0], [2, 0], started=False)
    assert first.stall_seconds == 103.0 and not first.counts_as_restart
    # restart after being parked: FULL, counted
    parked = _plan("afe", "bert", [0, 0], [2, 0], started=True)
    assert parked.stall_seconds == 103.0 and parked.counts_as_restart
    # to zero: free, not a restart
    zero = _plan("afe", "bert", [4, 4], [0, 0])
    assert zero.phases == () and not zero.counts_as_restart


def test_plan_change_full_golden_values() -> None:
    for old, new in (([4, 0], [4, 4]), ([4, 4], [4, 3]), ([4, 0], [0, 4])):
        for app in APP_NAMES:
            plan = _plan("full", app, old, new)
            assert plan.phases == (Phase(FULL_RESTART_DELAY_S[app], 0, False),) and plan.counts_as_restart
    assert _plan("full", "bert", [4, 4], [0, 0]).phases == ()


def test_plan_change_stopfree_phases() -> None:
    # joiners: kept workers train for FULL s while the 4 joiners start, then a NEXT-s sync pause
    grow = _plan("stopfree", "bert", [4, 0], [4, 4])
    assert grow.phases == (Phase(103.0, 4, False, (4, 0)), Phase(5.0, 0, False))
    assert grow.stall_seconds == 5.0 and grow.counts_as_restart
    spread = _plan("stopfree", "imagenet", [2, 2, 0], [2, 2, 4])
    assert spread.phases == (Phase(35.0, 4, True, (2, 2, 0)), Phase(3.0, 0, False))
    # scale-in: only the sync pause
    assert _plan("stopfree", "bert", [4, 4], [4, 2]).phases == (Phase(5.0, 0, False),)
    # nothing kept (migration): full start
    assert _plan("stopfree", "bert", [4, 0], [0, 4]).phases == (Phase(103.0, 0, False),)
    # partial migration: kept = min(old, new) per node = 2
    part = _plan("stopfree", "cifar10", [4, 0], [2, 2])
    assert part.phases == (Phase(24.0, 2, False, (2, 0)), Phase(3.0, 0, False))
    assert _plan("stopfree", "bert", [0, 0], [4, 0], started=False).phases == (Phase(103.0, 0, False),)


@pytest.mark.parametrize("horizon", [0.0, 300.0])
def test_reclaim_hooks_computed_without_the_whole_state_choose_as_on_it(monkeypatch, horizon: float) -> None:
    """With the default hook (ATS-I, marked ``ats_i_rule``) or the restart-aware rule
    (``AtsPolicy(reclaim_horizon=...)``) the simulator reclaims from the views of the jobs that
    hold GPUs; at every reclaim of a busy lending episode that choice equals the rule's on the
    whole state, and the unmarked override of a subclass still gets the whole state."""
    from baselines.ats import AtsPolicy
    from deepboot_env.sim.reclaim import ats_i_victim, restart_aware_victim
    from traces.loaders import load_workload

    direct = Simulator.least_loss_victim
    checked = []

    def both(self, horizon_seen=0.0):
        ref = direct(self, horizon_seen)
        state = self.observe()
        assert horizon_seen == horizon
        assert ref == (restart_aware_victim(state, horizon) if horizon else ats_i_victim(state))
        checked.append(ref)
        return ref

    monkeypatch.setattr(Simulator, "least_loss_victim", both)
    policy = AtsPolicy(reclaim_horizon=horizon)
    metrics = _episode(Simulator(load_workload("test/test-01"), SimConfig(), policy), policy)
    assert len(checked) >= metrics.reclaims > 400 and any(ref is not None for ref in checked)

    class Override(AtsPolicy):
        def choose_reclaim(self, state, request):
            self.states.append(state)
            return super().choose_reclaim(state, request)

    checked.clear()
    override = Override()
    override.states = []
    drive(Simulator(load_workload("test/test-01"), SimConfig(), override), override)
    assert not checked and len(override.states) >= metrics.reclaims
