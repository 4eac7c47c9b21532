"""The wheel is the project: built from this tree, installed into a fresh venv, and run from a folder
outside the repository (no clone to fall back on, no ``../shared``). Without extras it simulates
and makes the env with no torch installed, and ``deepboot train`` names the missing extra; with
the ``rl`` extra it simulates both shipped models by their short names, runs a tiny benchmark,
trains with presets (``--preset residual`` starting exactly at ATS), and makes the Gymnasium env.

Slow (a fresh venv installs the dependencies: 2-3 min with pip's cache), and run by CI: it is
the only test that sees the package as a user of ``pip install deepboot-env`` does.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
from builders import REPO

pytestmark = pytest.mark.slow

TORCH = "torch==2.13.0"
"""The torch build to install (a pin: an unpinned torch pulls a multi-GB CUDA build)."""
EXTRAS = "[rl]"
"""Extras of the wheel the user journey needs (training included)."""


def _source_tree(dest: Path) -> Path:
    """The repository's files as git sees them (tracked and untracked, ignored ones left out:
    no venv, no build output), copied to ``dest`` so that building leaves the clone untouched."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listing.split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _clean_env() -> dict[str, str]:
    """This process's environment without anything that would let the venv see the clone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


BARE_CHECKS: dict[str, list[str]] = {
    "simulate": ["deepboot", "simulate", "--workload", "tiny", "--policy", "priority:deepboot-priority-v1", "--quiet"],
    "env": ["python", "-c", "import gymnasium as gym, deepboot_env; gym.make('DeepBoot-v1', workload='tiny').reset()"],
    "no torch": ["python", "-c", "import importlib.util as u; assert u.find_spec('torch') is None"],
    "train": ["deepboot", "train", "--preset", "smoke", "--workload", "tiny"],
}
"""What runs in the venv with the wheel alone, before the rl extra is installed."""


def _bare_checks(bin_dir: Path, work: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """:data:`BARE_CHECKS` run from ``work`` with the wheel installed without extras."""
    return {
        name: subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]], cwd=work, capture_output=True, text=True, env=_clean_env(), timeout=300
        )
        for name, argv in BARE_CHECKS.items()
    }


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """(bin folder of a fresh venv holding the wheel with the rl extra, a working folder outside the
    repository, the results of :data:`BARE_CHECKS` run before the extra was installed)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("builds the wheel from a git checkout")
    root = tmp_path_factory.mktemp("wheel")
    src = _source_tree(root / "src")
    dist = root / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)]
    subprocess.run(build, check=True, capture_output=True, env=_clean_env())
    (wheel,) = dist.glob("deepboot_env-*.whl")
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    work = root / "work"
    work.mkdir()
    _pip_install(bin_dir, str(wheel))
    bare = _bare_checks(bin_dir, work)  # the wheel alone
    _pip_install(bin_dir, TORCH, f"{wheel}{EXTRAS}")
    bare["wheel"] = wheel
    return bin_dir, work, bare


def _pip_install(bin_dir: Path, *requirements: str) -> None:
    install = [str(bin_dir / "python"), "-m", "pip", "install", "-q", *requirements]
    done = subprocess.run(install, capture_output=True, text=True, env=_clean_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(wheel_venv: tuple[Path, Path, dict[str, Any]]) -> tuple[Path, Path]:
    """(bin folder of the venv with the wheel and its rl extra, a working folder outside the repository)."""
    return wheel_venv[0], wheel_venv[1]


def test_without_extras_simulate_and_the_env_run_and_train_names_the_extra(
    wheel_venv: tuple[Path, Path, dict[str, Any]],
) -> None:
    bare = wheel_venv[2]
    for name in ("simulate", "env", "no torch"):
        assert bare[name].returncode == 0, f"{name}: {bare[name].stderr[-2000:]}"
    train = bare["train"]
    assert train.returncode == 2 and len(train.stderr.strip().splitlines()) == 1, train.stderr
    assert "needs the 'rl' extra" in train.stderr


def _run(installed: tuple[Path, Path], *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    bin_dir, work = installed
    command = [str(bin_dir / argv[0]), *argv[1:]]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, env=_clean_env(), timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


MAX_SHIPPED_MODELS = 4
"""Model files the wheel ships: the current score model, the held application table, the learned
priority and the first PPO model (the lineage before the current score model stays in the
repository: models/lineage/)."""


def test_the_wheel_ships_the_current_models_only(wheel_venv: tuple[Path, Path, dict[str, Any]]) -> None:
    with zipfile.ZipFile(wheel_venv[2]["wheel"]) as wheel:
        models = sorted(
            name for name in wheel.namelist() if re.search(r"\.(zip|json|pt|pth)$", name) and "/pretrained/" in name
        )
    assert [name.rpartition("/")[2] for name in models] == [
        "deepboot-priority-v1.json",
        "deepboot-score-v8.zip",
        "deepboot-table-v1.table.json",
        "deepboot-v0.zip",
    ]
    assert len(models) <= MAX_SHIPPED_MODELS
    assert not any("lineage" in name for name in wheel.namelist())


def test_the_package_comes_from_the_venv_not_the_clone(installed: tuple[Path, Path]) -> None:
    code = "import agents, deepboot_env, traces; print(agents.__file__, deepboot_env.__file__, traces.__file__)"
    files = _run(installed, "python", "-c", code).stdout.split()
    assert all("site-packages" in f and not f.startswith(str(REPO)) for f in files), files


@pytest.mark.parametrize(
    "model",
    [
        "ppo:deepboot-v0",
        "ppo:deepboot-score-v8",
        "priority:deepboot-priority-v1",
        "table:deepboot-table-v1",
    ],
)
def test_simulate_every_shipped_model_by_short_name(installed: tuple[Path, Path], model: str) -> None:
    out = installed[1] / f"{model.replace(':', '-')}.json"
    argv = ["--workload", "test/test-01", "--policy", model, "--quiet", "--json", str(out)]
    _run(installed, "deepboot", "simulate", *argv)
    metrics = json.loads(out.read_text())
    assert metrics["dynamics"] == "v1" and metrics["train_jobs_done"] == metrics["train_jobs"] == 160


def test_a_tiny_benchmark(installed: tuple[Path, Path]) -> None:
    out = installed[1] / "bench"
    argv = ["--families", "short-period", "--policies", "ats", "priority:deepboot-priority-v1", "--seeds", "2"]
    _run(installed, "deepboot", "benchmark", *argv, "--quiet", "--out", str(out))
    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["policy"], r["seed"]) for r in rows) == sorted(
        (p, s) for p in ("ats", "priority:deepboot-priority-v1") for s in ("2000000", "2000001")
    )
    assert "DeepBoot-v1 dynamics" in (out / "leaderboard.md").read_text()


def test_train_lists_its_presets_and_a_smoke_training_runs(installed: tuple[Path, Path]) -> None:
    help_text = _run(installed, "deepboot", "train", "--help").stdout
    assert all(preset in help_text for preset in ("smoke", "residual", "priority-es"))
    runs = installed[1] / "runs"
    argv = ["--algo", "ppo", "--preset", "smoke", "--workload", "tiny", "--eval-workload", "tiny", "-n", "512"]
    _run(installed, "deepboot", "train", *argv, "--no-progress", "--verbose", "0", "-f", str(runs))
    run = runs / "ppo_1"
    assert (run / "best_model.zip").is_file() and (run / "final_model.zip").is_file()
    config = (run / "config.yml").read_text()
    assert "preset: smoke" in config and "dynamics: v1" in config and "n_steps: 128" in config  # the preset's


def test_residual_preset_starts_at_ats(installed: tuple[Path, Path]) -> None:
    """The preset's warm start runs from the wheel: its first evaluation is exactly ATS (1.00 x)."""
    runs = installed[1] / "residual"
    argv = ["--algo", "maskable_ppo", "--preset", "residual", "--workload", "tiny", "--eval-workload", "tiny"]
    argv += ["-n", "512", "--n-envs", "1", "--pretrain-epochs", "1", "--eval-freq", "100000", "--eval-jobs", "1"]
    _run(installed, "deepboot", "train", *argv, "--no-progress", "--verbose", "0", "-f", str(runs))
    with open(runs / "maskable_ppo_1" / "evaluations.csv", newline="") as fh:
        first = next(csv.DictReader(fh))
    assert int(first["timesteps"]) == 0 and float(first["jct_ratio"]) == 1.0


def test_gym_make_deepboot_v1(installed: tuple[Path, Path]) -> None:
    code = (
        "import gymnasium as gym, deepboot_env\n"
        "env = gym.make('DeepBoot-v1', workload='tiny')\n"
        "obs, info = env.reset(seed=0)\n"
        "obs, reward, terminated, truncated, info = env.step(env.action_space.sample())\n"
        "print(env.spec.id, sorted(obs))\n"
    )
    assert _run(installed, "python", "-c", code).stdout.split()[0] == "DeepBoot-v1"
