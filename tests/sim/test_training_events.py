"""The compiled event loop with training jobs (``drain_loops.run_events_loops``) is the simulator's.

Between two decisions the simulator runs inference events, reclaims of lent training GPUs and job
completions (``Simulator._run_events``). At every such run of real episodes (ATS-I and the
restart-aware reclaim, AFE, full and Pollux restarts, two clusters and a shared pool) the state is
copied into the loop's arrays (:meth:`~deepboot_env.sim.drain._DrainArrays.of` with the jobs as
rows, the deferred completions projected), the compiled loop runs to the same time, the Python
loop runs, and its state copied again must be the loop's: every job's row, the active jobs, the
ledger, the live pods, the waiting queue, the live events with their sequence numbers, the
GPU-seconds, the requests started, the restarts, the reclaims and the completions, in order.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from builders import drive

from baselines.ats import AtsPolicy
from deepboot_env.policy import make_policy
from deepboot_env.sim import drain_loops as k
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.drain import RequestColumns, _DrainArrays
from deepboot_env.sim.progress import COMPLETION, N_PHASES, VERSION, JobArrays
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload


def state_of(a: _DrainArrays) -> dict[str, object]:
    """What a run of events leaves, from the loop's arrays, in absolute positions."""
    st, fs = a.st, a.fs
    pod_i, pod_f, live, counts = a.pods[0], a.pods[1], a.pods[2], a.pods[3]
    jf, ji, pf, pi, jcounts, active = a.training[0][:6]
    pids = sorted(live[: st[k.N_LIVE]].tolist())
    heap_t, heap_i = a.events
    events = []
    for t, (kind, seq, target, version) in zip(
        heap_t[: st[k.HEAP_N]].tolist(), heap_i[: st[k.HEAP_N]].tolist(), strict=True
    ):
        if kind == k.TRAIN_DONE:
            alive = ji[target, VERSION] == version and math.isnan(jf[target, COMPLETION])
        else:
            alive = pod_i[target, k.STATUS] != k.DEAD and pod_i[target, k.VERSION] == version
        if alive:
            events.append((t, kind, seq, target, version))
    waits = a.queue[0]
    waiting = [
        (a.first_ticket + row, int(waits[row, k.W_REQUEST]))
        for row in range(int(st[k.W_HEAD]), int(st[k.TICKETS]))
        if waits[row, k.W_REQUEST] >= 0
    ]
    phases = [(pf[j, : ji[j, N_PHASES]].tolist(), pi[j, : ji[j, N_PHASES]].tolist()) for j in range(len(ji))]
    return {
        "arrivals": a.first_arrival + int(st[k.NXT]),
        "sequence": (int(st[k.SEQ]), int(st[k.POD_SEQ])),
        "held": st[k.HELD :].tolist(),
        "ledger": counts.tolist(),
        "pods": [(pid, pod_i[pid].tolist(), pod_f[pid].tolist()) for pid in pids],
        "waiting": waiting,
        "events": sorted(events),
        "books": (fs[k.NOW], fs[k.WAIT_S], fs[k.ACC_T], fs[k.GS : k.SAMPLE].tolist()),
        "jobs": (jf.tolist(), ji.tolist(), jcounts.tolist(), phases),
        "active": active[: st[k.N_ACTIVE]].tolist(),
    }


def same(a: object, b: object) -> bool:
    """Equal, NaNs included (the rows hold NaN for None)."""
    return repr(a) == repr(b)


@pytest.mark.parametrize(
    "policy, config",
    [
        ("ats", SimConfig()),
        ("ats-srpt-fcfs-place-rr-warm", SimConfig(cap_growth="trained")),
        (AtsPolicy(reclaim_horizon=120.0), SimConfig(restart="full", cluster=ClusterConfig.parse_shared("8x4"))),
        ("ats-srpt", SimConfig(restart="pollux")),
        ("ats-srpt-fcfs-place-rr-warm", SimConfig(truth="measured", cap_growth="trained")),
    ],
    ids=["ats", "prior", "restart-aware-shared-full", "ats-srpt-pollux", "prior-v1"],
)
def test_compiled_events_with_training_are_the_simulators(policy, config: SimConfig) -> None:
    workload = generate_workload(
        "training-events", 7, train={"num_jobs": 30}, inference={"horizon_s": 10 * 3600.0, "mean_gpus": 10.0}
    )
    policy = make_policy(policy) if isinstance(policy, str) else policy
    sim = Simulator(workload, config, policy)
    real = Simulator._run_events
    totals = {"runs": 0, "reclaims": 0, "done": 0, "restarts": 0}

    def checked(self: Simulator, until: float) -> None:
        columns = RequestColumns.of(self._pool._specs)
        records = list(self._pool.requests)
        counters = (self._training.restarts, self._pool.reclaims, np.isfinite(self._books.job_completions))
        arrays = _DrainArrays.of(self, until, columns, JobArrays.of(self.jobs, config.restart))
        k.run_events_loops(
            arrays.st, arrays.fs, arrays.pods, arrays.events, arrays.reqs, arrays.queue, *arrays.training, until
        )
        real(self, until)
        after = _DrainArrays.of(self, until, columns, JobArrays.of(self.jobs, config.restart))
        want, got = state_of(after), state_of(arrays)
        for key in want:
            assert same(got[key], want[key]), f"{key} after the run to {until}"
        st = arrays.st
        restarts, reclaims = self._training.restarts - counters[0], self._pool.reclaims - counters[1]
        done = np.flatnonzero(np.isfinite(self._books.job_completions) & ~counters[2]).tolist()
        assert (int(st[k.RESTARTS]), int(st[k.RECLAIMS])) == (restarts, reclaims)
        assert sorted(arrays.training[0][8][: st[k.N_DONE]].tolist()) == done
        req_i, req_f = arrays.reqs[0], arrays.reqs[1]
        started = [
            i
            for i, (old, new) in enumerate(zip(records, self._pool.requests, strict=True))
            if old.start is None and new.start is not None
        ]
        assert np.flatnonzero(req_i[:, k.R_POD] > 0).tolist() == started
        for idx in started:
            rec = self._pool.requests[idx]
            assert (rec.start, rec.finish, rec.cold, rec.pod) == (
                req_f[idx, k.R_START],
                req_f[idx, k.R_FINISH],
                bool(req_i[idx, k.R_COLD]),
                req_i[idx, k.R_POD],
            )
        totals["runs"] += 1
        totals["reclaims"] += reclaims
        totals["done"] += len(done)
        totals["restarts"] += restarts

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulator, "_run_events", checked)
        drive(sim, policy)
    assert totals["runs"] > 100 and totals["reclaims"] > 20 and totals["done"] > 10, totals


@pytest.mark.parametrize(
    "policy, config",
    [
        ("ats", SimConfig()),
        ("ats-srpt-fcfs-place-rr-warm", SimConfig(cap_growth="trained")),
        ("fifo", SimConfig(restart="full", cluster=ClusterConfig.parse_shared("8x4"))),
        ("ats", SimConfig(truth="measured", cap_growth="trained")),
    ],
    ids=["ats", "prior", "fifo-shared-full", "ats-v1"],
)
def test_compiled_allocation_is_the_simulators(policy, config: SimConfig) -> None:
    """At every decision of real episodes, the compiled ``apply_counts_loops`` leaves the state the
    simulator's ``_apply_counts`` leaves: SLEEP pods evicted, the ledger set, every changed job
    re-planned and re-projected, waiting requests served."""
    workload = generate_workload(
        "training-events", 8, train={"num_jobs": 30}, inference={"horizon_s": 10 * 3600.0, "mean_gpus": 10.0}
    )
    policy = make_policy(policy)
    sim = Simulator(workload, config, policy)
    real = Simulator._apply_counts
    totals = {"decisions": 0, "changes": 0, "evictions": 0}

    def checked(self: Simulator, counts: dict[int, list[int]]) -> None:
        columns = RequestColumns.of(self._pool._specs)
        arrays = _DrainArrays.of(self, self.now, columns, JobArrays.of(self.jobs, config.restart))
        wanted = np.full(arrays.training[0][4].shape, -1, dtype=np.int64)
        for j, row in counts.items():
            wanted[j] = row
        versions = [job.version for job in self.jobs]
        live = len(self._pool.pods)
        k.apply_counts_loops(
            arrays.st,
            arrays.fs,
            arrays.pods,
            arrays.events,
            arrays.reqs,
            arrays.queue,
            *arrays.training,
            wanted,
            self.now,
        )
        real(self, counts)
        after = _DrainArrays.of(self, self.now, columns, JobArrays.of(self.jobs, config.restart))
        want, got = state_of(after), state_of(arrays)
        for key in want:
            assert same(got[key], want[key]), f"{key} after the decision at {self.now}"
        totals["decisions"] += 1
        totals["changes"] += sum(job.version != v for job, v in zip(self.jobs, versions, strict=True))
        totals["evictions"] += max(live - len(self._pool.pods), 0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulator, "_apply_counts", checked)
        drive(sim, policy)
    assert totals["decisions"] > 100 and totals["changes"] > 50 and totals["evictions"] > 0, totals
