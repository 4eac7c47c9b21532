"""Build vectorised DeepBoot envs and PPO / MaskablePPO models with defaults for this env.

* :func:`make_vec_env_for`: SB3 ``make_vec_env`` over ``DeepBoot-v0`` (``DummyVecEnv``, each
  sub-env wrapped in ``Monitor``; sub-env ``i`` is seeded ``seed + i``), or groups of envs that
  play the same scenarios.
* :func:`build_model`: ``PPO`` or ``MaskablePPO`` (or :class:`agents.models.group_ppo.GroupPPO`) with a
  self-describing policy and :data:`~agents.hyperparameters.DEFAULT_HYPERPARAMS` overridden by
  the caller's hyperparameters (parsed and checked by :mod:`agents.hyperparameters`).

The algorithm and policy classes, the device and the network's size come from
:mod:`agents.models.algorithms`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from agents.errors import ConfigError
from agents.hyperparameters import (
    SET_POLICY_KWARGS,
    check_policy_kwargs_arch,
    model_kwargs,
    policy_arch,
    resolve_hyperparams,
)
from agents.models.algorithms import algo_class, check_parameter_count, policy_class, resolve_device
from deepboot_env.env import DeepBootEnv
from deepboot_env.limits import shown
from deepboot_env.pool import start_env_worker, stop_signals_blocked
from deepboot_env.ray_pool import RayBackendError

VEC_ENVS: tuple[str, ...] = ("dummy", "subproc", "ray")
"""Values of ``--vec-env``: SB3's ``DummyVecEnv`` and ``SubprocVecEnv``, and
:class:`agents.trainers.ray_vec_env.RayVecEnv` (one Ray actor per env)."""


# ----------------------------------------------------------------------------------- env / model
def make_vec_env_for(
    workload: Any = "train",
    n_envs: int = 1,
    seed: int | None = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    monitor_dir: str | None = None,
    vec_env: str = "dummy",
    address: str | None = None,
    group_size: int = 1,
    antithetic: bool = False,
) -> Any:
    """``n_envs`` copies of the env (``DeepBoot-v0``, or ``DeepBoot-v1`` with ``dynamics="v1"`` in
    ``env_kwargs``) in a ``DummyVecEnv`` (or :data:`VEC_ENVS`' other kinds), each wrapped in ``Monitor``.

    Args:
        workload: the env's ``workload`` argument (split name, shipped name, CSV path,
            :class:`~deepboot_env.sim.workload.Workload` or a list of them).
        n_envs: number of sub-envs (DummyVecEnv: the fastest choice on small machines).
        seed: sub-env ``i`` is reset with ``seed + i`` first.
        env_kwargs: other :class:`~deepboot_env.env.DeepBootEnv` arguments (``max_jobs`` ...).
        monitor_dir: where ``Monitor`` writes its CSVs (None: nowhere).
        vec_env: ``dummy`` (default; fastest on small machines, docs/environment.md §7) or
            ``subproc`` (one process per env; pays off only for slow steps) or ``ray`` (one Ray
            actor per env, :class:`agents.trainers.ray_vec_env.RayVecEnv`).
        address: ``ray`` only: the Ray cluster to join when no Ray session is open (None: a
            private local instance on 127.0.0.1).
        group_size: envs per same-scenario group: with a scenario sampler (a workload family),
            envs ``i`` and ``j`` with ``i // group_size == j // group_size`` play the same
            scenarios in the same order (common random numbers; their noise differs), and share
            one base-policy reference per scenario under ``relative_reward``.
        antithetic: with ``group_size`` > 1 (score mode): consecutive envs of a group also share
            their noise codes, the second of each pair mirrored (``DeepBootEnv``'s
            ``noise_stream`` and ``antithetic``: antithetic pairs for :class:`agents.models.group_ppo.GroupPPO`).

    Raises:
        ConfigError: for a bad ``n_envs`` or ``vec_env``, or a Ray that is missing or unreachable.
    """
    from stable_baselines3.common.env_util import make_vec_env  # lazy: SB3 is slow to import

    vec_env_cls, vec_env_kwargs = _vec_env_class(n_envs, vec_env, address, group_size)
    kwargs = {**(env_kwargs or {}), "workload": workload}
    try:
        if group_size > 1:
            fns = _grouped_env_fns(kwargs, int(n_envs), int(seed or 0), group_size, monitor_dir, antithetic)
            vec = vec_env_cls(fns, **vec_env_kwargs)
            vec.seed(seed)
            return vec
        return make_vec_env(
            DeepBootEnv,  # the class itself: the same env as gym.make of either id, without its version notice
            n_envs=int(n_envs),
            seed=seed,
            env_kwargs=kwargs,
            vec_env_cls=vec_env_cls,
            vec_env_kwargs=vec_env_kwargs,
            monitor_dir=monitor_dir,
        )
    except RayBackendError as exc:  # ray: missing or unreachable
        raise ConfigError(str(exc)) from None


def _vec_env_class(n_envs: int, vec_env: str, address: str | None, group_size: int) -> tuple[Any, dict[str, Any]]:
    """The VecEnv class ``vec_env`` names and its keyword arguments (``ray``: the cluster
    ``address``), once ``n_envs`` and ``group_size`` are checked.

    Raises:
        ConfigError: for a bad ``n_envs``, ``vec_env`` or ``group_size``.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv  # lazy: SB3 is slow to import

    if int(n_envs) < 1:
        raise ConfigError(f"n_envs must be >= 1, got {n_envs}")
    if vec_env not in VEC_ENVS:
        raise ConfigError(f"unknown vec_env {shown(vec_env)}; choose from {', '.join(VEC_ENVS)}")
    if group_size < 1 or int(n_envs) % group_size:
        raise ConfigError(f"group_size must be >= 1 and divide n_envs {n_envs}, got {group_size}")
    if vec_env == "subproc" and int(n_envs) > MAX_SUBPROC_ENVS:
        raise ConfigError(
            f"n_envs {n_envs} with vec_env subproc would start {n_envs} processes (the limit is {MAX_SUBPROC_ENVS}); "
            "use vec_env dummy or ray"
        )
    if vec_env == "ray":
        from agents.trainers.ray_vec_env import RayVecEnv  # lazy: SB3 is slow to import

        return RayVecEnv, {"address": address}
    return {"dummy": DummyVecEnv, "subproc": quiet_subproc_vec_env()}[vec_env], {}


MAX_SUBPROC_ENVS = 64
"""Most envs of ``--vec-env subproc``: one process each."""


def quiet_subproc_vec_env() -> type:
    """SB3's ``SubprocVecEnv`` whose workers ignore the stop signals
    (:func:`~deepboot_env.pool.start_env_worker`): a Ctrl-C reaches the whole process group, and
    workers that died of it first left the parent an ``EOFError`` instead of a clean stop."""
    from stable_baselines3.common.vec_env import SubprocVecEnv  # lazy: SB3 is slow to import

    class QuietSubprocVecEnv(SubprocVecEnv):
        def __init__(self, env_fns: list[Any], start_method: str | None = None) -> None:
            with stop_signals_blocked():  # the workers start with them held back, then ignore them
                super().__init__([partial(_env_in_worker, fn) for fn in env_fns], start_method)

    return QuietSubprocVecEnv


def _env_in_worker(make: Any) -> Any:
    """``make()`` in an env worker, once its signal dispositions are set."""
    start_env_worker()
    return make()


def _grouped_env_fns(
    env_kwargs: Mapping[str, Any],
    n_envs: int,
    seed: int,
    group_size: int,
    monitor_dir: str | None,
    antithetic: bool = False,
) -> list[Any]:
    """What ``make_vec_env`` builds (env ``i``'s action space seeded ``seed + i``, a ``Monitor``),
    with env ``i`` given the scenario stream of group ``i // group_size`` of ``seed`` (and, if
    ``antithetic``, the noise stream of its pair in the group, mirrored for the pair's second)."""
    from stable_baselines3.common.monitor import Monitor  # lazy: SB3 is slow to import

    def make(rank: int) -> Any:
        def init() -> Any:
            stream = int(np.random.SeedSequence([seed, rank // group_size]).generate_state(1)[0])
            group, member = divmod(rank, group_size)
            pairing: dict[str, Any] = {}
            if antithetic:
                noise = np.random.SeedSequence([seed, group, 1 + member // 2]).generate_state(1)[0]
                pairing = {"noise_stream": int(noise), "antithetic": member % 2 == 1}
            env = DeepBootEnv(scenario_stream=stream, **pairing, **env_kwargs)
            env.action_space.seed(seed + rank)
            if monitor_dir is not None:
                os.makedirs(monitor_dir, exist_ok=True)
            return Monitor(env, filename=None if monitor_dir is None else os.path.join(monitor_dir, str(rank)))

        return init

    return [make(rank) for rank in range(n_envs)]


def model_class(algo: str, kwargs: dict[str, Any], group_size: int) -> Any:
    """The model class of ``algo``: :class:`agents.models.group_ppo.GroupPPO` with the hyperparameter
    ``group_advantage: true`` (whose ``group_size`` and ``per_job_ratio`` it moves into
    ``kwargs``), else SB3's.

    Raises:
        ConfigError: ``group_advantage`` without ``ppo`` and groups of at least two envs, or
            ``per_job_ratio`` without ``group_advantage``.
    """
    per_job_ratio = kwargs.pop("per_job_ratio", False)
    if not kwargs.pop("group_advantage", False):
        if per_job_ratio:
            raise ConfigError("per_job_ratio needs group_advantage: true (agents.models.group_ppo.GroupPPO)")
        return algo_class(algo)
    if algo != "ppo" or group_size < 2:
        raise ConfigError(f"group_advantage needs --algo ppo and --group-size >= 2, got {algo} and {group_size}")
    from agents.models.group_ppo import GroupPPO  # lazy: SB3 is slow to import

    kwargs["group_size"], kwargs["per_job_ratio"] = group_size, per_job_ratio
    return GroupPPO


def build_model(
    algo: str,
    env: Any,
    device: str = "cpu",
    seed: int | None = 0,
    tensorboard_log: str | None = None,
    hyperparams: Mapping[str, Any] | None = None,
    verbose: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    group_size: int = 1,
) -> Any:
    """A new ``PPO`` / ``MaskablePPO`` on ``env``, with a self-describing policy
    (:mod:`agents.models.described_policy`: the saved model names the env it needs) and the one-tensor
    action distribution (:func:`agents.models.distributions.use_padded_distribution`).

    Args:
        algo: ``ppo`` or ``maskable_ppo``.
        env: a VecEnv (see :func:`make_vec_env_for`).
        device: ``auto``, ``cpu`` or ``cuda`` (see :func:`resolve_device`).
        seed: seeds torch, numpy and the action space.
        tensorboard_log: TensorBoard root (None: no SB3-configured TensorBoard output).
        hyperparams: raw overrides of :data:`DEFAULT_HYPERPARAMS` (``lin_<x>`` schedules,
            ``policy_kwargs`` dict or ``dict(...)`` string).
        verbose: SB3 verbosity.
        env_kwargs: the env arguments of ``env``, kept by the policy.
        group_size: envs per same-scenario group of ``env``; with the hyperparameter
            ``group_advantage: true`` (``ppo`` only), the model is a
            :class:`agents.models.group_ppo.GroupPPO` over groups of this size.

    Raises:
        ConfigError: unknown algo, device or hyperparameter, ``group_advantage`` without
            ``ppo`` and groups of at least two envs, or a network beyond
            :data:`~deepboot_env.limits.MAX_POLICY_PARAMETERS`.
    """
    from agents.models.described_policy import ENV_ARGUMENTS_KEY  # lazy: SB3 is slow to import
    from agents.models.distributions import use_padded_distribution  # lazy: SB3 is slow to import

    kwargs = model_kwargs(resolve_hyperparams(algo, hyperparams))
    cls = model_class(algo, kwargs, group_size)
    arch = policy_arch(kwargs.pop("policy"))
    given = kwargs.get("policy_kwargs") or {}
    check_policy_kwargs_arch(arch, given)
    sizes = SET_POLICY_KWARGS if arch == "set" else {}  # named, so that the checkpoint keeps them
    check_parameter_count(env.observation_space, env.action_space, arch, {**sizes, **given}, "hyperparameters")
    kwargs["policy_kwargs"] = {**sizes, **given, ENV_ARGUMENTS_KEY: dict(env_kwargs or {})}
    model = cls(
        policy_class(algo, arch),
        env,
        device=resolve_device(device),
        seed=seed,
        tensorboard_log=tensorboard_log,
        verbose=verbose,
        **kwargs,
    )
    use_padded_distribution(model.policy)
    return model
