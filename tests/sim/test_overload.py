"""Waiting inference requests are served at a cost proportional to what is placed, with exactly
the results of trying every waiting request in FIFO order after every event (the reference)."""

from __future__ import annotations

from collections import deque

import pytest

from deepboot_env.evaluation import run_episode
from deepboot_env.policy import BasePolicy, make_policy
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.inference import _PLACED, InferencePool
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload


class FullScanPool(InferencePool):
    """The reference: a FIFO deque, every waiting request retried after every event (the pool's
    own event handlers call this ``serve_waiting``; the instances they mark are ignored)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = deque()  # type: ignore[assignment]

    def arrive(self, idx: int, now: float) -> None:
        self.waiting.append(idx)
        self.serve_waiting(now)

    def serve_waiting(self, now: float) -> None:
        still: deque[int] = deque()
        while self.waiting:
            idx = self.waiting.popleft()
            if self._place_request(idx, now) != _PLACED:
                still.append(idx)
        self.waiting = still  # type: ignore[assignment]


class FullScanSimulator(Simulator):
    _pool_type = FullScanPool


class PickyReclaim(BasePolicy):
    """ATS's allocation; its reclaim hook refuses the requests of one model (request-dependent)."""

    name = "picky"

    def __init__(self) -> None:
        self.ats = make_policy("ats")

    def decide(self, state):
        return self.ats.decide(state)

    def choose_reclaim(self, state, request):
        return None if request.app == "bert" else super().choose_reclaim(state, request)


def _overloaded(seed: int):
    """Peaks far beyond a 2x4 inference cluster: requests queue for minutes."""
    return generate_workload(
        f"overload-{seed}",
        seed,
        train={"num_jobs": 12},
        inference={"horizon_s": 4 * 3600.0, "mean_gpus": 10.0, "amplitude": 0.9, "period_s": 4 * 3600.0},
    )


def _episode(sim_type: type[Simulator], policy, workload, cluster: ClusterConfig | None = None) -> dict:
    import deepboot_env.evaluation as evaluation

    config = SimConfig(cluster=cluster or ClusterConfig.parse("2x4+2x4"))
    sim = sim_type(workload, config, policy)
    while not sim.done:
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        sim.advance()
    assert evaluation  # the same loop as run_episode, with the simulator class chosen
    metrics = sim.metrics()
    out = metrics.deterministic_dict()
    out["timeline"] = metrics.timeline
    out["requests"] = [(r.start, r.finish, r.cold, r.pod) for r in sim.requests]
    return out


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("policy", ["ats", "fifo", "picky"])
def test_indexed_queue_equals_the_full_scan(seed: int, policy: str) -> None:
    workload = _overloaded(seed)

    def make():
        return PickyReclaim() if policy == "picky" else make_policy(policy)

    fast, reference = _episode(Simulator, make(), workload), _episode(FullScanSimulator, make(), workload)
    assert max(row[-2] for row in reference["timeline"]) > 50  # really overloaded: requests queued
    assert fast == reference


def test_indexed_queue_equals_the_full_scan_on_a_shared_pool() -> None:
    """One pool of 4 nodes shared by training and inference (every GPU reclaimable): the same."""
    workload, cluster = _overloaded(3), ClusterConfig.parse_shared("4x4")
    fast = _episode(Simulator, make_policy("ats"), workload, cluster)
    reference = _episode(FullScanSimulator, make_policy("ats"), workload, cluster)
    assert max(row[-2] for row in reference["timeline"]) > 50
    assert fast == reference


def test_overloaded_metrics_are_plausible() -> None:
    metrics = run_episode("ats", _overloaded(1), SimConfig(cluster=ClusterConfig.parse("2x4+2x4")))
    assert metrics.infer_requests_done == metrics.infer_requests
    assert metrics.infer_latency_p99 > 60  # requests waited


def test_generate_reports_the_peak_offered_load_and_warns_past_the_cluster(tmp_path, capsys) -> None:
    from deepboot_harness.cli import main
    from traces.generate import peak_offered_gpus

    assert main(["generate", "--out", str(tmp_path / "light.csv"), "--inference-mean-gpus", "4"]) == 0
    err = capsys.readouterr().err
    assert "peak offered inference load" in err and "warning" not in err
    argv = ["generate", "--out", str(tmp_path / "heavy.csv"), "--inference-mean-gpus", "27", "--inference-gpus", "32"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "warning: the peaks exceed the inference cluster" in err
    heavy = _overloaded(1)
    assert peak_offered_gpus(heavy.requests) > 8  # the 2x4 inference cluster of the equivalence test
