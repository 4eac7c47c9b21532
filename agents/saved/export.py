"""Export a trained model for evaluation: the same weights in a self-describing zip without the
optimizer's moment estimates.

Adam keeps two moments per weight, twice the size of the network; a checkpoint meant for
``--policy ppo:<path>`` does not need them. The exported policy is the project's class of the same
architecture (:mod:`agents.models.described_policy`) holding the env arguments of the run (its policy's,
or for an older run ``config.yml``'s ``env_kwargs`` completed from the model's spaces: e.g. the base
policy of a residual model), so the file is self-contained: ``agents.load_agent(path)``
returns the model and its env, and a plain ``MaskablePPO.load(path)`` / ``PPO.load(path)``
evaluated on another env fails with one line naming the env it needs::

    python -m agents.saved.export runs/maskable_ppo_2/best_model.zip agents/pretrained/deepboot-v0.zip

``--prior NAME`` writes a score model that decodes its scores over another prior (its env argument
``base_policy``), the weights unchanged: how ``deepboot-score-v5`` is v4 over the prior that keeps
warm pods (docs/policies.md §8.10)::

    python -m agents.saved.export models/lineage/deepboot-score-v4.zip models/lineage/deepboot-score-v5.zip \
        --prior ats-srpt-fcfs-place-rr-warm
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.models.algorithms import policy_class
from agents.models.described_policy import ENV_ARGUMENTS_KEY
from agents.saved.checkpoint import save_model
from agents.saved.policy_adapter import agent_env_kwargs, load_model, resolve_model_path, uses_masks
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.policy import ScoredProposer, make_policy


def described(model: Any, env_kwargs: dict[str, Any]) -> Any:
    """``model`` with a new policy of the project's class of its architecture that keeps
    ``env_kwargs`` (:mod:`agents.models.described_policy`), the same weights and a fresh optimizer."""
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


def export_model(src: str | Path, dst: str | Path, prior: str | None = None) -> Path:
    """Write ``src`` to ``dst`` as a self-describing model with an empty optimizer state, over the
    prior ``prior`` if given (a score model's ``base_policy``); returns ``dst``.

    Raises:
        ValueError: if ``prior`` is given for a model that is not a score model, or names a
            policy that takes no scores.
    """
    src = resolve_model_path(src)
    model = load_model(src)
    env_kwargs = agent_env_kwargs(model, src)
    if prior is not None:
        env_kwargs["base_policy"] = checked_prior(env_kwargs, prior)
    model = described(model, env_kwargs)
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    return save_model(model, dst)


def checked_prior(env_kwargs: dict[str, Any], prior: str) -> str:
    """``prior``, if a score model with the env arguments ``env_kwargs`` can decode over it.

    Raises:
        ValueError: as :func:`export_model`.
    """
    mode = env_kwargs.get("action_mode", "target")
    if mode != "score":
        raise ValueError(f"--prior applies to a score model (action_mode 'score'), not {mode!r}")
    policy = make_policy(prior)  # an unknown name: ValueError, naming the policies there are
    if not isinstance(policy, ScoredProposer):
        raise ValueError(f"--prior {prior!r} takes no scores (use ats, ats-srpt, ... or priority:<path>)")
    return prior


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="a saved model zip (or run folder)")
    parser.add_argument("dst", help="where to write the exported zip")
    parser.add_argument("--prior", help="a score model's new prior (its base_policy), weights unchanged")
    args = parser.parse_args(argv)
    try:
        out = export_model(args.src, args.dst, args.prior)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
