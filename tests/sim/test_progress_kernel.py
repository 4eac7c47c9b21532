"""The compiled progress kernel (:mod:`deepboot_env.sim.progress_loops`) is the reference loop.

On every call of :func:`~deepboot_env.sim.jobs._run` recorded in real episodes (restart stalls,
stop-free phases, interference speeds below 1, a shared pool) and on random horizons around them,
:func:`~deepboot_env.sim.progress.compiled_run` gives what
:func:`~deepboot_env.sim.jobs._reference_run` gives, every float bit for bit: the epoch, the
progress, the phases left (cut ones with their ends), the anchor and the completion time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from builders import RunCase, drive, recorded_run_cases

from baselines.ats import AtsPolicy
from deepboot_env.policy import make_policy
from deepboot_env.sim import progress, progress_loops
from deepboot_env.sim.cluster import ClusterConfig, node_layout
from deepboot_env.sim.jobs import RunResult, TrainingJob, _reference_run
from deepboot_env.sim.progress import JobArrays, ProgressTables, class_id, compiled_run, job_rows
from deepboot_env.sim.progress_loops import ADOPT, ADVANCE, PROFILED, PROJECT, SET_SPEED, reclaim_victim, replay_job_ops
from deepboot_env.sim.reclaim import fair_replicas
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload


@pytest.fixture(scope="module")
def run_cases() -> list[RunCase]:
    workload = generate_workload(
        "fast-paths", 11, train={"num_jobs": 14}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )
    return recorded_run_cases(workload)


def exact(result: RunResult) -> tuple:
    """A run's result with every float as its repr (a phase's seconds as a float: a plan may
    hold a whole number as an int)."""
    epoch, progress_, phases, anchor, completion = result
    shown = tuple((repr(float(p.seconds)), p.replicas, p.multi_node, p.counts, repr(p.end)) for p in phases)
    return epoch, repr(progress_), shown, repr(anchor), repr(completion)


def test_compiled_progress_is_the_reference_loop(run_cases: list[RunCase]) -> None:
    covered = {"stall": 0, "two phases": 0, "slowed": 0, "projection": 0, "completes": 0, "cut": 0}
    for job, t1, start in run_cases:
        expected = _reference_run(job, t1, start)
        assert exact(compiled_run(job, t1, start)) == exact(expected), (job.index, t1, start)
        phases = start[3]
        covered["stall"] += bool(phases) and phases[0].replicas == 0
        covered["two phases"] += len(phases) == 2
        covered["slowed"] += job.speed < 1.0
        covered["projection"] += t1 == math.inf
        covered["completes"] += expected[4] is not None and t1 < math.inf
        covered["cut"] += any(p.end is not None for p in expected[2])
    assert len(run_cases) > 5000 and min(covered.values()) > 50, covered


def test_tables_hold_the_rate_table(run_cases: list[RunCase]) -> None:
    job = max((case[0] for case in run_cases), key=lambda job: job.truth.max_replicas)
    table = job.truth
    k = table.max_replicas
    tables = ProgressTables.of(table)
    assert tables is ProgressTables.of(table)  # built once per table
    epochs = len(job.epoch_ends)
    assert tables.rates.shape == (2 * (k + 1), epochs) and tables.suffix.shape == (2 * (k + 1), epochs + 1)
    assert tables.model.shape == (2, k + 1, epochs) and not tables.measured
    multi = class_id(tables, [k - 1, 1])
    assert multi == k + 1 + k and class_id(tables, [k]) == k
    assert tables.rates[multi].tolist() == table.rate_column(True, k) and tables.rates[0].tolist() == [0.0] * epochs
    assert tables.suffix[k].tolist() == table.epoch_suffix_list(False, k) and k > 1


def test_measured_classes_are_the_step_times(run_cases: list[RunCase]) -> None:
    """The measured truth's classes: each measured shape, then the (nodes, GPUs) grid; a
    placement's class is its shape's if measured, else its grid cell, as the truth keys it."""
    from deepboot_env.sim.measured import shared_measured_rates

    table = max((case[0] for case in run_cases), key=lambda job: job.truth.max_replicas).truth
    truth = shared_measured_rates(table, "pollux")
    tables = ProgressTables.of(truth)
    assert tables.measured and len(tables.shapes) == len(truth.steps.shapes) > 3
    for counts in ([2, 0, 1], [1, 2, 0, 0], [4, 4], [1, 1, 1, 1, 1], [0, 3], [2, 2, 0, 2]):
        cls = truth.placement_class(counts, sum(1 for c in counts if c) > 1)
        c = class_id(tables, counts)
        assert tables.rates[c].tolist() == truth.rate_column(cls, sum(counts)), (counts, cls)
        assert (c < len(tables.shapes)) == isinstance(cls, str)


def test_kernel_layout_literals_match_the_adapter() -> None:
    """The kernel keeps its column numbers as literals (numba's cache is keyed on its source)."""
    names = ("T", "PROGRESS", "ANCHOR_T", "ANCHOR_P", "SPEED", "EPOCH", "REPLICAS", "CLASS", "N_PHASES")
    names += (
        "SERVICE",
        "COMPLETION",
        "FIRST_START",
        "ARRIVAL",
        "APP",
        "VERSION",
        "SETTLED",
        "RESTARTS",
        "MAX_PROFILED",
    )
    names += ("P_SECONDS", "P_END", "P_REPLICAS", "P_CLASS", "JF_WIDTH", "JI_WIDTH", "MAX_PHASES")
    names += ("N_EPOCHS", "K_MAX", "MEASURED", "N_SHAPES", "FULL_DELAY", "FAST_DELAY", "GRID_NODES")
    assert {n: getattr(progress_loops, n) for n in names} == {n: getattr(progress, n) for n in names}


def test_rounding_matches_python_beyond_int64() -> None:
    """A rate so small that an epoch's seconds pass int64 still rounds as Python's ``round``."""
    from deepboot_env.sim.progress_loops import advance_rows

    jf = np.array([[0.0, 0.0, np.nan, np.nan, 1.0, 0.0, np.nan, 0.0, 0.0, np.nan]])
    ji = np.array([[0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0]], dtype=np.int64)  # one GPU of class 1
    pf, pi = np.full((1, 2, 2), np.nan), np.zeros((1, 2, 2), dtype=np.int64)
    rates, suffix, ends = np.array([[0.0], [1e-30]]), np.zeros((2, 2)), np.array([1.0])
    out = np.empty(1)
    advance_rows(jf, ji, pf, pi, np.array([1e40]), rates, suffix, ends, out)
    completion = 0.0 + round(1.0 / 1e-30)  # Python's whole number, past int64
    assert completion > 2.0**63 and out[0] == completion and ji[0, 0] == 1 and jf[0, 1] == 1.0


Op = tuple[int, int, float, list[int] | None, tuple[np.ndarray, ...]]
"""(code, job, time or value, new GPUs per node, the job's rows after the operation)."""


def recorded_job_ops(workload, policy: str, config: SimConfig) -> tuple[JobArrays, list[Op]]:
    """The jobs' rows at the start of an episode of ``policy``, and every operation on a job
    during it (advances, changes, speed changes, completion projections) with the job's rows
    after it, read from the :class:`TrainingJob` itself. A projection from a state kept since the
    job's last change (``completion_from``) is recorded as one from the job as it is: the same
    completion, whatever the job was advanced to since (:func:`~deepboot_env.sim.jobs._run`)."""
    sim = Simulator(workload, config, make_policy(policy))
    start = JobArrays.of(sim.jobs, config.restart)
    apps = start.rows[1][:, progress.APP]
    ops: list[Op] = []

    def rows_of(job: TrainingJob) -> tuple[np.ndarray, ...]:
        return (*job_rows(job, app=int(apps[job.index])), np.array(job.counts))

    inside: list[int] = []  # a change's own profiled() call is part of the change

    def recorded(code: int, method):
        def wrapper(job: TrainingJob, *args, **kwargs):
            inside.append(code)
            try:
                result = method(job, *args, **kwargs)
            finally:
                inside.pop()
            if code == PROFILED and ADOPT in inside:
                return result
            value = {
                ADVANCE: lambda: args[0],
                ADOPT: lambda: args[3],
                SET_SPEED: lambda: args[0],
                PROFILED: lambda: args[0],
            }
            counts = list(args[1]) if code == ADOPT else None
            ops.append((code, job.index, float(value.get(code, lambda: np.nan)()), counts, rows_of(job)))
            if code == PROJECT:
                ops[-1] = (*ops[-1][:4], (*ops[-1][4], np.nan if result is None else result))
            return result

        return wrapper

    with pytest.MonkeyPatch.context() as patch:
        for code, name in [
            (ADVANCE, "advance"),
            (ADOPT, "adopt_change"),
            (SET_SPEED, "set_speed"),
            (PROFILED, "profiled"),
        ]:
            patch.setattr(TrainingJob, name, recorded(code, getattr(TrainingJob, name)))
        for name in ("time_of_completion", "completion_from"):  # the lazy schedule projects from a kept state
            patch.setattr(TrainingJob, name, recorded(PROJECT, getattr(TrainingJob, name)))
        drive(sim, sim.policy)
    return start, ops


@pytest.mark.parametrize(
    "policy, config",
    [
        ("ats", SimConfig()),
        ("ats", SimConfig(interference=0.3, cap_growth="trained")),
        ("fifo", SimConfig(restart="full")),
        ("pollux", SimConfig(cluster=ClusterConfig.parse_shared("8x4"), restart="pollux")),
        ("ats", SimConfig(truth="measured", cap_growth="trained")),  # DeepBoot-v1's truth and caps
    ],
    ids=["ats-afe", "ats-interference", "fifo-full", "pollux-shared", "ats-v1"],
)
def test_job_operations_replayed_on_rows_leave_the_jobs_state(policy: str, config: SimConfig) -> None:
    """Every operation on a job in a real episode, replayed on the rows in the kernel, leaves the
    row the job's own state after it: time, epoch, progress, anchor, phases, speed, GPUs per node,
    GPU-seconds, completion, first start, version, restarts and the profiled cap."""
    workload = generate_workload(
        "job-ops", 5, train={"num_jobs": 24}, inference={"horizon_s": 8 * 3600.0, "mean_gpus": 4.0}
    )
    arrays, ops = recorded_job_ops(workload, policy, config)
    n = len(ops)
    codes = np.array([[code, j] for code, j, *_ in ops], dtype=np.int64)
    values = np.array([value for _, _, value, _, _ in ops])
    width = arrays.rows[4].shape[1]
    new = np.array([counts or [0] * width for *_, counts, _ in ops], dtype=np.int64).reshape(n, width)
    jf, ji, pf, pi, counts = arrays.rows
    out = (np.full(n, np.nan), np.empty((n, *jf.shape[1:])), np.empty((n, *ji.shape[1:]), dtype=np.int64))
    out += (np.empty((n, *pf.shape[1:])), np.empty((n, *pi.shape[1:]), dtype=np.int64))
    out += (np.empty((n, *counts.shape[1:]), dtype=np.int64),)
    replay_job_ops(arrays.rows, arrays.tables, arrays.model, codes, values, new, out)
    for m, (code, j, _, _, rows) in enumerate(ops):
        phases = rows[1][0, progress.N_PHASES]
        got = (out[1][m], out[2][m], out[3][m][:phases], out[4][m][:phases], out[5][m])
        want = (rows[0][0], rows[1][0], rows[2][0][:phases], rows[3][0][:phases], rows[4])
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"operation {m} (code {code}) on job {j}")
        if code == PROJECT:
            np.testing.assert_array_equal(out[0][m], rows[5], err_msg=f"projection {m} of job {j}")
    kinds = np.bincount(codes[:, 0], minlength=5)
    assert kinds[ADVANCE] > 300 and kinds[ADOPT] > 40 and kinds[PROJECT] > 20, kinds
    assert (kinds[SET_SPEED] > 0) == (config.interference is not None)
    assert (kinds[PROFILED] > 0) == (config.cap_growth == "trained")


def test_stop_free_plans_are_refused() -> None:
    workload = generate_workload("job-ops", 5, train={"num_jobs": 3}, inference={"horizon_s": 600.0})
    sim = Simulator(workload, SimConfig(restart="stopfree"))
    with pytest.raises(ValueError, match="plans restarts by full, afe, pollux, not 'stopfree'"):
        JobArrays.of(sim.jobs, "stopfree")


@pytest.mark.parametrize(
    "policy, config",
    [
        (AtsPolicy(), SimConfig()),
        (AtsPolicy(reclaim_horizon=600.0), SimConfig(cap_growth="trained")),
        (AtsPolicy(reclaim_horizon=120.0), SimConfig(restart="full", cluster=ClusterConfig.parse_shared("8x4"))),
        (AtsPolicy(), SimConfig(truth="measured", cap_growth="trained")),
    ],
    ids=["ats-i", "restart-aware", "restart-aware-shared", "ats-i-v1"],
)
def test_reclaim_victim_is_the_simulators(policy, config: SimConfig) -> None:
    """At every reclaim of a real episode, the kernel's victim from the jobs' rows is the
    simulator's (ATS-I, or the restart-aware rule at its horizon), and the holders it advanced
    are left as the simulator leaves them."""
    workload = generate_workload(
        "reclaims", 3, train={"num_jobs": 24}, inference={"horizon_s": 8 * 3600.0, "mean_gpus": 8.0}
    )
    sim = Simulator(workload, config, policy)
    horizon = float(policy.reclaim_horizon)
    real = Simulator.least_loss_victim
    seen: list[tuple[int, int]] = []

    def checked(self: Simulator, horizon_asked: float = 0.0):
        arrays = JobArrays.of(self.jobs, config.restart)
        active = np.array(self._active, dtype=np.int64)
        lendable = np.array(node_layout(self.ledger.kinds).lendable, dtype=np.int64)
        counts = self.ledger.counts
        node_counts = (counts["train"], counts["running"], counts["protect"], counts["sleep"])
        fair = fair_replicas(len(active), node_counts, config.cluster.total_gpus)
        victim = real(self, horizon_asked)
        assert horizon_asked == horizon
        got = reclaim_victim(arrays.rows, arrays.tables, arrays.model, active, lendable, fair, horizon, self.now)
        assert got == ((victim.job_id, victim.node) if victim is not None else (-1, -1))
        after = JobArrays.of(self.jobs, config.restart)
        for a, b in zip(arrays.rows[:2], after.rows[:2], strict=True):
            np.testing.assert_array_equal(a, b)
        seen.append(got)
        return victim

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulator, "least_loss_victim", checked)
        drive(sim, policy)
    victims = [job for job, _ in seen if job >= 0]
    assert len(victims) > 30 and len(set(victims)) > 5, (len(seen), len(set(victims)))
