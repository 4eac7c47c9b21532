"""Malformed model zips under ``deepboot simulate --policy ppo:<zip>``: one error line and exit
status 2 each (15 of 35 gave tracebacks, mostly ``UnpicklingError``), and nothing in them runs."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from builders import SHIPPED_MODEL

pytestmark = pytest.mark.usefixtures("torch_one_thread")

Entries = dict[str, bytes]


class _Marker:
    """Unpickling this touches a file: the benign stand-in for a payload."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


MARKER = Path("PAYLOAD-RAN")
"""Where a payload would leave its trace (relative: the test runs in tmp_path)."""


def _entries() -> Entries:
    with zipfile.ZipFile(SHIPPED_MODEL) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _data(change: Callable[[dict], object]) -> Callable[[Entries], Entries]:
    """A mutation of the ``data`` JSON (``change`` edits it in place or returns a replacement)."""

    def apply(entries: Entries) -> Entries:
        data = json.loads(entries["data"])
        out = change(data)
        entries["data"] = json.dumps(data if out is None else out).encode()
        return entries

    return apply


def _set(**items: bytes) -> Callable[[Entries], Entries]:
    return lambda entries: {**entries, **items}


def _drop(name: str) -> Callable[[Entries], Entries]:
    return lambda entries: {k: v for k, v in entries.items() if k != name}


def _torch_bytes(obj: object) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _wrong_shapes(entries: Entries) -> Entries:
    import torch

    state = torch.load(io.BytesIO(entries["policy.pth"]), weights_only=True)
    name = next(iter(state))
    state[name] = torch.zeros(3, 3)
    return {**entries, "policy.pth": _torch_bytes(state)}


def _pickled_payload(entries: Entries) -> Entries:
    return {**entries, "policy.pth": pickle.dumps(_Marker(MARKER))}


def _field(name: str, value: object) -> Callable[[Entries], Entries]:
    return _data(lambda d: d.__setitem__(name, value))


MUTATIONS: dict[str, Callable[[Entries], Entries]] = {
    "no data entry": _drop("data"),
    "no policy.pth": _drop("policy.pth"),
    "observation_space missing": _data(lambda d: d.pop("observation_space")),
    "data not json": _set(data=b"{not json"),
    "data is a list": _set(data=b"[1, 2, 3]"),
    "data deeply nested": _set(data=b"[" * 50_000 + b"]" * 50_000),
    "data huge integer": _set(data=b'{"n_steps": ' + b"9" * 400 + b"}"),
    "data not utf-8": _set(data=b"\xff\xfe\xfa"),
    "data empty object": _set(data=b"{}"),
    "policy_class missing": _data(lambda d: d.pop("policy_class")),
    "policy_class of another algorithm": _field("policy_class", {"__module__": "stable_baselines3.a2c"}),
    "action_space garbage nvec": _data(lambda d: d["action_space"].__setitem__("nvec", "[a b c]")),
    "action_space missing": _data(lambda d: d.pop("action_space")),
    "action_space huge nvec": _data(lambda d: d["action_space"].__setitem__("nvec", "[" + "5 " * 100_000 + "]")),
    "observation_space keys wrong": _data(lambda d: d["observation_space"].__setitem__("spaces", "{'x': Box}")),
    "lr_schedule garbage": _data(lambda d: d["lr_schedule"].__setitem__("value_schedule", "__import__('os')")),
    "clip_range garbage": _data(lambda d: d["clip_range"].__setitem__("value_schedule", "x" * 100_000)),
    "gamma nan": _field("gamma", float("nan")),
    "learning_rate inf": _field("learning_rate", float("inf")),
    "n_steps zero": _field("n_steps", 0),
    "pickled unknown field": _field("sneaky", {":type:": "x", ":serialized:": "gAR9lC4="}),
    "policy_kwargs not a mapping": _field("policy_kwargs", [1, 2]),
    "policy env_kwargs naming a checkpoint": _data(
        lambda d: d["policy_kwargs"].__setitem__("env_kwargs", {"base_policy": "ppo:/elsewhere.zip"})
    ),
    "policy env_kwargs unknown option": _data(lambda d: d["policy_kwargs"].__setitem__("env_kwargs", {"nope": 1})),
    "policy.pth garbage": _set(**{"policy.pth": b"\x00garbage" * 100}),
    "policy.pth pickled object": _pickled_payload,
    "policy.pth wrong shapes": _wrong_shapes,
    "policy.pth empty state": lambda e: {**e, "policy.pth": _torch_bytes({})},
    "pytorch_variables garbage": _set(**{"pytorch_variables.pth": b"garbage"}),
    "optimizer garbage": _set(**{"policy.optimizer.pth": b"garbage"}),
    "path traversal entry": _set(**{"../../escaped.txt": b"x"}),
    "absolute entry": _set(**{"/tmp/absolute.txt": b"x"}),
    "metadata naming a checkpoint": _set(**{"deepboot_env.json": b'{"env_kwargs": {"base_policy": "ppo:x.zip"}}'}),
    "metadata not json": _set(**{"deepboot_env.json": b"{"}),
    "metadata a list": _set(**{"deepboot_env.json": b"[]"}),
    "metadata env_kwargs a number": _set(**{"deepboot_env.json": b'{"env_kwargs": 7}'}),
}
"""35 malformed zips: each a mutation of the shipped checkpoint's entries."""


def _write(path: Path, entries: Entries) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in entries.items():
            info = zipfile.ZipInfo(name)  # names as given: traversal included
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, content)
    return path


def _files(tmp_path: Path) -> dict[str, Path]:
    """The raw (not zip-level) malformed files: empty, text, truncated."""
    raw = SHIPPED_MODEL.read_bytes()
    out = {"empty file": b"", "text file": b"hello", "truncated 10%": raw[: len(raw) // 10]}
    out["truncated 90%"] = raw[: len(raw) * 9 // 10]
    paths = {}
    for name, content in out.items():
        paths[name] = tmp_path / f"{name.replace(' ', '-')}.zip"
        paths[name].write_bytes(content)
    return paths


def _simulate(path: Path, capsys) -> tuple[int, str]:
    from deepboot_harness.cli import main

    code = main(["simulate", "--workload", "smoke/tiny", "--policy", f"ppo:{path}", "--dynamics", "v0", "--quiet"])
    return code, capsys.readouterr().err


def _check_refused(code: int, err: str, path: Path) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("deepboot simulate: error: "), err[:2000]
    assert "Traceback" not in err and len(err) < 1000


def test_malformed_zips_fail_in_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert len(MUTATIONS) >= 35
    failures = []
    for name, mutate in MUTATIONS.items():
        path = _write(tmp_path / f"{name.replace(' ', '-')}.zip", mutate(_entries()))
        code, err = _simulate(path, capsys)
        try:
            _check_refused(code, err, path)
        except AssertionError as exc:
            failures.append(f"{name}: {str(exc)[:300]}")
    assert not failures, "\n".join(failures)
    assert not MARKER.exists() and not (tmp_path.parent / "escaped.txt").exists()


def test_malformed_files_fail_in_one_line(tmp_path: Path, capsys) -> None:
    for path in _files(tmp_path).values():
        code, err = _simulate(path, capsys)
        _check_refused(code, err, path)


def test_the_shipped_checkpoint_still_loads(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path / "same.zip", _entries())
    code, err = _simulate(path, capsys)
    assert code == 0, err
