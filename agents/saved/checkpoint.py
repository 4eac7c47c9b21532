"""Loading saved PPO / MaskablePPO checkpoints without running code from them.

A stable-baselines3 zip keeps some fields of the model (its spaces, policy class, schedules,
buffers) as cloudpickled objects: ``PPO.load`` unpickles them, and an unpickled object can run any
code it likes. The network weights are plain tensors that SB3 already reads with
``torch.load(weights_only=True)``. :func:`load_checkpoint`, the loader behind every entry point of
this project (``ppo:<path>``, ``train_policy.py --resume``, :mod:`agents.saved.export`), rebuilds each
pickled field from data it can check instead, and passes them to SB3 as ``custom_objects`` so that
nothing is unpickled:

* ``observation_space`` / ``action_space``: rebuilt from the action space's sizes and the
  observation's entry names (stored as plain text beside the pickle) through the env's own action
  codec and observation encoding;
* ``policy_class`` / ``rollout_buffer_class``: the classes of the algorithm (``ppo`` or
  ``maskable_ppo``) and of the policy architecture (SB3's multi-input MLP, its self-describing
  version of :mod:`agents.models.described_policy` or the set policy of :mod:`agents.models.set_policy` when the
  class's plain-text module names it), nothing else;
* ``lr_schedule`` / ``clip_range`` / ``clip_range_vf`` (and ``learning_rate``, which RL Zoo
  saves as a schedule object): the constant or linear schedule their plain-text description or
  fields name (parsed, never evaluated);
* ``policy_kwargs``: keys from a whitelist (:data:`agents.hyperparameters.POLICY_KWARGS_KEYS`), activation
  functions by name, and a project policy's ``env_kwargs`` (a literal dict of env options);
* ``_last_obs``, ``_last_episode_starts``, ``ep_info_buffer``, ``ep_success_buffer``: dropped
  (SB3 recreates them when training resumes).

Any other pickled field makes loading fail with one line naming it, unless ``trust=True``
(``--trust-checkpoint``), which loads the file as plain SB3 does and warns. Plain
``PPO.load`` / ``MaskablePPO.load`` still unpickle: that is SB3's to change.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import math
import os
import re
import warnings
import zipfile
import zlib
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from agents.errors import ConfigError
from agents.hyperparameters import (
    HYPERPARAM_RANGES,
    LEGACY_SET_SIZES,
    TRAINER_FIELD,
    check_hyperparam_range,
    policy_kwargs_from_mapping,
)
from agents.models.algorithms import algo_class, check_parameter_count, policy_class
from agents.models.env_shape import score_layout, spaces_env_shape
from deepboot_env.atomic import atomic_write
from deepboot_env.config import EnvConfig
from deepboot_env.env.action import ScoreCodec, make_codec, mode_of_nvec
from deepboot_env.env.deepboot_env import spaces_for
from deepboot_env.limits import (
    MAX_JSON_BYTES,
    MAX_ZIP_DATA_BYTES,
    MAX_ZIP_MEMBERS,
    MAX_ZIP_TOTAL_BYTES,
    open_regular,
    parse_json,
    read_bounded,
    read_stream,
    shown,
)

SERIALIZED = ":serialized:"
"""The marker SB3 puts on a field it stored as a cloudpickle."""


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded safely; the message names the file and the field."""


def read_data(path: Path) -> dict[str, Any]:
    """The ``data`` JSON of an SB3 zip, as stored (pickled fields stay base64 text, unread).

    Raises:
        CheckpointError: if the file is not such a zip.
    """
    with open_model_zip(path) as zf:
        return _data(path, zf)


def _data(path: Path, zf: zipfile.ZipFile) -> dict[str, Any]:
    """The ``data`` JSON object of the open model zip ``zf`` (at ``path``)."""
    data = parse_json(_member(path, zf, "data", MAX_ZIP_DATA_BYTES), f"{path}: entry 'data'", CheckpointError)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: its 'data' entry is not a JSON object")
    return data


_ZIP_ERRORS = (
    OSError,
    KeyError,
    ValueError,
    EOFError,
    RuntimeError,
    NotImplementedError,
    zipfile.BadZipFile,
    zlib.error,
)
"""What reading a malformed zip raises (bad headers, CRCs, compression methods, encryption)."""

METADATA_FILE = "deepboot_env.json"
"""Entry of a model zip exported by older versions, holding the env arguments it was trained with
(newer exports keep them in the policy: :mod:`agents.models.described_policy`)."""

MODEL_MEMBERS: dict[str, int] = {
    "data": MAX_ZIP_DATA_BYTES,
    "policy.pth": MAX_ZIP_TOTAL_BYTES,
    "policy.optimizer.pth": MAX_ZIP_TOTAL_BYTES,
    "pytorch_variables.pth": MAX_ZIP_TOTAL_BYTES,
    "_stable_baselines3_version": 1 << 10,
    "system_info.txt": 1 << 16,
    METADATA_FILE: MAX_JSON_BYTES,
}
"""The entries a PPO / MaskablePPO model zip may hold, each with the most bytes it may unpack to:
SB3's six and the project's older metadata. SB3's loader unpacks every ``.pth`` entry it finds, so
an entry the policy does not use is refused rather than read."""


@contextmanager
def open_model_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    """The model zip at ``path``, open, after :func:`check_members`:
    a regular file only (:func:`~deepboot_env.limits.open_regular`), its entry count read from
    the archive's end record before its directory is listed.

    Raises:
        CheckpointError: not a zip, too many or unknown entries, entries too large, unreadable.
    """
    try:
        fh = open_regular(path)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the model ({exc.strerror or exc})") from None
    with fh, model_archive(path, fh) as zf:
        yield zf


@contextmanager
def model_archive(path: Path, fh: IO[bytes]) -> Iterator[zipfile.ZipFile]:
    """The model zip in the binary stream ``fh`` (read from ``path``, for the messages), after
    :func:`check_members`.

    Raises:
        CheckpointError: not a zip, too many or unknown entries, entries too large.
    """
    try:
        members = _declared_member_count(fh)
        if members > MAX_ZIP_MEMBERS:
            raise CheckpointError(f"{path}: holds {members:,} entries; a model zip holds at most {MAX_ZIP_MEMBERS}")
        fh.seek(0)
        zf = zipfile.ZipFile(fh)
    except _ZIP_ERRORS as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{path}: not a stable-baselines3 model zip ({shown(str(exc))})") from None
    with zf:
        check_members(path, zf)
        yield zf


_END_RECORD = b"PK\x05\x06"
"""The signature of a zip's end-of-central-directory record (followed by its entry counts)."""


def _declared_member_count(fh: IO[bytes]) -> int:
    """The entry count a zip's end record declares (0 where there is no record: ``zipfile`` then
    says the file is not a zip); a ZIP64 archive's escape value 0xFFFF reads as that many."""
    size = fh.seek(0, os.SEEK_END)
    tail_size = min(size, 22 + 0xFFFF)  # the record, then a comment of at most 65,535 bytes
    fh.seek(size - tail_size)
    tail = fh.read(tail_size)
    at = tail.rfind(_END_RECORD)
    if at < 0 or len(tail) < at + 12:
        return 0
    return int.from_bytes(tail[at + 10 : at + 12], "little")


def check_members(path: Path, zf: zipfile.ZipFile) -> None:
    """Refuse a zip with an entry that is not one of :data:`MODEL_MEMBERS`, a name twice, an
    entry whose declared size is beyond its own limit, or entries whose declared sizes add up to
    more than :data:`~deepboot_env.limits.MAX_ZIP_TOTAL_BYTES` (a zip entry is never read past its
    declared size, so this bounds everything a loader unpacks).

    Raises:
        CheckpointError: naming the entry, or the total.
    """
    seen: set[str] = set()
    total = 0
    for info in zf.infolist():
        name = info.filename
        if name not in MODEL_MEMBERS:
            raise CheckpointError(
                f"{path}: entry {shown(name, 40)} is not part of a PPO model zip (its entries: docs/usage.md §7.1)"
            )
        if name in seen:
            raise CheckpointError(f"{path}: entry {shown(name, 40)} is in the zip twice")
        seen.add(name)
        if info.file_size > MODEL_MEMBERS[name]:
            raise CheckpointError(
                f"{path}: entry {shown(name)} unpacks to {info.file_size:,} bytes (limit {MODEL_MEMBERS[name]:,})"
            )
        total += info.file_size
    if total > MAX_ZIP_TOTAL_BYTES:
        raise CheckpointError(
            f"{path}: its entries unpack to {total:,} bytes together "
            f"(limit {MAX_ZIP_TOTAL_BYTES:,}, docs/usage.md §7.1)"
        )


def optional_entry(path: Path, name: str, limit: int) -> bytes | None:
    """Entry ``name`` of the model zip at ``path`` (:func:`open_model_zip`), read no further than
    ``limit`` bytes whatever its header declares; None where the zip has no such entry, or the
    file is no model zip at all (its loader says why).

    Raises:
        CheckpointError: the entry too large or corrupt.
    """
    with ExitStack() as stack:
        try:
            zf = stack.enter_context(open_model_zip(path))
        except CheckpointError:
            return None  # not a model zip: its loader says why
        return _member(path, zf, name, limit) if name in zf.namelist() else None


def _member(path: Path, zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """Entry ``name`` of the open model zip ``zf`` (at ``path``), at most ``limit`` bytes."""
    try:
        info = zf.getinfo(name)
        if info.file_size > limit:
            raise CheckpointError(f"{path}: entry {name!r} unpacks to {info.file_size:,} bytes (limit {limit:,})")
        with zf.open(info) as fh:
            data = read_stream(fh, limit)
    except _ZIP_ERRORS as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{path}: not a stable-baselines3 model zip ({shown(str(exc))})") from None
    if data is None:
        raise CheckpointError(f"{path}: entry {name!r} unpacks to more than {limit:,} bytes")
    return data


def _algo_classes(algo: str, arch: str = "mlp", described: bool = False) -> tuple[type, type]:
    """(policy class, rollout buffer class) of ``algo`` with Dict observations and the policy
    architecture ``arch`` (``mlp``: SB3's multi-input policy, or with ``described`` the one of
    :mod:`agents.models.described_policy` that keeps its env arguments; ``set``: :mod:`agents.models.set_policy`)."""
    if algo == "maskable_ppo":
        from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer  # lazy: SB3 is slow to import
        from sb3_contrib.common.maskable.policies import (  # lazy: SB3 is slow to import
            MaskableMultiInputActorCriticPolicy,
        )

        buffer: type = MaskableDictRolloutBuffer
        policy: type = MaskableMultiInputActorCriticPolicy
    else:
        from stable_baselines3.common.buffers import DictRolloutBuffer  # lazy: SB3 is slow to import
        from stable_baselines3.common.policies import MultiInputActorCriticPolicy  # lazy: SB3 is slow to import

        buffer, policy = DictRolloutBuffer, MultiInputActorCriticPolicy
    if arch == "set" or described:
        policy = policy_class(algo, arch)
    return policy, buffer


SET_POLICY_MODULES = ("agents.models.set_policy", "agents.set_policy")
"""The modules the set policies' classes live in, as a checkpoint's plain text names them (the
second for checkpoints saved before the policies moved to :mod:`agents.models`)."""

PROJECT_POLICY_MODULES = (*SET_POLICY_MODULES, "agents.models.described_policy", "agents.described_policy")
"""Modules of the project's policy classes: they keep their env arguments and name their algorithm
(``deepboot_algo``) in plain text."""


def _project_policy(data: dict[str, Any]) -> dict[str, Any] | None:
    """The zip's ``policy_class`` field if it names one of the project's policy classes."""
    field = data.get("policy_class")
    return field if isinstance(field, dict) and field.get("__module__") in PROJECT_POLICY_MODULES else None


def saved_arch(data: dict[str, Any]) -> str:
    """``set`` if the zip's policy class is one of :mod:`agents.models.set_policy`'s, else ``mlp``."""
    field = _project_policy(data)
    return "set" if field is not None and field.get("__module__") in SET_POLICY_MODULES else "mlp"


def saved_algo(path: Path, data: dict[str, Any]) -> str:
    """``maskable_ppo`` or ``ppo``: the algorithm whose policy class the zip names (plain text).

    Raises:
        CheckpointError: if the policy class is neither algorithm's.
    """
    field = data.get("policy_class")
    text = json.dumps(field) if isinstance(field, dict) else ""
    ppo_fields = all(key in data for key in ("clip_range", "n_epochs", "batch_size"))  # A2C has none
    project = _project_policy(data)
    if ppo_fields and project is not None:
        algo = project.get("deepboot_algo")
        if algo in ("ppo", "maskable_ppo"):
            return str(algo)
    if ppo_fields and "MaskableMultiInputActorCriticPolicy" in text:
        return "maskable_ppo"
    if ppo_fields and "MultiInputActorCriticPolicy" in text:
        return "ppo"
    raise CheckpointError(
        f"{path}: policy_class is not a PPO or MaskablePPO multi-input policy (a model of another algorithm?)"
    )


_NUMBER = r"([-+0-9.eE]+|inf)"
_CONSTANT = re.compile(rf"^ConstantSchedule\(val={_NUMBER}\)$")
_LINEAR = re.compile(rf"^LinearSchedule\(start={_NUMBER}, end={_NUMBER}, end_fraction={_NUMBER}\)$")


_SB3_SCHEDULE = "<class 'stable_baselines3.common.utils.{}'>"


def _schedule(path: Path, key: str, field: dict[str, Any]) -> Any:
    """The schedule a pickled ``FloatSchedule`` field describes in plain text, or a pickled bare
    ``ConstantSchedule`` / ``LinearSchedule`` (RL Zoo stores ``learning_rate`` so) by its fields."""
    from stable_baselines3.common.utils import (  # lazy: SB3 is slow to import
        ConstantSchedule,
        FloatSchedule,
        LinearSchedule,
    )

    text = str(field.get("value_schedule", ""))
    if m := _CONSTANT.match(text):
        return FloatSchedule(ConstantSchedule(float(m.group(1))))
    if m := _LINEAR.match(text):
        return FloatSchedule(LinearSchedule(float(m.group(1)), float(m.group(2)), float(m.group(3))))
    kind = field.get(":type:")
    try:
        if kind == _SB3_SCHEDULE.format("ConstantSchedule"):
            return ConstantSchedule(float(field["val"]))
        if kind == _SB3_SCHEDULE.format("LinearSchedule"):
            return LinearSchedule(float(field["start"]), float(field["end"]), float(field["end_fraction"]))
    except (KeyError, TypeError, ValueError):
        pass
    text = text or str(kind)
    raise CheckpointError(f"{path}: field {shown(key)} is a schedule this loader cannot rebuild ({shown(text)})")


def _spaces(path: Path, data: dict[str, Any]) -> tuple[Any, Any]:
    """Observation and action spaces rebuilt from the action space's sizes."""
    field = data.get("action_space")
    field = field if isinstance(field, dict) else {}
    text = field.get("nvec", "")
    described = data.get("observation_space", {})
    described_spaces = str(described.get("spaces", "")) if isinstance(described, dict) else ""
    try:
        if "spaces.box.Box" in str(field.get(":type:", "")):  # score mode: scores per slot, then lending
            size = text = field.get("_shape")
            if not (isinstance(size, list) and len(size) == 1 and isinstance(size[0], int) and 2 <= size[0] <= 4097):
                raise ValueError(size)
            mode = ScoreCodec.mode
            # the slots: the prior entry's length (width scores make the action longer than slots + 1)
            prior = re.search(r"'prior': Box\([^()]*\((\d+),\)", described_spaces)
            slots, widths = score_layout(size[0], int(prior.group(1)) if prior else None)
            codec = make_codec(mode, slots, EnvConfig.defaults()["lend_levels"], width_classes=widths)
        else:
            nvec = np.array([int(x) for x in str(text).strip("[]").split()], dtype=np.int64)
            mode = mode_of_nvec(nvec)
            codec = make_codec(mode, int(nvec.size - 1), int(nvec[-1]))
    except ValueError:
        raise CheckpointError(f"{path}: action_space is not a DeepBoot-v0 action space ({shown(text)})") from None
    keys = re.findall(r"'(\w+)': Box", described_spaces)
    observation, action = spaces_for(codec, outlook="outlook" in keys)
    if sorted(keys) != sorted(observation.spaces):
        raise CheckpointError(f"{path}: observation_space {keys} does not match the {mode} action space's")
    return observation, action


def _policy_kwargs(path: Path, field: dict[str, Any], described: bool) -> dict[str, Any]:
    """A pickled ``policy_kwargs`` rebuilt from its plain-text entries (whitelisted keys, and the
    env arguments of a project policy class)."""
    from agents.models.described_policy import ENV_ARGUMENTS_KEY  # lazy: SB3 is slow to import

    entries = {k: v for k, v in field.items() if not k.startswith(":")}
    env_kwargs = _check_env_kwargs(path, entries, described)
    entries.pop(ENV_ARGUMENTS_KEY, None)
    try:
        out = policy_kwargs_from_mapping(entries, from_repr=True)
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    if env_kwargs is not None:
        out[ENV_ARGUMENTS_KEY] = env_kwargs
    return out


def _check_env_kwargs(path: Path, policy_kwargs: dict[str, Any], described: bool) -> dict[str, Any] | None:
    """The env arguments among ``policy_kwargs`` (None if there are none), checked.

    Raises:
        CheckpointError: env arguments for a policy class that takes none, or bad ones.
    """
    from agents.models.described_policy import ENV_ARGUMENTS_KEY  # lazy: SB3 is slow to import

    if ENV_ARGUMENTS_KEY not in policy_kwargs:
        return None
    if not described:
        raise CheckpointError(f"{path}: policy_kwargs has {ENV_ARGUMENTS_KEY} but the policy class takes none")
    return saved_env_kwargs(path, policy_kwargs[ENV_ARGUMENTS_KEY])


def saved_env_kwargs(path: Path, field: Any) -> dict[str, Any]:
    """The env arguments saved in a model file: a dict of env options, or its text (parsed as a
    literal, not evaluated), checked by :meth:`~deepboot_env.config.EnvConfig.from_options`. A
    ``base_policy`` must be a built-in policy's name: one with a prefix names a file
    (``ppo:<path>``, ``priority:<path>``), and a model file never makes the loader open another.

    Raises:
        CheckpointError: not a dict of env options, bad options, or a base policy naming a file.
    """
    value = field
    if isinstance(field, str):
        try:
            value = ast.literal_eval(field)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise CheckpointError(f"{path}: policy_kwargs env_kwargs is not a dict of env options ({shown(field)})")
    refuse_named_files(path, value)
    try:
        EnvConfig.from_options(**value)
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: policy_kwargs env_kwargs: {exc}") from None
    return value


def refuse_named_files(path: Path, env_kwargs: dict[str, Any]) -> None:
    """Refuse saved env arguments whose ``base_policy`` names a file (a prefix such as
    ``ppo:<path>`` or ``priority:<path>``): a model file never makes the loader open another.

    Raises:
        CheckpointError: naming the file and the value (cut).
    """
    base = env_kwargs.get("base_policy")
    if isinstance(base, str) and ":" in base:
        raise CheckpointError(
            f"{path}: env_kwargs base_policy {shown(base)} names a file; a saved model may name only a "
            "built-in base policy (the loader opens no file a model names)"
        )


_DROPPED = ("_last_obs", "_last_episode_starts", "_last_original_obs")
_EMPTY_DEQUES = ("ep_info_buffer", "ep_success_buffer")


def _window(path: Path, value: Any) -> int:
    """The checkpoint's ``_stats_window_size``: a whole number from 1 to 1,000,000.

    Raises:
        CheckpointError: for anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise CheckpointError(f"{path}: field '_stats_window_size' must be a whole number >= 1, got {shown(value)}")
    return value


def safe_custom_objects(path: Path, data: dict[str, Any], algo: str) -> dict[str, Any]:
    """A replacement for every pickled field of ``data`` (see the module docstring).

    Raises:
        CheckpointError: for a pickled field it cannot rebuild, naming the field.
    """
    out: dict[str, Any] = {}
    spaces: tuple[Any, Any] | None = None
    for key, field in data.items():
        if not (isinstance(field, dict) and SERIALIZED in field):
            if key == "policy_kwargs" and isinstance(field, dict):  # plain JSON, kept: check the env arguments
                _check_env_kwargs(path, field, _project_policy(data) is not None)
            continue
        if key in ("observation_space", "action_space"):
            spaces = spaces or _spaces(path, data)
            out[key] = spaces[0] if key == "observation_space" else spaces[1]
        elif key == "policy_class":
            out[key] = _algo_classes(algo, saved_arch(data), _project_policy(data) is not None)[0]
        elif key == "rollout_buffer_class":
            out[key] = _algo_classes(algo)[1]
        elif key in ("lr_schedule", "learning_rate", "clip_range", "clip_range_vf"):
            out[key] = _schedule(path, key, field)
        elif key == "policy_kwargs":
            out[key] = _policy_kwargs(path, field, _project_policy(data) is not None)
        elif key in _DROPPED:
            out[key] = None
        elif key in _EMPTY_DEQUES:
            out[key] = deque(maxlen=_window(path, data.get("_stats_window_size", 100)))
        else:
            raise CheckpointError(
                f"{path}: field {shown(key)} is pickled and cannot be checked; load it only if you trust "
                "the file (--trust-checkpoint)"
            )
    return out


def fill_legacy_set_sizes(data: dict[str, Any], custom: dict[str, Any]) -> None:
    """Give a set policy's ``policy_kwargs`` the sizes it does not name, as they were before
    session 46 (:data:`~agents.hyperparameters.LEGACY_SET_SIZES`: one attention block, no
    pooled-context block), in ``custom`` (SB3's ``custom_objects``): a model built since names
    them all, so only an older file lacks one, and the defaults of today would build it another
    network than its weights'. A pickled ``policy_kwargs`` (``--trust-checkpoint``) is left as it is."""
    kwargs = custom.get("policy_kwargs", data.get("policy_kwargs"))
    if saved_arch(data) == "set" and isinstance(kwargs, dict) and SERIALIZED not in kwargs:
        custom["policy_kwargs"] = {**LEGACY_SET_SIZES, **kwargs}


def check_saved_hyperparams(path: Path, data: dict[str, Any], custom: dict[str, Any]) -> None:
    """Refuse a checkpoint whose hyperparameters are out of range, NaN or infinite (``gamma``,
    ``learning_rate``, the rebuilt schedules at the start and the end of training, ...): the
    ranges of :data:`agents.hyperparameters.HYPERPARAM_RANGES`.

    Raises:
        CheckpointError: naming the file and the hyperparameter.
    """
    for key in (*HYPERPARAM_RANGES, "lr_schedule"):
        value = custom.get(key, data.get(key))
        if value is None or isinstance(value, dict):
            continue
        start, end = (value(1.0), value(0.0)) if callable(value) else (value, None)
        try:
            if key != "lr_schedule":
                check_hyperparam_range(key, start)
            for item in (start, end) if key == "lr_schedule" else (end,):
                if item is not None and not (isinstance(item, int | float) and math.isfinite(item) and item >= 0):
                    raise ConfigError(f"hyperparameter {key}: must be a finite number >= 0, got {shown(item)}")
        except ConfigError as exc:
            raise CheckpointError(f"{path}: {exc}") from None


def check_saved_network(path: Path, data: dict[str, Any], custom: dict[str, Any]) -> None:
    """Refuse a checkpoint whose ``policy_kwargs`` describe a network of more than
    :data:`~deepboot_env.limits.MAX_POLICY_PARAMETERS` parameters, counted before SB3 builds it
    (:func:`agents.models.algorithms.check_parameter_count`): the weights entries are bounded, but the
    network SB3 builds from the plain-text sizes is not.

    Raises:
        CheckpointError: naming the file and the count.
    """
    from agents.models.described_policy import ENV_ARGUMENTS_KEY  # lazy: SB3 is slow to import

    kwargs = custom.get("policy_kwargs", data.get("policy_kwargs"))
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    if "observation_space" not in custom or "action_space" not in custom:
        return  # not a model of this project's spaces: SB3 fails on it before building anything
    try:
        sizes = policy_kwargs_from_mapping({k: v for k, v in kwargs.items() if k != ENV_ARGUMENTS_KEY})
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    try:
        check_parameter_count(custom["observation_space"], custom["action_space"], saved_arch(data), sizes, str(path))
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None


def saved_trainer(path: Path, data: dict[str, Any]) -> dict[str, Any] | None:
    """The GroupPPO settings a model saved by :class:`agents.models.group_ppo.GroupPPO` names (its
    :data:`TRAINER_FIELD`), checked; None for a plain PPO or MaskablePPO model.

    Raises:
        CheckpointError: a field that is not such a record.
    """
    field = data.get(TRAINER_FIELD)
    if field is None:
        return None
    size = field.get("group_size") if isinstance(field, dict) else None
    ok = (
        isinstance(field, dict)
        and field.get("algorithm") == "group_ppo"
        and isinstance(size, int)
        and not isinstance(size, bool)
        and 2 <= size <= MAX_GROUP_SIZE
        and isinstance(field.get("per_job_ratio"), bool)
    )
    if not ok:
        raise CheckpointError(f"{path}: field {TRAINER_FIELD!r} is not a trainer this loader knows ({shown(field)})")
    return field


MAX_GROUP_SIZE = 1024
"""Largest ``group_size`` a saved GroupPPO may name."""


def _loading_class(
    path: Path, data: dict[str, Any], found: str, model_class: Any, overrides: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """The class a model is loaded as (``model_class``; None: GroupPPO where the model names it,
    :func:`saved_trainer`, else ``found``'s) and the overrides, with a GroupPPO's saved group
    settings under those given.

    Raises:
        CheckpointError: a GroupPPO record on a model that is not a PPO one.
    """
    trainer = saved_trainer(path, data)
    if trainer is not None and found != "ppo":
        raise CheckpointError(f"{path}: names a GroupPPO trainer but holds a {found} model")
    if model_class is None and trainer is not None:
        from agents.models.group_ppo import GroupPPO  # lazy: torch is slow to import

        model_class = GroupPPO
    if trainer is not None and model_class.__name__ == "GroupPPO":
        overrides = {"group_size": trainer["group_size"], "per_job_ratio": trainer["per_job_ratio"], **overrides}
    return model_class or algo_class(found), overrides


MAX_MODEL_FILE_BYTES = MAX_ZIP_TOTAL_BYTES + (1 << 20)
"""Largest model zip file read: its entries' bound, stored, plus the zip's own headers."""


@dataclass(frozen=True)
class SavedModel:
    """A PPO / MaskablePPO model zip, read once and validated once (:meth:`read`), then loaded
    from the bytes read (:meth:`load`): what a run from a model asks of it (its algorithm,
    architecture, trainer, env shape) costs no second read and no loading of weights.

    Attributes:
        path: the file, for messages.
        content: its bytes.
        data: its ``data`` JSON, as stored (pickled fields unread).
        algo: ``ppo`` or ``maskable_ppo``.
        trust: pickled fields are unpickled at :meth:`load` (``--trust-checkpoint``).
        custom: SB3's ``custom_objects``: every pickled field rebuilt from checked data ({} when trusted).
    """

    path: Path
    content: bytes = dataclasses.field(repr=False)
    data: dict[str, Any] = dataclasses.field(repr=False)
    algo: str
    trust: bool
    custom: dict[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def read(cls, path: str | Path, algo: str | None = None, trust: bool = False) -> SavedModel:
        """The model zip at ``path``, read and checked (see the module docstring).

        Raises:
            CheckpointError: not a PPO/MaskablePPO zip, a different algorithm than ``algo``, a
                pickled field that cannot be rebuilt safely, a network or entries too large.
        """
        path = Path(path)
        try:
            content = read_bounded(path, MAX_MODEL_FILE_BYTES, "a model zip", CheckpointError)
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read the model ({exc.strerror or exc})") from None
        with model_archive(path, io.BytesIO(content)) as zf:
            data = _data(path, zf)
        found = saved_algo(path, data)
        if algo is not None and algo != found:
            raise CheckpointError(f"{path}: holds a {found} model, not {algo}")
        custom: dict[str, Any] = {}
        if trust:
            warnings.warn(
                f"{path}: loading pickled fields (--trust-checkpoint): only do this for files you trust", stacklevel=2
            )
        else:
            custom = safe_custom_objects(path, data, found)
            check_saved_hyperparams(path, data, custom)
        fill_legacy_set_sizes(data, custom)
        if not trust:
            check_saved_network(path, data, custom)
        saved_trainer(path, data)  # checked now, not at the load
        return cls(path, content, data, found, trust, custom)

    @property
    def arch(self) -> str:
        """``set`` or ``mlp`` (:func:`saved_arch`)."""
        return saved_arch(self.data)

    @property
    def trainer(self) -> dict[str, Any] | None:
        """The GroupPPO settings it names (:func:`saved_trainer`), or None."""
        return saved_trainer(self.path, self.data)

    @property
    def env_shape(self) -> dict[str, Any]:
        """The env arguments its spaces fix (:func:`~agents.models.env_shape.spaces_env_shape` of the
        spaces rebuilt from its plain text)."""
        return spaces_env_shape(*_spaces(self.path, self.data))

    def load(self, device: str = "cpu", env: Any = None, model_class: Any = None, **overrides: Any) -> Any:
        """The SB3 model, loaded from the bytes :meth:`read` checked.

        Args:
            device: torch device.
            env: the env to attach (for training on).
            model_class: the class to load it as (None: :class:`agents.models.group_ppo.GroupPPO` with
                its saved settings for a model that one saved, :func:`saved_trainer`, else the
                algorithm's).
            overrides: attributes to set on the loaded model (SB3 ``load`` keyword arguments).

        Raises:
            CheckpointError: SB3 or torch cannot load it (one line).
        """
        from agents.models.distributions import use_padded_distribution  # lazy: SB3 is slow to import

        model_class, overrides = _loading_class(self.path, self.data, self.algo, model_class, overrides)
        custom = dict(self.custom)  # SB3 may keep what it is given
        try:
            model = model_class.load(
                io.BytesIO(self.content), env=env, device=device, custom_objects=custom, **overrides
            )
        except Exception as exc:  # noqa: BLE001 - a malformed file fails in SB3 or torch in many ways: one line
            raise CheckpointError(
                f"{self.path}: cannot load the model ({type(exc).__name__}: {shown(str(exc))})"
            ) from None
        use_padded_distribution(model.policy)
        return model


def load_checkpoint(
    path: str | Path,
    algo: str | None = None,
    device: str = "cpu",
    env: Any = None,
    trust: bool = False,
    model_class: Any = None,
    **overrides: Any,
) -> Any:
    """Load a PPO / MaskablePPO zip without unpickling anything (``trust=False``):
    :meth:`SavedModel.read` then :meth:`SavedModel.load`.

    Raises:
        CheckpointError: not a PPO/MaskablePPO zip, a different algorithm than ``algo``, or a
            pickled field that cannot be rebuilt safely.
    """
    return SavedModel.read(path, algo, trust).load(device, env, model_class, **overrides)


def save_model(model: Any, path: str | Path) -> Path:
    """``model.save`` (stable-baselines3) to ``path`` atomically: a kill or a full disk leaves
    the previous file (:func:`deepboot_env.atomic.atomic_write`); returns the path."""
    with atomic_write(path, binary=True) as fh:
        model.save(fh)
    return Path(path)
