"""``--backend ray``: the same results as the local pool, failed runs named, killed workers retried.

One local Ray instance per module (``ray_cluster`` of conftest.py: 2 CPUs, on 127.0.0.1, token
authentication on with the test session's token), shut down at the end. Skipped without the ``ray`` extra.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from deepboot_env.pool import Backend, run_pool
from deepboot_env.ray_pool import RunsFailed
from deepboot_harness.benchmark import RUNS_FILE, read_runs, run_cell
from deepboot_harness.cli import main

ray = pytest.importorskip("ray")

RAY = Backend("ray")
PLOTS = ("jct_ratio.png", "jct_aggregate.png", "jct_cdf.png")


def test_the_instance_listens_on_loopback_and_refuses_a_wrong_token(ray_cluster: str) -> None:
    assert ray_cluster.startswith("127.0.0.1:")
    assert os.environ["RAY_AUTH_MODE"] == "token"
    join = "import ray, sys; ray.init(address=sys.argv[1]); print(ray.cluster_resources()['CPU'])"
    env = {**os.environ, "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_NUM_REDIS_GET_RETRIES": "2"}  # fail fast
    wrong = subprocess.run(
        [sys.executable, "-c", join, ray_cluster], env=env, capture_output=True, text=True, timeout=120
    )
    assert wrong.returncode != 0 and "2.0" not in wrong.stdout and "token-auth" in wrong.stderr
    right = subprocess.run([sys.executable, "-c", join, ray_cluster], capture_output=True, text=True, timeout=120)
    assert right.returncode == 0 and right.stdout.strip().endswith("2.0"), right.stderr


def _compare(out: Path, *extra: str) -> None:
    argv = ["compare", "--workloads", "test/test-01", "test/test-02", "--policies", "fifo", "ats"]
    assert main([*argv, "--seeds", "0", "1", "--jobs", "2", "--quiet", "--out", str(out), *extra]) == 0


def test_compare_on_ray_writes_what_the_local_pool_writes(ray_cluster: str, tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "ray"
    _compare(local)
    _compare(remote, "--backend", "ray")
    assert len(read_runs(remote / RUNS_FILE)) == 8
    wall = ["wall_seconds"]
    pd.testing.assert_frame_equal(
        pd.read_csv(remote / "results.csv").drop(columns=wall), pd.read_csv(local / "results.csv").drop(columns=wall)
    )
    for name in ("jcts.csv", "timeline.csv", "results.md", "jct_ratio.png", "timeline.png"):
        assert (remote / name).read_bytes() == (local / name).read_bytes(), name


def _without_timings(markdown: str) -> str:
    """A leaderboard without its timings: the CPU-seconds table and the wall-time note."""
    kept = "\n### ".join(s for s in markdown.split("\n### ") if not s.startswith("CPU seconds"))
    return "\n".join(line for line in kept.splitlines() if "of wall time" not in line)


def test_benchmark_on_ray_writes_what_the_local_pool_writes(ray_cluster: str, tmp_path: Path) -> None:
    argv = ["benchmark", "--families", "short-period", "philly-periodic", "--policies", "ats", "fifo"]
    argv += ["--seeds", "2", "--jobs", "2", "--quiet"]
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert main([*argv, "--out", str(local)]) == 0
    assert main([*argv, "--out", str(remote), "--backend", "ray"]) == 0
    cpu = ["cpu_s"]
    for name in ("results.csv", "leaderboard.csv"):
        pd.testing.assert_frame_equal(
            pd.read_csv(remote / name).drop(columns=cpu), pd.read_csv(local / name).drop(columns=cpu), obj=name
        )
    assert (remote / "jobs.csv").read_bytes() == (local / "jobs.csv").read_bytes()
    board = (remote / "leaderboard.md").read_text()
    assert "`deepboot benchmark --jobs 2 --backend ray` made 8 of them" in board
    assert _without_timings(board) == _without_timings((local / "leaderboard.md").read_text())
    for name in PLOTS:
        assert (remote / name).read_bytes() == (local / name).read_bytes(), name


def test_a_failing_run_is_named_after_the_others_are_handed_back(ray_cluster: str) -> None:
    options = {"dynamics": "v1"}
    cells = [("ats", "short-period", 2_000_000, options), ("no-such-policy", "short-period", 2_000_000, options)]
    cells.append(("fifo", "short-period", 2_000_000, options))
    got: dict[int, str] = {}
    with pytest.raises(RunsFailed) as failed:
        run_pool(
            run_cell,
            cells,
            2,
            False,
            "t",
            describe=lambda c: f"{c[0]} on {c[1]} seed {c[2]}",
            on_result=lambda i, row: got.setdefault(i, row["policy"]),
            backend=RAY,
        )
    assert got == {0: "ats", 2: "fifo"}
    message = str(failed.value)
    assert message.startswith("1 of 3 runs failed: no-such-policy on short-period seed 2000000 (ValueError: ")
    assert "\n" not in message


def _task_workers(title: str) -> list[int]:
    """The processes of this machine whose title is ``title`` (a Ray worker running that task)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.replace(b"\0", b" ").strip().startswith(title.encode()):
                pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds Ray's workers through /proc")
def test_a_killed_worker_is_retried_and_no_run_is_lost_or_doubled(ray_cluster: str, tmp_path: Path) -> None:
    """SIGKILL to the Ray worker running a run of a ``deepboot benchmark --backend ray`` joined
    to the module's instance: the run is made again and the benchmark completes, every run once."""
    out = tmp_path / "bench"
    argv = [sys.executable, "-m", "deepboot_harness.cli", "benchmark", "--families", "short-period"]
    argv += ["--policies", "ats", "fifo", "--seeds", "3", "--jobs", "2", "--quiet"]
    argv += ["--backend", "ray", "--address", ray_cluster, "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed, saved_then = None, -1
    deadline = time.monotonic() + 120
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        workers = _task_workers("ray::run_cell")
        if workers and (out / RUNS_FILE).is_file():
            saved_then = len(read_runs(out / RUNS_FILE))
            os.kill(workers[0], signal.SIGKILL)
            killed = workers[0]
        time.sleep(0.05)
    _, err = proc.communicate(timeout=300)
    assert killed is not None, "no Ray worker ran a run"
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    runs = read_runs(out / RUNS_FILE)
    assert 0 <= saved_then < 6
    assert sorted((r["policy"], r["seed"]) for r in runs) == sorted(
        (p, s) for p in ("ats", "fifo") for s in range(2_000_000, 2_000_003)
    )


def test_the_teacher_labels_on_ray_what_it_labels_locally(ray_cluster: str, tmp_path: Path) -> None:
    """``deepboot teach --backend ray``: each scenario a Ray task, the same labels and search as
    with local workers."""
    import numpy as np

    from agents.trainers.teacher import read_manifest, read_scenario

    argv = ["teach", "--families", "mixed", "short-period", "--seeds", "1", "--generations", "1", "--pairs", "1"]
    assert main([*argv, "--out", str(tmp_path / "local"), "--quiet"]) == 0
    assert (
        main([*argv, "--jobs", "2", "--backend", "ray", "--address", ray_cluster, "--out", str(tmp_path / "ray")]) == 0
    )
    local, remote = read_manifest(tmp_path / "local"), read_manifest(tmp_path / "ray")
    assert sorted(remote["scenarios"]) == sorted(local["scenarios"]) and len(local["scenarios"]) == 2
    for name, meta in local["scenarios"].items():
        assert remote["scenarios"][name]["search_ratio"] == meta["search_ratio"]
        here, there = read_scenario(tmp_path / "local" / name), read_scenario(tmp_path / "ray" / name)
        labels = [key for key in here if key != "meta"]  # the meta holds each run's CPU seconds
        assert here.keys() == there.keys() and all(np.array_equal(here[k], there[k]) for k in labels)
