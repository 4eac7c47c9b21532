"""Checkpoints and configs are data: a crafted file runs nothing through any entry point."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import zipfile
from pathlib import Path

import cloudpickle
import pytest
from builders import SHIPPED_MODEL

import train_policy
from agents.errors import ConfigError
from agents.hyperparameters import policy_kwargs_from_mapping
from agents.saved.checkpoint import CheckpointError, load_checkpoint
from agents.saved.policy_adapter import load_agent_policy
from deepboot_env.policy import make_policy
from traces.generate import generate_workload, write_workload_csv

pytestmark = pytest.mark.usefixtures("torch_one_thread")


class _Marker:
    """Unpickling this touches a file: the benign stand-in for a payload."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def _payload(marker: Path) -> dict[str, str]:
    return {":type:": "<class 'object'>", ":serialized:": base64.b64encode(cloudpickle.dumps(_Marker(marker))).decode()}


def _crafted(tmp_path: Path, field: str, marker: Path) -> Path:
    """The shipped checkpoint with ``field`` of its data replaced by (or added as) a payload."""
    src = zipfile.ZipFile(SHIPPED_MODEL)
    out = tmp_path / f"crafted-{field}.zip"
    with zipfile.ZipFile(out, "w") as dst:
        for item in src.namelist():
            content = src.read(item)
            if item == "data":
                data = json.loads(content)
                payload = _payload(marker)
                if field in data and isinstance(data[field], dict):
                    payload = {**data[field], ":serialized:": payload[":serialized:"]}  # keep the plain text
                data[field] = payload
                content = json.dumps(data).encode()
            dst.writestr(item, content)
    return out


@pytest.fixture()
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PAYLOAD-RAN"


@pytest.mark.parametrize("field", ["observation_space", "action_space", "policy_class", "lr_schedule", "clip_range"])
def test_a_payload_in_a_known_field_never_runs(field: str, tmp_path: Path, marker: Path) -> None:
    path = _crafted(tmp_path, field, marker)
    policy = make_policy(f"ppo:{path}")  # the field is rebuilt from checked data
    assert policy.codec.mode == "residual"
    load_agent_policy(path)
    load_checkpoint(path)
    assert not marker.exists()
    with pytest.warns(UserWarning, match="trust"), contextlib.suppress(Exception):
        load_checkpoint(path, trust=True)  # plain SB3 loading: the payload is real (and breaks the model)
    assert marker.exists()


def test_a_payload_in_an_unknown_field_is_refused_by_name(tmp_path: Path, marker: Path) -> None:
    path = _crafted(tmp_path, "sneaky_extra", marker)
    for load in (lambda: make_policy(f"ppo:{path}"), lambda: load_checkpoint(path)):
        with pytest.raises(CheckpointError, match="field 'sneaky_extra' is pickled"):
            load()
    assert not marker.exists()


def test_cli_and_resume_run_no_payload(tmp_path: Path, marker: Path, capsys) -> None:
    from agents.saved.export import export_model
    from deepboot_harness.cli import main

    path = _crafted(tmp_path, "observation_space", marker)
    wl = write_workload_csv(generate_workload("tiny", 1, train={"num_jobs": 3}), tmp_path / "tiny.csv")
    assert main(["simulate", "--workload", str(wl), "--policy", f"ppo:{path}", "--dynamics", "v0"]) == 0  # its world
    export_model(path, tmp_path / "exported.zip")
    bad = _crafted(tmp_path, "sneaky_extra", marker)
    with pytest.raises(SystemExit) as exc:
        train_policy.main(["-i", str(bad), "--log-folder", str(tmp_path / "runs"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sneaky_extra" in err[0] and "--trust-checkpoint" in err[0]
    assert not marker.exists()


def test_models_of_other_algorithms_and_non_models_are_refused(tmp_path: Path) -> None:
    from stable_baselines3 import A2C

    from deepboot_env.env import DeepBootEnv

    env = DeepBootEnv(workload=generate_workload("tiny", 1, train={"num_jobs": 3}), max_jobs=4)
    A2C("MultiInputPolicy", env, n_steps=4, device="cpu").save(tmp_path / "a2c.zip")
    with pytest.raises(CheckpointError, match="not a PPO or MaskablePPO"):
        load_checkpoint(tmp_path / "a2c.zip")
    with pytest.raises(CheckpointError, match="holds a maskable_ppo model, not ppo"):
        load_checkpoint(SHIPPED_MODEL, algo="ppo")
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a stable-baselines3 model zip"):
        load_checkpoint(tmp_path / "junk.zip")
    shutil.copy(SHIPPED_MODEL, tmp_path / "cut.zip")
    with open(tmp_path / "cut.zip", "r+b") as f:
        f.truncate(SHIPPED_MODEL.stat().st_size // 2)
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "cut.zip")


@pytest.mark.parametrize(
    "text",
    [
        "dict(net_arch=th.os.system('touch PWNED'))",
        "__import__('os').system('touch PWNED')",
        "dict(activation_fn=th.os.system)",
        "dict(**{'net_arch': [8]})",
        "{'net_arch': [8], 'optimizer_class': 'x'}",
    ],
)
def test_policy_kwargs_are_data_never_code(text: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        policy_kwargs_from_mapping(text)
    with pytest.raises(SystemExit):
        train_policy.main(["--hyperparams", f"policy_kwargs:{text}", "--log-folder", str(tmp_path), "--no-progress"])
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "PWNED").exists()


def test_policy_kwargs_accepted_forms() -> None:
    import torch

    assert policy_kwargs_from_mapping("dict(net_arch=[64, 64], activation_fn=nn.ReLU)") == {
        "net_arch": [64, 64],
        "activation_fn": torch.nn.ReLU,
    }
    assert policy_kwargs_from_mapping({"net_arch": {"pi": [8], "vf": [8]}, "ortho_init": False})["ortho_init"] is False


@pytest.mark.parametrize(
    ("fields", "rate"),
    [
        ({"val": "0.0005"}, 0.0005),
        ({"start": "0.001", "end": "0.0", "end_fraction": "1.0"}, 0.001),
    ],
)
def test_a_bare_schedule_as_rl_zoo_stores_it_is_rebuilt_from_its_fields(
    fields: dict[str, str], rate: float, tmp_path: Path, marker: Path
) -> None:
    """RL Zoo saves ``learning_rate`` as a pickled ConstantSchedule (its plain text: ``val``)."""
    kind = "ConstantSchedule" if "val" in fields else "LinearSchedule"
    payload = {**_payload(marker), ":type:": f"<class 'stable_baselines3.common.utils.{kind}'>", **fields}
    path = _crafted(tmp_path, "learning_rate", marker)

    def write(field: dict[str, str]) -> None:
        with zipfile.ZipFile(path) as zf:
            items = {name: zf.read(name) for name in zf.namelist()}
        items["data"] = json.dumps({**json.loads(items["data"]), "learning_rate": field}).encode()
        with zipfile.ZipFile(path, "w") as zf:
            for name, content in items.items():
                zf.writestr(name, content)

    write(payload)
    model = load_checkpoint(path)
    assert type(model.learning_rate).__name__ == kind and model.learning_rate(1.0) == pytest.approx(rate)
    write({**payload, "val": "__import__('os')", "start": "x"})
    with pytest.raises(CheckpointError, match="'learning_rate' is a schedule this loader cannot rebuild"):
        load_checkpoint(path)
    assert not marker.exists()
