"""Policies that know the env they were trained on (self-describing checkpoints).

A DeepBoot model works only with the env arguments it was trained with: a residual model needs
``action_mode="residual"`` and its base policy, a model with 16 slots ``max_jobs=16``, a
``DeepBoot-v1`` model the v1 dynamics. The project's policy classes carry those arguments as the
policy keyword argument ``env_kwargs``, so SB3 saves them in the zip (``policy_kwargs``, plain
text beside the pickle) and a plain ``MaskablePPO.load(path)`` restores them with the weights.

:class:`DescribedPolicyMixin` checks every observation given to ``predict`` (what
``evaluate_policy`` and ``model.predict`` call) against the model's observation space: the
observation of another env fails with one line, an :class:`EnvMismatchError` naming the env the
model needs, e.g. ``gym.make('DeepBoot-v0', action_mode='residual', base_policy='ats', ...)``,
instead of SB3's ``KeyError: 'base'`` deep in the network. Envs whose observations have the same
entries and shapes (another base policy, other dynamics) cannot be told apart from the
observation: :func:`agents.saved.policy_adapter.load_agent` builds the right env from the arguments.

:class:`DescribedMultiInputPolicy` (PPO) and :class:`MaskableDescribedMultiInputPolicy`
(MaskablePPO) are SB3's multi-input MLP policies with the mixin; the set policies of
:mod:`agents.models.set_policy` include it too. Training only adds the check to ``predict``
(rollouts call the network directly).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch as th
from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy
from stable_baselines3.common.policies import MultiInputActorCriticPolicy

from agents.models.env_shape import spaces_env_shape

ENV_ARGUMENTS_KEY = "env_kwargs"
"""The policy keyword argument (and ``policy_kwargs`` entry) holding the env arguments."""


class EnvMismatchError(ValueError):
    """An observation from an env the model was not trained on; the message names the right env."""


def env_arguments(observation_space: Any, action_space: Any, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The env arguments of a model: ``env_kwargs`` completed with what its spaces say
    (``action_mode``, ``max_jobs``, ``lend_levels``, ``outlook``)."""
    try:
        shape = spaces_env_shape(observation_space, action_space)
    except ValueError:
        shape = {}
    return {**shape, **env_kwargs}


def env_spec(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The Gymnasium id (``dynamics`` picks ``DeepBoot-v0`` or ``-v1``) and the other keyword
    arguments of the env with ``arguments``."""
    kwargs = dict(arguments)
    return f"DeepBoot-{kwargs.pop('dynamics', None) or 'v0'}", kwargs


def env_call(arguments: Mapping[str, Any]) -> str:
    """``gym.make('DeepBoot-vN', k=v, ...)`` for env ``arguments``."""
    env_id, kwargs = env_spec(arguments)
    return "gym.make(" + ", ".join([repr(env_id), *(f"{k}={v!r}" for k, v in sorted(kwargs.items()))]) + ")"


def observation_mismatch(observation: Any, space: Any) -> str | None:
    """What about ``observation`` (single or batched) does not fit the Dict ``space``; None if it fits."""
    if not isinstance(observation, Mapping):
        return f"the observation is a {type(observation).__name__}, not a dict"
    if set(observation) != set(space.spaces):
        return f"the env's observation has entries {sorted(observation)}, the model's {sorted(space.spaces)}"
    for key, sub in space.spaces.items():
        shape = np.shape(observation[key])
        if shape != sub.shape and shape[1:] != sub.shape:
            return f"the env's observation entry {key!r} has shape {shape}, the model's {sub.shape}"
    return None


FUSED_ADAM: dict[str, Any] = {"eps": 1e-5, "fused": True}
"""The optimizer arguments of a policy whose ``policy_kwargs`` name none: SB3's own for Adam (eps
1e-5), in torch's fused kernel, one call for every parameter: on the CPU an update's Adam step
over the set network's 33 tensors took 160 us instead of 710 us for the loop over them."""


class DescribedPolicyMixin:
    """Keeps the env arguments (``env_kwargs``) and checks observations given to ``predict``.
    (The methods reach the host policy's SB3 attributes through ``policy: Any``.)"""

    def __init__(self, *args: Any, env_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.env_kwargs: dict[str, Any] = dict(env_kwargs or {})
        if kwargs.get("optimizer_kwargs") is None and kwargs.get("optimizer_class", th.optim.Adam) is th.optim.Adam:
            kwargs["optimizer_kwargs"] = dict(FUSED_ADAM)
        super().__init__(*args, **kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data: dict[str, Any] = super()._get_constructor_parameters()  # type: ignore[misc]
        data[ENV_ARGUMENTS_KEY] = dict(self.env_kwargs)
        return data

    def env_arguments(self) -> dict[str, Any]:
        """The env arguments the model needs (stored ones completed from its spaces)."""
        policy: Any = self
        return env_arguments(policy.observation_space, policy.action_space, self.env_kwargs)

    def obs_to_tensor(self, observation: Any) -> Any:
        """SB3's conversion, after checking that ``observation`` comes from the model's env.

        Raises:
            EnvMismatchError: naming the env the model needs.
        """
        policy: Any = self
        problem = observation_mismatch(observation, policy.observation_space)
        if problem is not None:
            raise EnvMismatchError(
                f"this model needs the env {env_call(self.env_arguments())}, but {problem} "
                "(agents.load_agent(path) returns the model with its env)"
            )
        return super().obs_to_tensor(observation)  # type: ignore[misc]


class DescribedMultiInputPolicy(DescribedPolicyMixin, MultiInputActorCriticPolicy):
    """SB3's multi-input MLP actor-critic for ``PPO``, with its env arguments."""

    deepboot_arch: ClassVar[str] = "mlp"
    """Plain-text marker of the architecture (stored in the checkpoint's JSON, read by the loader)."""
    deepboot_algo: ClassVar[str] = "ppo"
    """Plain-text marker of the algorithm."""


class MaskableDescribedMultiInputPolicy(DescribedPolicyMixin, MaskableMultiInputActorCriticPolicy):
    """sb3-contrib's multi-input MLP actor-critic for ``MaskablePPO``, with its env arguments."""

    deepboot_arch: ClassVar[str] = "mlp"
    """Plain-text marker of the architecture (stored in the checkpoint's JSON, read by the loader)."""
    deepboot_algo: ClassVar[str] = "maskable_ppo"
    """Plain-text marker of the algorithm."""


def described_policy_class(algo: str) -> type[DescribedMultiInputPolicy] | type[MaskableDescribedMultiInputPolicy]:
    """The multi-input MLP policy class of ``algo`` (``ppo`` or ``maskable_ppo``)."""
    return MaskableDescribedMultiInputPolicy if algo == "maskable_ppo" else DescribedMultiInputPolicy
