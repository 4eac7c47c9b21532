"""Optional extras of the distribution, checked where they are first needed.

``pip install deepboot-env`` gives the simulator, the env, the baselines, the learned priority
and the CLI; training agents and running saved PPO models need the ``rl`` extra (torch,
stable-baselines3, sb3-contrib, TensorBoard). Code that needs an extra calls
:func:`require_extra` before importing it, so that a user without it gets one line naming the
extra and the command that installs it, instead of a traceback from deep inside an import.
"""

from __future__ import annotations

import importlib.util

EXTRAS: dict[str, tuple[str, ...]] = {
    "rl": ("torch", "stable_baselines3", "sb3_contrib", "tensorboard"),
}
"""Extra -> the modules it installs (as imported)."""


class MissingExtraError(ImportError):
    """An optional extra is not installed (the message names it and how to install it)."""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    missing = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or blocked install is a missing one
            found = False
        if not found:
            missing.append(module)
    return missing


CPU_TORCH = "torch==2.13.0"
"""The torch the README's commands pin: a CPU build from the package index (an unpinned torch pulls
a multi-GB CUDA build); GPU users install any ``torch>=2.8,<3`` CUDA build instead."""

TORCH_EXTRAS = ("rl", "zoo")
"""Extras that pull torch."""


def install_command(extra: str, clone: bool = False) -> str:
    """The pip command that installs ``extra`` (from the package index, or a ``clone``'s folder),
    with the README's CPU torch where the extra pulls torch."""
    torch = f"{CPU_TORCH} " if extra in TORCH_EXTRAS else ""
    target = f"-e '.[{extra}]'" if clone else f"'deepboot-env[{extra}]'"
    return f"pip install {torch}{target}"


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` if ``extra`` is not installed; ``what`` names what needs it
    (``ppo:<path>``, ``deepboot train``).

    Raises:
        MissingExtraError: one line: what needs which extra, what is missing, the pip command.
    """
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(
            f"{what} needs the {extra!r} extra ({', '.join(EXTRAS[extra])}; missing: {', '.join(missing)}): "
            f"{install_command(extra)} (in a clone: {install_command(extra, clone=True)})"
        )
