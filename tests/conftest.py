"""Shared fixtures of the test suite (shared builders: ``tests/builders.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def torch_one_thread():
    """Torch on one thread (as ``train_policy.py`` sets it) for the module; restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
