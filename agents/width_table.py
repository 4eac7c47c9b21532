"""A score model's width outputs as a per-application table, and growing a model to have them.

A set model with an application table (``--preset score-app``: ``application_scores``) scores
each job from its application alone: the table is a linear layer from the application's one-hot
code to the slot's outputs, ``[score, width scores...]`` (:mod:`agents.set_policy`). Its width
outputs are therefore one value per (width class, application): the weight rows ``1..W`` of the
table, which multiply each w-GPU option of a job by ``exp(score_scale * (v[c(w)] - v[c(f)]))``
(:func:`baselines.ats.width_scored_options`). ES trains exactly these values
(:mod:`agents.evolution`, ``--algo es -i MODEL.zip``), and with its setting ``score_row: 1`` the
score row too (row 0: each application's log-weight change), the whole table.

:func:`grow_width_outputs` turns a score model without width scores (``deepboot-score-v3``) into
one with :data:`~deepboot_env.policy.WIDTH_CLASSES` of them: the same weights, the new outputs zero
(so its deterministic policy is the old one, bit for bit), the width scores' log std that of the
scores.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

from agents.described_policy import ENV_ARGUMENTS_KEY, env_spec
from agents.env_shape import env_shape_of
from deepboot_env.policy import WIDTH_CLASSES
from deepboot_env.sim.apps import APP_NAMES

WIDTH_CLASS_NAMES = ("two", "node", "split")
"""The width classes a width score values against the job's fair share: 2 GPUs on one node, 3 or
more on one node, split over nodes (1 GPU is the reference, valued 0)."""

OUTPUT_LAYERS = ("application_table", "slot_head.2")
"""The layers whose outputs are per slot (the application table, or the slot head's last layer)."""


class WidthTableError(ValueError):
    """A model whose width outputs cannot be read, set or grown (one line naming the model)."""


def width_names(score_row: bool = False) -> tuple[str, ...]:
    """The names of the table's values, class-major: ``<application>/<class>``; with
    ``score_row``, the score row's ``<application>/score`` first."""
    rows = ("score", *WIDTH_CLASS_NAMES) if score_row else WIDTH_CLASS_NAMES
    return tuple(f"{app}/{cls}" for cls in rows for app in APP_NAMES)


def _application_table(model: Any, what: str) -> Any:
    """The model's application table (a ``torch.nn.Linear``).

    Raises:
        WidthTableError: a model that is not a score set model with an application table.
    """
    table = getattr(getattr(model.policy, "mlp_extractor", None), "application_table", None)
    if table is None or env_shape_of(model)["action_mode"] != "score":
        raise WidthTableError(
            f"{what}: not a score model with an application table (train one with --preset score-app)"
        )
    return table


def _width_layer(model: Any, what: str) -> Any:
    """The model's application table, which has width outputs (rows ``1..W``).

    Raises:
        WidthTableError: no application table, or no width scores (see :func:`grow_width_outputs`).
    """
    table = _application_table(model, what)
    if table.weight.shape[0] != 1 + WIDTH_CLASSES:
        raise WidthTableError(f"{what}: has no width scores (width_classes=0)")
    return table


def width_table(model: Any, what: str = "the model", score_row: bool = False) -> np.ndarray:
    """The model's width outputs per (class, application), class-major (:func:`width_names`);
    with ``score_row``, its per-application scores first (the whole table).

    Raises:
        WidthTableError: no application table, or no width scores (see :func:`grow_width_outputs`).
    """
    first = 0 if score_row else 1
    return _width_layer(model, what).weight.detach().cpu().numpy()[first:].astype(float).reshape(-1)


def set_width_table(model: Any, values: Any, what: str = "the model", score_row: bool = False) -> None:
    """Write ``values`` (as :func:`width_table` returns them, with the same ``score_row``) into
    the model's width outputs (and its score row).

    Raises:
        WidthTableError: no width outputs, or values of the wrong size or not finite.
    """
    import torch  # lazy: torch is slow to import

    table = _width_layer(model, what)
    first = 0 if score_row else 1
    rows = table.weight.shape[0] - first
    size = rows * table.weight.shape[1]
    array = np.asarray(values, dtype=float).reshape(-1)
    if array.size != size or not np.isfinite(array).all():
        kind = "an application table" if score_row else "a width table"
        raise WidthTableError(f"{what}: {kind} holds {size} finite values, got {array.size}")
    with torch.no_grad():
        written = torch.as_tensor(array.reshape(rows, -1), dtype=table.weight.dtype)
        table.weight[first:] = written.to(table.weight.device)


def grow_width_outputs(model: Any, what: str = "the model") -> Any:
    """Give a score model without width scores :data:`~deepboot_env.policy.WIDTH_CLASSES` of
    them, in place (its spaces, env arguments, policy and rollout buffer); returns the model.

    The grown policy keeps every weight; each per-slot output layer gets zero rows for the width
    outputs, so the deterministic policy is unchanged, and the log stds gain a width group equal
    to the scores' group. The optimizer starts afresh (its parameters are new tensors).

    Raises:
        WidthTableError: not a score set model, or one that has width scores already.
    """
    import torch  # lazy: torch is slow to import

    from agents.distributions import use_padded_distribution  # lazy: SB3 is slow to import

    shape = env_shape_of(model)
    if shape["action_mode"] != "score" or not hasattr(model.policy, "mlp_extractor"):
        raise WidthTableError(f"{what}: only a score model grows width scores")
    if shape.get("width_classes"):
        raise WidthTableError(f"{what}: has width scores already")
    arguments = {**dict(getattr(model.policy, "env_kwargs", None) or {}), **shape, "width_classes": WIDTH_CLASSES}
    env_id, kwargs = env_spec(arguments)
    env = gymnasium.make(env_id, **kwargs)
    old = model.policy.state_dict()
    model.observation_space, model.action_space = env.observation_space, env.action_space
    env.close()
    if ENV_ARGUMENTS_KEY in (model.policy_kwargs or {}):
        model.policy_kwargs = {**model.policy_kwargs, ENV_ARGUMENTS_KEY: arguments}
    model._setup_model()
    grown = {key: _grown(key, old[key], value) for key, value in model.policy.state_dict().items()}
    with torch.no_grad():
        model.policy.load_state_dict(grown)
    use_padded_distribution(model.policy)
    return model


def _grown(key: str, old: Any, new: Any) -> Any:
    """Parameter ``key`` of the grown policy from the old one (same, zero rows added, or the log
    stds with a width group).

    Raises:
        WidthTableError: a parameter whose shape changed where none should.
    """
    import torch  # lazy: torch is slow to import

    if old.shape == new.shape:
        return old.clone()
    if key == "score_log_std":  # groups [scores, lending] -> [scores, lending, widths]
        return torch.cat([old, old[:1]])
    if key.rsplit(".", 1)[0].endswith(OUTPUT_LAYERS):
        out = torch.zeros_like(new)
        out[: old.shape[0]] = old
        return out
    raise WidthTableError(f"cannot grow {key}: {tuple(old.shape)} -> {tuple(new.shape)}")
