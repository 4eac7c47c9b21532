"""Atomic, locked outputs (:mod:`deepboot_env.atomic`) and the stop mechanism (:mod:`deepboot_env.stops`),
in-process: a failed write leaves the previous file and no temporary file, a failed append leaves
no cut row, a locked folder is refused in one line naming the holder, and a disk-full error in a
command is one line with exit status 2. ``tests/test_stops.py`` sends real signals to commands
and fills a real filesystem."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from deepboot_env import atomic
from deepboot_env.atomic import FolderInUse, append_text, atomic_write, lock_folder, write_text
from deepboot_env.stops import Stopped, StopSignals, interruptible, stop_requested
from deepboot_harness.cli import main


def _no_space(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_atomic_write_replaces_whole_or_leaves_the_previous_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "results.csv"
    write_text(path, "a,b\n1,2\n")
    assert path.read_text() == "a,b\n1,2\n"
    with pytest.raises(RuntimeError), atomic_write(path) as fh:
        fh.write("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "a,b\n1,2\n"
    monkeypatch.setattr(atomic.os, "fsync", _no_space)  # the disk fills as the data is flushed
    with pytest.raises(OSError) as exc:
        write_text(path, "x" * 100_000)
    assert exc.value.errno == errno.ENOSPC and str(path) in str(exc.value) and ".tmp" not in str(exc.value)
    assert path.read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]  # no temporary file left


def test_append_text_never_leaves_a_cut_row(tmp_path, monkeypatch) -> None:
    path = tmp_path / "runs.jsonl"
    append_text(path, '{"run": 1}\n')
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 4:
            return real_write(fd, bytes(data[:4]))  # a short write: part of the row reached the disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "write", half_then_full)
    with pytest.raises(OSError, match="No space left"):
        append_text(path, '{"run": 2}\n')
    monkeypatch.undo()
    assert path.read_text() == '{"run": 1}\n'
    append_text(path, '{"run": 2}\n')
    assert [json.loads(line)["run"] for line in path.read_text().splitlines()] == [1, 2]


@pytest.mark.parametrize("fails_at", ["write", "fsync"])
def test_append_text_on_ctrl_c_keeps_whole_rows_only(tmp_path, monkeypatch, fails_at: str) -> None:
    """Ctrl-C in the middle of the row takes it back; Ctrl-C in the fsync after the whole row is
    written keeps it (a benchmark that saw the row counts that run as saved)."""
    path = tmp_path / "runs.jsonl"
    append_text(path, '{"run": 1}\n')
    real_write = os.write

    def part_then_interrupt(fd: int, data: bytes) -> int:
        if len(data) > 4:
            return real_write(fd, bytes(data[:4]))
        raise KeyboardInterrupt

    def interrupt(fd: int) -> None:
        raise KeyboardInterrupt

    if fails_at == "write":
        monkeypatch.setattr(atomic.os, "write", part_then_interrupt)
    else:
        monkeypatch.setattr(atomic.os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        append_text(path, '{"run": 2}\n')
    monkeypatch.undo()
    runs = [json.loads(line)["run"] for line in path.read_text().splitlines()]
    assert runs == ([1] if fails_at == "write" else [1, 2])


def test_a_locked_folder_is_refused_naming_the_holder(tmp_path) -> None:
    with lock_folder(tmp_path / "bench") as held:
        assert (held / ".lock").read_text().strip() == str(os.getpid())
        with pytest.raises(FolderInUse, match=rf"--out .*bench: in use by another process \(pid {os.getpid()}\)"):
            with lock_folder(tmp_path / "bench"):
                pass
    with lock_folder(tmp_path / "bench"):  # released at the end of the block
        pass


def test_a_second_benchmark_on_a_locked_folder_is_refused_in_one_line(tmp_path, capsys) -> None:
    """Two ``--resume`` on one folder would run every run twice: the second is refused, exit 2."""
    out = tmp_path / "bench"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from deepboot_env.atomic import lock_folder\n"
         "with lock_folder(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)", str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        argv = ["benchmark", "--families", "bursty", "--policies", "ats", "--seeds", "1", "--quiet"]
        assert main([*argv, "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"deepboot benchmark: error: --out {out}: in use by another process (pid {holder.pid}); " + (
            "wait for it to end, or use another folder"
        )
        assert not (out / "runs.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_full_disk_is_one_line_and_keeps_the_previous_file(tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "m.json"
    argv = ["simulate", "--workload", "smoke/tiny", "--policy", "fifo", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    before = out.read_bytes()
    monkeypatch.setattr(atomic.os, "fsync", _no_space)
    assert main([*argv, "--seed", "1", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"deepboot simulate: error: [Errno 28] No space left on device: '{out}'\n"
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_a_signal_raises_stopped_only_in_interruptible_sections() -> None:
    with StopSignals(interruptible=False) as stops:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stops.signum == signal.SIGTERM and stop_requested()  # deferred: recorded only
        with pytest.raises(Stopped) as exc, interruptible():
            pass  # entering an interruptible section with a signal pending stops at once
        assert exc.value.exit_status == 143 and str(exc.value) == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # a second signal while stopping is ignored
        with interruptible():
            pass
    assert not stop_requested()
    with pytest.raises(Stopped) as exc, StopSignals():
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()  # not reached when the handler has run
    assert exc.value.exit_status == 130
