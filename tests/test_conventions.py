"""Command-line conventions: no prefix abbreviations on any command, one-line errors, Zoo spellings
of ``train_policy.py`` (``--env``, ``-i/--trained-agent``, ``--device auto``) and its preset list."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest
from builders import REPO

from agents.errors import ConfigError
from agents.runs.run_config import ENV_IDS, TrainSettings, preset_descriptions, resolve_settings


def _script_main(relative: str) -> Callable[[list[str]], Any]:
    """``main`` of a script that is not in a package (benchmarks/)."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _module_main(name: str) -> Callable[[list[str]], Any]:
    return importlib.import_module(name).main


def _parser_files() -> list[Path]:
    """Every project source file that builds a command-line parser."""
    files = [REPO / "train_policy.py"]
    for folder in ("agents", "baselines", "benchmarks", "deepboot_env", "deepboot_harness", "traces"):
        files += sorted((REPO / folder).rglob("*.py"))
    return [f for f in files if "ArgumentParser(" in f.read_text(encoding="utf-8")]


BENCHMARK_REQUIRED: dict[str, list[str]] = {"bench_philly.py": ["--philly", "x"]}
"""Arguments a benchmark script requires."""

# every command with the arguments it requires: an abbreviation added to them must be the only error
COMMANDS: dict[str, tuple[Callable[[], Callable[[list[str]], Any]], list[str]]] = {
    "train_policy.py": (lambda: _module_main("train_policy"), []),
    "deepboot simulate": (lambda: _module_main("deepboot_harness.cli"), ["simulate"]),
    "deepboot compare": (
        lambda: _module_main("deepboot_harness.cli"),
        ["compare", "--workloads", "tiny", "--policies", "fifo", "--out", "x"],
    ),
    "deepboot benchmark": (lambda: _module_main("deepboot_harness.cli"), ["benchmark", "--out", "x"]),
    "deepboot generate": (lambda: _module_main("deepboot_harness.cli"), ["generate"]),
    "deepboot calibrate": (lambda: _module_main("deepboot_harness.cli"), ["calibrate", "--apps", "x"]),
    "deepboot_harness.curves": (lambda: _module_main("deepboot_harness.curves"), ["run", "--out", "x.png"]),
    "agents.saved.export": (lambda: _module_main("agents.saved.export"), ["a.zip", "b.zip"]),
    "agents.saved.score_sizes": (lambda: _module_main("agents.saved.score_sizes"), ["model.zip"]),
    "traces.calibrate": (lambda: _module_main("traces.calibrate"), ["--apps", "x"]),
    "traces.philly": (lambda: _module_main("traces.philly"), ["--philly", "x"]),
    "traces.make_shipped": (lambda: _module_main("traces.make_shipped"), []),
    **{
        f"benchmarks/{path.name}": (
            (lambda rel=f"benchmarks/{path.name}": _script_main(rel)),
            BENCHMARK_REQUIRED.get(path.name, []),
        )
        for path in sorted((REPO / "benchmarks").glob("bench_*.py"))
    },
}


def test_every_parser_is_the_project_parser() -> None:
    """A new command cannot slip in with argparse's defaults (prefix matching, multi-line errors)."""
    files = _parser_files()
    assert len(files) >= 15
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.name == "argparsing.py":
            continue
        assert "argparse.ArgumentParser(" not in text, f"{path}: use deepboot_env.argparsing.ArgumentParser"
        assert "from deepboot_env.argparsing import ArgumentParser" in text, path
    covered = {Path(name).name for name in COMMANDS} | {name.rsplit(".", 1)[-1] + ".py" for name in COMMANDS}
    for path in files:
        if path.name not in ("argparsing.py", "generate_cli.py", "cli.py"):
            assert path.name in covered, f"{path}: add its command to COMMANDS"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_abbreviations_are_refused_with_one_line(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--hel`` would print the help (exit 0) if prefixes matched; here it is an unknown flag."""
    load, required = COMMANDS[command]
    main = load()
    with pytest.raises(SystemExit) as exc:
        main([*required, "--hel"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: unrecognized arguments: --hel" in err, err


@pytest.mark.parametrize(
    ("command", "argv", "abbreviation"),
    [
        ("train_policy.py", ["--n-timestep", "10"], "--n-timestep"),
        ("train_policy.py", ["--trained", "x.zip"], "--trained"),
        ("train_policy.py", ["--env-kw", "max_jobs:8"], "--env-kw"),
        ("deepboot compare", ["--job", "2"], "--job"),
        ("deepboot benchmark", ["--famil", "mixed"], "--famil"),
        ("deepboot generate", ["--num-job", "3"], "--num-job"),
    ],
)
def test_the_reported_abbreviations_are_refused(
    command: str, argv: list[str], abbreviation: str, capsys: pytest.CaptureFixture[str]
) -> None:
    load, required = COMMANDS[command]
    with pytest.raises(SystemExit) as exc:
        load()([*required, *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unrecognized arguments: {abbreviation}" in err, err


def _train_args(*argv: str) -> TrainSettings:
    from train_policy import build_parser

    return TrainSettings.from_args(build_parser().parse_args(list(argv)))


def test_the_parser_has_a_flag_per_train_setting_in_its_order() -> None:
    """``config.yml`` records the settings under ``args`` in this order; ``--help`` lists the
    flags in it; the parser's defaults are the dataclass's."""
    from train_policy import build_parser

    args = build_parser().parse_args([])
    assert list(vars(args)) == [f.name for f in fields(TrainSettings)]
    assert TrainSettings.from_args(args) == TrainSettings()


def test_a_default_is_written_once_and_help_follows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in defaults live in :class:`TrainSettings` and (where a preset may override them)
    ``RUN_KEYS`` / ``PRETRAIN_KEYS``: changed there, the parser and its ``--help`` both follow."""
    import train_policy
    from agents.runs import run_config

    @dataclass(frozen=True)
    class Changed(TrainSettings):
        seed: int = 5
        vec_env: str = "subproc"
        workload: list[str] = field(default_factory=lambda: ["tiny", "val"])

    monkeypatch.setattr(train_policy, "TrainSettings", Changed)
    monkeypatch.setitem(run_config.RUN_KEYS, "n_envs", 7)
    monkeypatch.setitem(run_config.PRETRAIN_KEYS, "pretrain_noise", [0.0, 0.25])
    parser = train_policy.build_parser()
    args = parser.parse_args([])
    assert (args.seed, args.vec_env, args.workload, args.n_envs) == (5, "subproc", ["tiny", "val"], None)
    helps = {action.dest: action.help or "" for action in parser._actions}
    assert helps["seed"].endswith("default 5"), helps["seed"]
    assert "(default subproc)" in helps["vec_env"], helps["vec_env"]
    assert "(default tiny val)" in helps["workload"], helps["workload"]
    assert "(preset: 7)" in helps["n_envs"], helps["n_envs"]
    assert "preset: 0 0.25)" in helps["pretrain_noise"], helps["pretrain_noise"]


def test_zoo_spellings_of_train_policy() -> None:
    args = _train_args("-i", "runs/x.zip", "--env", "DeepBoot-v1")
    assert args.init_model == "runs/x.zip" and args.env == "DeepBoot-v1" and args.resume_run is None
    assert _train_args("--trained-agent", "a.zip").init_model == "a.zip"
    assert _train_args("--resume", "runs/ppo_1").resume_run == "runs/ppo_1"  # a run folder, continued
    assert _train_args().device == "auto"
    assert set(ENV_IDS) == {"DeepBoot-v0", "DeepBoot-v1"}


@pytest.mark.parametrize(
    ("argv", "dynamics"),
    [
        ([], "v1"),  # the default preset sets none: the front ends' default (v1), written out
        (["--env", "DeepBoot-v1"], "v1"),
        (["--env", "DeepBoot-v0"], "v0"),
        (["--env", "DeepBoot-v1", "--env-kwargs", "dynamics:v1", "max_jobs:8"], "v1"),
        (["--env", "DeepBoot-v0", "--preset", "generalist"], "v0"),  # the flag wins over the preset
        (["--preset", "generalist"], "v1"),
    ],
)
def test_env_id_sets_the_dynamics(argv: list[str], dynamics: str | None) -> None:
    settings = resolve_settings(_train_args(*argv), "maskable_ppo")
    assert settings["env_kwargs"].get("dynamics") == dynamics


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "CartPole-v1"], "--env: unknown env id 'CartPole-v1'; choose from DeepBoot-v0, DeepBoot-v1"),
        (["--env", "DeepBoot-v0", "--env-kwargs", "dynamics:v1"], "contradicts --env-kwargs dynamics:v1"),
    ],
)
def test_bad_env_id_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve_settings(_train_args(*argv), "ppo")
    from train_policy import main

    with pytest.raises(SystemExit) as exc:
        main([*argv, "-n", "1", "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_help_lists_every_preset_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from train_policy import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    presets = preset_descriptions()
    assert set(presets) == {
        "default",
        "smoke",
        "pretrained",
        "residual",
        "generalist",
        "priority-es",
        "width-es",
        "score",
        "score-group",
        "score-job",
        "score-app",
        "hindsight",
        "table-es",
    }
    listing = text.split("presets of agents/conf/deepboot.yml (--preset NAME):\n", 1)[1].splitlines()
    assert len(listing) == len(presets)
    for line, (name, description) in zip(listing, presets.items(), strict=True):
        assert description and line.split(maxsplit=1) == [name, description]


MAX_FUNCTION_LINES = 60
"""The longest function a reader should have to hold in mind (issue 34)."""

SHORT_FUNCTION_FILES = ("deepboot_env/sim", "agents", "train_policy.py", "deepboot_harness/cli.py")
"""Where functions stay within :data:`MAX_FUNCTION_LINES`: the physics, the training library and
the two command lines."""


def long_functions(path: Path, root: Path = REPO) -> list[str]:
    """``file:line name (N lines)`` of each function of ``path`` longer than MAX_FUNCTION_LINES
    (the file named relative to ``root``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_functions_of_the_core_stay_short() -> None:
    files = []
    for name in SHORT_FUNCTION_FILES:
        target = REPO / name
        files.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target])
    assert len(files) > 40
    long = [line for path in files for line in long_functions(path)]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_length_check_counts_a_long_function(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path.write_text(f"def f():\n{body}\n\n\ndef g():\n{body[: body.rfind(chr(10))]}\n")
    assert long_functions(path, tmp_path) == [f"probe.py:1 f ({MAX_FUNCTION_LINES + 1} lines)"]
