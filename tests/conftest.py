"""Shared fixtures of the test suite (shared builders: ``tests/builders.py``).

The test modules sit in a folder per package they specify: ``sim/`` (:mod:`deepboot_env.sim`),
``env/`` (the rest of :mod:`deepboot_env`: the env, its codecs, the policy contract, evaluation,
config), ``baselines/``, ``traces/``, ``agents/`` (and ``train_policy.py``), ``harness/``
(:mod:`deepboot_harness`); what spans them (docs, layers, linters, the wheel, stops, bad input,
the fingerprint) stays here.
"""

from __future__ import annotations

import os

import pytest

from deepboot_env import evaluation
from deepboot_env.ray_pool import LOOPBACK_ENV

os.environ.setdefault(LOOPBACK_ENV, "0")  # a Ray imported by any test puts its servers on 127.0.0.1
# every episode a test plays through run_episode goes on the compiled loop's arrays where that is the
# same episode (tests/sim/test_array_episode.py, test_ats_loops.py): the default rule counts the
# episodes a process has played, and what a test exercises must not depend on the tests before it
evaluation.ARRAY_EPISODES = True


@pytest.fixture(scope="module")
def torch_one_thread():
    """Torch on one thread (as ``train_policy.py`` sets it) for the module; restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ray_token():
    """A Ray token of the test session's own in ``RAY_AUTH_TOKEN`` (nothing written to ``~/.ray``;
    one for the session: a process keeps the first token it reads); restored at the end."""
    import secrets

    saved = {key: os.environ.get(key) for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
    os.environ["RAY_AUTH_TOKEN"] = token = secrets.token_hex(32)
    yield token
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def ray_cluster(ray_token):
    """A local Ray instance for the module (2 CPUs, on 127.0.0.1, token authentication on with
    ``ray_token``), shut down at the end; its GCS address. Skips without the ``ray`` extra."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
