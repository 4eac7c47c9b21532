"""Every input path refuses what is not a regular file (issue 67, class 5): a FIFO (whose
``open()`` blocks until a writer comes, with no signal handler running meanwhile), a device and a
folder are refused in one line, within a second, by every command that reads a file a user names
and by every resume that reads its own folder."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deepboot_env.limits import NotRegularFile, open_regular
from deepboot_harness.cli import main

WATCHDOG_S = 20
"""A refusal that has not come by then is a hang: the alarm turns it into a failure."""

INPUTS: dict[str, list[str]] = {
    "--workload": ["simulate", "--policy", "fifo", "--quiet", "--workload", "{path}.csv"],
    "priority:": ["simulate", "--workload", "smoke/tiny", "--quiet", "--policy", "priority:{path}.json"],
    "ppo:": ["simulate", "--workload", "smoke/tiny", "--quiet", "--policy", "ppo:{path}.zip"],
    "--interference-matrix": ["simulate", "--workload", "smoke/tiny", "--quiet", "--interference-matrix", "{path}.csv"],
    "--conf-file": ["train", "--conf-file", "{path}.yml", "-n", "64", "-f", "{runs}"],
    "--tune": ["train", "--tune", "{path}.yml", "-n", "64", "-f", "{runs}"],
    "-i": ["train", "-i", "{path}.zip", "-n", "64", "-f", "{runs}"],
    "generate --stats": ["generate", "--stats", "{path}.json", "--num-jobs", "4"],
}
"""Each command reading a file a user names, with ``{path}`` where the file goes."""


@pytest.fixture
def watchdog() -> Iterator[None]:
    def hang(*_: object) -> None:
        raise TimeoutError(f"no refusal within {WATCHDOG_S} s: the reader waited on the file")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(WATCHDOG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _special(kind: str, path: Path) -> Path:
    """A ``kind`` file at ``path``: a FIFO, a folder, or a link to the device ``/dev/null``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")
    return path


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # train's parser.error
        return int(stop.code or 0)


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
@pytest.mark.parametrize("flag", list(INPUTS))
def test_every_input_refuses_a_special_file_in_one_line(flag: str, kind: str, tmp_path: Path, capsys) -> None:
    template = INPUTS[flag]
    suffix = next(part for part in template if "{path}" in part).rsplit("}", 1)[1]
    path = _special(kind, tmp_path / f"input{suffix}")
    argv = [part.format(path=tmp_path / "input", runs=tmp_path / "runs") for part in template]
    assert str(path) in " ".join(argv)
    main(["simulate", "--workload", "smoke/tiny", "--policy", "fifo", "--quiet"])  # imports paid here
    capsys.readouterr()
    start = time.monotonic()
    code = _run(argv)
    elapsed = time.monotonic() - start
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2, (code, err)
    assert len(err) == 1 and len(err[0]) <= 300 and "Traceback" not in err[0], err
    assert elapsed < 1.0, elapsed  # train checks its files before it imports the trainers


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_open_regular_refuses_at_once_naming_the_kind(kind: str, tmp_path: Path) -> None:
    path = _special(kind, tmp_path / "x")
    start = time.monotonic()
    with pytest.raises(NotRegularFile, match=f"(?i)is a {kind}, not a regular file"):
        open_regular(path)
    assert time.monotonic() - start < 1.0


def test_open_regular_reads_a_regular_file_in_blocking_mode(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("héllo\n")
    with open_regular(path) as fh:
        assert os.get_blocking(fh.fileno()) and fh.read() == "héllo\n".encode()
    with open_regular(path, encoding="utf-8") as fh:
        assert fh.read() == "héllo\n"


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize("name", ["teacher.json", "mixed-1000.npz"])
def test_a_teacher_resume_refuses_a_fifo_in_its_own_folder(name: str, tmp_path: Path, capsys) -> None:
    """The teacher's manifest or a scenario's labels replaced by a FIFO: read on resume (the
    manifest) or by a learner (the labels), refused in one line at once."""
    from agents.trainers.teacher import read_scenario

    out = tmp_path / "teach"
    argv = ["teach", "--families", "mixed", "--seeds", "1", "--generations", "0", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    (out / name).unlink()
    os.mkfifo(out / name)
    capsys.readouterr()
    if name == "teacher.json":
        assert main([*argv, "--resume"]) == 2
        err = capsys.readouterr().err.strip()
    else:
        with pytest.raises(ValueError) as exc:
            read_scenario(out / name)
        err = str(exc.value)
    assert "\n" not in err and "FIFO" in err and len(err) <= 300, err


@pytest.mark.usefixtures("watchdog")
@pytest.mark.parametrize("name", ["benchmark.json", "runs.jsonl"])
def test_a_resume_refuses_a_fifo_in_its_own_folder(name: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "bench"
    argv = ["benchmark", "--families", "bursty", "--policies", "ats", "--seeds", "1", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    (out / name).unlink()
    os.mkfifo(out / name)
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "FIFO" in err and len(err) <= 300, err


@pytest.mark.usefixtures("watchdog")
def test_an_es_resume_refuses_a_fifo_state(tmp_path: Path, capsys) -> None:
    from builders import es_smoke_argv

    import train_policy

    run = train_policy.run(es_smoke_argv("priority-es", tmp_path / "runs", "-n", "1"))
    (run / "state.json").unlink()
    os.mkfifo(run / "state.json")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        train_policy.main([*es_smoke_argv("priority-es", tmp_path / "runs", "-n", "1"), "--resume", str(run)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "FIFO" in err[-1] and len(err[-1]) <= 300, err


def test_a_signal_as_the_file_opens_stays_a_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C raised as the file object is made (the object dropped, its descriptor closed with
    it) reaches the caller as KeyboardInterrupt, never as "Bad file descriptor" from a second close
    (which a config reader would report as an unreadable file, exit 2: a CI flake of test_stops)."""
    import builtins

    import deepboot_env.sim.files

    path = tmp_path / "conf.yml"
    path.write_text("a: 1\n")

    def open_then_interrupt(*args: object, **kwargs: object) -> object:
        builtins.open(*args, **kwargs).close()  # type: ignore[call-overload]
        raise KeyboardInterrupt

    monkeypatch.setattr(deepboot_env.sim.files, "open", open_then_interrupt, raising=False)
    with pytest.raises(KeyboardInterrupt):
        open_regular(path)
