"""Refactors leave behaviour bit-identical: every fingerprint case matches its recorded digest.

The cases and the way to re-record them are in ``tests/fingerprint.py``; a change that is meant to
alter dynamics re-records them in the same commit and says why.
"""

from __future__ import annotations

import json

import pytest
from fingerprint import CASES, GOLDEN


@pytest.fixture(scope="module")
def golden() -> dict[str, str]:
    return json.loads(GOLDEN.read_text())


def test_every_case_is_recorded(golden: dict[str, str]) -> None:
    assert sorted(golden) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fingerprint_unchanged(name: str, golden: dict[str, str], torch_one_thread) -> None:
    assert CASES[name]() == golden[name], f"{name}: behaviour changed (see tests/fingerprint.py)"
