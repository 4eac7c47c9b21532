"""The algorithms and policy classes of the project's models, and the size of a network before it is built.

* :func:`algo_class`: the SB3 class of an algorithm name (``ppo``, ``maskable_ppo``).
* :func:`policy_class`: the project's policy class of an algorithm and architecture (the set
  policy or the self-describing MLP).
* :func:`parameter_count` / :func:`check_parameter_count`: the size of the network a policy's
  ``policy_kwargs`` describe, counted before anything is allocated.
* :func:`resolve_device`: SB3's ``get_device`` (``auto`` -> ``cuda`` when available else ``cpu``; ``mps`` allowed).

They sit below the saved models (:mod:`agents.saved`), which build these classes when loading,
and the trainers (:mod:`agents.trainers`), which build them when starting.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from agents.errors import ConfigError
from agents.hyperparameters import SET_POLICY_KWARGS, check_algo
from deepboot_env.limits import MAX_POLICY_PARAMETERS, shown

if TYPE_CHECKING:  # imported where used: SB3 and torch are slow to import
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda", "mps")
"""Values of ``--device``."""


def algo_class(algo: str) -> type[PPO] | type[MaskablePPO]:
    """The SB3 class of ``algo`` (``PPO`` or sb3-contrib ``MaskablePPO``)."""
    check_algo(algo)
    if algo == "maskable_ppo":
        from sb3_contrib import MaskablePPO  # lazy: SB3 is slow to import

        return MaskablePPO
    from stable_baselines3 import PPO  # lazy: SB3 is slow to import

    return PPO


def resolve_device(device: str) -> str:
    """The torch device ``device`` names, through SB3's :func:`~stable_baselines3.common.utils.get_device`:
    ``auto`` -> ``cuda`` if available else ``cpu``; any torch device (``cpu``, ``cuda``,
    ``cuda:<n>``, ``mps``, ...) as itself, except ``cuda`` without a GPU, which falls back to
    ``cpu`` with a warning.

    Raises:
        ConfigError: for a string torch does not know as a device.
    """
    from stable_baselines3.common.utils import get_device  # lazy: SB3 is slow to import

    try:
        resolved = str(get_device(device))
    except RuntimeError:
        raise ConfigError(f"unknown device {shown(device)}; choose from {', '.join(DEVICES)} (or cuda:<n>)") from None
    if device != "auto" and resolved == "cpu" and device != "cpu":
        warnings.warn(f"--device {device} asked for but CUDA is not available; using cpu", RuntimeWarning, stacklevel=2)
    return resolved


def policy_class(algo: str, arch: str) -> type:
    """The project's policy class of ``algo`` and architecture ``arch``: the set policy of
    :mod:`agents.models.set_policy` (``set``) or the self-describing multi-input MLP of
    :mod:`agents.models.described_policy` (``mlp``)."""
    if arch == "set":
        from agents.models.set_policy import set_policy_class  # lazy: torch is slow to import

        return set_policy_class(algo)
    from agents.models.described_policy import described_policy_class  # lazy: SB3 is slow to import

    return described_policy_class(algo)


MLP_NET_ARCH: dict[str, list[int]] = {"pi": [64, 64], "vf": [64, 64]}
"""SB3's hidden layers of a multi-input actor-critic that names no ``net_arch``."""


def parameter_count(observation_space: Any, action_space: Any, arch: str, policy_kwargs: Mapping[str, Any]) -> int:
    """The parameters of the policy that ``policy_kwargs`` describe over these spaces (``arch``
    ``mlp`` or ``set``), counted without allocating them: the body (SB3's ``MlpExtractor`` or the
    :class:`~agents.models.set_policy.SetNetwork`) is built on torch's ``meta`` device, where a tensor has
    a shape and no storage, and the output layers are counted by arithmetic. A few numbers of
    SB3's (log standard deviations) are left out: the count is for refusing networks that do not
    fit in memory, not for bookkeeping."""
    import torch as th  # lazy: torch is slow to import

    activation = th.nn.ReLU  # the allowed activations hold no parameters
    with th.device("meta"):
        if arch == "set":
            from agents.models.set_policy import set_network  # lazy: torch is slow to import

            sizes = {key: policy_kwargs.get(key, value) for key, value in SET_POLICY_KWARGS.items()}
            body: Any = set_network(observation_space, action_space, activation, sizes)
            heads = body.latent_dim_vf + 1  # the value layer; the action layer is the identity
        else:
            from stable_baselines3.common.torch_layers import MlpExtractor  # lazy: SB3 is slow to import

            features = sum(int(np.prod(space.shape)) for space in observation_space.spaces.values())
            net_arch = policy_kwargs.get("net_arch") or MLP_NET_ARCH
            body = MlpExtractor(features, net_arch=net_arch, activation_fn=activation, device="meta")
            is_discrete = isinstance(action_space, spaces.MultiDiscrete)
            actions = int(np.sum(action_space.nvec)) if is_discrete else int(np.prod(action_space.shape))
            heads = (body.latent_dim_pi + 1) * actions + body.latent_dim_vf + 1
        return sum(weights.numel() for weights in body.parameters()) + heads


def check_parameter_count(
    observation_space: Any, action_space: Any, arch: str, policy_kwargs: Mapping[str, Any], source: str
) -> None:
    """Refuse a network of more than :data:`~deepboot_env.limits.MAX_POLICY_PARAMETERS`
    parameters before it is built (a 2 MB checkpoint naming ``net_arch: [12000, 12000]`` would
    otherwise take gigabytes first).

    Raises:
        ConfigError: ``"<source>: policy_kwargs describe a network of N parameters ..."``.
    """
    try:
        count = parameter_count(observation_space, action_space, arch, policy_kwargs)
    except (ValueError, TypeError, RuntimeError) as exc:  # sizes the network cannot be built with
        raise ConfigError(f"{source}: policy_kwargs do not describe a network ({shown(str(exc))})") from None
    if count > MAX_POLICY_PARAMETERS:
        raise ConfigError(
            f"{source}: policy_kwargs describe a network of {count:,} parameters, more than the limit of "
            f"{MAX_POLICY_PARAMETERS:,} (docs/usage.md §7.1)"
        )
