"""Real signals to real commands, and a real full filesystem.

Each test starts a command in its own process group, sends SIGINT (to the group, as Ctrl-C does)
or SIGTERM (to the command alone, as ``kill`` does) at a point where work is under way, and checks
what :mod:`deepboot_env.stops` promises: exit status 130 / 143, one line on stderr, no process of
the group left (worker processes included), no half-written file (every CSV parses, every JSON
loads, no temporary file), and the resume completes with no duplicate. The last test mounts a
small tmpfs in a user namespace (``unshare -rm``; skipped where that is not allowed) and fills it:
every command that writes fails in one line and leaves the previous files as they were.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from builders import REPO

from deepboot_harness.cli import main
from deepboot_harness.run_log import RUNS_FILE, read_runs

CLI = [sys.executable, "-m", "deepboot_harness"]
TRAIN = [sys.executable, str(REPO / "train_policy.py")]


def _as_from_a_terminal() -> None:
    """Ctrl-C's disposition in a terminal (a shell without job control starts tests with SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(argv: list[str], cwd: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``argv`` in its own process group (its id is the process id), stdout and stderr to files."""
    out, err = cwd / "stdout.txt", cwd / "stderr.txt"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=o,
            stderr=e,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"},
            start_new_session=True,
            preexec_fn=_as_from_a_terminal,
        )
    return proc, out, err


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (the ``SigCgt`` mask of
    ``/proc/<pid>/status``; True where there is no ``/proc`` to tell)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signum - 1) & 1)


def _stop_when(
    argv: list[str], cwd: Path, ready: Callable[[], bool], signum: int, *, once_handled: bool = False
) -> tuple[int, str, str]:
    """Start ``argv``, wait for ``ready()``, send ``signum`` (SIGINT and SIGHUP to the group,
    SIGTERM to the command alone); the exit status, stdout and stderr once it ended and its group is gone.

    ``once_handled``: ask ``ready()`` only once the command has a handler for ``signum``. Before
    that the interpreter itself is starting, where no program's code runs yet and the signal's
    default action ends it (as it ends any program then)."""
    proc, out, err = _start(argv, cwd)
    deadline = time.monotonic() + 120

    def waiting() -> bool:
        if once_handled and not _catches(proc.pid, signum):
            return True
        return not ready()

    while waiting() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"ended before the signal: {err.read_text()}"
    was_ready = ready()
    if signum in (signal.SIGINT, signal.SIGHUP):  # Ctrl-C, a closed terminal: the whole group
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        _fail_with_stacks(proc.pid, err, f"no exit 120 s after the signal (ready when sent: {was_ready})")
    _assert_group_gone(proc.pid)
    return code, out.read_text(), err.read_text()


def _fail_with_stacks(pgid: int, err: Path, why: str) -> None:
    """Fail with the Python stacks of every process of group ``pgid`` (SIGABRT: the commands run
    with ``PYTHONFAULTHANDLER``), then kill the group."""
    left = _group(pgid)
    os.killpg(pgid, signal.SIGABRT)
    time.sleep(2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pytest.fail(f"{why}; processes {left}; stderr:\n{err.read_text()[-12000:]}")


def _group(pgid: int) -> list[str]:
    """The live processes of process group ``pgid`` (``pid command``), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(f"{stat.parent.name} {text[text.index('(') + 1 : text.rindex(')')]}")
    return found


def _assert_group_gone(pgid: int, grace_s: float = 10.0) -> None:
    """No process of the command's group is left (worker processes included)."""
    deadline = time.monotonic() + grace_s
    while _group(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group(pgid), f"left behind: {_group(pgid)}"


def _assert_whole_files(folder: Path) -> None:
    """Every CSV parses (rows as long as the header), every JSON (lines) and YAML loads, no temporary file."""
    for path in folder.rglob("*"):
        assert not path.name.endswith(".tmp"), f"temporary file left: {path}"
        if path.suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))
            assert all(len(r) == len(rows[0]) for r in rows), f"cut CSV: {path}"  # empty: SB3's unused progress.csv
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            [json.loads(line) for line in path.read_text().splitlines()]
        elif path.suffix == ".yml":
            yaml.safe_load(path.read_text())


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _run_printed(command: str, cwd: Path) -> None:
    """Run a printed resume command as printed (``python`` is this interpreter)."""
    words = shlex.split(command)
    words = [sys.executable if w == "python" else w for w in words[:1]] + words[1:]
    done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_benchmark_sigterm_stops_its_workers_and_resume_completes(signum: int, tmp_path) -> None:
    """``kill`` reaches the parent alone, a closed terminal (SIGHUP) the whole group: it stops its
    worker processes, keeps the finished runs."""
    out = tmp_path / "bench"
    grid = ["--families", "short-period", "--policies", "ats", "fifo", "--seeds", "2", "--jobs", "2"]
    code, _, err = _stop_when(
        [*CLI, "benchmark", *grid, "--out", str(out), "--quiet"],
        tmp_path,
        lambda: bool(read_runs(out / RUNS_FILE)),
        signum,
    )
    assert code == 128 + signum
    name = signal.Signals(signum).name
    assert _one_line(err) == f"deepboot benchmark: {name}: stopped; the finished runs are saved in {out}: " + (
        "continue with --resume"
    )
    _assert_whole_files(out)
    saved = read_runs(out / RUNS_FILE)
    assert 1 <= len(saved) <= 4  # all 4 when the signal came while the leaderboard was written
    assert main(["benchmark", *grid, "--out", str(out), "--resume", "--quiet"]) == 0
    runs = read_runs(out / RUNS_FILE)
    assert runs[: len(saved)] == saved and len(runs) == len({(r["policy"], r["seed"]) for r in runs}) == 4
    _assert_whole_files(out)


def test_compare_ctrl_c_with_workers_then_resume_writes_every_output(tmp_path) -> None:
    out = tmp_path / "cmp"
    # 12 runs: once the first is saved, the rest keeps the command busy for seconds even on a loaded
    # machine, so that the signal finds it running
    seeds = [str(seed) for seed in range(6)]
    grid = ["--workloads", "smoke/tiny", "--policies", "ats", "fifo", "--seeds", *seeds, "--jobs", "2"]
    code, _, err = _stop_when(
        [*CLI, "compare", *grid, "--out", str(out), "--quiet"],
        tmp_path,
        lambda: bool(read_runs(out / RUNS_FILE)),
        signal.SIGINT,
    )
    assert code == 130 and _one_line(err).startswith("deepboot compare: SIGINT: stopped; the finished runs")
    _assert_whole_files(out)
    assert main(["compare", *grid, "--out", str(out), "--resume", "--quiet"]) == 0
    runs = read_runs(out / RUNS_FILE)
    assert len(runs) == len({(r["policy"], r["seed"]) for r in runs}) == 12
    with open(out / "results.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 12
    _assert_whole_files(out)


def test_generate_sigterm_while_writing_leaves_the_previous_file(tmp_path) -> None:
    target = tmp_path / "w.csv"
    target.write_text("previous\n")

    def writing() -> bool:
        return any(p.name.endswith(".tmp") for p in tmp_path.iterdir())

    argv = [*CLI, "generate", "--out", str(target), "--load", "300", "--seed", "3"]
    code, _, err = _stop_when(argv, tmp_path, writing, signal.SIGTERM)
    assert code == 143 and _one_line(err).startswith("deepboot generate: SIGTERM: stopped")
    assert target.read_text() == "previous\n"
    _assert_whole_files(tmp_path)


@pytest.mark.parametrize(
    ("signum", "point"),
    [(signal.SIGTERM, "warm start: "), (signal.SIGINT, "warm start: epoch 1/")],
    ids=["sigterm-in-the-demonstrations", "ctrl-c-in-the-cloning"],
)
def test_training_stopped_during_the_warm_start_saves_a_model_that_resumes_as_printed(tmp_path, signum, point) -> None:
    """A signal while the expert's demonstrations run in worker processes, or while cloning: the
    model is saved, the workers are gone, and the printed command continues the run."""
    argv = [*TRAIN, "--algo", "ppo", "--preset", "smoke", "--workload", "tiny", "--eval-workload", "tiny"]
    argv += ["-n", "64", "--pretrain-expert", "ats", "--pretrain-epochs", "500", "--pretrain-noise", "0", "0.05"]
    argv += ["--eval-jobs", "2", "--eval-freq", "0", "--no-progress", "-f", "runs"]
    argv += ["--hyperparams", "n_steps:32", "batch_size:32"]
    stdout = tmp_path / "stdout.txt"

    def at_point() -> bool:
        return stdout.is_file() and point in stdout.read_text()

    code, _, err = _stop_when(argv, tmp_path, at_point, signum)
    name = signal.Signals(signum).name
    assert code == 128 + signum
    line = _one_line(err)
    assert line.startswith(f"train_policy.py: {name}: stopped (during the warm start: stopped ")
    run = tmp_path / "runs" / "ppo_1"
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["results"]["interrupted"] == name and config["pretrain"]["interrupted"]
    if signum == signal.SIGINT:
        assert config["pretrain"]["epochs_done"] >= 1 and "cloning epochs" in line
    else:
        assert config["pretrain"]["epochs_done"] == 0 and "nothing cloned" in line
    assert (run / "final_model.zip").is_file()
    _assert_whole_files(run)
    resume = line.split("resume with: ", 1)[1]
    assert resume.endswith(" --resume runs/ppo_1") and "-n" not in resume.split()  # the folder has the rest
    if signum == signal.SIGTERM:  # one resume is enough: the command is the same
        _run_printed(resume, tmp_path)
        again = yaml.safe_load((run / "config.yml").read_text())
        assert again["results"]["interrupted"] is None and again["results"]["total_timesteps"] >= 64
        assert again["sessions"][0]["results"]["interrupted"] == name


def test_training_sigterm_during_an_evaluation_stops_its_workers_and_keeps_whole_rows(tmp_path) -> None:
    """An evaluation after every step, in 2 worker processes: half a second after the first one
    is written, the second is under way; a SIGTERM stops its pool at once, and the model and whole
    evaluation rows are kept."""
    argv = [*TRAIN, "--algo", "ppo", "--preset", "smoke", "--workload", "tiny", "--eval-workload", "tiny"]
    argv += ["-n", "100000", "--eval-freq", "1", "--eval-episodes", "2", "--eval-jobs", "2", "--n-envs", "1"]
    argv += ["--eval-reference", "none"]
    argv += ["--no-progress", "--verbose", "0", "-f", "runs", "--hyperparams", "n_steps:32", "batch_size:32"]
    evaluations = tmp_path / "runs" / "ppo_1" / "evaluations.csv"
    seen: list[float] = []

    def in_the_second_evaluation() -> bool:
        if not seen and evaluations.is_file():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() > seen[0] + 0.5

    code, _, err = _stop_when(argv, tmp_path, in_the_second_evaluation, signal.SIGTERM)
    assert code == 143 and "resume with: " in _one_line(err)
    run = tmp_path / "runs" / "ppo_1"
    assert yaml.safe_load((run / "config.yml").read_text())["results"]["interrupted"] == "SIGTERM"
    assert (run / "final_model.zip").is_file() and (run / "best_model.zip").is_file()
    _assert_whole_files(run)
    with open(evaluations, newline="") as fh:
        assert {r["timesteps"] for r in csv.DictReader(fh)} == {"1"}  # the second evaluation was cut short


def test_es_ctrl_c_during_a_generation_resumes_as_printed_without_duplicates(tmp_path) -> None:
    argv = [*TRAIN, "--algo", "es", "--preset", "priority-es", "--workload", "family:short-period"]
    argv += ["--eval-workload", "family:short-period", "--eval-episodes", "1", "--eval-jobs", "2", "-n", "2"]
    argv += ["-params", "pairs:1", "seeds_per_family:1", "eval_freq:1", "-f", "runs"]
    run = tmp_path / "runs" / "es_1"

    def in_first_generation() -> bool:  # generation 0 is validated: the first generation runs
        return (run / "evaluations.csv").is_file()

    code, _, err = _stop_when(argv, tmp_path, in_first_generation, signal.SIGINT)
    assert code == 130
    line = _one_line(err)
    resume = line.split("resume with: ", 1)[1]
    assert resume.endswith(" --resume runs/es_1") and "--algo" not in resume  # the folder has the rest
    _assert_whole_files(run)
    _run_printed(resume, tmp_path)
    state = json.loads((run / "state.json").read_text())
    assert state["generation"] == 2
    with open(run / "generations.csv", newline="") as fh:
        assert [int(r["generation"]) for r in csv.DictReader(fh)] == [1, 2]
    with open(run / "evaluations.csv", newline="") as fh:
        assert [int(r["iteration"]) for r in csv.DictReader(fh)] == [0, 1, 2]
    _assert_whole_files(run)


def _after(seconds: float) -> Callable[[], bool]:
    """A ``ready`` that is true ``seconds`` after it is first asked (a moment in a command's start)."""
    start: list[float] = []

    def ready() -> bool:
        if not start:
            start.append(time.monotonic())
        return time.monotonic() >= start[0] + seconds

    return ready


LONG_COMMANDS: dict[str, list[str]] = {
    "simulate": [*CLI, "simulate", "--workload", "test/test-01", "--policy", "pollux", "--quiet"],
    "compare": [*CLI, "compare", "--workloads", "test/test-01", "--policies", "pollux", "--seeds", "0", "1"]
    + ["--out", "cmp", "--quiet"],
    "benchmark": [*CLI, "benchmark", "--families", "mixed", "--policies", "ats", "--seeds", "8", "--out", "bench"],
    "train": [*TRAIN, "--algo", "ppo", "--preset", "smoke", "--workload", "tiny", "--eval-workload", "tiny"]
    + ["-n", "1000000", "--no-progress", "--verbose", "0", "-f", "runs"],
    "es": [*TRAIN, "--algo", "es", "--preset", "priority-es", "--workload", "family:short-period"]
    + ["--eval-workload", "family:short-period", "--eval-episodes", "1", "-n", "1000", "-f", "runs"],
    "teach": [*CLI, "teach", "--families", "mixed", "--seeds", "8", "--jobs", "2", "--out", "teach", "--quiet"],
}
"""Commands that run for minutes, stopped at a moment of their start."""


@pytest.mark.parametrize("delay", [0.2, 1.5])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("command", list(LONG_COMMANDS))
def test_a_signal_while_a_command_starts_is_one_line(command: str, signum: int, delay: float, tmp_path) -> None:
    """During the imports (or just after), ``delay`` after the launcher's handler is in place:
    one line, the shell's status, no traceback, no orphan."""
    code, _, err = _stop_when(LONG_COMMANDS[command], tmp_path, _after(delay), signum, once_handled=True)
    assert code == 128 + signum, err
    line = _one_line(err)
    message = line.split("; resume with: ")[0]  # the resume command is to copy whole, not to cut
    assert signal.Signals(signum).name in message and len(message) <= 300


@pytest.mark.parametrize(
    ("vec_env", "signum"),
    [("subproc", signal.SIGINT), ("subproc", signal.SIGHUP), ("dummy", signal.SIGHUP)],
    ids=["subproc-ctrl-c", "subproc-sighup", "dummy-sighup"],
)
def test_training_stopped_from_its_terminal_saves_its_model(vec_env: str, signum: int, tmp_path) -> None:
    """Ctrl-C or a closed terminal reach the env workers too: they ignore it, and the parent saves
    the model and exits with the shell's status, as with in-process envs."""
    argv = [*TRAIN, "--algo", "ppo", "--preset", "smoke", "--workload", "tiny", "--eval-workload", "tiny"]
    argv += ["-n", "1000000", "--n-envs", "2", "--vec-env", vec_env, "--eval-freq", "0", "--no-progress"]
    argv += ["--verbose", "0", "-f", "runs", "--hyperparams", "n_steps:32", "batch_size:32"]
    checkpoints = tmp_path / "runs" / "ppo_1" / "config.yml"
    code, _, err = _stop_when(argv, tmp_path, checkpoints.is_file, signum)
    assert code == 128 + signum, err
    assert "resume with: " in _one_line(err)
    run = tmp_path / "runs" / "ppo_1"
    assert yaml.safe_load((run / "config.yml").read_text())["results"]["interrupted"] == signal.Signals(signum).name
    assert (run / "final_model.zip").is_file()
    _assert_whole_files(run)


FULL_DISK_SCRIPT = r"""
set -u
mount -t tmpfs -o size=4m tmpfs "$FULL" || exit 77
cp -r "$PREVIOUS"/. "$FULL"/
head -c 8m /dev/zero > "$FULL/filler" 2>/dev/null
run() { name=$1; shift; "$@" >/dev/null 2>"$LOG/$name.err"; echo $? > "$LOG/$name.code"; }
run simulate $CLI simulate --workload smoke/tiny --policy fifo --quiet --json "$FULL/m.json"
run generate $CLI generate --out "$FULL/w.csv" --load 2
run benchmark $CLI benchmark --families short-period --policies ats fifo --seeds 1 --out "$FULL/bench" --resume \
    --quiet
run train $TRAIN --algo ppo --preset smoke --workload tiny -n 64 --eval-freq 0 -f "$FULL/runs" --no-progress \
    --verbose 0
run compare $CLI compare --workloads smoke/tiny --policies ats fifo --seeds 0 --out "$FULL/cmp" --resume --quiet
run es $TRAIN --algo es --workload family:short-period --eval-workload family:short-period --eval-episodes 1 \
    -n 1 --eval-jobs 1 -params pairs:1 seeds_per_family:1 -f "$FULL/runs" --no-progress --verbose 0
find "$FULL" -name '*.tmp' > "$LOG/tmp-files"
rm "$FULL/filler"
tar -C "$FULL" -cf "$LOG/after.tar" --exclude=filler .
"""


def test_a_full_filesystem_fails_each_command_in_one_line_and_keeps_the_previous_files(tmp_path) -> None:
    """In a user namespace, a 4 MB tmpfs holding a previous run's outputs, then filled: simulate,
    generate, benchmark (its leaderboard rewritten on resume), PPO and ES training and compare (its
    results rewritten on resume) each exit 2 with one
    line naming the disk, and every previous file is intact."""
    if shutil.which("unshare") is None or shutil.which("tar") is None:
        pytest.skip("needs unshare and tar")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not allowed here: {probe.stderr.decode().strip()}")
    previous = tmp_path / "previous"
    previous.mkdir()
    assert (
        main(["simulate", "--workload", "smoke/tiny", "--policy", "ats", "--quiet", "--json", str(previous / "m.json")])
        == 0
    )
    (previous / "w.csv").write_text("name,time\nprevious,0\n")
    bench = ["benchmark", "--families", "short-period", "--policies", "ats", "fifo", "--seeds", "1", "--quiet"]
    assert main([*bench, "--out", str(previous / "bench")]) == 0
    grid = ["--workloads", "smoke/tiny", "--policies", "ats", "fifo", "--seeds", "0", "--quiet"]
    assert main(["compare", *grid, "--out", str(previous / "cmp")]) == 0
    before = {p.relative_to(previous): p.read_bytes() for p in previous.rglob("*") if p.is_file() and p.name != ".lock"}
    full, log = tmp_path / "full", tmp_path / "log"
    full.mkdir()
    log.mkdir()
    env = {**os.environ, "FULL": str(full), "PREVIOUS": str(previous), "LOG": str(log), "OMP_NUM_THREADS": "1"}
    env.update(CLI=shlex.join(CLI), TRAIN=shlex.join(TRAIN))
    done = subprocess.run(["unshare", "-rm", "sh", "-c", FULL_DISK_SCRIPT], env=env, capture_output=True, text=True)
    if done.returncode == 77:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    for name in ("simulate", "generate", "benchmark", "train", "compare", "es"):
        code, err = (log / f"{name}.code").read_text().strip(), (log / f"{name}.err").read_text()
        assert code == "2", (name, code, err)
        assert "No space left on device" in _one_line(err), (name, err)
    assert (log / "tmp-files").read_text() == ""
    subprocess.run(["tar", "-C", str(full), "-xf", str(log / "after.tar")], check=True)  # full is unmounted now
    for rel, data in before.items():
        assert (full / rel).read_bytes() == data, f"{rel} changed"


def test_the_launcher_catches_the_signals_the_commands_stop_on() -> None:
    """``deepboot_harness.launch`` imports nothing of the project before its handler is in place,
    so it spells the signals out: they must be :data:`deepboot_env.stops.SIGNALS`."""
    from deepboot_env.stops import SIGNALS
    from deepboot_harness.launch import STOP_SIGNALS

    assert set(STOP_SIGNALS) == set(SIGNALS)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_the_teacher_stopped_keeps_whole_labels_and_resumes_without_duplicates(signum: int, tmp_path) -> None:
    """A signal while the teacher's two workers label: one line naming --resume, the shell's
    status, the workers gone, every file whole; the resume labels the rest and the manifest lists
    each once."""
    from agents.trainers.teacher import read_manifest, read_scenario

    argv = [*CLI, "teach", "--families", "mixed", "--seeds", "3", "--generations", "1", "--pairs", "1"]
    argv += ["--jobs", "2", "--out", "teach", "--quiet"]
    out = tmp_path / "teach"
    code, _, err = _stop_when(argv, tmp_path, lambda: any(out.glob("*.npz")), signum)
    assert code == 128 + signum and "continue with --resume" in _one_line(err)
    done = sorted(path.name for path in out.glob("*.npz"))
    assert 1 <= len(done) < 3 and set(read_manifest(out)["scenarios"]) <= set(done)  # a file, then its entry
    for name in done:
        read_scenario(out / name)  # whole
    _assert_whole_files(out)
    resumed = subprocess.run([*argv, "--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert len(read_manifest(out)["scenarios"]) == len(list(out.glob("*.npz"))) == 3
