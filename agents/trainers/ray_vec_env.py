"""``--vec-env ray``: a stable-baselines3 ``VecEnv`` whose sub-envs are Ray actors.

:class:`RayVecEnv` has the semantics of SB3's ``SubprocVecEnv`` (SB3 2.x): sub-env ``i`` is
reset with the seed and options set by ``seed()`` / ``set_options()`` (used once), a finished
episode's last observation goes to ``info["terminal_observation"]`` and the sub-env is reset at
once, ``env_method`` / ``get_attr`` / ``has_attr`` look through the wrappers
(``get_wrapper_attr``), ``set_attr`` sets on the outer wrapper; rewards are ``float32`` as
``DummyVecEnv`` gives them (``SubprocVecEnv`` gives ``float64``). Each call to the sub-envs
(``step``, ``reset``, ``env_method("action_masks")`` ...) is sent to every actor at once and
gathered with one ``ray.get``: one round trip.

One actor per sub-env, spread over the cluster's nodes (``SPREAD``), each holding
``num_cpus`` CPUs (default 1). Ray is reached through :func:`deepboot_env.ray_pool.ray_session`:
the session open in this process (a Tune trial's, or the caller's ``ray.init``) if any, else a
private local instance of ``n_envs`` CPUs on 127.0.0.1 (``address=None``) or the cluster at
``address``; a session opened here is shut down by :meth:`RayVecEnv.close`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn
from stable_baselines3.common.vec_env.patch_gym import _patch_env
from stable_baselines3.common.vec_env.subproc_vec_env import _stack_obs

from deepboot_env.ray_pool import RayBackendError, check_ray, ray_session

INSTALL_HINT = "--vec-env ray needs Ray, an optional extra: pip install -e '.[ray]' (pip install 'ray[tune]==2.60.0')"
"""The one line shown when Ray is not installed."""


class EnvWorker:
    """One sub-env inside a Ray actor: the commands of SB3's ``SubprocVecEnv`` worker, as methods."""

    def __init__(self, env_fn: Callable[[], gym.Env]) -> None:
        self.env = _patch_env(env_fn())
        self.reset_info: dict[str, Any] = {}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, dict[str, Any], dict[str, Any]]:
        """Step; on the episode's end, keep its last observation in the info and reset. Also
        returns the info of the latest reset (as ``DummyVecEnv.reset_infos`` holds it)."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        done = terminated or truncated
        info["TimeLimit.truncated"] = truncated and not terminated
        if done:
            info["terminal_observation"] = observation
            observation, self.reset_info = self.env.reset()
        return observation, reward, done, info, self.reset_info

    def reset(self, seed: int | None, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Reset with ``seed`` and, when not empty, ``options``."""
        maybe_options = {"options": options} if options else {}
        observation, self.reset_info = self.env.reset(seed=seed, **maybe_options)
        return observation, self.reset_info

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """The observation and action spaces."""
        return self.env.observation_space, self.env.action_space

    def env_method(self, name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """``name(*args, **kwargs)`` of the env, looked up through its wrappers."""
        return self.env.get_wrapper_attr(name)(*args, **kwargs)

    def get_attr(self, name: str) -> Any:
        """An attribute of the env, looked up through its wrappers."""
        return self.env.get_wrapper_attr(name)

    def has_attr(self, name: str) -> bool:
        """Whether the env or a wrapper has the attribute."""
        try:
            self.env.get_wrapper_attr(name)
        except AttributeError:
            return False
        return True

    def set_attr(self, name: str, value: Any) -> None:
        """Set an attribute of the outer wrapper (as ``SubprocVecEnv`` does)."""
        setattr(self.env, name, value)

    def is_wrapped(self, wrapper_class: type[gym.Wrapper]) -> bool:
        """Whether the env is wrapped in ``wrapper_class``."""
        return is_wrapped(self.env, wrapper_class)

    def render(self) -> Any:
        """The env's rendering."""
        return self.env.render()

    def close(self) -> None:
        """Close the env."""
        self.env.close()


class RayVecEnv(VecEnv):
    """SB3 ``VecEnv`` over one Ray actor per env (see the module).

    Args:
        env_fns: functions building each sub-env (as SB3's ``make_vec_env`` passes them).
        address: the Ray cluster to join when no session is open (None: a private local instance).
        num_cpus: CPUs each actor holds.

    Raises:
        RayBackendError: if Ray is missing or unreachable (one line).
    """

    def __init__(self, env_fns: list[Callable[[], gym.Env]], address: str | None = None, num_cpus: float = 1) -> None:
        try:
            check_ray()
        except RayBackendError:
            raise RayBackendError(INSTALL_HINT) from None
        self.closed = False
        self._stack = contextlib.ExitStack()
        self._ray = self._stack.enter_context(ray_session(address, len(env_fns)))
        try:
            actor = self._ray.remote(num_cpus=num_cpus, scheduling_strategy="SPREAD")(EnvWorker)
            self.actors = [actor.remote(env_fn) for env_fn in env_fns]
            self._pending: list[Any] = []
            observation_space, action_space = self._ray.get(self.actors[0].spaces.remote())
            super().__init__(len(env_fns), observation_space, action_space)
        except BaseException:
            self._stack.close()
            raise

    def _call(self, method: str, *args: Any, indices: VecEnvIndices = None) -> list[Any]:
        """``method(*args)`` on the actors of ``indices``, in one round trip."""
        return self._ray.get([getattr(self.actors[i], method).remote(*args) for i in self._get_indices(indices)])

    def step_async(self, actions: np.ndarray) -> None:
        """Send each actor its action (the results are gathered by :meth:`step_wait`)."""
        self._pending = [actor.step.remote(action) for actor, action in zip(self.actors, actions, strict=True)]

    def step_wait(self) -> VecEnvStepReturn:
        """The stacked observations, rewards, dones and the infos of the steps sent."""
        results = self._ray.get(self._pending)
        self._pending = []
        obs, rews, dones, infos, reset_infos = zip(*results, strict=True)
        self.reset_infos = list(reset_infos)
        rewards = np.array(rews, dtype=np.float32)  # DummyVecEnv's dtypes (a training run matches one on it)
        return (
            _stack_obs(obs, self.observation_space),
            rewards,
            np.array(dones, dtype=bool),
            list(map(_writable, infos)),
        )

    def reset(self) -> VecEnvObs:
        """Reset every sub-env with its pending seed and options (then forgotten)."""
        results = self._ray.get(
            [actor.reset.remote(self._seeds[i], self._options[i]) for i, actor in enumerate(self.actors)]
        )
        obs, reset_infos = zip(*results, strict=True)
        self.reset_infos = list(reset_infos)
        self._reset_seeds()  # seeds and options are used once
        self._reset_options()
        return _stack_obs(obs, self.observation_space)

    def close(self) -> None:
        """Close the envs, end the actors and a Ray session opened here."""
        if self.closed:
            return
        try:
            if self._pending:
                self._ray.get(self._pending)
            self._call("close")
            for actor in self.actors:
                self._ray.kill(actor)
        finally:
            self.closed = True
            self._stack.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each sub-env's ``rgb_array`` rendering (None for other render modes)."""
        if self.render_mode != "rgb_array":
            return [None] * self.num_envs
        return self._call("render")

    def has_attr(self, attr_name: str) -> bool:
        """Whether every sub-env has the attribute (through its wrappers)."""
        return all(self._call("has_attr", attr_name))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute of the sub-envs of ``indices`` (through their wrappers)."""
        return self._call("get_attr", attr_name, indices=indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set the attribute on the outer wrapper of the sub-envs of ``indices``."""
        self._call("set_attr", attr_name, value, indices=indices)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        """The method's results on the sub-envs of ``indices``, in one round trip (``action_masks``)."""
        return self._call("env_method", method_name, method_args, method_kwargs, indices=indices)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """Whether each sub-env of ``indices`` is wrapped in ``wrapper_class``."""
        return self._call("is_wrapped", wrapper_class, indices=indices)


def _writable(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with a writable copy of a ``terminal_observation`` Ray handed back read-only."""
    terminal = info.get("terminal_observation")
    if isinstance(terminal, dict):
        info["terminal_observation"] = {k: np.array(v) for k, v in terminal.items()}
    elif isinstance(terminal, np.ndarray):
        info["terminal_observation"] = np.array(terminal)
    return info
