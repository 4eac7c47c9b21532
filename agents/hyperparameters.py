"""Hyperparameters of a PPO / MaskablePPO run: defaults, ``k:v`` parsing and checks.

* :data:`DEFAULT_HYPERPARAMS` per algorithm (:data:`ALGOS`), overridden in turn by a preset and
  the command line (:func:`resolve_hyperparams`), then made constructor arguments
  (:func:`model_kwargs`: schedules and ``policy_kwargs`` built).
* :func:`parse_kv` / :func:`parse_value`: RL-Zoo-style ``k:v`` overrides (Python literals,
  ``lin_<x>`` linear schedules, ``policy_kwargs`` as data: a mapping, a ``{...}`` literal or an
  RL-Zoo ``dict(...)`` call, read without evaluating it, keys and activations from a whitelist:
  :func:`policy_kwargs_from_mapping`).
* :func:`check_hyperparams` / :func:`check_hyperparam_range`: known keys, types and ranges
  (:data:`HYPERPARAM_TYPES`, :data:`HYPERPARAM_RANGES`), checked before any model is built and
  again on every checkpoint loaded (:mod:`agents.saved.checkpoint`).
* The policy architectures (:data:`POLICY_ARCHS`: ``mlp``, ``set``) and the ``policy_kwargs``
  keys each takes (:func:`check_policy_kwargs_arch`, :func:`switch_arch`).

Every bad value is a :class:`~agents.errors.ConfigError` (one line naming the key). Importing the
module loads neither torch nor SB3 (``train_policy.py --help`` reads its tables); they are imported
where a linear schedule or an activation function is built.
"""

from __future__ import annotations

import ast
import copy
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agents.errors import ConfigError
from deepboot_env.limits import MAX_ROLLOUT, shown

ALGOS: tuple[str, ...] = ("ppo", "maskable_ppo")
"""Algorithms :func:`agents.trainers.ppo.build_model` accepts."""


def check_algo(algo: str) -> str:
    """Return ``algo`` if known.

    Raises:
        ConfigError: for an unknown algorithm, listing the known ones.
    """
    if algo not in ALGOS:
        raise ConfigError(f"unknown algo {shown(algo)}; choose from {', '.join(ALGOS)}")
    return algo


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
    "per_job_ratio": bool,
}
"""Hyperparameters accepted (and their raw types: schedules are ``lin_<x>`` strings)."""


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
    from stable_baselines3.common.utils import LinearSchedule  # lazy: SB3 is slow to import

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
    "pool_layers": "an integer >= 0 (set policy; pooled-context blocks after the attention blocks)",
    "application_scores": (
        "0, 1 or 2 (set policy; 1: one learned score per application; 2: plus a linear score of the job's features)"
    ),
}
"""The ``policy_kwargs`` keys a config or a checkpoint may set, and what each takes."""

POLICY_ARCHS: dict[str, str] = {"mlp": "MultiInputPolicy", "set": "SetPolicy"}
"""``--policy-arch`` -> the ``policy`` hyperparameter: SB3's multi-input MLP over the flattened
slots, or the set-based actor-critic of :mod:`agents.models.set_policy`."""

SET_POLICY_KWARGS: dict[str, int] = {
    "embed_dim": 64,
    "attention_heads": 4,
    "attention_layers": 0,
    "application_scores": 0,
    "pool_layers": 1,
}
"""Default sizes of the set network (``policy_kwargs`` of ``--policy-arch set``, :mod:`agents.models.set_policy`):
one pooled-context block and no attention since session 46 (as fast as the set learner's target
asks, and it learns as well as the attention block on the README's recipe: docs/results.md §7).
A model is built with all of them named (:func:`agents.trainers.ppo.build_model`), so its checkpoint
keeps its sizes whatever the defaults become."""

TRAINER_FIELD = "deepboot_trainer"
"""The field of a saved model's ``data`` naming the trainer beyond SB3's algorithm (plain JSON,
written by :meth:`agents.models.group_ppo.GroupPPO.save`: ``{"algorithm": "group_ppo", "group_size": 2,
"per_job_ratio": true}``), which the loader reads back (:func:`agents.saved.checkpoint.saved_trainer`)."""

LEGACY_SET_SIZES: dict[str, int] = {"attention_layers": 1, "pool_layers": 0}
"""What a set checkpoint saved before session 46 had where it names no size: one attention block
(the default then) and no pooled-context block (there were none); the loader fills them in."""

SET_SIZE_MINIMUMS: dict[str, int] = {
    "embed_dim": 1,
    "attention_heads": 1,
    "attention_layers": 0,
    "application_scores": 0,
    "pool_layers": 0,
}
"""The set policy's size arguments and their smallest values (checked here and by the policy)."""

SET_SIZE_MAXIMUMS: dict[str, int] = {"application_scores": 2}
"""The set policy's arguments that also have a largest value."""

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
        import torch as th  # lazy: torch is slow to import

        return getattr(th.nn, name)
    elif key == "log_std_init":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif key in ARCH_ONLY_KEYS["set"]:
        high = SET_SIZE_MAXIMUMS.get(key, value)
        ok = isinstance(value, int) and not isinstance(value, bool) and SET_SIZE_MINIMUMS[key] <= value <= high
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
