"""The state-reading learner (agents/trainers/learner.py): the teacher's labels read back, regressed
into a set policy, and the hindsight start of a training run (``teacher_seeds``), stopped and resumed
exactly."""

from __future__ import annotations

import csv
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import train_policy
from agents.errors import ConfigError
from agents.models.app_table import AppTableModel
from agents.runs.interrupt import TrainingInterrupted
from agents.runs.validation import EVAL_COLUMNS
from agents.saved.checkpoint import SavedModel
from agents.trainers.learner import LabelSet, clone_labels, read_labels
from agents.trainers.ppo import build_model, make_vec_env_for
from agents.trainers.teacher import MANIFEST, PLAYER_FILE, TeacherSpec, player_digest, read_manifest, teach
from agents.trainers.training_run import hindsight_budget
from baselines.hindsight import HindsightSettings
from deepboot_env.env.observation import JOB_FEATURES
from deepboot_env.sim.apps import APP_NAMES

SPEC = TeacherSpec(("short-requests",), seeds=1, search=HindsightSettings(generations=1, pairs=1))
"""One scenario, a search of 4 episodes: a few seconds."""

TINY_PRESET = {
    "n_timesteps": 512,
    "n_envs": 2,
    "group_size": 2,
    "eval_freq": 0,
    "save_freq": 0,
    "teacher_families": ["short-requests"],
    "teacher_seeds": 1,
    "teacher_generations": 1,
    "teacher_pairs": 1,
    "clone_epochs": 2,
    "env_kwargs": {**SPEC.env_kwargs, "relative_reward": True, "hold": 4},
    "policy": "SetPolicy",
    "group_advantage": True,
    "per_job_ratio": True,
    "n_steps": 128,
    "batch_size": 128,
    "n_epochs": 1,
    "policy_kwargs": {"embed_dim": 16, "attention_heads": 2, "pool_layers": 1, "application_scores": 0},
}
"""The ``hindsight`` preset in small: one labelled scenario, two regression epochs, 512 PPO steps."""


@pytest.fixture(scope="module")
def labels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LabelSet]:
    folder = tmp_path_factory.mktemp("learner") / "teacher"
    teach(SPEC, folder)
    return folder, read_labels(folder)


def _model(application_scores: int) -> object:
    env_kwargs = {**SPEC.env_kwargs, "relative_reward": True}
    vec = make_vec_env_for("tiny", 2, 0, env_kwargs, group_size=2, antithetic=True)
    hyperparams = {**TINY_PRESET, "policy_kwargs": {**TINY_PRESET["policy_kwargs"], "application_scores": 0}}
    hyperparams["policy_kwargs"]["application_scores"] = application_scores
    for key in ("n_timesteps", "n_envs", "group_size", "eval_freq", "save_freq", "env_kwargs"):
        hyperparams.pop(key)
    for key in [key for key in hyperparams if key.startswith(("teacher_", "clone_"))]:
        hyperparams.pop(key)
    return build_model("ppo", vec, hyperparams=hyperparams, env_kwargs=env_kwargs, group_size=2)


def test_a_teacher_s_folder_reads_as_one_label_set(labels: tuple[Path, LabelSet]) -> None:
    folder, read = labels
    assert read.scenarios == ["short-requests-1000"] and len(read) > 100
    assert read.labels.shape == (len(read), SPEC.max_jobs * 4 + 1) and read.labels.dtype == np.float32
    assert all(len(rows) == len(read) for rows in read.obs.values()) and set(read.scenario) == {0}
    empty = folder.parent / "empty"
    empty.mkdir()
    (empty / MANIFEST).write_text('{"spec": {}, "scenarios": {}}')
    with pytest.raises(ValueError, match="labelled no scenario yet"):
        read_labels(empty)


def _feature_labels(read: LabelSet) -> LabelSet:
    """Labels a state-reading policy can fit and a table cannot: each present job's score is
    0.5 x its age less the mean age of its application's jobs (no application's score explains it)."""
    rows = read.obs["jobs"].reshape(len(read), SPEC.max_jobs, -1)
    present = rows[:, :, 0] > 0.5
    age = rows[:, :, JOB_FEATURES.index("age")]
    app = rows[:, :, 1 : 1 + len(APP_NAMES)].argmax(axis=2)
    target = np.zeros_like(age)
    for a in np.unique(app[present]):
        jobs = present & (app == a)
        target[jobs] = 0.5 * (age[jobs] - age[jobs].mean())
    out = np.zeros_like(read.labels)
    out[:, : SPEC.max_jobs] = target
    return LabelSet(read.obs, out, read.scenario, read.scenarios)


@pytest.mark.parametrize(("application_scores", "fits"), [(0, True), (1, False)])
def test_the_regression_fits_what_the_state_shows(labels, application_scores: int, fits: bool) -> None:
    """The set policy without an application table learns a score that moves with a job's
    features (its error falls to a fifth of the labels' spread); the table cannot (the error stays
    above half of it)."""
    _, read = labels
    target = _feature_labels(read)
    acting = (read.obs["jobs"].reshape(len(read), SPEC.max_jobs, -1)[:, :, 0] > 0.5).sum()
    spread = float((target.labels**2).sum() / (4 * acting + len(read)))  # a score, 3 width scores, lending
    model = _model(application_scores)
    history = clone_labels(model, target, epochs=15, batch_size=128, learning_rate=3e-3, seed=0)
    assert len(history) == 15
    assert (history[-1]["mse"] < 0.2 * spread) is fits and (history[-1]["mse"] > 0.5 * spread) is not fits


def test_a_regression_is_deterministic_stops_and_refuses_other_actions(labels) -> None:
    _, read = labels
    first, second = _model(0), _model(0)
    assert clone_labels(first, read, epochs=2, seed=3) == clone_labels(second, read, epochs=2, seed=3)
    for a, b in zip(first.policy.parameters(), second.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    assert clone_labels(_model(0), read, epochs=3, should_stop=lambda: True) == []
    short = LabelSet(read.obs, read.labels[:, :-1], read.scenario, read.scenarios)
    with pytest.raises(ValueError, match="labels are actions of shape"):
        clone_labels(_model(0), short)
    with pytest.raises(ValueError, match="epochs >= 0"):
        clone_labels(_model(0), read, epochs=-1)


def _train(tmp_path: Path, name: str, *extra: str, preset: dict | None = None) -> list[str]:
    conf = tmp_path / "tiny.yml"
    conf.write_text(yaml.safe_dump({"common": preset or TINY_PRESET, "ppo": {}}))
    runs = tmp_path / name
    return [
        "--conf-file",
        str(conf),
        "--workload",
        "family:short-requests",
        "--no-progress",
        "--verbose",
        "0",
        "-f",
        str(runs),
        *extra,
    ]


def _weights(run: Path, name: str = "final_model.zip") -> dict[str, torch.Tensor]:
    saved = SavedModel.read(run / name)
    return {key: value.clone() for key, value in saved.load("cpu").policy.state_dict().items()}


def test_a_hindsight_start_stopped_and_resumed_trains_the_same_model(tmp_path: Path, monkeypatch) -> None:
    """A run whose regression a SIGINT stops (its labels written) says so, and ``--resume`` starts
    the hindsight start again from a new model and the labels kept: the final model equals an
    uninterrupted run's, weight for weight. Its record names the teacher's work and cost."""
    import agents.trainers.learner

    whole = train_policy.run(_train(tmp_path, "whole"))
    record = yaml.safe_load((whole / "config.yml").read_text())["teacher"]
    assert record["complete"] and record["scenarios"] == 1 and record["clone_epochs_done"] == 2
    assert record["teacher_cpu_s"] > 0 and (whole / "teacher" / "short-requests-1000.npz").is_file()

    real_teach = agents.trainers.learner.teach

    def teach_then_stop(*args, **kwargs):
        manifest = real_teach(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C would, once the labels are written
        return manifest

    monkeypatch.setattr(agents.trainers.learner, "teach", teach_then_stop)
    with pytest.raises(TrainingInterrupted) as stop:
        train_policy.run(_train(tmp_path, "stopped"))
    monkeypatch.setattr(agents.trainers.learner, "teach", real_teach)
    run = stop.value.run_dir
    assert "during the hindsight start" in str(stop.value) and "--resume" in stop.value.resume
    assert not yaml.safe_load((run / "config.yml").read_text())["teacher"]["complete"]
    assert train_policy.run(["--resume", str(run), "--verbose", "0"]) == run
    assert yaml.safe_load((run / "config.yml").read_text())["teacher"]["complete"]
    resumed, straight = _weights(run), _weights(whole)
    assert resumed.keys() == straight.keys()
    assert all(torch.equal(resumed[key], straight[key]) for key in straight)


def test_a_teacher_needs_a_new_score_model_in_its_env(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="labels the env it trains in: --env-kwargs width_classes:3"):
        train_policy.run(_train(tmp_path, "runs", "--env-kwargs", "width_classes:0"))
    with pytest.raises(ConfigError, match="from the teacher's labels or from an expert's"):
        train_policy.run(_train(tmp_path, "runs", "--pretrain-expert", "ats"))
    with pytest.raises(ConfigError, match=r"teacher_app_gain must be a number in \[0, 1,000\], got -1"):
        train_policy.run(_train(tmp_path, "runs", preset={**TINY_PRESET, "teacher_app_gain": -1}))
    with pytest.raises(ConfigError, match="app_gain needs advantage labels"):  # the preset's labels are held
        train_policy.run(_train(tmp_path, "runs", preset={**TINY_PRESET, "teacher_app_gain": 5}))


def test_a_run_starts_from_labels_deepboot_teach_wrote(labels, tmp_path: Path) -> None:
    """``--teacher-labels`` reads a teacher's folder in place; the regressed policy is validated
    before the first update by the one validator, in the one schema (issue 68: PPO, ES and the
    hindsight learner share them)."""
    folder, _ = labels
    flags = ["--teacher-labels", str(folder), "--teacher-seeds", "0", "--eval-workload", "tiny", "--eval-freq", "512"]
    run = train_policy.run(_train(tmp_path, "runs", *flags))
    record = yaml.safe_load((run / "config.yml").read_text())["teacher"]
    assert record["folder"] == str(folder) and record["complete"] and record["scenarios"] == 1
    assert not (run / "teacher").exists()  # read where they are, not labelled again
    with open(run / "evaluations.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == EVAL_COLUMNS and rows[1][0] == "0"  # the regressed policy, before any update
    assert float(rows[1][EVAL_COLUMNS.index("prior_ratio")]) > 0
    with pytest.raises(ConfigError, match="not a teacher manifest|cannot read it"):
        train_policy.run(_train(tmp_path, "runs", "--teacher-labels", str(tmp_path)))


ROUNDS_PRESET = {
    **TINY_PRESET,
    "n_timesteps": 0,
    "teacher_rounds": 2,
    "teacher_probes": 1,
    "env_kwargs": {**SPEC.env_kwargs, "relative_reward": True},
}
"""Policy iteration in small, and no PPO after it: the tiny preset's round, then one probe over its
regression (hold 1: the player's every decision is its own)."""


def test_policy_iteration_rounds_label_the_last_regression_and_resume_exactly(tmp_path: Path, monkeypatch) -> None:
    """With ``teacher_rounds`` 2 the second round labels the first regression's own play (its
    model kept as the round's player) and the model regresses those labels afresh; a run stopped
    once the second round's labels are written resumes at that round, without labelling or
    regressing the first again, to the same weights as a run never stopped."""
    import agents.trainers.learner

    whole = train_policy.run(_train(tmp_path, "whole", preset=ROUNDS_PRESET))
    record = yaml.safe_load((whole / "config.yml").read_text())["teacher"]
    assert record["complete"] and [done["round"] for done in record["rounds"]] == [1, 2]
    assert record["rounds"][1]["folder"] == "teacher-2" and record["rounds"][1]["scenarios"] == 1
    kept = (whole / "teacher-2" / PLAYER_FILE).read_bytes()
    spec = TeacherSpec.from_json(read_manifest(whole / "teacher-2")["spec"], "teacher-2")
    assert spec.player == player_digest(kept) == record["rounds"][1]["player"][:12] + spec.player[12:]
    assert record["teacher_cpu_s"] == pytest.approx(sum(done["teacher_cpu_s"] for done in record["rounds"]), abs=0.2)
    assert hindsight_budget(record).startswith("hindsight start: 2 round(s), 2 scenarios labelled, teacher ")

    real_teach, calls = agents.trainers.learner.teach, []

    def teach_then_stop(*args, **kwargs):
        manifest = real_teach(*args, **kwargs)
        calls.append(bool(kwargs.get("player")))
        if calls == [False, True]:
            os.kill(os.getpid(), signal.SIGINT)  # once the second round's labels are written
        return manifest

    monkeypatch.setattr(agents.trainers.learner, "teach", teach_then_stop)
    with pytest.raises(TrainingInterrupted):
        train_policy.run(_train(tmp_path, "stopped", preset=ROUNDS_PRESET))
    assert calls == [False, True]
    run = next((tmp_path / "stopped").iterdir())
    assert train_policy.run(["--resume", str(run), "--verbose", "0"]) == run
    assert calls == [False, True, True]  # the resume starts at round 2
    resumed, straight = _weights(run), _weights(whole)
    assert all(torch.equal(resumed[key], straight[key]) for key in straight)
    with pytest.raises(ConfigError, match="hold:1"):
        train_policy.run(_train(tmp_path, "held", "--env-kwargs", "hold:4", preset=ROUNDS_PRESET))
    with pytest.raises(ConfigError, match="needs a warm start"):
        train_policy.run(_train(tmp_path, "cold", "--teacher-seeds", "0", preset=ROUNDS_PRESET))


def test_a_table_s_play_is_round_one_and_a_regression_plays_round_two(tmp_path: Path) -> None:
    """``teacher_table``: round 1 labels the advantages over the held table's play (the spec
    records its values); round 2 labels the regression's own play, with no table; a table over
    another prior is refused in one line before any work."""
    table = tuple(np.round(np.random.default_rng(5).uniform(-0.5, 0.5, 24), 3).tolist())
    AppTableModel(table).save(tmp_path / "table.json")
    preset = {**ROUNDS_PRESET, "teacher_kind": "advantage", "teacher_table": str(tmp_path / "table.json")}
    preset["env_kwargs"] = {**preset["env_kwargs"], "base_policy": "ats-srpt-fcfs-place-rr-warm"}
    run = train_policy.run(_train(tmp_path, "runs", preset=preset))
    assert read_manifest(run / "teacher")["spec"]["table"] == list(table)
    second = read_manifest(run / "teacher-2")["spec"]
    assert second["table"] == [] and second["player"]
    rounds = yaml.safe_load((run / "config.yml").read_text())["teacher"]["rounds"]
    assert rounds[0]["player"] == "held table" and rounds[1]["player"] == second["player"][:12]
    AppTableModel(table, prior="ats-srpt").save(tmp_path / "other.json")
    with pytest.raises(ConfigError, match="scores ats-srpt, not the env's base_policy"):
        train_policy.run(_train(tmp_path, "other", preset={**preset, "teacher_table": str(tmp_path / "other.json")}))
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())


def test_table_generations_train_the_table_in_the_run_and_label_its_play(tmp_path: Path, monkeypatch) -> None:
    """``table_generations``: ES trains a held table from zeros in ``<run>/table`` (here one
    generation of one pair on one scenario, one val seed), and the teacher labels that table's
    play: the one-command path from nothing to the table and the labels over it."""
    from agents.trainers import evolution

    small = {"app_table": 1, "pairs": 1, "seeds_per_family": 1, "sigma": 0.05, "learning_rate": 0.02, "eval_freq": 1}
    monkeypatch.setattr(evolution, "load_conf", lambda *args, **kwargs: dict(small))
    monkeypatch.setattr(evolution, "FAMILY_SEEDS", 1)
    preset = {**ROUNDS_PRESET, "teacher_kind": "advantage", "teacher_rounds": 1, "table_generations": 1}
    run = train_policy.run(_train(tmp_path, "runs", preset=preset))
    record = yaml.safe_load((run / "config.yml").read_text())["teacher"]
    assert record["complete"] and record["table"]["complete"] and record["table"]["generations"] == 1
    table = AppTableModel.load(run / "table" / "best_model.json")
    spec = read_manifest(run / "teacher")["spec"]
    assert spec["table"] == np.clip(table.values, -1, 1).tolist()
    with pytest.raises(ConfigError, match="teacher_kind advantage"):
        train_policy.run(_train(tmp_path, "held", preset={**TINY_PRESET, "table_generations": 1}))
    with pytest.raises(ConfigError, match="set one of them"):
        train_policy.run(_train(tmp_path, "both", preset={**preset, "teacher_table": str(run / "table.json")}))
