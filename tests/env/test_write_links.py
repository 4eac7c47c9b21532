"""No write follows a symbolic link (issue 67, class 2): a folder handed over with links in it
that point out changes no file outside it. The atomic writers replace a link with the new file;
the lock and the appenders refuse a link, or anything but a regular file, in one line."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from builders import es_smoke_argv

from deepboot_env.atomic import (
    LOCK_FILE,
    append_csv,
    append_text,
    lock_folder,
    temporary_path,
    write_json,
    write_text,
)
from deepboot_harness.benchmark import RUNS_FILE
from deepboot_harness.cli import main

OUTSIDE = "a file outside the folder\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the run folder that links inside it will point at."""
    path = tmp_path / "outside.txt"
    path.write_text(OUTSIDE)
    return path


def _link(folder: Path, name: str, target: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to(target)
    return folder / name


def test_the_lock_refuses_a_link_and_leaves_its_target(tmp_path: Path, outside: Path) -> None:
    folder = tmp_path / "run"
    _link(folder, LOCK_FILE, outside)
    with pytest.raises(OSError, match=r"--out .*run: '.lock' is a symbolic link; a run folder's files") as err:
        with lock_folder(folder):
            pass
    assert "\n" not in str(err.value)
    assert outside.read_text() == OUTSIDE


@pytest.mark.parametrize("write", ["text", "csv"])
def test_the_appenders_refuse_a_link_and_leave_its_target(write: str, tmp_path: Path, outside: Path) -> None:
    path = _link(tmp_path / "run", "rows.csv", outside)
    with pytest.raises(OSError, match="is a symbolic link") as err:
        if write == "text":
            append_text(path, "a row\n")
        else:
            append_csv(path, ["a", "b"], [{"a": 1, "b": 2}])
    assert err.value.filename == str(path)
    assert outside.read_text() == OUTSIDE and path.is_symlink()


def test_a_dangling_link_is_not_created_through(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "created.txt"
    target.parent.mkdir()
    path = _link(tmp_path / "run", "runs.jsonl", target)
    with pytest.raises(OSError, match="symbolic link"):
        append_text(path, "{}\n")
    assert not target.exists()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_the_appenders_and_the_lock_refuse_what_is_not_a_regular_file(kind: str, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("runs.jsonl", LOCK_FILE):
        path = folder / name
        os.mkfifo(path) if kind == "fifo" else path.mkdir()
    with pytest.raises(OSError, match="not a regular file"):
        append_text(folder / "runs.jsonl", "{}\n")
    with pytest.raises(OSError, match="not a regular file"):
        with lock_folder(folder):
            pass


def test_the_atomic_writers_replace_a_link_and_leave_its_target(tmp_path: Path, outside: Path) -> None:
    path = _link(tmp_path / "run", "results.md", outside)
    write_text(path, "new\n")
    assert not path.is_symlink() and path.read_text() == "new\n"
    assert outside.read_text() == OUTSIDE
    model = _link(tmp_path / "run", "best_model.json", outside)
    write_json(model, {"b": [1.5], "a": None}, sort_keys=True)
    assert not model.is_symlink() and model.read_text() == '{\n  "a": null,\n  "b": [\n    1.5\n  ]\n}\n'
    assert outside.read_text() == OUTSIDE


def test_a_link_planted_at_the_temporary_path_is_not_written_through(tmp_path: Path, outside: Path) -> None:
    target = tmp_path / "run" / "config.yml"
    _link(target.parent, temporary_path(target).name, outside)
    write_text(target, "a: 1\n")
    assert target.read_text() == "a: 1\n" and outside.read_text() == OUTSIDE
    assert sorted(p.name for p in target.parent.iterdir()) == ["config.yml"]


@pytest.mark.parametrize("name", [LOCK_FILE, RUNS_FILE])
def test_a_benchmark_folder_with_a_link_is_refused_in_one_line(
    name: str, tmp_path: Path, outside: Path, capsys
) -> None:
    """New or resumed, ``benchmark --out`` writes nothing through a link in its folder."""
    out = tmp_path / "bench"
    argv = ["benchmark", "--families", "bursty", "--policies", "ats", "--seeds", "1", "--quiet", "--out", str(out)]
    if name == RUNS_FILE:
        assert main(argv) == 0
        (out / RUNS_FILE).unlink()
    _link(out, name, outside)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "symbolic link" in err and len(err) <= 300, err
    assert outside.read_text() == OUTSIDE


def test_es_resume_appends_nothing_through_a_link(tmp_path: Path, outside: Path, capsys) -> None:
    import train_policy

    run = train_policy.run(es_smoke_argv("priority-es", tmp_path / "runs", "-n", "1"))
    (run / "generations.csv").unlink()
    _link(run, "generations.csv", outside)
    capsys.readouterr()
    resume = [*es_smoke_argv("priority-es", tmp_path / "runs", "-n", "1"), "--resume", str(run)]
    start = time.monotonic()
    assert train_policy.main(resume) == 2
    assert time.monotonic() - start < 5  # refused before a generation runs
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'generations.csv' is a symbolic link" in err[0] and len(err[0]) <= 300, err
    assert outside.read_text() == OUTSIDE
