"""Without the ``rl`` extra: the simulator, the env, the baselines, the learned priority and the CLI
run, and never try to import torch, stable-baselines3, sb3-contrib or TensorBoard; what needs them
(``ppo:<path>``, ``deepboot train``) says so in one line that names the extra.

Each case runs in a fresh interpreter whose ``sys.meta_path`` refuses those modules, as an
install without the extra would, and records every attempt to import them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from builders import REPO

BLOCKER = textwrap.dedent(
    """
    import json, sys
    ATTEMPTS = []
    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "stable_baselines3", "sb3_contrib", "tensorboard"}:
                ATTEMPTS.append(name)
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None
    sys.meta_path.insert(0, Blocker())
    """
)


def _without_rl(code: str) -> tuple[int, dict, str]:
    """Run ``code`` (which sets ``rc``) without the rl extra: (rc, what it reported, stderr)."""
    script = BLOCKER + textwrap.dedent(code) + "\nprint(json.dumps({'rc': rc, 'attempts': ATTEMPTS}))\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip(), done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return int(report["rc"]), report, done.stderr


@pytest.mark.parametrize("policy", ["ats", "priority:deepboot-priority-v1"])
def test_simulate_never_imports_torch(policy: str) -> None:
    rc, report, err = _without_rl(
        f"""
        from deepboot_harness.cli import main
        rc = main(["simulate", "--workload", "tiny", "--policy", {policy!r}, "--quiet"])
        """
    )
    assert rc == 0, err
    assert report["attempts"] == []


def test_the_env_never_imports_torch() -> None:
    rc, report, err = _without_rl(
        """
        import gymnasium as gym
        import deepboot_env
        env = gym.make("DeepBoot-v1", workload="tiny")
        env.reset(seed=0)
        env.step(env.action_space.sample())
        rc = 0
        """
    )
    assert rc == 0, err
    assert report["attempts"] == []


def test_a_ppo_model_names_the_missing_extra_in_one_line() -> None:
    rc, _, err = _without_rl(
        """
        from deepboot_harness.cli import main
        rc = main(["simulate", "--workload", "tiny", "--policy", "ppo:deepboot-v0", "--quiet"])
        """
    )
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert "needs the 'rl' extra" in lines[0] and "pip install torch==2.13.0 'deepboot-env[rl]'" in lines[0]


def test_training_names_the_missing_extra_and_help_still_lists_the_presets() -> None:
    rc, _, err = _without_rl(
        """
        from deepboot_harness.cli import main
        try:
            main(["train", "--preset", "smoke", "--workload", "tiny"])
        except SystemExit as exit_:
            rc = exit_.code
        """
    )
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert lines[0].startswith("deepboot train: error: deepboot train needs the 'rl' extra")
    rc, _, err = _without_rl(
        """
        import contextlib, io
        from deepboot_harness.cli import main
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                main(["train", "--help"])
        except SystemExit as exit_:
            rc = exit_.code
        assert "priority-es" in out.getvalue()
        """
    )
    assert rc == 0, err


def test_the_missing_extra_command_pins_the_readme_s_cpu_torch() -> None:
    """Issue 68: the message once suggested an unpinned ``deepboot-env[rl]``, which pulls a
    multi-GB CUDA torch on a CPU machine; it gives the pin the README's commands use."""
    from builders import REPO

    from deepboot_env.extras import CPU_TORCH, install_command

    assert f"pip install {CPU_TORCH} -e" in (REPO / "README.md").read_text()
    assert install_command("rl") == f"pip install {CPU_TORCH} 'deepboot-env[rl]'"
    assert install_command("ray", clone=True) == "pip install -e '.[ray]'"
