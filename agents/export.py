"""Export a trained model for evaluation: the same weights in a self-describing zip without the
optimizer's moment estimates.

Adam keeps two moments per weight, twice the size of the network; a checkpoint meant for
``--policy ppo:<path>`` does not need them. The exported policy is the project's class of the same
architecture (:mod:`agents.described_policy`) holding the env arguments of the run (its policy's,
or for an older run ``config.yml``'s ``env_kwargs`` completed from the model's spaces: e.g. the base
policy of a residual model), so the file is self-contained: ``agents.load_agent(path)``
returns the model and its env, and a plain ``MaskablePPO.load(path)`` / ``PPO.load(path)``
evaluated on another env fails with one line naming the env it needs::

    python -m agents.export runs/maskable_ppo_2/best_model.zip agents/pretrained/deepboot-v0.zip
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.callbacks import save_model
from agents.described_policy import ENV_ARGUMENTS_KEY
from agents.factory import policy_class
from agents.policy_adapter import agent_env_kwargs, load_model, resolve_model_path, uses_masks
from deepboot_env.argparsing import ArgumentParser


def described(model: Any, env_kwargs: dict[str, Any]) -> Any:
    """``model`` with a new policy of the project's class of its architecture that keeps
    ``env_kwargs`` (:mod:`agents.described_policy`), the same weights and a fresh optimizer."""
    algo = "maskable_ppo" if uses_masks(model) else "ppo"
    arch = "set" if getattr(model.policy, "deepboot_arch", "mlp") == "set" else "mlp"
    state = model.policy.state_dict()
    model.policy_class = policy_class(algo, arch)
    model.policy_kwargs = {**model.policy_kwargs, ENV_ARGUMENTS_KEY: dict(env_kwargs)}
    model.policy = model.policy_class(
        model.observation_space, model.action_space, model.lr_schedule, **model.policy_kwargs
    ).to(model.device)
    model.policy.load_state_dict(state)
    return model


def export_model(src: str | Path, dst: str | Path) -> Path:
    """Write ``src`` to ``dst`` as a self-describing model with an empty optimizer state; returns
    ``dst``."""
    src = resolve_model_path(src)
    model = load_model(src)
    model = described(model, agent_env_kwargs(model, src))
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    return save_model(model, dst)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="a saved model zip (or run folder)")
    parser.add_argument("dst", help="where to write the exported zip")
    args = parser.parse_args(argv)
    out = export_model(args.src, args.dst)
    print(f"{out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
