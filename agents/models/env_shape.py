"""The env arguments a saved model's spaces imply: :func:`env_shape_of` (no torch, no SB3).

A DeepBoot model's action space gives its action mode (target, residual or score: the codec's
sizes), its job slots (``max_jobs``) and lending levels; its observation space says whether it
sees the outlook entry. :func:`spaces_env_shape` reads them and checks that every observation
entry has the shape the env would give it, so that a model of another env fails with one line.
The ``ppo:<path>`` adapter (:mod:`agents.saved.policy_adapter`), the self-describing policies
(:mod:`agents.models.described_policy`) and ``--resume`` (:mod:`agents.trainers.training_run`) read them here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepboot_env.config import EnvConfig
from deepboot_env.env.action import ScoreCodec, make_codec, mode_of_nvec
from deepboot_env.env.observation import CLUSTER_FEATURES, JOB_FEATURES, OUTLOOK_FEATURES
from deepboot_env.policy import WIDTH_CLASSES


def env_shape_of(model: Any) -> dict[str, Any]:
    """``max_jobs``, ``lend_levels`` and ``action_mode`` of the env ``model`` was trained on (from
    its spaces), ``outlook: True`` if its observation has the outlook entry, and a score model's
    ``width_classes`` where it has width scores.

    Raises:
        ValueError: if the spaces are not those of ``DeepBoot-v0``.
    """
    return spaces_env_shape(model.observation_space, model.action_space)


def spaces_env_shape(observation_space: Any, action_space: Any) -> dict[str, Any]:
    """:func:`env_shape_of` for a model's observation and action spaces.

    Raises:
        ValueError: if the spaces are not those of ``DeepBoot-v0``.
    """
    nvec = np.asarray(getattr(action_space, "nvec", []), dtype=np.int64).reshape(-1)
    box = getattr(action_space, "nvec", None) is None and len(getattr(action_space, "shape", None) or ()) == 1
    try:
        mode = ScoreCodec.mode if box else mode_of_nvec(nvec)
    except ValueError:
        raise ValueError(f"model action space {action_space} is not a DeepBoot-v0 action space") from None
    spaces = getattr(observation_space, "spaces", {})
    width_classes = 0
    if box:  # score mode: per slot a score (and width scores), then the lending share (no levels)
        prior = getattr(spaces.get("prior") if hasattr(spaces, "get") else None, "shape", None)
        try:
            max_jobs, width_classes = score_layout(int(action_space.shape[0]), prior[0] if prior else None)
        except ValueError:
            raise ValueError(f"model action space {action_space} is not a DeepBoot-v0 action space") from None
        lend_levels = EnvConfig.defaults()["lend_levels"]
    else:
        max_jobs, lend_levels = int(nvec.size - 1), int(nvec[-1])
    outlook = "outlook" in spaces
    expected = {"jobs": (max_jobs * len(JOB_FEATURES),), "cluster": (len(CLUSTER_FEATURES),)}
    if outlook:
        expected["outlook"] = (len(OUTLOOK_FEATURES),)
    # the codec's extra entries; a codec with a base policy is built only to read its shapes
    codec = make_codec(mode, max_jobs, lend_levels, width_classes=width_classes)
    expected.update({k: (n,) for k, n in codec.extra_observation().items()})
    if {k: getattr(v, "shape", None) for k, v in spaces.items()} != expected:
        raise ValueError(f"model observation space {observation_space} does not match DeepBoot-v0")
    shape: dict[str, Any] = {"max_jobs": max_jobs, "lend_levels": lend_levels, "action_mode": mode}
    if outlook:
        shape["outlook"] = True
    if width_classes:
        shape["width_classes"] = width_classes
    return shape


def score_layout(action_size: int, prior_slots: int | None) -> tuple[int, int]:
    """A score model's job slots and width classes, from its action's size and its ``prior``
    entry's length (one per slot; None: absent, then a score per slot and no width scores).

    Raises:
        ValueError: if the action is not ``slots * (1 + width classes) + 1`` entries with width
            classes 0 or :data:`~deepboot_env.policy.WIDTH_CLASSES`.
    """
    slots = int(prior_slots) if prior_slots is not None else action_size - 1
    width_classes = (action_size - 1) // slots - 1 if slots > 0 else -1
    if width_classes not in (0, WIDTH_CLASSES) or slots * (1 + width_classes) + 1 != action_size:
        raise ValueError(f"a score action of {action_size} entries does not fit {prior_slots} slots")
    return slots, width_classes
