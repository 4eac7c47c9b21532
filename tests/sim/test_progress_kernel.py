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
from builders import RunCase, recorded_run_cases

from deepboot_env.sim import progress, progress_loops
from deepboot_env.sim.jobs import RunResult, _reference_run
from deepboot_env.sim.measured import MeasuredRates
from deepboot_env.sim.progress import ProgressTables, compiled_run
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
    assert tables.rates.shape == (2, table.max_replicas + 1, epochs)
    assert tables.suffix.shape == (2, table.max_replicas + 1, epochs + 1)
    for e in (0, epochs - 1):
        assert tables.rates[1, k, e] == table.rate(e, True, k) and tables.rates[0, 0, e] == 0.0
    assert tables.suffix[0, k].tolist() == table.epoch_suffix_list(False, k) and k > 1


def test_measured_truth_is_refused(run_cases: list[RunCase]) -> None:
    job, t1, start = run_cases[0]
    job = job.clone()
    job.truth = MeasuredRates.__new__(MeasuredRates)
    with pytest.raises(ValueError, match=f"job {job.index}: the compiled progress reads a fitted rate table"):
        compiled_run(job, t1, start)


def test_kernel_layout_literals_match_the_adapter() -> None:
    """The kernel keeps its column numbers as literals (numba's cache is keyed on its source)."""
    names = ("T", "PROGRESS", "ANCHOR_T", "ANCHOR_P", "SPEED", "EPOCH", "REPLICAS", "MULTI", "N_PHASES")
    names += ("P_SECONDS", "P_END", "P_REPLICAS", "P_MULTI", "JF_WIDTH", "JI_WIDTH", "MAX_PHASES")
    assert {n: getattr(progress_loops, n) for n in names} == {n: getattr(progress, n) for n in names}


def test_rounding_matches_python_beyond_int64() -> None:
    """A rate so small that an epoch's seconds pass int64 still rounds as Python's ``round``."""
    from deepboot_env.sim.progress_loops import advance_rows

    jf = np.array([[0.0, 0.0, np.nan, np.nan, 1.0]])
    ji = np.array([[0, 1, 0, 0]], dtype=np.int64)
    pf, pi = np.full((1, 2, 2), np.nan), np.zeros((1, 2, 2), dtype=np.int64)
    rates = np.array([[[0.0], [1e-30]], [[0.0], [1e-30]]])
    ends = np.array([1.0])
    suffix = np.zeros((2, 2, 2))
    out = np.empty(1)
    advance_rows(jf, ji, pf, pi, np.array([1e40]), rates, suffix, ends, out)
    completion = 0.0 + round(1.0 / 1e-30)  # Python's whole number, past int64
    assert completion > 2.0**63 and out[0] == completion and ji[0, 0] == 1 and jf[0, 1] == 1.0
