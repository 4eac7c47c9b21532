"""The linters CI runs pass on the repository: ``ruff check .`` and ``mypy`` (its files and
settings are in ``pyproject.toml``). Each runs in this interpreter's environment and is skipped
when it is not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_check() -> None:
    pytest.importorskip("ruff")
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, f"ruff check . failed:\n{result.stdout}{result.stderr}"


@pytest.mark.slow
def test_mypy() -> None:
    pytest.importorskip("mypy")
    result = _run("mypy")
    assert result.returncode == 0, f"mypy failed:\n{result.stdout}{result.stderr}"
