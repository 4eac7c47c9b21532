"""Training with RL Baselines3 Zoo itself, as the README shows (needs the ``zoo`` extra: skipped
without rl_zoo3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rl_zoo3")


def test_rl_zoo3_trains_deepboot_v1_a_few_hundred_steps(tmp_path: Path) -> None:
    from agents.models.env_shape import env_shape_of
    from agents.saved.checkpoint import load_checkpoint

    argv = [
        sys.executable, "-m", "rl_zoo3.train", "--algo", "ppo", "--env", "DeepBoot-v1",
        "--gym-packages", "deepboot_env", "-conf", "agents.zoo",
        "-n", "256", "--hyperparams", "n_envs:1", "n_steps:128", "batch_size:64", "n_epochs:1",
        "policy_kwargs:dict(net_arch=[16])", "--eval-freq", "-1", "--device", "cpu", "--seed", "0",
        "-f", str(tmp_path / "logs"),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    model = load_checkpoint(tmp_path / "logs" / "ppo" / "DeepBoot-v1_1" / "DeepBoot-v1.zip")  # pickle-free
    assert model.num_timesteps == 256
    assert env_shape_of(model) == {"max_jobs": 32, "lend_levels": 5, "action_mode": "target"}
