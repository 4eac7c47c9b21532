"""Export a trained model for evaluation: the same zip without the optimizer's moment estimates.

Adam keeps two moments per weight, twice the size of the network; a checkpoint meant for
``--policy ppo:<path>`` does not need them. The exported model loads with ``MaskablePPO.load`` /
``PPO.load`` as usual (a fresh optimizer state if training is resumed from it). The env arguments
of the run (``config.yml``'s ``env_kwargs``: e.g. the base policy of a residual model) are stored
in the zip as ``deepboot_env.json``, so the exported file is self-contained::

    python -m agents.export runs/maskable_ppo_2/best_model.zip agents/pretrained/deepboot-v0.zip
"""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser


def export_model(src: str | Path, dst: str | Path) -> Path:
    """Write ``src`` to ``dst`` with an empty optimizer state and the run's env arguments;
    returns ``dst``."""
    from agents.policy_adapter import METADATA_FILE, load_model, model_env_kwargs, resolve_model_path

    src = resolve_model_path(src)
    env_kwargs = model_env_kwargs(src)
    model = load_model(src)
    policy = model.policy
    policy.optimizer = type(policy.optimizer)(policy.parameters(), **policy.optimizer.defaults)
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    model.save(dst)
    with zipfile.ZipFile(dst, "a") as zf:
        zf.writestr(METADATA_FILE, json.dumps({"env_kwargs": env_kwargs}, sort_keys=True))
    return dst


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
