"""Build vectorised DeepBoot-v0 envs and PPO / MaskablePPO models with defaults for this env.

* :func:`make_vec_env_for`: SB3 ``make_vec_env`` over ``DeepBoot-v0`` (``DummyVecEnv``, each
  sub-env wrapped in ``Monitor``; sub-env ``i`` is seeded ``seed + i``).
* :func:`build_model`: ``PPO`` or ``MaskablePPO`` with ``MultiInputPolicy`` and
  :data:`DEFAULT_HYPERPARAMS` overridden by the caller's hyperparameters.
* :func:`parse_kv` / :func:`parse_value`: RL-Zoo-style ``k:v`` overrides (Python literals,
  ``lin_<x>`` linear schedules, ``policy_kwargs`` as data: a mapping, a ``{...}`` literal or an
  RL-Zoo ``dict(...)`` call, read without evaluating it, keys and activations from a whitelist).
* :func:`resolve_device`: SB3's ``get_device`` (``auto`` -> ``cuda`` when available else ``cpu``; ``mps`` allowed).
"""

from __future__ import annotations

import ast
import copy
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from deepboot_env.limits import MAX_ROLLOUT, shown

if TYPE_CHECKING:  # imported where used: SB3 and torch are slow to import
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

ALGOS: tuple[str, ...] = ("ppo", "maskable_ppo")
"""Algorithms :func:`build_model` accepts."""

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda", "mps")
"""Values of ``--device``."""

VEC_ENVS: tuple[str, ...] = ("dummy", "subproc", "ray")
"""Values of ``--vec-env``: SB3's ``DummyVecEnv`` and ``SubprocVecEnv``, and
:class:`agents.ray_vec_env.RayVecEnv` (one Ray actor per env)."""

DEFAULT_HYPERPARAMS: dict[str, dict[str, Any]] = {
    "ppo": {
        "policy": "MultiInputPolicy",
        "n_steps": 256,
        "batch_size": 256,
        "n_epochs": 10,
        "gamma": 0.995,
        "gae_lambda": 0.95,
        "clip_range": 0.2,
        "ent_coef": 0.01,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "learning_rate": 3e-4,
        "policy_kwargs": {"net_arch": {"pi": [256, 256], "vf": [256, 256]}},
    },
}
DEFAULT_HYPERPARAMS["maskable_ppo"] = copy.deepcopy(DEFAULT_HYPERPARAMS["ppo"])
"""Starting hyperparameters per algorithm (docs/environment.md §7): ``n_steps`` is per env; long
episodes (~1,000-3,000 decisions) call for gamma 0.995."""

HYPERPARAM_TYPES: dict[str, type | tuple[type, ...]] = {
    "policy": str,
    "n_steps": int,
    "batch_size": int,
    "n_epochs": int,
    "gamma": float,
    "gae_lambda": float,
    "ent_coef": float,
    "vf_coef": float,
    "max_grad_norm": float,
    "normalize_advantage": bool,
    "target_kl": (float, type(None)),
    "stats_window_size": int,
    "learning_rate": (float, str),
    "clip_range": (float, str),
    "clip_range_vf": (float, str, type(None)),
    "policy_kwargs": (dict, str),
    "group_advantage": bool,
}
"""Hyperparameters accepted (and their raw types: schedules are ``lin_<x>`` strings)."""


class ConfigError(ValueError):
    """A bad flag value, ``k:v`` pair or configuration entry (one-line message)."""


# ------------------------------------------------------------------------------------ k:v parsing
_YAML_CONSTANTS: dict[str, Any] = {"true": True, "false": False, "null": None}


def parse_value(text: str) -> Any:
    """A ``k:v`` value: a Python literal (``3e-4``, ``[64, 64]``, ``True``, ``None``, ``{'a': 1}``),
    a YAML spelling of those constants as the configuration files write them (``true``,
    ``false``, ``null``, any case), or, failing that, the text itself (``lin_3e-4``,
    ``dict(net_arch=[64])``, ``afe``)."""
    constant = _YAML_CONSTANTS.get(text.strip().lower(), text)
    if constant is not text:
        return constant
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def parse_kv(items: Sequence[str] | None, what: str = "--hyperparams") -> dict[str, Any]:
    """Parse ``["k:v", ...]`` into a dict (values via :func:`parse_value`).

    Raises:
        ConfigError: for an item without ``:`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = str(item).partition(":")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{what}: expected key:value, got {shown(item)}")
        out[key] = parse_value(value.strip())
    return out


def linear_schedule(initial: float) -> Any:
    """Linear decay from ``initial`` (start of training) to 0 (end), as SB3 schedules."""
    from stable_baselines3.common.utils import LinearSchedule

    return LinearSchedule(float(initial), 0.0, 1.0)


def _schedule(key: str, value: Any) -> Any:
    if isinstance(value, str):
        try:  # YAML reads 3e-4 (no dot / exponent sign) as a string
            return float(value)
        except ValueError:
            pass
        if value.startswith("lin_"):
            try:
                return linear_schedule(float(value[4:]))
            except ValueError:
                raise ConfigError(f"{key}: bad linear schedule {shown(value)} (expected lin_<number>)") from None
        raise ConfigError(f"{key}: expected a number or lin_<number>, got {shown(value)}")
    return value


ACTIVATIONS: tuple[str, ...] = ("ReLU", "Tanh", "ELU", "LeakyReLU", "GELU", "SiLU", "Sigmoid", "Mish")
"""Activation functions ``policy_kwargs`` may name (classes of ``torch.nn``)."""

POLICY_KWARGS_KEYS: dict[str, str] = {
    "net_arch": "a list of layer sizes, or a dict {pi: [...], vf: [...]}",
    "activation_fn": f"one of {', '.join(ACTIVATIONS)} (optionally as nn.<name>)",
    "ortho_init": "true or false",
    "share_features_extractor": "true or false",
    "normalize_images": "true or false",
    "log_std_init": "a number",
    "embed_dim": "an integer >= 1 (set policy)",
    "attention_heads": "an integer >= 1 dividing embed_dim (set policy)",
    "attention_layers": "an integer >= 0 (set policy)",
}
"""The ``policy_kwargs`` keys a config or a checkpoint may set, and what each takes."""

POLICY_ARCHS: dict[str, str] = {"mlp": "MultiInputPolicy", "set": "SetPolicy"}
"""``--policy-arch`` -> the ``policy`` hyperparameter: SB3's multi-input MLP over the flattened
slots, or the set-based actor-critic of :mod:`agents.set_policy`."""

SET_SIZE_MINIMUMS: dict[str, int] = {"embed_dim": 1, "attention_heads": 1, "attention_layers": 0}
"""The set policy's size arguments and their smallest values (checked here and by the policy)."""

ARCH_ONLY_KEYS: dict[str, tuple[str, ...]] = {
    "mlp": ("net_arch", "share_features_extractor"),
    "set": tuple(SET_SIZE_MINIMUMS),
}
"""``policy_kwargs`` keys that only one architecture takes."""

_ACTIVATION_REPR = re.compile(
    r"^(?:<class '[\w.]*?\.?)?(?:(?:th|torch)\.)?(?:nn\.)?(?:modules\.activation\.)?(\w+)'?>?$"
)


def _layer_sizes(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)


def _check_policy_kwarg(key: str, value: Any) -> Any:
    """``value`` for ``key``, checked (activation names become ``torch.nn`` classes)."""
    if key not in POLICY_KWARGS_KEYS:
        raise ConfigError(f"policy_kwargs: unknown key {shown(key)}; allowed: {', '.join(POLICY_KWARGS_KEYS)}")
    if key == "net_arch":
        ok = _layer_sizes(value) or (
            isinstance(value, dict) and set(value) <= {"pi", "vf"} and all(_layer_sizes(v) for v in value.values())
        )
    elif key == "activation_fn":
        m = _ACTIVATION_REPR.match(str(getattr(value, "__name__", value)))
        name = m.group(1) if m else ""
        if name not in ACTIVATIONS:
            raise ConfigError(f"policy_kwargs: activation_fn {shown(value)} is not {POLICY_KWARGS_KEYS[key]}")
        import torch as th

        return getattr(th.nn, name)
    elif key == "log_std_init":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif key in ARCH_ONLY_KEYS["set"]:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= SET_SIZE_MINIMUMS[key]
    else:
        ok = isinstance(value, bool)
    if not ok:
        raise ConfigError(f"policy_kwargs: {key} must be {POLICY_KWARGS_KEYS[key]}, got {shown(value)}")
    return value


def _literal(node: ast.expr) -> Any:
    """A literal, or a dotted name (``nn.ReLU``) as text; anything else is refused."""
    if isinstance(node, ast.Attribute | ast.Name):
        return ast.unparse(node)
    return ast.literal_eval(node)


def _parse_policy_kwargs_text(text: str) -> dict[str, Any]:
    """A ``{...}`` literal or an RL-Zoo ``dict(key=value, ...)`` call, read as data (never run)."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "dict" and not tree.args:
            if any(kw.arg is None for kw in tree.keywords):
                raise ValueError("** is not allowed")
            return {str(kw.arg): _literal(kw.value) for kw in tree.keywords}
        if isinstance(tree, ast.Dict):
            return {
                ast.literal_eval(k): _literal(v) for k, v in zip(tree.keys, tree.values, strict=True) if k is not None
            }
        raise ValueError("expected {...} or dict(...)")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ConfigError(f"policy_kwargs: cannot read {shown(text)} as data ({exc})") from None


def policy_kwargs_from_mapping(value: Any, from_repr: bool = False) -> dict[str, Any]:
    """``policy_kwargs`` from a mapping or its text, checked against :data:`POLICY_KWARGS_KEYS`.

    Nothing is evaluated: text is parsed as a literal (``{'net_arch': [64, 64]}``) or an RL-Zoo
    ``dict(net_arch=[64, 64], activation_fn=nn.ReLU)`` call; activation functions are looked up
    by name. With ``from_repr`` the values are the ``repr`` texts a checkpoint stores.

    Raises:
        ConfigError: for text that is not such data, an unknown key or a bad value.
    """
    if isinstance(value, str):
        value = _parse_policy_kwargs_text(value)
    if not isinstance(value, Mapping):
        raise ConfigError(f"policy_kwargs: expected a mapping, got {shown(value)}")
    out = {}
    for key, item in value.items():
        if from_repr and key != "activation_fn" and isinstance(item, str):
            try:
                item = ast.literal_eval(item)
            except (ValueError, SyntaxError):
                raise ConfigError(f"policy_kwargs: {key} is not a literal ({shown(item)})") from None
        out[str(key)] = _check_policy_kwarg(str(key), item)
    return out


def policy_arch(policy: str) -> str:
    """The architecture (``mlp`` or ``set``) of a ``policy`` hyperparameter.

    Raises:
        ConfigError: for a policy name that is neither architecture's.
    """
    for arch, name in POLICY_ARCHS.items():
        if policy == name:
            return arch
    raise ConfigError(f"policy: unknown policy {shown(policy)}; choose from {', '.join(POLICY_ARCHS.values())}")


def check_policy_kwargs_arch(arch: str, policy_kwargs: Mapping[str, Any]) -> None:
    """Refuse ``policy_kwargs`` keys of the other architecture (SB3 would fail with a traceback).

    Raises:
        ConfigError: naming the key and the architecture that takes it.
    """
    for other, keys in ARCH_ONLY_KEYS.items():
        wrong = [k for k in keys if k in policy_kwargs]
        if other != arch and wrong:
            raise ConfigError(f"policy_kwargs: {', '.join(wrong)} is for --policy-arch {other}, not {arch}")
    if arch == "set":
        from agents.set_policy import SET_POLICY_KWARGS

        sizes = {**SET_POLICY_KWARGS, **{k: v for k, v in policy_kwargs.items() if k in SET_POLICY_KWARGS}}
        if sizes["embed_dim"] % sizes["attention_heads"]:
            raise ConfigError(
                f"policy_kwargs: embed_dim {sizes['embed_dim']} must be a multiple of attention_heads "
                f"{sizes['attention_heads']}"
            )


def switch_arch(hyperparams: dict[str, Any], arch: str, keep_policy_kwargs: bool) -> None:
    """Set ``hyperparams`` (raw) to the architecture ``arch``: its ``policy`` name, and unless
    ``keep_policy_kwargs`` (the user gave them) ``policy_kwargs`` without the other architecture's
    keys (a preset's MLP ``net_arch`` does not describe a set network).

    Raises:
        ConfigError: for an unknown architecture.
    """
    if arch not in POLICY_ARCHS:
        raise ConfigError(f"unknown --policy-arch {shown(arch)}; choose from {', '.join(POLICY_ARCHS)}")
    hyperparams["policy"] = POLICY_ARCHS[arch]
    kwargs = hyperparams.get("policy_kwargs")
    if keep_policy_kwargs or kwargs is None:
        return
    if isinstance(kwargs, str):
        kwargs = _parse_policy_kwargs_text(kwargs)
    foreign = {key for other, keys in ARCH_ONLY_KEYS.items() if other != arch for key in keys}
    hyperparams["policy_kwargs"] = {k: v for k, v in dict(kwargs).items() if k not in foreign}


def check_hyperparams(hyperparams: Mapping[str, Any]) -> None:
    """Reject unknown keys and values of the wrong type (before any model is built).

    Raises:
        ConfigError: naming the offending key.
    """
    if "policy" in hyperparams and isinstance(hyperparams["policy"], str):
        policy_arch(hyperparams["policy"])
    for key, value in hyperparams.items():
        if key not in HYPERPARAM_TYPES:
            raise ConfigError(f"unknown hyperparameter {shown(key)}; known: {', '.join(sorted(HYPERPARAM_TYPES))}")
        want = HYPERPARAM_TYPES[key]
        ok = isinstance(value, want)
        if want is float or (isinstance(want, tuple) and float in want):
            ok = ok or (isinstance(value, int) and not isinstance(value, bool))
        if want is int and isinstance(value, bool):
            ok = False
        if not ok:
            raise ConfigError(f"hyperparameter {key}: bad value {shown(value)}")
        check_hyperparam_range(key, value)


HYPERPARAM_RANGES: dict[str, tuple[float, float]] = {
    "n_steps": (1, MAX_ROLLOUT),
    "batch_size": (1, MAX_ROLLOUT),
    "n_epochs": (1, 10_000),
    "stats_window_size": (1, 1_000_000),
    "gamma": (0.0, 1.0),
    "gae_lambda": (0.0, 1.0),
    "ent_coef": (0.0, math.inf),
    "vf_coef": (0.0, math.inf),
    "max_grad_norm": (0.0, math.inf),
    "target_kl": (0.0, math.inf),
    "learning_rate": (0.0, math.inf),
    "clip_range": (0.0, math.inf),
    "clip_range_vf": (0.0, math.inf),
}
"""The closed range of each numeric hyperparameter (a schedule's start value for schedules);
an infinite end means any finite number. Zero is refused where it stops learning (learning_rate,
clip ranges, target_kl, max_grad_norm)."""

_POSITIVE = ("learning_rate", "clip_range", "clip_range_vf", "target_kl", "max_grad_norm")


def check_hyperparam_range(key: str, value: Any) -> None:
    """Refuse a number (or a schedule's start) of ``key`` outside :data:`HYPERPARAM_RANGES`,
    NaN and infinities included.

    Raises:
        ConfigError: naming the key, the range and the value (cut).
    """
    if key in ("learning_rate", "clip_range", "clip_range_vf") and isinstance(value, str):
        schedule = _schedule(key, value)
        value = schedule if isinstance(schedule, float) else schedule(1.0)
    if key not in HYPERPARAM_RANGES or value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"hyperparameter {key}: must be a number, got {shown(value)}")
    low, high = HYPERPARAM_RANGES[key]
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    finite = math.isfinite(number)
    if not (finite and low <= number <= high) or (key in _POSITIVE and number <= 0):
        bound = f"> {low:g}" if key in _POSITIVE else f">= {low:g}"
        what = f"a finite number {bound}" if high == math.inf else f"from {low:g} to {high:g}"
        raise ConfigError(f"hyperparameter {key}: must be {what}, got {shown(value)}")


def resolve_hyperparams(algo: str, *overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """:data:`DEFAULT_HYPERPARAMS` for ``algo`` updated by each mapping in turn (raw values).

    ``policy_kwargs`` dicts are replaced, not merged.
    """
    check_algo(algo)
    out = copy.deepcopy(DEFAULT_HYPERPARAMS[algo])
    for mapping in overrides:
        if mapping:
            out.update(copy.deepcopy(dict(mapping)))
    check_hyperparams(out)
    return out


def model_kwargs(hyperparams: Mapping[str, Any]) -> dict[str, Any]:
    """Raw hyperparameters -> constructor keyword arguments (schedules and policy_kwargs built)."""
    check_hyperparams(hyperparams)
    out: dict[str, Any] = {}
    for key, value in hyperparams.items():
        if key in ("learning_rate", "clip_range", "clip_range_vf"):
            out[key] = _schedule(key, value)
        elif key == "policy_kwargs":
            out[key] = policy_kwargs_from_mapping(value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------- algo / device
def check_algo(algo: str) -> str:
    """Return ``algo`` if known.

    Raises:
        ConfigError: for an unknown algorithm, listing the known ones.
    """
    if algo not in ALGOS:
        raise ConfigError(f"unknown algo {shown(algo)}; choose from {', '.join(ALGOS)}")
    return algo


def algo_class(algo: str) -> type[PPO] | type[MaskablePPO]:
    """The SB3 class of ``algo`` (``PPO`` or sb3-contrib ``MaskablePPO``)."""
    check_algo(algo)
    if algo == "maskable_ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    from stable_baselines3 import PPO

    return PPO


def resolve_device(device: str) -> str:
    """The torch device ``device`` names, through SB3's :func:`~stable_baselines3.common.utils.get_device`:
    ``auto`` -> ``cuda`` if available else ``cpu``; any torch device (``cpu``, ``cuda``,
    ``cuda:<n>``, ``mps``, ...) as itself, except ``cuda`` without a GPU, which falls back to
    ``cpu`` with a warning.

    Raises:
        ConfigError: for a string torch does not know as a device.
    """
    from stable_baselines3.common.utils import get_device

    try:
        resolved = str(get_device(device))
    except RuntimeError:
        raise ConfigError(f"unknown device {shown(device)}; choose from {', '.join(DEVICES)} (or cuda:<n>)") from None
    if device != "auto" and resolved == "cpu" and device != "cpu":
        warnings.warn(f"--device {device} asked for but CUDA is not available; using cpu", RuntimeWarning, stacklevel=2)
    return resolved


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
            actor per env, :class:`agents.ray_vec_env.RayVecEnv`).
        address: ``ray`` only: the Ray cluster to join when no Ray session is open (None: a
            private local instance on 127.0.0.1).
        group_size: envs per same-scenario group: with a scenario sampler (a workload family),
            envs ``i`` and ``j`` with ``i // group_size == j // group_size`` play the same
            scenarios in the same order (common random numbers; their noise differs), and share
            one base-policy reference per scenario under ``relative_reward``.
        antithetic: with ``group_size`` > 1 (score mode): consecutive envs of a group also share
            their noise codes, the second of each pair mirrored (``DeepBootEnv``'s
            ``noise_stream`` and ``antithetic``: antithetic pairs for :class:`agents.group_ppo.GroupPPO`).

    Raises:
        ConfigError: for a bad ``n_envs`` or ``vec_env``, or a Ray that is missing or unreachable.
    """
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from deepboot_env.env import DeepBootEnv
    from deepboot_env.ray_pool import RayBackendError

    if int(n_envs) < 1:
        raise ConfigError(f"n_envs must be >= 1, got {n_envs}")
    if vec_env not in VEC_ENVS:
        raise ConfigError(f"unknown vec_env {shown(vec_env)}; choose from {', '.join(VEC_ENVS)}")
    if group_size < 1 or int(n_envs) % group_size:
        raise ConfigError(f"group_size must be >= 1 and divide n_envs {n_envs}, got {group_size}")
    kwargs = dict(env_kwargs or {})
    kwargs["workload"] = workload
    vec_env_cls: Any = {"dummy": DummyVecEnv, "subproc": SubprocVecEnv}.get(vec_env)
    vec_env_kwargs: dict[str, Any] = {}
    if vec_env == "ray":
        from agents.ray_vec_env import RayVecEnv

        vec_env_cls, vec_env_kwargs = RayVecEnv, {"address": address}
    try:
        if group_size > 1:
            fns = _grouped_env_fns(kwargs, int(n_envs), int(seed or 0), group_size, monitor_dir, antithetic)
            vec = (vec_env_cls or DummyVecEnv)(fns, **vec_env_kwargs)
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
    import os

    from stable_baselines3.common.monitor import Monitor

    from deepboot_env.env import DeepBootEnv

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
    (:mod:`agents.described_policy`: the saved model names the env it needs) and the one-tensor
    action distribution (:func:`agents.distributions.use_padded_distribution`).

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
            :class:`agents.group_ppo.GroupPPO` over groups of this size.

    Raises:
        ConfigError: unknown algo, device or hyperparameter, or ``group_advantage`` without
            ``ppo`` and groups of at least two envs.
    """
    from agents.described_policy import ENV_ARGUMENTS_KEY, described_policy_class

    cls = algo_class(algo)
    raw = resolve_hyperparams(algo, hyperparams)
    kwargs = model_kwargs(raw)
    if kwargs.pop("group_advantage", False):
        if algo != "ppo" or group_size < 2:
            raise ConfigError(f"group_advantage needs --algo ppo and --group-size >= 2, got {algo} and {group_size}")
        from agents.group_ppo import GroupPPO

        cls, kwargs["group_size"] = GroupPPO, group_size
    arch = policy_arch(kwargs.pop("policy"))
    check_policy_kwargs_arch(arch, kwargs.get("policy_kwargs") or {})
    if arch == "set":
        from agents.set_policy import set_policy_class

        policy: Any = set_policy_class(algo)
    else:
        policy = described_policy_class(algo)
    kwargs["policy_kwargs"] = {**(kwargs.get("policy_kwargs") or {}), ENV_ARGUMENTS_KEY: dict(env_kwargs or {})}
    model = cls(
        policy,
        env,
        device=resolve_device(device),
        seed=seed,
        tensorboard_log=tensorboard_log,
        verbose=verbose,
        **kwargs,
    )
    from agents.distributions import use_padded_distribution

    use_padded_distribution(model.policy)
    return model
