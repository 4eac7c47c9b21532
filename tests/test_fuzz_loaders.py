"""Fuzzing the loaders of user files (issues 33 and 67): workload CSV, priority JSON, checkpoint
data, metadata and members, YAML configuration, ES state, a resumed grid's run log. Whatever the
bytes, a loader returns or raises its own one-line error of at most 300 characters, never a
traceback-class exception, and keeps its memory bounded.

CI runs a fixed (derandomized) set of :data:`EXAMPLES` cases per loader, a few hundred in all in
well under 30 s. More on demand, with fresh random cases::

    DEEPBOOT_FUZZ_EXAMPLES=5000 python -m pytest tests/test_fuzz_loaders.py
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import SHIPPED_MODEL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.errors import ConfigError
from agents.models.priority import FEATURES, FORMAT, PriorityModel, PriorityModelError
from agents.runs.run_config import load_conf
from agents.saved.checkpoint import (
    CheckpointError,
    check_saved_hyperparams,
    load_checkpoint,
    read_data,
    safe_custom_objects,
    saved_algo,
)
from agents.saved.policy_adapter import METADATA_FILE, model_env_kwargs
from agents.trainers.evolution import EsConfigError, EsSettings, EsState
from deepboot_env.limits import shown
from deepboot_harness.benchmark import ROW_FIELDS as BENCHMARK_ROW_FIELDS
from deepboot_harness.run_log import RunLogError, read_runs
from traces.families import FAMILIES  # noqa: F401 - imported once here, not inside a traced load
from traces.loaders import TraceError, load_workload

ON_DEMAND = "DEEPBOOT_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("DEEPBOOT_FUZZ_EXAMPLES", "60"))
"""Cases per loader: 60 in CI (derandomized: the same cases every run), more on demand."""

MAX_ERROR_CHARS = 300
"""Issue 67: every error line is at most 300 characters (the file's path included)."""

MAX_PEAK_BYTES = 64 << 20
"""The most memory one load may allocate (Python allocations, traced)."""

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not ON_DEMAND,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")

WORK = Path(tempfile.mkdtemp(prefix="deepboot-fuzz-"))
"""Where the fuzzed files are written (hypothesis runs a test many times in one fixture scope)."""


def _bounded(load: Callable[[], Any], allowed: tuple[type[Exception], ...]) -> None:
    """Run ``load``: it returns, or raises one of ``allowed`` with a one-line message of bounded
    length; its traced allocations peak under :data:`MAX_PEAK_BYTES`."""
    tracemalloc.start()
    try:
        load()
    except allowed as exc:
        text = str(exc)
        assert "\n" not in text and len(text) <= MAX_ERROR_CHARS, text[:3000]
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < MAX_PEAK_BYTES, f"{peak:,} bytes"


# ---------------------------------------------------------------------------------------------
# strategies

NASTY_TEXT = st.sampled_from(
    ["", "nan", "inf", "-inf", "1e308", "1e-320", "-0", "1_000", "0x10", "=1+1", "@x", "+x", "\x00", "a\nb", "9" * 400]
)
FIELD = st.one_of(
    NASTY_TEXT,
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=30),
    st.sampled_from(["bert", "cifar10", "ncf", "imagenet", "infer-ncf-1", "infer-gpt-1", "yolov3"]),
)
JSON_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**45), 10**45)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=30,
)
HEADERS = [
    "name,time,application,num_replicas,batch_size",
    "name,time,application,num_replicas,batch_size,duration,num_task",
    "timestamp,duration,num_gpus,gpu_time,cluster",
]


@st.composite
def workload_csv(draw: st.DrawFn) -> bytes:
    """A workload-like CSV: a real or mangled header, rows of nasty fields; or raw bytes."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=300))
    header = draw(st.sampled_from(HEADERS) | st.text(max_size=40))
    width = draw(st.integers(1, 9))
    rows = draw(st.lists(st.lists(FIELD, min_size=width, max_size=width), max_size=6))
    text = header + "\n" + "".join(",".join(row) + "\n" for row in rows)
    return text.encode("utf-8", "surrogatepass")


def _mutated(base: dict[str, Any], draw: st.DrawFn) -> dict[str, Any]:
    """``base`` with a few fields replaced by (or added as) random JSON values, or dropped."""
    doc = copy.deepcopy(base)
    keys = [*base, "extra"]
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()) and key in doc:
            del doc[key]
        else:
            doc[key] = draw(JSON_VALUE)
    return doc


def _json_bytes(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


@st.composite
def json_doc(draw: st.DrawFn, base: dict[str, Any]) -> bytes:
    """A mutation of ``base`` as JSON, or raw text."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
    return _json_bytes(_mutated(base, draw))


YAML_PIECES = st.sampled_from(
    [
        "a: &a [1, 2, 3]\nb: [*a, *a, *a, *a]\n",
        "x: &x [*x]\n",
        "!!python/object/apply:os.system ['true']\n",
        "default:\n  common:\n    n_steps: 0\n",
        "default: [1, 2]\n",
        "common: {learning_rate: .nan}\n",
        "{" * 50,
        "- - - - - - - - - - - - - - - - - -\n",
        "default:\n  ppo: !!binary aGVsbG8=\n",
        "? [a, b]\n: c\n",
        "default:\n  common: {<<: {n_steps: 1}}\n",
        '"a\\nb": 1\n"c\\nd": 2\n',
        "".join(f"k{k}: {k}\n" for k in range(300)),
    ]
)


@st.composite
def yaml_text(draw: st.DrawFn) -> str:
    """A YAML configuration: random data dumped, crafted pieces (anchors, tags, nesting), or text."""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        import yaml

        return yaml.safe_dump({"default": {"common": draw(JSON_VALUE)}})
    if kind == 1:
        return "".join(draw(st.lists(YAML_PIECES, min_size=1, max_size=3)))
    return draw(st.text(max_size=200))


# ---------------------------------------------------------------------------------------------
# the loaders


def _write(name: str, content: bytes) -> Path:
    path = WORK / name
    path.write_bytes(content)
    return path


@FUZZ
@given(workload_csv())
def test_fuzz_workload_csv(content: bytes) -> None:
    path = _write("w.csv", content)
    _bounded(lambda: load_workload(path), (TraceError,))


PRIORITY = {"format": FORMAT, "features": list(FEATURES), "theta": [0.1] * len(FEATURES), "info": {}}


@FUZZ
@given(json_doc(PRIORITY))
def test_fuzz_priority_json(content: bytes) -> None:
    path = _write("p.json", content)
    _bounded(lambda: PriorityModel.load(path), (PriorityModelError,))


def _shipped_entries() -> dict[str, bytes]:
    with zipfile.ZipFile(SHIPPED_MODEL) as zf:
        return {name: zf.read(name) for name in zf.namelist() if name in ("data", "_stable_baselines3_version")}


SHIPPED_ENTRIES = _shipped_entries()
SHIPPED_DATA = json.loads(SHIPPED_ENTRIES["data"])


def _zip(name: str, entries: dict[str, bytes]) -> Path:
    path = WORK / name
    with zipfile.ZipFile(path, "w") as zf:
        for entry, content in entries.items():
            zf.writestr(entry, content)
    return path


def _check_data(path: Path) -> None:
    data = read_data(path)
    algo = saved_algo(path, data)
    check_saved_hyperparams(path, data, safe_custom_objects(path, data, algo))


@FUZZ
@given(json_doc(SHIPPED_DATA))
def test_fuzz_checkpoint_data(content: bytes) -> None:
    path = _zip("data.zip", {**SHIPPED_ENTRIES, "data": content})
    _bounded(lambda: _check_data(path), (CheckpointError,))


@FUZZ
@given(json_doc({"env_kwargs": {"base_policy": "ats", "max_jobs": 32}}))
def test_fuzz_checkpoint_metadata(content: bytes) -> None:
    path = _zip("meta.zip", {**SHIPPED_ENTRIES, METADATA_FILE: content})
    _bounded(lambda: model_env_kwargs(path), (CheckpointError,))


@FUZZ
@given(yaml_text())
def test_fuzz_yaml_configuration(text: str) -> None:
    path = _write("conf.yml", text.encode("utf-8", "surrogatepass"))

    def load() -> None:
        shown(load_conf(path, "default", "ppo"))

    _bounded(load, (ConfigError,))


ES_STATE = json.loads(json.dumps(EsState.start(EsSettings(), seed=0).__dict__))


@FUZZ
@given(json_doc(ES_STATE))
def test_fuzz_es_state(content: bytes) -> None:
    path = _write("state.json", content)
    _bounded(lambda: EsState.load(path), (EsConfigError,))


FULL_ENTRIES = {**_shipped_entries(), **{name: zipfile.ZipFile(SHIPPED_MODEL).read(name) for name in ("policy.pth",)}}
MEMBER_NAMES = st.sampled_from([*FULL_ENTRIES, "policy.optimizer.pth", "extra.pth", "../up", "data/", "x" * 300])


@st.composite
def model_zip_members(draw: st.DrawFn) -> dict[str, bytes]:
    """The shipped model's entries with some dropped, renamed, cut, swapped or added (issue 67:
    members the policy does not use, and contents that are not what their name says)."""
    entries = dict(FULL_ENTRIES)
    for name in draw(st.lists(st.sampled_from(list(FULL_ENTRIES)), max_size=2)):
        entries.pop(name, None)
    for _ in range(draw(st.integers(0, 2))):
        name = draw(MEMBER_NAMES)
        source = FULL_ENTRIES[draw(st.sampled_from(list(FULL_ENTRIES)))]
        entries[name] = source[: draw(st.integers(0, len(source)))]
    return entries


@FUZZ
@given(model_zip_members())
def test_fuzz_model_zip_members(entries: dict[str, bytes]) -> None:
    path = _zip("members.zip", entries)
    _bounded(lambda: load_checkpoint(path), (CheckpointError,))


load_checkpoint(SHIPPED_MODEL)  # SB3's and torch's lazy imports, paid once here, not in a traced load


RUN_ROW = {"policy": "ats", "family": "mixed", "seed": 1, "train_jct_mean": 1.5, "jcts": {"j": 1.0}}


@FUZZ
@given(st.lists(json_doc(RUN_ROW), max_size=4), st.booleans())
def test_fuzz_resumed_run_log(lines: list[bytes], cut: bool) -> None:
    """``benchmark --resume`` reads its own ``runs.jsonl``: whatever the lines, the runs or one line."""
    text = b"\n".join(lines) + (b"" if cut else b"\n")
    path = _write("runs.jsonl", text)
    _bounded(lambda: read_runs(path, BENCHMARK_ROW_FIELDS), (RunLogError,))
