"""A score model's width outputs as a per-application table, and growing a model to have them.

A set model with an application table (``--preset score-app``: ``application_scores``) scores
each job from its application alone: the table is a linear layer from the application's one-hot
code to the slot's outputs, ``[score, width scores...]`` (:mod:`agents.models.set_policy`). Its width
outputs are therefore one value per (width class, application): the weight rows ``1..W`` of the
table, which multiply each w-GPU option of a job by ``exp(score_scale * (v[c(w)] - v[c(f)]))``
(:func:`baselines.ats.width_scored_options`). ES trains exactly these values
(:mod:`agents.trainers.evolution`, ``--algo es -i MODEL.zip``), and with its setting ``score_row: 1`` the
score row too (row 0: each application's log-weight change), the whole table.

:func:`grow_width_outputs` turns a score model without width scores (``deepboot-score-v3``) into
one with :data:`~deepboot_env.policy.WIDTH_CLASSES` of them: the same weights, the new outputs zero
(so its deterministic policy is the old one, bit for bit), the width scores' log std that of the
scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np

from agents.models.described_policy import ENV_ARGUMENTS_KEY, env_spec
from agents.models.env_shape import env_shape_of
from deepboot_env.env.observation import JOB_FEATURES
from deepboot_env.policy import WIDTH_CLASSES
from deepboot_env.sim.apps import APP_NAMES

WIDTH_CLASS_NAMES = ("two", "node", "split")
"""The width classes a width score values against the job's fair share: 2 GPUs on one node, 3 or
more on one node, split over nodes (1 GPU is the reference, valued 0)."""

OUTPUT_LAYERS = ("application_table", "slot_head.2")
"""The layers whose outputs are per slot (the application table, or the slot head's last layer)."""


class WidthTableError(ValueError):
    """A model whose width outputs cannot be read, set or grown (one line naming the model)."""


STATE_FEATURES: tuple[str, ...] = (*JOB_FEATURES[1 + len(APP_NAMES) :], "prior")
"""What a job's state scores read (``application_scores: 2``): its row after the one-hot, then
the prior's weight of the job (the score observation's ``prior`` entry)."""


def width_names(score_row: bool = False, state_scores: bool = False) -> tuple[str, ...]:
    """The names of the table's values, class-major: ``<application>/<class>``; with
    ``score_row``, the score row's ``<application>/score`` first; with ``state_scores``, then the
    score's weight on each job feature, ``state/<feature>``."""
    rows = ("score", *WIDTH_CLASS_NAMES) if score_row else WIDTH_CLASS_NAMES
    state = tuple(f"state/{name}" for name in STATE_FEATURES) if state_scores else ()
    return (*(f"{app}/{cls}" for cls in rows for app in APP_NAMES), *state)


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


def _state_scores_of(model: Any) -> Any:
    """The model's state scores (a ``torch.nn.Linear``, row 0 the score's), or None."""
    return getattr(getattr(model.policy, "mlp_extractor", None), "state_scores", None)


def has_state_scores(model: Any) -> bool:
    """Whether ``model`` has state scores (``application_scores`` 2)."""
    return _state_scores_of(model) is not None


def _state_layer(model: Any, what: str) -> Any:
    """The model's state scores (a ``torch.nn.Linear``, row 0 the score's).

    Raises:
        WidthTableError: a model without them (see :func:`grow_state_scores`).
    """
    layer = _state_scores_of(model)
    if layer is None:
        raise WidthTableError(f"{what}: has no state scores (application_scores 2)")
    return layer


def width_table(model: Any, what: str = "the model", score_row: bool = False, state_scores: bool = False) -> np.ndarray:
    """The model's width outputs per (class, application), class-major (:func:`width_names`);
    with ``score_row``, its per-application scores first (the whole table); with
    ``state_scores``, then the score's weights on the job's features.

    Raises:
        WidthTableError: no application table, no width scores (see :func:`grow_width_outputs`)
            or no state scores asked for.
    """
    first = 0 if score_row else 1
    table = _width_layer(model, what).weight.detach().cpu().numpy()[first:].astype(float).reshape(-1)
    if not state_scores:
        return table
    state = _state_layer(model, what).weight.detach().cpu().numpy()[0].astype(float)
    return np.concatenate([table, state])


def set_width_table(
    model: Any, values: Any, what: str = "the model", score_row: bool = False, state_scores: bool = False
) -> None:
    """Write ``values`` (as :func:`width_table` returns them, with the same ``score_row`` and
    ``state_scores``) into the model's width outputs (its score row, its state scores).

    Raises:
        WidthTableError: no width outputs (or state scores), or values of the wrong size or not finite.
    """
    import torch  # lazy: torch is slow to import

    table = _width_layer(model, what)
    state = _state_layer(model, what) if state_scores else None
    first = 0 if score_row else 1
    rows = table.weight.shape[0] - first
    size = rows * table.weight.shape[1]
    extra = state.weight.shape[1] if state is not None else 0
    array = np.asarray(values, dtype=float).reshape(-1)
    if array.size != size + extra or not np.isfinite(array).all():
        kind = "an application table" if score_row else "a width table"
        kind += " and state scores" if state is not None else ""
        raise WidthTableError(f"{what}: {kind} holds {size + extra} finite values, got {array.size}")
    with torch.no_grad():
        written = torch.as_tensor(array[:size].reshape(rows, -1), dtype=table.weight.dtype)
        table.weight[first:] = written.to(table.weight.device)
        if state is not None:
            state.weight[0] = torch.as_tensor(array[size:], dtype=state.weight.dtype).to(state.weight.device)


def grow_width_outputs(model: Any, what: str = "the model") -> Any:
    """Give a score model without width scores :data:`~deepboot_env.policy.WIDTH_CLASSES` of
    them, in place (its spaces, env arguments, policy and rollout buffer); returns the model.

    The grown policy keeps every weight; each per-slot output layer gets zero rows for the width
    outputs, so the deterministic policy is unchanged, and the log stds gain a width group equal
    to the scores' group. The optimizer starts afresh (its parameters are new tensors).

    Raises:
        WidthTableError: not a score set model, or one that has width scores already.
    """
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
    return _rebuilt(model, old, lambda key, new: _grown(key, old[key], new))


def _rebuilt(model: Any, old: dict[str, Any], grow: Callable[[str, Any], Any]) -> Any:
    """``model`` with its policy built anew from its (changed) spaces and ``policy_kwargs``, each
    parameter ``grow(key, new_value)`` of the old ones ``old``, and the padded distribution of
    its action space; returns the model."""
    import torch  # lazy: torch is slow to import

    from agents.models.distributions import use_padded_distribution  # lazy: SB3 is slow to import

    model._setup_model()
    grown = {key: grow(key, value) for key, value in model.policy.state_dict().items()}
    with torch.no_grad():
        model.policy.load_state_dict(grown)
    use_padded_distribution(model.policy)
    return model


def grow_state_scores(model: Any, what: str = "the model") -> Any:
    """Give a score model with an application table state scores (``application_scores`` 2), in
    place; returns the model. Every weight is kept and the new layer is zero, so the policy is
    the old one bit for bit. The optimizer starts afresh.

    Raises:
        WidthTableError: no application table, state scores already, or a job row whose
            features are not :data:`STATE_FEATURES` (checked before the model is touched).
    """
    import torch  # lazy: torch is slow to import

    _application_table(model, what)
    if has_state_scores(model):
        raise WidthTableError(f"{what}: has state scores already")
    reads = model.policy.mlp_extractor.state_width
    if reads != len(STATE_FEATURES):
        raise WidthTableError(f"{what}: a job row of {reads} features after the one-hot, not {len(STATE_FEATURES)}")
    old = model.policy.state_dict()
    model.policy_kwargs = {**(model.policy_kwargs or {}), "application_scores": 2}
    return _rebuilt(model, old, lambda key, new: old[key].clone() if key in old else torch.zeros_like(new))


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
