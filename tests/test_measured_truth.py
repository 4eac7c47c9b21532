"""The measured step times (docs/goodput.md §9) and their shipped table ``step_times.json``.

* The table against its definition: interpolation at and between traced points,
  rotation-equivalent shapes, the grid beyond 4 nodes, the two trace sets.
* Tests that need the raw traces read ``../shared/data/apps`` and skip cleanly when it is absent
  (the shipped table equals what calibration computes; the grid equals a pandas/scipy rebuild).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deepboot_env.sim.apps import APP_NAMES, get_app
from deepboot_env.sim.measured import STEP_TIMES_PATH, canonical_shape, load_step_times

DATA_APPS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "apps"
SHIPPED = Path(__file__).resolve().parents[1] / "deepboot_env" / "sim" / STEP_TIMES_PATH


@pytest.fixture(scope="module")
def shipped() -> dict:
    return json.loads(SHIPPED.read_text())


@pytest.fixture(scope="module", params=["pollux", "deepboot"])
def steps(request):
    return load_step_times(request.param)


def test_shipped_table_is_compact_attributed_and_has_both_sets(shipped) -> None:
    assert SHIPPED.stat().st_size < 400_000
    assert shipped["license"] == "Apache-2.0" and "Petuum" in shipped["source"]
    assert set(shipped["trace_sets"]) == {"pollux", "deepboot"}
    for app in APP_NAMES:
        pollux = shipped["trace_sets"]["pollux"]
        deepboot = shipped["trace_sets"]["deepboot"]
        assert len(pollux["shapes"][app]) == 108 and not pollux["copies"][app]
        # DeepBoot's file repeats every shape with its digits shifted by 4, timed identically
        assert deepboot["shapes"][app] == pollux["shapes"][app]
        shifted = {"".join(str(int(c) + 4) for c in ident): ident for ident in pollux["shapes"][app]}
        assert deepboot["copies"][app] == shifted


def test_interpolation_is_exact_at_traced_points_and_linear_between(shipped, steps) -> None:
    for app in APP_NAMES:
        table = steps[app]
        for ident in ("1", "12", "44", "132", "4444"):
            m, step, sync = (np.asarray(v, dtype=float) for v in shipped["apps"][app]["shapes"][ident])
            got_step, got_sync = table.times(ident, m)
            np.testing.assert_array_equal(got_step, step)
            np.testing.assert_array_equal(got_sync, sync)
            mid = (m[:-1] + m[1:]) / 2
            mid_step, _ = table.times(ident, mid)
            np.testing.assert_allclose(mid_step, (step[:-1] + step[1:]) / 2, rtol=1e-12)
            outside_step, _ = table.times(ident, np.array([m[0] - 1, m[-1] + 1]))
            assert np.isnan(outside_step).all()


def test_traced_points_equal_the_raw_traces() -> None:
    if not DATA_APPS.is_dir():
        pytest.skip(f"raw traces not available at {DATA_APPS}")
    import pandas as pd

    for trace_set, file in (("pollux", "origin_placements.csv"), ("deepboot", "placements.csv")):
        steps = load_step_times(trace_set)
        for app in APP_NAMES:
            raw = pd.read_csv(DATA_APPS / app / file)
            table = steps[app]
            for pid, rows in raw.groupby("placement"):
                step, sync = table.times(str(pid), rows.local_bsz.to_numpy(float))
                np.testing.assert_allclose(step, rows.step_time, rtol=5e-7, err_msg=f"{trace_set} {app} {pid}")
                np.testing.assert_allclose(sync, rows.sync_time, rtol=5e-7, err_msg=f"{trace_set} {app} {pid}")


def test_shapes_are_normalised_by_rotation(steps) -> None:
    assert canonical_shape([0, 2, 0, 1]) == canonical_shape([1, 2]) == (1, 2)
    assert canonical_shape([2, 3, 1]) == canonical_shape([3, 1, 2]) == (1, 2, 3)
    assert canonical_shape([1, 3, 2]) == (1, 3, 2)  # a reflection is another measured shape
    table = steps["cifar10"]
    assert table.placement_class([2, 1, 0, 0]) == table.placement_class([0, 0, 1, 2]) == "12"
    assert table.placement_class([0, 3, 1, 2]) == "123" != table.placement_class([1, 3, 2, 0]) == "132"


def test_shapes_beyond_four_nodes_use_the_grid(steps) -> None:
    table = steps["cifar10"]
    assert table.placement_class([4] * 5) == (5, 20)
    assert table.placement_class([4] * 17) == (16, 68)  # nodes capped at 16
    assert table.placement_class([9]) == (1, 9)  # more GPUs on a node than any measured shape
    # at a scalability point the grid returns the measurement itself
    n, k, m, step, sync = table.scalability[0]
    got_step, got_sync = table.times((int(n), int(k)), np.array([m]))
    assert got_step[0] == pytest.approx(step, rel=1e-12) and got_sync[0] == pytest.approx(sync, rel=1e-12)
    # and between the 4-node shapes and the 6-node rows it interpolates
    five, _ = table.times((5, 20), np.array([64.0, 128.0]))
    assert np.all(np.isfinite(five)) and np.all(five > 0)


def test_the_deepboot_copies_move_the_grid_but_not_the_known_shapes() -> None:
    pollux, deepboot = load_step_times("pollux")["cifar10"], load_step_times("deepboot")["cifar10"]
    m = np.array([32.0, 64.0, 128.0])
    np.testing.assert_array_equal(pollux.times("44", m)[0], deepboot.times("44", m)[0])
    assert deepboot.placement_class([5]) == "5" and pollux.placement_class([5]) == (1, 5)
    np.testing.assert_array_equal(deepboot.times("5", m)[0], deepboot.times("1", m)[0])
    a, b = pollux.times((5, 20), m)[0], deepboot.times((5, 20), m)[0]
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and not np.allclose(a, b)


def test_grid_equals_the_originals_interpolation() -> None:
    """Rebuild the originals' interpolator with pandas and scipy from the raw files."""
    if not DATA_APPS.is_dir():
        pytest.skip(f"raw traces not available at {DATA_APPS}")
    import pandas as pd
    from scipy.interpolate import LinearNDInterpolator

    xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
    for trace_set, file in (("pollux", "origin_placements.csv"), ("deepboot", "placements.csv")):
        steps = load_step_times(trace_set)
        for app in APP_NAMES:
            raw = pd.read_csv(DATA_APPS / app / file)
            raw["num_nodes"] = raw.placement.apply(lambda p: len(str(p)))
            raw["num_replicas"] = raw.placement.apply(lambda p: sum(map(int, str(p))))
            grid = raw.groupby(xs)[xs + ys].mean()
            grid = pd.concat([grid, pd.read_csv(DATA_APPS / app / "scalability.csv")], ignore_index=True)
            reference = LinearNDInterpolator(grid[xs].to_numpy(float), grid[ys].to_numpy(float))
            table = steps[app]
            lo, hi = get_app(app).min_local_bsz, get_app(app).max_local_bsz
            for n, k in ((5, 20), (6, 24), (7, 28), (16, 64), (9, 33), (16, 50)):
                m = np.unique(np.geomspace(lo, min(hi, get_app(app).max_batch_size // k), 6).round())
                want = reference(np.column_stack([np.full(len(m), n), np.full(len(m), k), m]))
                step, sync = table.times((n, k), m)
                np.testing.assert_allclose(step, want[:, 0], rtol=1e-6, err_msg=f"{trace_set} {app} {n},{k}")
                np.testing.assert_allclose(sync, want[:, 1], rtol=1e-6, err_msg=f"{trace_set} {app} {n},{k}")


def test_shipped_table_is_what_calibration_computes(shipped) -> None:
    if not DATA_APPS.is_dir():
        pytest.skip(f"raw traces not available at {DATA_APPS}")
    from traces.calibrate import _dump
    from traces.step_times import build_step_times

    assert _dump(build_step_times(DATA_APPS)) + "\n" == SHIPPED.read_text()


def test_unknown_trace_set_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="unknown trace set 'philly'; expected one of pollux, deepboot"):
        load_step_times("philly")
