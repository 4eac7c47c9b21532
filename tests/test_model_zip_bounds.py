"""A model zip's total is bounded (issue 67, class 1): whatever its members declare, a zip of a
few MB is refused in one line before a loader unpacks it past
:data:`~deepboot_env.limits.MAX_ZIP_TOTAL_BYTES`, and a network its ``policy_kwargs`` describe
is counted before it is built (:data:`~deepboot_env.limits.MAX_POLICY_PARAMETERS`)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from builders import REPO, SHIPPED_MODEL

from agents.errors import ConfigError
from agents.models.algorithms import check_parameter_count, parameter_count
from agents.saved.checkpoint import MODEL_MEMBERS, CheckpointError, load_checkpoint, read_data
from deepboot_env.limits import MAX_POLICY_PARAMETERS, MAX_ZIP_MEMBERS, MAX_ZIP_TOTAL_BYTES

SCORE_MODEL = REPO / "agents" / "pretrained" / "deepboot-score-v8.zip"
"""A shipped set-policy model (SHIPPED_MODEL is an MLP one)."""

MAX_LOAD_RSS_MB = 1024
"""The issue's bound: a model zip of at most 10 MB never makes a loader exceed 1 GB resident."""


def _entries(src: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(src) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _zip(out: Path, entries: dict[str, bytes], data: dict | None = None) -> Path:
    items = dict(entries)
    if data is not None:
        items["data"] = json.dumps({**json.loads(items["data"]), **data}).encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in items.items():
            zf.writestr(name, content)
    return out


def _policy_kwargs(src: Path, **changes: object) -> dict:
    """The ``data`` field ``policy_kwargs`` of ``src`` (plain JSON in the shipped models) with ``changes``."""
    return {"policy_kwargs": {**json.loads(_entries(src)["data"])["policy_kwargs"], **changes}}


def _tensor_file(megabytes: int) -> bytes:
    """A valid torch file holding one zero tensor of ``megabytes`` MB (packs to about 1/1000)."""
    import torch

    buffer = io.BytesIO()
    torch.save({"weight": torch.zeros(megabytes << 18)}, buffer)  # 4 bytes a float
    return buffer.getvalue()


def _peak_of_simulate(model: Path) -> tuple[int, int, str]:
    """(exit code, peak resident MB, stderr) of ``deepboot simulate --policy ppo:<model>`` in a
    fresh interpreter (VmHWM: the peak of that program alone, imports included)."""
    script = (
        "import sys\n"
        "from deepboot_harness.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
        "print(code, int(status) // 1024)\n"
    )
    argv = ["simulate", "--workload", "smoke/tiny", "--quiet", "--policy", f"ppo:{model}"]
    out = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=300)
    code, peak = map(int, out.stdout.split()[-2:])
    return code, peak, out.stderr


def test_crafted_model_zips_stay_under_1_gb_and_fail_in_one_line(tmp_path: Path) -> None:
    """Each crafted zip is at most 10 MB; each is refused by the command in one line with status
    2, and the whole process (imports included) peaks under 1 GB."""
    tensors = _tensor_file(256)  # 256 MB unpacked: three of them were loaded whole before the bound
    under = _tensor_file(42)  # three of 42 MB: just under the total, so they are read (peak about 490 MB)
    shipped = _entries(SHIPPED_MODEL)
    weights = ("policy.pth", "policy.optimizer.pth", "pytorch_variables.pth")
    cases = {
        "three 256 MB tensor entries": _zip(tmp_path / "tensors.zip", {**shipped, **dict.fromkeys(weights, tensors)}),
        "three 42 MB tensor entries": _zip(tmp_path / "under.zip", {**shipped, **dict.fromkeys(weights, under)}),
        "a 12k x 12k network": _zip(
            tmp_path / "wide.zip", shipped, _policy_kwargs(SHIPPED_MODEL, net_arch=[12_000, 12_000])
        ),
        "a set network of embed_dim 20,000": _zip(
            tmp_path / "wide-set.zip", _entries(SCORE_MODEL), _policy_kwargs(SCORE_MODEL, embed_dim=20_000)
        ),
    }
    for name, model in cases.items():
        assert model.stat().st_size <= 10 << 20, (name, model.stat().st_size)
        code, peak_mb, stderr = _peak_of_simulate(model)
        errors = [line for line in stderr.splitlines() if "error:" in line]
        assert code == 2 and len(errors) == 1 and "Traceback" not in stderr, (name, stderr[-2000:])
        assert len(errors[0]) <= 300, errors[0]
        assert peak_mb < MAX_LOAD_RSS_MB, (name, peak_mb)


def test_the_total_of_the_members_is_bounded_not_each_member(tmp_path: Path) -> None:
    shipped = _entries(SHIPPED_MODEL)
    each = MAX_ZIP_TOTAL_BYTES // 2  # every entry within the bound, the three together beyond it
    path = tmp_path / "total.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in shipped.items():
            if not name.endswith(".pth"):
                zf.writestr(name, content)
        for name in ("policy.pth", "policy.optimizer.pth", "pytorch_variables.pth"):
            with zf.open(name, "w", force_zip64=True) as fh:
                for _ in range(each >> 20):
                    fh.write(bytes(1 << 20))
    with pytest.raises(CheckpointError, match="unpack to .* bytes together") as err:
        read_data(path)
    assert "\n" not in str(err.value) and len(str(err.value)) <= 300


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"extra.pth": b"x"}, "'extra.pth' is not part of a PPO model zip"),
        ({"../escape": b"x"}, "'../escape' is not part of"),
        ({"policy.pth/": b""}, "is not part of"),
    ],
)
def test_members_the_policy_does_not_use_are_refused(extra: dict, fragment: str, tmp_path: Path) -> None:
    path = _zip(tmp_path / "extra.zip", {**_entries(SHIPPED_MODEL), **extra})
    with pytest.raises(CheckpointError, match=fragment):
        load_checkpoint(path)


def test_a_member_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.zip"
    with zipfile.ZipFile(path, "w") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        for name, content in _entries(SHIPPED_MODEL).items():
            zf.writestr(name, content)
        zf.writestr("policy.pth", b"again")
    with pytest.raises(CheckpointError, match="'policy.pth' is in the zip twice"):
        load_checkpoint(path)


def test_a_zip_of_many_members_is_refused_before_its_directory_is_read(tmp_path: Path) -> None:
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for k in range(20_000):
            zf.writestr(f"m{k}", b"")
    start = time.process_time()
    with pytest.raises(CheckpointError, match=f"holds 20,000 entries; a model zip holds at most {MAX_ZIP_MEMBERS}"):
        read_data(path)
    assert time.process_time() - start < 0.1  # the directory was not listed


def test_the_shipped_members_are_the_allowed_ones() -> None:
    for model in (SHIPPED_MODEL, SCORE_MODEL):
        assert set(_entries(model)) <= set(MODEL_MEMBERS)
        assert sum(len(content) for content in _entries(model).values()) < MAX_ZIP_TOTAL_BYTES


@pytest.mark.parametrize("model", [SHIPPED_MODEL, SCORE_MODEL], ids=["mlp", "set"])
def test_parameter_count_matches_the_built_network(model: Path) -> None:
    """The count from ``policy_kwargs`` alone is the built policy's, but for SB3's few log
    standard deviations."""
    loaded = load_checkpoint(model)
    built = sum(weights.numel() for weights in loaded.policy.parameters())
    kwargs = {key: value for key, value in loaded.policy_kwargs.items() if key != "env_kwargs"}
    arch = "set" if "embed_dim" in kwargs else "mlp"
    counted = parameter_count(loaded.observation_space, loaded.action_space, arch, kwargs)
    assert 0 <= built - counted <= 8, (built, counted)


def test_a_network_beyond_the_limit_is_refused_before_it_is_built() -> None:
    loaded = load_checkpoint(SHIPPED_MODEL)
    spaces = (loaded.observation_space, loaded.action_space)
    check_parameter_count(*spaces, "mlp", {"net_arch": [256, 256]}, "test")  # within: no error
    start = time.process_time()
    with pytest.raises(ConfigError, match=f"more than the limit of {MAX_POLICY_PARAMETERS:,}") as err:
        check_parameter_count(*spaces, "mlp", {"net_arch": [100_000, 100_000]}, "test")
    assert time.process_time() - start < 1.0  # 10**10 weights, none allocated
    assert str(err.value).startswith("test: policy_kwargs describe a network of")


def test_training_refuses_a_network_beyond_the_limit(tmp_path: Path, capsys) -> None:
    import train_policy

    argv = ["-params", "policy_kwargs:dict(net_arch=[20000, 20000])", "-n", "64", "-f", str(tmp_path), "--no-progress"]
    with pytest.raises(SystemExit) as stop:
        train_policy.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "more than the limit" in err[-1] and len(err[-1]) <= 300


def test_a_saved_model_is_read_once_and_loaded_from_what_was_checked(tmp_path: Path) -> None:
    """Issue 68's SavedModel: one read, one validation; the load uses the bytes checked, so a file
    swapped (or removed) after the check is never what loads."""
    from agents.saved.checkpoint import SavedModel

    path = tmp_path / "model.zip"
    path.write_bytes(SCORE_MODEL.read_bytes())
    saved = SavedModel.read(path)
    assert (saved.algo, saved.arch, saved.trainer) == ("ppo", "set", None)
    assert saved.env_shape == {
        "max_jobs": 32,
        "lend_levels": 5,
        "action_mode": "score",
        "outlook": True,
        "width_classes": 3,
    }
    path.write_bytes(b"not a zip any more")
    model = saved.load()
    assert type(model).__name__ == "PPO" and sum(p.numel() for p in model.policy.parameters()) > 0
    with pytest.raises(CheckpointError, match="not a stable-baselines3 model zip"):
        SavedModel.read(path)
