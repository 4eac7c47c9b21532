"""Episode metrics stay consistent when events are superseded (re-planned jobs, re-used pods)."""

from __future__ import annotations

import numpy as np
import pytest

from deepboot_env.evaluation import run_episode
from deepboot_env.sim.metrics import censored_jct_mean
from deepboot_env.sim.simulator import SimConfig
from traces.generate import generate_workload


@pytest.mark.parametrize("policy", ["fifo", "ats"])
def test_gpu_seconds_cover_exactly_the_episode(policy: str) -> None:
    wl = generate_workload("m", 9, train={"num_jobs": 30}, inference={"horizon_s": 10 * 3600.0, "mean_gpus": 6.0})
    metrics = run_episode(policy, wl, SimConfig())
    total = sum(metrics.gpu_seconds_by_state.values())
    assert total == pytest.approx(64 * metrics.sim_end)
    last_request = max(r.arrival + r.duration for r in wl.requests)
    # The episode ends with the last training job or inference request, not at a stale event.
    assert metrics.sim_end >= metrics.makespan
    assert metrics.sim_end <= max(metrics.makespan, last_request + 8 + 600)
    timeline = np.array(metrics.timeline)
    assert np.allclose(timeline[:, 1:7].sum(axis=1), 64)
    assert timeline[-1, 0] >= last_request - 120  # sampled while inference drains after training


def test_the_censored_mean_counts_unfinished_jobs_up_to_the_cut() -> None:
    wl = generate_workload("m", 3, train={"num_jobs": 12}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0})
    full = run_episode("ats", wl, SimConfig())
    assert censored_jct_mean(wl, full) == pytest.approx(full.train_jct_mean)  # every job finished
    cut = run_episode("ats", wl, SimConfig(), max_decisions=3)
    assert cut.train_jobs_done < cut.train_jobs
    pending = [max(cut.sim_end - j.arrival, 0.0) for j in wl.jobs if j.name not in cut.jcts]
    assert censored_jct_mean(wl, cut) == pytest.approx((sum(cut.jcts.values()) + sum(pending)) / len(wl.jobs))
