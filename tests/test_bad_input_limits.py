"""Bounded reads and checked values (issue 33): each crafted input is refused in one line, naming
the file or the setting, without reading or formatting it whole."""

from __future__ import annotations

import json
import math
import resource
import zipfile
from pathlib import Path

import pytest
from builders import SHIPPED_MODEL

from agents.errors import ConfigError
from agents.hyperparameters import check_hyperparams
from agents.models.priority import FEATURES, PriorityModel, PriorityModelError
from agents.runs.run_config import load_conf
from agents.runs.validation import EVAL_COLUMNS
from agents.trainers.evolution import EsConfigError, EsSettings, EsState
from deepboot_env.config import EnvConfig, EnvConfigError
from deepboot_env.limits import (
    MAX_CONFIG_BYTES,
    MAX_INT_DIGITS,
    MAX_JOB_SLOTS,
    MAX_NESTING,
    MIN_INTERVAL_S,
    NotRegularFile,
    parse_json,
    parse_yaml,
    read_bounded,
    shown,
)
from deepboot_env.sim.simulator import SimConfig


def one_line(exc: BaseException, limit: int = 400) -> str:
    """The message of ``exc``, checked to be one short line."""
    text = str(exc)
    assert "\n" not in text and len(text) < limit, text[:1000]
    return text


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MB, Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + k)}: &{chr(98 + k)} [{', '.join(['*' + chr(97 + k)] * 10)}]\n" for k in range(9)
)
"""10**10 values once every alias is expanded, in under 1 KB."""


# ---------------------------------------------------------------------------------------------
# error messages never echo an unbounded value


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: "x" * 5_000_000, "(5,000,000 chars)"),
        (lambda: list(range(5_000_000)), "(5,000,000 items)"),
        (lambda: 10**5000, "an integer of about 5,000 digits"),
        (lambda: {str(k): k for k in range(100_000)}, "(100,000 items)"),
    ],
    ids=["str", "list", "int", "dict"],
)
def test_shown_cuts_long_values_and_says_how_long(make, fragment: str) -> None:
    text = shown(make())
    assert len(text) < 200 and fragment in text


def test_shown_is_bounded_on_shared_and_cyclic_values() -> None:
    shared = parse_yaml("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n", "x")
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert len(shown(shared)) < 200 and len(shown(cyclic)) < 200


@pytest.mark.parametrize(
    "check",
    [
        lambda v: check_hyperparams({"n_steps": v}),
        lambda v: EsSettings.of({"pairs": v}),
        lambda v: EnvConfig.from_options(max_jobs=v),
        lambda v: EnvConfig.from_options(action_mode=v),
    ],
)
def test_errors_on_a_huge_value_stay_short(check) -> None:
    for value in (["x"] * 1_000_000, "y" * 1_000_000):
        with pytest.raises((ConfigError, EsConfigError, EnvConfigError)) as err:
            check(value)
        one_line(err.value)


# ---------------------------------------------------------------------------------------------
# files: size, nesting, integers, aliases


def test_read_bounded_stops_at_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(bytes(4096))
    with pytest.raises(ValueError, match="larger than the limit of 1,024 bytes"):
        read_bounded(big, 1024, "a test file")
    with pytest.raises(NotRegularFile, match="is a character device, not a regular file"):
        read_bounded("/dev/zero", 1024, "a test file")  # never read: it has no end
    path = tmp_path / "small"
    path.write_bytes(b"abc")
    assert read_bounded(path, 3, "x") == b"abc"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than the limit"),
        ("[" * (MAX_NESTING + 2) + "]" * (MAX_NESTING + 2), "nested deeper than the limit"),
        ("1" * 400, f"an integer of 400 digits (the limit is {MAX_INT_DIGITS})"),
        ('{"a": ' + "9" * 5000 + "}", "an integer of 5,000 digits"),
        ("{", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        ("[" + "0," * 200_000 + "0]", "more than the limit of 100,000 values"),
    ],
    ids=["deep", "just-too-deep", "int400", "int5000", "truncated", "bad-utf8", "many-values"],
)
def test_json_limits(text: str | bytes, fragment: str) -> None:
    with pytest.raises(ValueError, match="^src: ") as err:
        parse_json(text, "src")
    assert fragment in one_line(err.value)


def test_yaml_billion_laughs_is_refused_without_expanding(tmp_path: Path) -> None:
    assert len(BILLION_LAUGHS) < 1024
    before = peak_rss_mb()
    with pytest.raises(ValueError, match="more than the limit of 100,000 values"):
        parse_yaml(BILLION_LAUGHS, "src")
    conf = tmp_path / "laughs.yml"
    conf.write_text(BILLION_LAUGHS + "default:\n  common:\n    policy_kwargs:\n      net_arch: *j\n")
    with pytest.raises(ConfigError, match=r"--conf-file .*laughs.yml: more than the limit") as err:
        load_conf(conf, "default", "ppo")
    one_line(err.value)
    assert peak_rss_mb() - before < 200


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: " + "[" * 5000 + "]" * 5000, "nested deeper"),
        ("a: &a [*a]\n", "nested deeper"),  # an alias of itself
        ("a: !!python/object/apply:os.system ['true']\n", "not YAML"),
        ("a: [\n", "not YAML"),
    ],
)
def test_yaml_limits(text: str, fragment: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as err:
        parse_yaml(text, "src")
    assert fragment in one_line(err.value)
    conf = tmp_path / "bad.yml"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        load_conf(conf, "default", "ppo")


def test_conf_file_size_limit_and_dev_zero(tmp_path: Path) -> None:
    big = tmp_path / "big.yml"
    big.write_text("#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match=f"larger than the limit of {MAX_CONFIG_BYTES:,} bytes"):
        load_conf(big, "default", "ppo")
    with pytest.raises(ConfigError, match="is a character device, not a regular file"):
        load_conf("/dev/zero", "default", "ppo")


# ---------------------------------------------------------------------------------------------
# priority models


def _priority_doc(theta: object) -> str:
    return json.dumps({"format": "deepboot-priority/1", "features": list(FEATURES), "theta": theta})


def test_priority_model_from_dev_zero_and_huge_files(tmp_path: Path) -> None:
    from deepboot_env.policy import make_policy

    with pytest.raises(PriorityModelError, match="is a character device, not a regular file") as err:
        make_policy("priority:/dev/zero")
    one_line(err.value)
    big = tmp_path / "theta.json"
    big.write_text(_priority_doc([0.5] * 5_000_000))
    with pytest.raises(PriorityModelError) as err:
        PriorityModel.load(big)
    one_line(err.value)


def test_priority_model_with_a_long_theta_gives_a_short_error(tmp_path: Path) -> None:
    path = tmp_path / "theta.json"
    path.write_text(_priority_doc([0.5] * 50_000))
    with pytest.raises(PriorityModelError, match="field 'theta'") as err:
        PriorityModel.load(path)
    assert "(50,000 items)" in one_line(err.value)


# ---------------------------------------------------------------------------------------------
# hyperparameters, env and simulation settings


@pytest.mark.parametrize(
    ("hyperparams", "fragment"),
    [
        ({"n_steps": 0}, "n_steps: must be from 1"),
        ({"batch_size": 10**9}, "batch_size: must be from 1"),
        ({"learning_rate": "nan"}, "learning_rate: must be a finite number > 0"),
        ({"learning_rate": float("inf")}, "learning_rate"),
        ({"learning_rate": "lin_inf"}, "learning_rate"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"gamma": float("nan")}, "gamma: must be from 0 to 1"),
        ({"gamma": 1.5}, "gamma"),
        ({"ent_coef": -0.1}, "ent_coef"),
        ({"clip_range": 1e308 * 10}, "clip_range"),
        ({"clip_range": int("9" * 400)}, "clip_range"),
        ({"target_kl": 0.0}, "target_kl"),
    ],
)
def test_hyperparameters_out_of_range(hyperparams: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match="hyperparameter ") as err:
        check_hyperparams(hyperparams)
    assert fragment in one_line(err.value)


def test_good_hyperparameters_pass() -> None:
    check_hyperparams({"n_steps": 1, "gamma": 1, "learning_rate": "lin_3e-4", "target_kl": None, "ent_coef": 0})


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"interval": 1e-9}, f"interval must be >= {MIN_INTERVAL_S:g} s (the limit)"),
        ({"jct_scale": 1e-320}, "jct_scale must be a number from 1e-06 to 1e+12"),
        ({"jct_scale": 1e300}, "jct_scale"),
        ({"jct_scale": True}, "jct_scale"),
        ({"max_jobs": 10**7}, f"max_jobs must be <= {MAX_JOB_SLOTS} (the limit)"),
        ({"lend_levels": 10**9}, "lend_levels must be <= 64 (the limit)"),
        ({"cluster": "10000000x4+8x4"}, "10,000,008 nodes, more than the limit of 100,000"),
        ({"shared_pool": "10000000x4"}, "more than the limit of 100,000"),
        ({"max_time": int("9" * 400)}, "max_time must be a finite number"),
        ({"interval": "60"}, "interval must be a number"),
    ],
)
def test_env_options_out_of_range(options: dict, fragment: str) -> None:
    with pytest.raises(EnvConfigError) as err:
        EnvConfig.from_options(**options)
    assert fragment in one_line(err.value)


def test_interval_lower_bound_in_the_simulator_and_the_cli(capsys) -> None:
    from deepboot_harness.cli import main

    with pytest.raises(ValueError, match="the limit"):
        SimConfig(interval=MIN_INTERVAL_S / 2)
    SimConfig(interval=MIN_INTERVAL_S)
    with pytest.raises(SystemExit) as stop:  # refused by the flag's own range, as argparse refuses
        main(["simulate", "--workload", "smoke/tiny", "--policy", "fifo", "--interval", "1e-9", "--quiet"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--interval: must be a number from 1 to 86400, got 1e-9" in err


@pytest.mark.parametrize("seed", [1.7, True, -1, "3", None])
def test_scenario_seed_must_be_a_whole_number(seed: object) -> None:
    from deepboot_env.env import DeepBootEnv

    env = DeepBootEnv(workload="family:philly-periodic", max_jobs=4)
    if seed is None:
        env.reset(seed=0)
        return
    with pytest.raises(ValueError, match="scenario_seed must be an integer >= 0") as err:
        env.reset(seed=0, options={"scenario_seed": seed})
    one_line(err.value)


# ---------------------------------------------------------------------------------------------
# ES settings and state


def test_es_with_the_default_preset_keeps_its_own_learning_rate() -> None:
    values = load_conf(None, "default", "es", common=False)
    settings = EsSettings.of({k: v for k, v in values.items() if k in EsSettings.__dataclass_fields__})
    assert settings.learning_rate == 0.02 and settings.eval_freq == 2
    assert load_conf(None, "default", "ppo")["learning_rate"] == 3e-4  # PPO still reads common


@pytest.mark.parametrize("value", [math.inf, math.nan, 10**400, 1e300], ids=["inf", "nan", "int400", "1e300"])
def test_es_settings_refuse_non_finite_and_huge_counts(value: float) -> None:
    with pytest.raises(EsConfigError) as err:
        EsSettings.of({"generations": value})
    one_line(err.value)


def _state(tmp_path: Path, **changes: object) -> Path:
    good = EsState.start(EsSettings(), seed=0)
    doc = {**good.__dict__, "ats_jct": {"philly-periodic/1000": 5000.0}}
    doc.update(changes)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(doc))
    return path


def _train_seed() -> int:
    from traces.families import split_seeds

    return int(split_seeds("train")[0])


ES_STATE_CASES: dict[str, tuple[dict, str]] = {
    "short theta": ({"theta": [1.0]}, "field 'theta'"),
    "nan theta": ({"theta": [float("nan")] * len(FEATURES)}, "field 'theta'"),
    "string m": ({"m": "zeros"}, "field 'm'"),
    "negative v": ({"v": [-1.0] * len(FEATURES)}, "field 'v'"),
    "bool in theta": ({"theta": [True] * len(FEATURES)}, "field 'theta'"),
    "float generation": ({"generation": 1.5}, "field 'generation'"),
    "negative episodes": ({"episodes": -3}, "field 'episodes'"),
    "infinite best": ({"best_val": float("inf")}, "field 'best_val'"),
    "best within a number": ({"best_within": 1}, "field 'best_within'"),
    "rng garbage": ({"rng": {"bit_generator": "nope"}}, "field 'rng'"),
    "rng list": ({"rng": [1, 2]}, "field 'rng'"),
    "cache not a dict": ({"ats_jct": [1]}, "field 'ats_jct'"),
    "poisoned cache": ({"ats_jct": {"philly-periodic/SEED": 1e-300}}, "not an ATS mean JCT"),
    "cache nan": ({"ats_jct": {"philly-periodic/SEED": float("nan")}}, "not an ATS mean JCT"),
    "unknown family": ({"ats_jct": {"nope/SEED": 100.0}}, "not a family/seed"),
    "test seed": ({"ats_jct": {"philly-periodic/999999999": 100.0}}, "not a family/seed"),
    "unknown field": ({"extra": 1}, "unknown or missing"),
    "wall nan": ({"wall_seconds": float("nan")}, "field 'wall_seconds'"),
}


@pytest.mark.parametrize("case", sorted(ES_STATE_CASES))
def test_tampered_es_states_are_refused_in_one_line(case: str, tmp_path: Path) -> None:
    changes, fragment = ES_STATE_CASES[case]
    seed = str(_train_seed())
    changes = json.loads(json.dumps(changes).replace("SEED", seed))
    path = _state(tmp_path, **changes)
    with pytest.raises(EsConfigError) as err:
        EsState.load(path)
    assert fragment in one_line(err.value) and str(path) in str(err.value)


def test_a_good_es_state_loads_and_bad_files_fail(tmp_path: Path) -> None:
    path = _state(tmp_path, ats_jct={f"philly-periodic/{_train_seed()}": 5000.0})
    assert EsState.load(path).ats_jct
    for text in ("", "[" * 100_000, "{" + '"a": 1,' * 10 + "}"):
        path.write_text(text)
        with pytest.raises(EsConfigError) as err:
            EsState.load(path)
        one_line(err.value)
    with pytest.raises(EsConfigError, match="cannot resume"):
        EsState.load(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------------
# checkpoints: zip bombs, hyperparameters, metadata naming files


def _rewrite(src: Path, out: Path, data: dict | None = None, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(src) as zf:
        items = {name: zf.read(name) for name in zf.namelist()}
    if data is not None:
        items["data"] = json.dumps({**json.loads(items["data"]), **data}).encode()
    items.update(extra or {})
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in items.items():
            zf.writestr(name, content)
    return out


def test_a_zip_bomb_data_entry_is_refused_without_unpacking_it(tmp_path: Path) -> None:
    from agents.saved.checkpoint import CheckpointError, read_data

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("data", "w", force_zip64=True) as fh:
        chunk = b" " * (1 << 20)
        for _ in range(200):  # 200 MB of spaces: a few hundred KB packed
            fh.write(chunk)
    assert bomb.stat().st_size < 1 << 20
    before = peak_rss_mb()
    with pytest.raises(CheckpointError, match="entry 'data' unpacks to 209,715,200 bytes") as err:
        read_data(bomb)
    one_line(err.value)
    assert peak_rss_mb() - before < 100


def test_a_zip_whose_data_lies_about_its_size_is_read_no_further(tmp_path: Path) -> None:
    from agents.saved.checkpoint import CheckpointError, read_data

    liar = tmp_path / "liar.zip"
    with zipfile.ZipFile(liar, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data", b"{" + b" " * (10 << 20) + b"}")
    raw = bytearray(liar.read_bytes())  # declare 10 bytes: zipfile stops there, and the CRC fails
    central = raw.rindex(b"PK\x01\x02")
    raw[central + 24 : central + 28] = (10).to_bytes(4, "little")
    raw[26 - 4 : 26] = (10).to_bytes(4, "little")
    liar.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError) as err:
        read_data(liar)
    one_line(err.value)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"gamma": float("nan")}, "gamma"),
        ({"learning_rate": float("inf")}, "learning_rate"),
        ({"n_steps": 0}, "n_steps"),
        ({"gae_lambda": 7.0}, "gae_lambda"),
    ],
)
def test_the_safe_loader_refuses_non_finite_hyperparameters(data: dict, fragment: str, tmp_path: Path) -> None:
    from agents.saved.checkpoint import CheckpointError, load_checkpoint

    path = _rewrite(SHIPPED_MODEL, tmp_path / "bad.zip", data=data)
    with pytest.raises(CheckpointError, match=fragment) as err:
        load_checkpoint(path)
    one_line(err.value)


@pytest.mark.parametrize("base", ["ppo:other.zip", "priority:/dev/zero"])
def test_metadata_naming_a_file_is_refused(base: str, tmp_path: Path) -> None:
    from agents.saved.checkpoint import CheckpointError
    from agents.saved.policy_adapter import METADATA_FILE, model_env_kwargs
    from deepboot_env.policy import make_policy

    meta = json.dumps({"env_kwargs": {"base_policy": base}}).encode()
    path = _rewrite(SHIPPED_MODEL, tmp_path / "meta.zip", extra={METADATA_FILE: meta})
    with pytest.raises(CheckpointError, match="names a file") as err:
        model_env_kwargs(path)
    one_line(err.value)
    with pytest.raises(CheckpointError, match="names a file"):
        make_policy(f"ppo:{path}")


# ---------------------------------------------------------------------------------------------
# train_policy.py: one line and exit status 2 before any work


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--hyperparams", "n_steps:0"], "hyperparameter n_steps: must be from 1"),
        (["--hyperparams", "learning_rate:nan"], "hyperparameter learning_rate: must be a finite number > 0"),
        (["--hyperparams", "gamma:1e999"], "hyperparameter gamma"),
        (["--env-kwargs", "jct_scale:1e-320"], "jct_scale must be a number from"),
        (["--env-kwargs", "max_jobs:10000000"], "max_jobs must be <= 4096"),
        (["--env-kwargs", "interval:1e-9"], "interval must be >= 1 s"),
        (["--algo", "es", "--workload", "family:bursty", "-params", "generations:1e400"], "ES setting generations"),
        (["--algo", "es", "--workload", "family:bursty", "-params", "sigma:nan"], "ES setting sigma"),
    ],
)
def test_train_policy_refuses_bad_values_in_one_line(extra: list[str], fragment: str, tmp_path: Path, capsys) -> None:
    import train_policy

    with pytest.raises(SystemExit) as exc:
        train_policy.main(["--log-folder", str(tmp_path / "runs"), "--no-progress", *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert fragment in err[-1] and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("algo", ["ppo", "es"])
def test_train_policy_log_folder_onto_a_file_is_one_line(algo: str, tmp_path: Path, capsys) -> None:
    import train_policy

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for folder in (blocker, blocker / "below"):
        try:  # a bad flag exits through argparse, an unwritable folder returns main's status
            status = train_policy.main(
                ["--algo", algo, "-f", str(folder), "--no-progress", "--workload", "family:bursty"]
            )
        except SystemExit as exc:
            status = exc.code
        assert status == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "Traceback" not in "\n".join(err) and str(blocker) in err[-1], err


EVAL_HEADER = ",".join(EVAL_COLUMNS)
"""The header every trainer's evaluations.csv has."""


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "invalid JSON"),
        ("huge.json", "[" + " " * (2 << 20) + "]", "larger than the limit"),
    ],
)
def test_interference_matrix_files_are_bounded(name: str, content: str, fragment: str, tmp_path: Path, capsys) -> None:
    from deepboot_harness.cli import main

    path = tmp_path / name
    path.write_text(content)
    argv = ["simulate", "--workload", "smoke/tiny", "--policy", "fifo", "--interference-matrix", str(path), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err


def test_a_poisoned_but_plausible_ats_cache_is_caught_on_resume(tmp_path: Path, capsys) -> None:
    """The range check cannot see a plausible wrong value: resuming recomputes a cached entry."""
    import train_policy
    from agents.trainers.evolution import episode_jct, verify_cache

    seed = _train_seed()
    true = episode_jct((None, "bursty", seed, ()))
    run = tmp_path / "es_1"
    run.mkdir()
    path = _state(run, ats_jct={f"bursty/{seed}": true})
    verify_cache(path, EsState.load(path))  # the true value passes
    path = _state(run, ats_jct={f"bursty/{seed}": true * 0.5})
    with pytest.raises(EsConfigError, match=f"bursty/{seed} holds .* but ATS takes") as err:
        verify_cache(path, EsState.load(path))
    one_line(err.value)
    from dataclasses import asdict

    from agents.runs.run_config import TrainSettings
    from agents.runs.run_folder import write_config

    flags = TrainSettings(algo="es", workload=["family:bursty"], no_progress=True)
    write_config(run / "config.yml", {"algo": "es", "args": asdict(flags)})  # what the run was asked for
    with pytest.raises(SystemExit) as exc:
        train_policy.main(["--algo", "es", "--workload", "family:bursty", "--resume", str(run), "--no-progress"])
    assert exc.value.code == 2 and "does not match the scenarios" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--num-jobs", "100000000"], "100,000,000 training jobs, more than the limit of 600,000 rows"),
        (["--load", "1e300"], "an integer of about 302 digits training jobs"),
        (["--horizon-hours", "1e5"], "inference requests, more than the limit of 600,000 rows"),
    ],
)
def test_generate_refuses_workloads_beyond_the_row_limit(flags: list[str], fragment: str, capsys) -> None:
    from deepboot_harness.cli import main

    assert main(["generate", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("deepboot generate: error: ") and fragment in err


def test_a_missing_preset_lists_the_file_s_presets_in_one_short_line(tmp_path: Path) -> None:
    conf = tmp_path / "many.yml"
    conf.write_text('"a\\nb": {}\n' + "".join(f"preset{k}: {{}}\n" for k in range(1000)))
    with pytest.raises(ConfigError, match="no preset 'nope'; presets: 'a\\\\nb', preset0, ") as err:
        load_conf(conf, "nope", "ppo")
    assert "and 981 more" in one_line(err.value)


@pytest.mark.parametrize(
    ("common", "fragment"),
    [
        ("n_timesteps: -" + "9" * 4000, "--n-timesteps must be >= 0, got an integer of about 4,000 digits"),
        ("n_steps: " + "9" * 4000, "hyperparameter n_steps: must be from 1"),
        ("n_steps: " + "9" * 5000, "not YAML (Exceeds the limit (4300 digits)"),
        ("learning_rate: .nan", "hyperparameter learning_rate"),
        ("env_kwargs: {jct_scale: 1.0e-320}", "jct_scale must be a number from"),
    ],
)
def test_huge_and_non_finite_values_in_a_conf_file(common: str, fragment: str, tmp_path: Path, capsys) -> None:
    import train_policy

    conf = tmp_path / "conf.yml"
    conf.write_text(f"default:\n  common:\n    {common}\n")
    with pytest.raises(SystemExit) as exc:
        train_policy.main(["--conf-file", str(conf), "--log-folder", str(tmp_path / "runs"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err[-1]) < 500 and fragment in err[-1] and "Traceback" not in "\n".join(err)


def test_crafted_files_stay_under_500_mb_through_the_commands(tmp_path: Path) -> None:
    """Issue 33's acceptance: each crafted file is refused in one line with exit status 2 by the
    command that reads it, and the whole process (imports included) peaks under 500 MB (VmHWM:
    ru_maxrss would count the pytest process a forked child starts as)."""
    import subprocess
    import sys

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("data", "w", force_zip64=True) as fh:
        for _ in range(512):  # 512 MB of spaces, about 0.5 MB packed
            fh.write(b" " * (1 << 20))
    laughs = tmp_path / "laughs.yml"
    laughs.write_text(BILLION_LAUGHS + "default:\n  common:\n    n_steps: *j\n")
    wide = tmp_path / "wide.csv"
    wide.write_text("a," * 100_000 + "a\n")
    rows = tmp_path / "rows.csv"
    rows.write_text(
        "name,time,application,num_replicas,batch_size\n" + "".join(f"j{k},{k},ncf,1,32768\n" for k in range(650_000))
    )
    script = (
        "import sys\n"
        "from deepboot_harness.cli import main\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "except SystemExit as stop:  # train_policy.py's parser.error\n"
        "    code = stop.code\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]  # this program's peak, kB\n"
        "print(code, int(status) // 1024)\n"
    )
    simulate = ["simulate", "--workload", "smoke/tiny", "--quiet", "--policy"]
    cases = {
        "zip bomb": [*simulate, f"ppo:{bomb}"],
        "/dev/zero model": [*simulate, "priority:/dev/zero"],
        "billion laughs": ["train", "--conf-file", str(laughs), "-f", str(tmp_path / "runs")],
        "100,000 columns": ["simulate", "--workload", str(wide), "--policy", "fifo", "--quiet"],
        "650,000 rows": ["simulate", "--workload", str(rows), "--policy", "fifo", "--quiet"],
    }
    for name, argv in cases.items():
        out = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=300)
        code, peak_mb = map(int, out.stdout.split()[-2:])
        error_lines = [line for line in out.stderr.splitlines() if "error:" in line]
        assert code == 2 and len(error_lines) == 1 and "Traceback" not in out.stderr, (name, out.stderr[-2000:])
        assert peak_mb < 500, (name, peak_mb)


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("generations.csv", "generation,episodes\n1,2,3\n", "line 1: header"),
        ("evaluations.csv", f"{EVAL_HEADER}\n1,2\n", "line 2: 2 fields"),
        ("evaluations.csv", f'{EVAL_HEADER}\n1,"x' + "y" * 200_000, "field"),
        ("evaluations.csv", f"{EVAL_HEADER}\n1,x,w" + ",1" * (len(EVAL_COLUMNS) - 3) + "\n", "iteration"),
    ],
    ids=["header", "short-row", "huge-field", "not-a-number"],
)
def test_an_es_resume_checks_its_csvs_before_any_work(name: str, content: str, fragment: str, tmp_path: Path, capsys):
    """A run folder's CSVs are read bounded and checked when the resume starts (they used to fail
    with a ``_csv.Error`` traceback after a generation's work)."""
    import time

    from builders import es_smoke_argv

    import train_policy

    run = train_policy.run(es_smoke_argv("priority-es", tmp_path / "runs", "-n", "1"))
    (run / name).write_text(content)
    capsys.readouterr()
    start = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        train_policy.main([*es_smoke_argv("priority-es", tmp_path / "runs", "-n", "1"), "--resume", str(run)])
    assert stop.value.code == 2 and time.monotonic() - start < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and fragment in err[0] and len(err[0]) <= 300, err


# ---------------------------------------------------------------------------------------------
# issue 67: a resume's own files, command-line numbers, messages

BENCH = ["benchmark", "--families", "bursty", "--policies", "ats", "--seeds", "1", "--quiet"]
ROW = '{"policy": "ats", "family": "bursty", "seed": 1, "train_jct_mean": 1.0, "jcts": {}}\n'


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("benchmark.json", "[" * 100_000 + "]" * 100_000, "nested deeper than the limit"),
        ("benchmark.json", "[1, 2]", "not a benchmark's settings"),
        ("benchmark.json", "null", "not a benchmark's settings"),
        ("benchmark.json", '{"settings": {"policies": "' + "x" * 50_000_000 + '"}}', "larger than the limit"),
        ("benchmark.json", '{"settings": {"policies": "' + "x" * 500_000 + '"}}', "was run with other settings"),
        ("runs.jsonl", "[1]\n", "line 1: not a run"),
        (
            "runs.jsonl",
            '{"policy": "ats", "family": "bursty", "seed": 1, "train_jct_mean": 1.0}\n',
            "'jcts' is missing",
        ),
        (
            "runs.jsonl",
            '{"policy": "ats", "family": "bursty", "seed": "1", "train_jct_mean": 1, "jcts": {}}\n',
            "'seed'",
        ),
    ],
    ids=["deep", "list", "null", "50-mb", "long-value", "not-an-object", "no-jcts", "seed-text"],
)
def test_a_resume_reads_its_own_folder_bounded_and_checked(name: str, content: str, fragment: str, tmp_path, capsys):
    from deepboot_harness.cli import main

    out = tmp_path / "bench"
    assert main([*BENCH, "--out", str(out)]) == 0
    (out / name).write_text(content)
    capsys.readouterr()
    assert main([*BENCH, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and fragment in err and len(err) <= 300, err[:400]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["train", "--seed", "-1"], "--seed: must be a whole number from 0 to 4,294,967,295"),
        (["train", "--num-threads", "-2"], "--num-threads: must be a whole number from 0 to 1,024"),
        (["train", "--eval-freq", "-5"], "--eval-freq: must be a whole number >= 0"),
        (["train", "--save-freq", "-5"], "--save-freq: must be a whole number >= 0"),
        (["train", "--verbose", "-1"], "--verbose: must be a whole number from 0 to 2"),
        (["train", "--n-envs", "300", "--vec-env", "subproc", "-n", "64"], "would start 300 processes"),
        (["generate", "--inference-gpus", "0"], "--inference-gpus: must be a whole number from 1"),
        (["generate", "--inference-gpus", "-1"], "--inference-gpus: must be a whole number from 1"),
        (["generate", "--phase-hours", "nan"], "--phase-hours: expected a number"),
        (["generate", "--phase-hours", "inf"], "--phase-hours: expected a number"),
        (["generate", "--horizon-hours", "1e-9"], "--horizon-hours: must be a number from 0.01"),
        (["generate", "--instances-per-app", "0"], "--instances-per-app: must be a whole number from 1"),
        (["simulate", "--interval", "1e30"], "--interval: must be a number from 1 to 86400"),
    ],
)
def test_command_line_numbers_out_of_range_are_one_line(argv: list[str], fragment: str, tmp_path, capsys) -> None:
    from deepboot_harness.cli import main

    argv = [*argv, "-f", str(tmp_path)] if argv[0] == "train" else argv
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0] and len(err[0]) <= 300 and "Traceback" not in err[0], err


def test_a_huge_num_task_is_refused(tmp_path: Path) -> None:
    from traces.loaders import TraceError, load_workload

    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size,duration,num_task\nj,0,ncf,1,32,-1,1e20\n")
    with pytest.raises(TraceError, match="'num_task'") as err:
        load_workload(path)
    one_line(err.value, 300)


def test_a_key_given_twice_in_an_es_state_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    text = json.dumps(EsState.start(EsSettings(), seed=0).__dict__)
    path.write_text(text.replace('"generation": 0', '"generation": 0, "generation": 1'))
    with pytest.raises(EsConfigError, match="key 'generation' is given twice") as err:
        EsState.load(path)
    one_line(err.value, 300)


def test_an_action_error_at_4096_slots_is_short() -> None:
    import numpy as np

    from deepboot_env.env.action import split_action

    action = np.full(MAX_JOB_SLOTS + 1, 99, dtype=np.int64)
    with pytest.raises(ValueError, match="outside the action space") as err:
        split_action(action, MAX_JOB_SLOTS, 9, 5)
    one_line(err.value, 300)
