"""train_policy.py: smoke trainings (MaskablePPO, PPO, --resume), run folder, TensorBoard tags."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import yaml
from builders import FENCE, REPO, shell_commands

sys.path.insert(0, str(REPO))  # train_policy.py is a script at the repository root

import train_policy  # noqa: E402
from agents.runs.validation import EVAL_COLUMNS  # noqa: E402
from traces.loaders import resolve_workload  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")  # train_policy sets 1 (--num-threads default)


@pytest.fixture(scope="module")
def tiny_csv() -> Path:
    return resolve_workload("tiny")  # the shipped workload of the smoke preset


def _common(tiny_csv: Path, log_folder: Path) -> list[str]:
    return [
        "--preset",
        "smoke",
        "--workload",
        str(tiny_csv),
        "--eval-workload",
        str(tiny_csv),
        "--log-folder",
        str(log_folder),
        "--no-progress",
        "--verbose",
        "0",
    ]


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert list(folder.glob("events.out.tfevents.*")), f"no event files in {folder}"
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _hparams(folder: Path) -> dict[str, object]:
    """The hparams a TensorBoard run folder records (the HPARAMS tab's session start)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    for path in folder.glob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == "_hparams_/session_start_info":
                    data = HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    params = data.session_start_info.hparams
                    return {k: getattr(v, v.WhichOneof("kind")) for k, v in params.items()}
    raise AssertionError(f"no hparams in {folder}")


def test_smoke_maskable_ppo(tiny_csv, tmp_path) -> None:
    argv = ["--algo", "maskable_ppo", "--n-timesteps", "2048", "--n-envs", "2", "--seed", "3", "--eval-freq", "1024"]
    run = train_policy.run(argv + _common(tiny_csv, tmp_path / "runs"))
    assert run == tmp_path / "runs" / "maskable_ppo_1"
    for name in ("config.yml", "final_model.zip", "best_model.zip", "evaluations.csv", "progress.csv"):
        assert (run / name).is_file(), name

    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["algo"] == "maskable_ppo" and config["seed"] == 3 and config["n_envs"] == 2
    assert config["env_kwargs"] == {"max_jobs": 8, "max_rounds": 1000, "dynamics": "v1"}  # the default world, named
    assert config["hyperparams"]["n_steps"] == 128 and config["hyperparams"]["gamma"] == 0.995
    assert config["versions"]["Stable-Baselines3"] and config["versions"]["sb3-contrib"]
    assert config["results"]["total_timesteps"] == 2048 and config["results"]["steps_per_second"] > 0

    with open(run / "evaluations.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["timesteps"]) for r in rows] == [1024, 2048]
    assert tuple(rows[0]) == EVAL_COLUMNS  # the schema every trainer writes (ES: test_selection)
    assert {"workload", "train_jct_mean", "infer_latency_p99", "lent_gpu_hours"} <= set(rows[0])

    scalars = _scalars(run / "tb")
    for tag in ("sched/train_jct_mean", "sched/makespan", "sched/lent_gpu_hours", "sched/reclaims", "sched/restarts"):
        assert tag in scalars, tag
    assert "sched/infer_latency_p99" in scalars and "sched/repaired_gpus" in scalars
    assert "reward/jct" in scalars and "reward/infer" in scalars
    assert "eval/train_jct_mean" in scalars and "rollout/ep_rew_mean" in scalars
    assert all(v > 0 for _, v in scalars["sched/train_jct_mean"])
    assert all(v <= 0 for _, v in scalars["reward/jct"])

    from deepboot_env.config import sim_config
    from deepboot_env.evaluation import run_episode
    from deepboot_env.policy import make_policy
    from traces.loaders import load_workload

    policy = make_policy(f"ppo:{run}")  # the run folder -> its best model
    assert policy.masked and policy.max_jobs == 8
    best = min(rows, key=lambda r: float(r["censored_jct_mean"]))
    world = sim_config(dynamics="v1")  # deepboot compare's default, the run's
    if best["truncated"] == "0":  # evaluation during training == evaluation by deepboot compare
        metrics = run_episode(policy, load_workload(tiny_csv), world)
        assert metrics.train_jct_mean == pytest.approx(float(best["train_jct_mean"]), abs=1e-3)

    # the model is selected by its JCT ratio to ats, run once on the same episode
    assert config["eval_reference"] == "ats" and config["results"]["selected_by"] == "mean censored JCT / ats's"
    assert len({r["reference_censored_jct"] for r in rows}) == 1
    for r in rows:
        ratio = float(r["censored_jct_mean"]) / float(r["reference_censored_jct"])
        assert float(r["jct_ratio"]) == pytest.approx(ratio)
    assert config["results"]["best_val_score"] == pytest.approx(min(float(r["jct_ratio"]) for r in rows))
    ats = run_episode(make_policy("ats"), load_workload(tiny_csv), world)
    if not ats.truncated:
        assert float(rows[0]["reference_censored_jct"]) == pytest.approx(ats.train_jct_mean, abs=1e-3)


def test_ppo_tensorboard_log_and_resume(tiny_csv, tmp_path) -> None:
    tb = tmp_path / "tb"
    first = train_policy.run(
        ["--algo", "ppo", "-n", "512", "--eval-freq", "0", "-tb", str(tb)] + _common(tiny_csv, tmp_path / "runs")
    )
    assert first.name == "ppo_1" and (first / "final_model.zip").is_file()
    assert not (first / "best_model.zip").exists()  # evaluation disabled
    assert list((tb / "ppo_1").glob("events.out.tfevents.*"))

    second = train_policy.run(  # -i: a new run from the model, counted and scheduled from 0
        ["-i", str(first / "final_model.zip"), "-n", "256", "--eval-freq", "256", "--hyperparams", "n_epochs:1"]
        + _common(tiny_csv, tmp_path / "runs")
    )
    assert second.name == "ppo_2"
    config = yaml.safe_load((second / "config.yml").read_text())
    assert config["algo"] == "ppo" and config["resumed_from"] == str(first / "final_model.zip")
    assert config["results"]["total_timesteps"] == 256

    from stable_baselines3 import PPO

    model = PPO.load(second / "final_model.zip", device="cpu")
    assert model.num_timesteps == 256 and model.n_epochs == 1
    assert (second / "best_model.zip").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algo", "dqn"], "unknown algo 'dqn'"),
        (["--hyperparams", "n_steps"], "expected key:value"),
        (["--hyperparams", "n_stepz:3"], "unknown hyperparameter 'n_stepz'"),
        (["--env-kwargs", "max_job:3"], "unknown env option(s) max_job"),
        (["--env-kwargs", "max_jobs:0"], "max_jobs"),
        (["--device", "tpu"], "unknown device"),
        (["-i", "nowhere.zip"], "no saved model"),
        (["--resume", "nowhere"], "--resume nowhere: no such run folder"),
        (["--workload", "no-such-workload"], "no-such-workload"),
        (["--preset", "nope"], "no preset 'nope'"),
        (["--algo", "ppo", "--preset", "table-es"], "--preset table-es trains by evolution strategies"),
        (["--algo", "es", "--preset", "smoke"], "--preset smoke has no es section"),
        (["--eval-reference", "nope"], "--eval-reference: unknown policy 'nope'"),
    ],
)
def test_bad_flags_give_one_line_errors(argv, message, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        train_policy.main(["--log-folder", str(tmp_path), "--no-progress", "--verbose", "0", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def _one_line_error(argv: list[str], tmp_path: Path, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        train_policy.main(["--log-folder", str(tmp_path), "--verbose", "0", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not any(tmp_path.glob("ppo_*")), "no run folder for a run that did not start"
    return err


def test_a_preset_a_single_preset_file_lacks_is_one_line(tmp_path, capsys) -> None:
    single = tmp_path / "one.yml"
    single.write_text("common: {n_envs: 1}\n")
    err = _one_line_error(["--conf-file", str(single), "--preset", "residual"], tmp_path, capsys)
    assert "single preset; --preset 'residual'" in err


def test_missing_shipped_presets_are_one_line_not_an_empty_preset(tmp_path, capsys, monkeypatch) -> None:
    """A broken install must not train from built-in defaults under a preset's name."""
    import agents.runs.run_config

    monkeypatch.setattr(agents.runs.run_config, "DEFAULT_CONF", tmp_path / "missing.yml")
    err = _one_line_error(["--preset", "residual"], tmp_path, capsys)
    assert "cannot read the shipped presets file" in err and "missing.yml" in err


def test_sigint_saves_a_resumable_model_and_exits_130(tiny_csv, tmp_path) -> None:
    """Ctrl-C during training: no traceback, one line naming the resume command, exit 130, and
    --resume continues the step count."""
    import os
    import signal
    import subprocess
    import sys
    import time

    runs = tmp_path / "runs"
    argv = [sys.executable, str(REPO / "train_policy.py"), "--algo", "ppo", "-n", "200000", "--eval-freq", "0"]
    argv += _common(tiny_csv, runs)[:-2] + ["--verbose", "0", "--num-threads", "1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    progress = runs / "ppo_1" / "progress.csv"
    while time.monotonic() < deadline and not (progress.is_file() and progress.stat().st_size > 0):
        time.sleep(0.5)  # wait for the first PPO update: training is under way
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "SIGINT" in lines[0] and "--resume" in lines[0] and "Traceback" not in err, err
    run = runs / "ppo_1"
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["results"]["interrupted"] == "SIGINT"
    steps = config["results"]["total_timesteps"]
    assert 0 < steps < 200000

    assert lines[0].endswith(f"resume with: {sys.executable} {REPO / 'train_policy.py'} --resume {run}"), lines[0]
    resumed = train_policy.run(["--resume", str(run), "-n", "256", "--verbose", "0"])  # the rest: from the folder
    again = yaml.safe_load((resumed / "config.yml").read_text())
    assert resumed == run and again["results"]["interrupted"] is None
    assert again["results"]["total_timesteps"] == steps + 256 and again["sessions"][0]["results"]["interrupted"]


def test_training_on_a_family_selects_on_its_val_seeds(tmp_path) -> None:
    argv = ["--algo", "ppo", "-n", "256", "--eval-freq", "256", "--eval-episodes", "2", "--preset", "smoke"]
    argv += ["--workload", "family:short-period", "--eval-workload", "family:short-period"]
    argv += ["--env-kwargs", "max_jobs:8", "max_rounds:300", "--log-folder", str(tmp_path), "--no-progress"]
    run = train_policy.run([*argv, "--verbose", "0", "--eval-reference", "none"])
    with open(run / "evaluations.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    val = [f"short-period-{seed}" for seed in (1_000_000, 1_000_001)]
    assert [r["workload"] for r in rows] == val and (run / "best_model.zip").is_file()
    assert {r["jct_ratio"] for r in rows} == {""}  # no reference: selected by the mean censored JCT
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["workload"] == ["family:short-period"] and config["eval_reference"] is None
    mean_censored = sum(float(r["censored_jct_mean"]) for r in rows) / len(rows)
    assert config["results"]["best_val_score"] == pytest.approx(mean_censored)


def test_a_family_is_trained_on_alone() -> None:
    from agents.errors import ConfigError
    from agents.trainers.training_run import load_workloads, training_source

    assert training_source(["family:mixed"]) == "family:mixed"
    with pytest.raises(ConfigError, match="one workload family or a list of workloads"):
        training_source(["family:mixed", "train"])
    labels = [label for label, _ in load_workloads(["family:bursty:test"])]
    assert labels == [f"bursty-{seed}" for seed in range(2_000_000, 2_000_008)]


def test_tensorboard_shows_step_means_from_the_first_rollout_and_the_config(tiny_csv, tmp_path, capsys) -> None:
    argv = ["--algo", "ppo", "-n", "256", "--n-envs", "2", "--hyperparams", "n_steps:64", "n_epochs:1"]
    argv += ["--pretrain-expert", "ats", "--pretrain-epochs", "2", "--eval-jobs", "2"]
    run = train_policy.run(argv + _common(tiny_csv, tmp_path / "runs")[:-1] + ["1"])

    scalars = _scalars(run / "tb")
    rollouts = [128, 256]  # n_steps x n_envs per rollout
    for tag in ("reward/step_jct", "reward/step_infer", "reward/step_total", "sched/step_active_jobs"):
        assert [step for step, _ in scalars[tag]] == rollouts, tag
    assert "sched/step_repaired_gpus" in scalars
    assert all(v < 0 for _, v in scalars["reward/step_jct"]) and all(
        v > 0 for _, v in scalars["sched/step_active_jobs"]
    )
    for (_, total), (_, jct), (_, infer) in zip(
        scalars["reward/step_total"], scalars["reward/step_jct"], scalars["reward/step_infer"], strict=True
    ):
        assert total == pytest.approx(jct + infer, rel=1e-5)
    assert not any(tag.startswith("pretrain/") for tag in scalars)  # its own run, its own step axis
    pretrain = _scalars(run / "tb" / "pretrain")
    assert [step for step, _ in pretrain["pretrain/bc_loss"]] == [1, 2]
    assert "eval/jct_ratio" in scalars and "eval/truncated_frac" in scalars

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"), size_guidance={"tensors": 0})
    acc.Reload()
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "n_timesteps: 256" in text and "pretrain_expert: ats" in text and "dynamics: v1" in text
    hparams = _hparams(run / "tb")
    assert hparams["n_timesteps"] == 256 and hparams["hyperparams.n_steps"] == 64 and hparams["algo"] == "ppo"
    assert hparams["env_kwargs.max_rounds"] == 1000 and hparams["pretrain_expert"] == "ats"
    assert hparams["env_kwargs.dynamics"] == "v1"

    out = capsys.readouterr().out
    assert "warm start: epoch 2/2" in out
    line = next(x for x in out.splitlines() if x.startswith("eval @ 256 steps"))
    assert "truncated (cut at 1,000 decisions, not before the last job arrival" in line
    assert "selection score" in line and "mean censored JCT / ats's (lower is better)" in line
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["eval_jobs"] == 2 and 0 < config["results"]["eval_share"] < 1


def test_vec_env_ray_without_ray_says_in_one_line_how_to_install_it(tiny_csv, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    argv = ["--vec-env", "ray", *_common(tiny_csv, tmp_path / "runs")]
    with pytest.raises(SystemExit) as exit_:
        train_policy.main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "train_policy.py: error: --vec-env ray needs Ray, an optional extra: pip install -e '.[ray]' "
        "(pip install 'ray[tune]==2.60.0') (see --help)"
    )
    assert not (tmp_path / "runs").exists()
    with pytest.raises(SystemExit):
        train_policy.main(["--address", "auto", *_common(tiny_csv, tmp_path / "runs")])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "train_policy.py: error: --address is for --vec-env ray and --tune (see --help)"
    )


def test_tune_without_ray_says_in_one_line_how_to_install_it(tiny_csv, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    spec = tmp_path / "sweep.yml"
    spec.write_text("seed: {grid: [0, 1]}\n")
    with pytest.raises(SystemExit) as exit_:
        train_policy.main(["--tune", str(spec), *_common(tiny_csv, tmp_path / "runs")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "train_policy.py: error: --tune needs Ray Tune, an optional extra: pip install -e '.[ray]' "
        "(pip install 'ray[tune]==2.60.0') (see --help)"
    )
    assert not (tmp_path / "runs").exists()


def test_reference_episodes_run_beside_training(tiny_csv, tmp_path, monkeypatch) -> None:
    """With worker processes, the reference's episodes start in the background at training start
    (none goes through the evaluation's pool) and score the model exactly as in-process ones."""
    import agents.runs.validation

    pooled: list[str] = []
    real = agents.runs.validation.run_pool

    def spy(fn, items, *args, **kwargs):
        pooled.extend(getattr(item, "policy", "") for item in items)
        return real(fn, items, *args, **kwargs)

    monkeypatch.setattr(agents.runs.validation, "run_pool", spy)  # the evaluation's pool
    argv = ["--n-timesteps", "256", "--n-envs", "2", "--eval-freq", "256", "--eval-episodes", "2"]
    rows = {}
    for jobs in ("2", "1"):
        pooled.clear()
        run = train_policy.run(
            argv + _common(tiny_csv, tmp_path / jobs) + ["--eval-jobs", jobs, "-params", "n_steps:128"]
        )
        with open(run / "evaluations.csv", newline="") as fh:
            rows[jobs] = [r["reference_censored_jct"] for r in csv.DictReader(fh)]
        assert ("ats" in pooled) == (jobs == "1"), pooled
    assert rows["2"] == rows["1"] and all(float(v) > 0 for v in rows["1"])


def test_an_in_process_evaluation_leaves_the_global_generators_alone(tiny_csv, tmp_path, monkeypatch) -> None:
    """An in-process evaluation (--eval-jobs 1) loads the snapshot in the training process, and
    SB3's load seeds the global generators with the run's seed: training must draw on as if the
    episodes had run in workers (before the fix, a run's weights depended on --eval-jobs)."""
    import random

    import numpy as np
    import torch

    import agents.runs.callbacks

    def generators() -> tuple:
        return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist()

    real = agents.runs.callbacks.WorkloadEvalCallback.evaluate
    checked: list[bool] = []

    def spy(self):
        before = generators()
        rows = real(self)
        checked.append(generators() == before)
        return rows

    monkeypatch.setattr(agents.runs.callbacks.WorkloadEvalCallback, "evaluate", spy)
    argv = ["--n-timesteps", "256", "--n-envs", "2", "--eval-freq", "128", "--eval-episodes", "2", "--seed", "3"]
    train_policy.run(argv + _common(tiny_csv, tmp_path) + ["--eval-jobs", "1", "-params", "n_steps:128"])
    assert checked and all(checked), checked


def test_eval_family_takes_a_seed_count() -> None:
    from agents.errors import ConfigError
    from agents.trainers.training_run import load_workloads

    many = load_workloads(["family:mixed:val:32"])
    assert len(many) == 32 and [label for label, _ in many[:2]] == ["mixed-1000000", "mixed-1000001"]
    assert [label for label, _ in load_workloads(["family:mixed"], "val")] == [label for label, _ in many[:8]]
    for bad in ("family:mixed:val:0", "family:mixed:val:x"):
        with pytest.raises(ConfigError, match="seed count"):
            load_workloads([bad])


def _es_preset(argv: list[str]) -> bool:
    """Whether ``argv`` names a preset that trains by ES without ``--algo`` (``table-es``)."""
    from agents.runs.run_config import preset_algo

    return "--preset" in argv and preset_algo(None, argv[argv.index("--preset") + 1], None) == "es"


def test_the_readme_s_ppo_training_commands_train_their_preset_s_algorithm(tmp_path, monkeypatch) -> None:
    """Issue 68: the README's two PPO training commands (``score-app``, and ``-i`` over another
    prior), run as written with ``-n 1``, both train GroupPPO with the preset's learning rate; the fourth
    used to train plain PPO at SB3's defaults and record ``hyperparams: {}``. A bare ``-i`` keeps
    the trainer the model names."""
    commands = [
        argv[2:] for argv in shell_commands((REPO / "README.md").read_text()) if argv[:2] == ["deepboot", "train"]
    ]
    ppo = [argv for argv in commands if "--algo" not in argv and not _es_preset(argv)]
    assert len(ppo) == 2 and "-i" in ppo[1], ppo
    assert any(_es_preset(argv) for argv in commands)  # the first command: ES by its preset alone
    monkeypatch.chdir(tmp_path)  # the README's runs/ppo_1 is relative
    quick = ["-n", "1", "--no-progress", "--verbose", "0"]
    runs = [train_policy.run([*argv, *quick]) for argv in ppo]
    configs = [yaml.safe_load((run / "config.yml").read_text()) for run in runs]
    assert (runs[0] / "curve.png").is_file()  # the validation ratio to ats, next to its TensorBoard events
    for config in configs:
        assert config["trainer"] == "GroupPPO", config["trainer"]
        assert config["hyperparams"]["learning_rate"] == 1e-3 and config["hyperparams"]["group_advantage"]
    assert configs[1]["resumed_from"].endswith("ppo_1/final_model.zip")
    bare = train_policy.run(
        ["--workload", "family:mixed", "-i", "runs/ppo_1/final_model.zip", "--eval-freq", "0", *quick]
    )
    config = yaml.safe_load((bare / "config.yml").read_text())
    assert config["trainer"] == "GroupPPO" and config["group_size"] == 2
    # the README's load_agent snippet, on the model its first command made (it used to crash there)
    (snippet,) = [
        body
        for language, body in FENCE.findall((REPO / "README.md").read_text())
        if language == "python" and "load_agent" in body
    ]
    assert '"deepboot-score-v8"' in snippet and "runs/ppo_1/final_model.zip" in snippet
    exec(compile(snippet.replace('"deepboot-score-v8"', '"runs/ppo_1/final_model.zip"'), "README.md", "exec"), {})  # noqa: S102


def test_a_resumed_run_continues_its_learning_rate_schedule(tiny_csv, tmp_path, monkeypatch) -> None:
    """A run stopped half-way (a SIGINT sent at step 512) and continued with the one command its
    stop prints (``--resume RUN``, every setting from the folder) trains on to its own total with
    the same linear schedule: the update after step t of either session uses 1e-3 x (1 - t / 1024). A
    changed setting is refused in one line; ``-i`` starts the schedule again."""
    import os
    import signal

    import agents.runs.callbacks
    from agents.errors import ConfigError
    from agents.runs.interrupt import TrainingInterrupted

    real = agents.runs.callbacks.StopOnSignal._on_step

    def stop_half_way(self) -> bool:
        if self.num_timesteps == 512:
            os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C would, in the middle of a rollout
        return real(self)

    monkeypatch.setattr(agents.runs.callbacks.StopOnSignal, "_on_step", stop_half_way)
    argv = ["-n", "1024", "--eval-freq", "0", "-params", "learning_rate:lin_1e-3", "n_steps:128", "n_epochs:1"]
    argv += ["--n-envs", "1", *_common(tiny_csv, tmp_path / "runs")]
    with pytest.raises(TrainingInterrupted) as stop:
        train_policy.run(argv)
    run = stop.value.run_dir
    assert stop.value.resume.endswith(f"--resume {run}")
    monkeypatch.setattr(agents.runs.callbacks.StopOnSignal, "_on_step", real)
    with pytest.raises(ConfigError, match=r"--resume .*: -params .* differs from the run's"):
        train_policy.run(["--resume", str(run), "-params", "learning_rate:1e-4"])
    assert train_policy.run(["--resume", str(run), "--verbose", "0"]) == run
    with open(run / "progress.csv", newline="") as fh:  # both sessions, one file
        rates = [float(r["train/learning_rate"]) for r in csv.DictReader(fh) if r.get("train/learning_rate")]
    # an update after each rollout of 128 steps but the one the stop cut (512); a schedule started
    # again would give 0.75e-3, 0.5e-3, ... after the resume
    assert rates == pytest.approx([1e-3 * (1 - t / 1024) for t in (128, 256, 384, 640, 768, 896, 1024)], abs=1e-12)
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["results"]["total_timesteps"] == 1024 and len(config["sessions"]) == 1
    fresh = train_policy.run(["-i", str(run), "-n", "256", *argv[2:]])  # a new run: 256 steps, from 0
    with open(fresh / "progress.csv", newline="") as fh:
        rates = [float(r["train/learning_rate"]) for r in csv.DictReader(fh) if r.get("train/learning_rate")]
    assert rates == pytest.approx([5e-4, 0.0], abs=1e-9)
