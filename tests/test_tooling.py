"""The linters CI runs pass on the repository: ``ruff check .`` and ``mypy`` (its files and
settings are in ``pyproject.toml``). Each runs in this interpreter's environment and is skipped
when it is not installed."""

from __future__ import annotations

import subprocess
import sys

import pytest
from builders import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, check=False)


def test_ruff_check() -> None:
    pytest.importorskip("ruff")
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, f"ruff check . failed:\n{result.stdout}{result.stderr}"


@pytest.mark.slow
def test_mypy() -> None:
    pytest.importorskip("mypy")
    result = _run("mypy")
    assert result.returncode == 0, f"mypy failed:\n{result.stdout}{result.stderr}"


def test_ci_runs_the_readme_quickstart_commands_verbatim() -> None:
    """``.ci/run`` runs the README's two Quickstart commands as written (the demo as a smoke step,
    then the test run), and the test command installs the extras CI's tests need (rl: training
    and PPO models; ray: the Ray tests run in CI, not skip), while the demo needs none."""
    result = subprocess.run([str(REPO / ".ci" / "run"), "--print"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    demo, tests = result.stdout.splitlines()
    quickstart = (REPO / "README.md").read_text(encoding="utf-8").split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert f"```bash\n{demo}\n```" in quickstart and f"```bash\n{tests}\n```" in quickstart
    assert "deepboot simulate" in demo and "python -m pytest -q" in tests
    # two workers, a file each at a time: a module's fixtures (the wheel's venv) are built once
    assert tests.endswith("-n 2 --dist loadfile")
    extras = tests.split('-e ".[', 1)[1].split("]", 1)[0].split(",")
    assert {"rl", "dev", "ray"} <= set(extras)
    assert "pip install -e . &&" in demo  # the demo episode runs without any extra
