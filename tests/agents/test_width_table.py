"""A score model's width outputs as a table (``agents.models.width_table``): growing them, ES over them
(``train_policy.py --algo es -i MODEL.zip``) and PPO resuming a model that grows them."""

from __future__ import annotations

import gc
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch as th
import yaml
from builders import REPO, es_smoke_argv

import train_policy
from agents.models.env_shape import env_shape_of
from agents.models.width_table import (
    STATE_FEATURES,
    WidthTableError,
    grow_state_scores,
    grow_width_outputs,
    set_width_table,
    width_names,
    width_table,
)
from agents.saved.checkpoint import load_checkpoint
from agents.saved.policy_adapter import AgentPolicy, load_agent_policy
from agents.trainers.evolution import EsConfigError, EsSettings
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import WIDTH_CLASSES
from deepboot_env.sim.apps import APP_NAMES
from traces.generate import generate_workload

pytestmark = pytest.mark.usefixtures("torch_one_thread")

V3 = REPO / "models" / "lineage" / "deepboot-score-v3.zip"
needs_v3 = pytest.mark.skipif(not V3.is_file(), reason="no shipped score model")
V6 = REPO / "models" / "lineage" / "deepboot-score-v6.zip"
needs_v6 = pytest.mark.skipif(not V6.is_file(), reason="no shipped score model")


@pytest.fixture(scope="module")
def busy():
    """Twelve jobs in half an hour: jobs contend for GPUs, so widths matter."""
    return generate_workload(
        "busy", 4, train={"num_jobs": 12, "window_hours": 0.5}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0}
    )


def _played(model, workload) -> tuple[float, int]:
    policy = AgentPolicy(model, base_policy=model.policy.env_kwargs["base_policy"], hold=4)
    metrics = run_episode(policy, workload, sim_config(dynamics="v1"), seed=0)
    return metrics.train_jct_mean, metrics.restarts


@needs_v3
def test_growing_keeps_every_weight_and_the_policy_and_adds_zero_width_outputs(busy) -> None:
    model = load_checkpoint(V3)
    before = {key: value.clone() for key, value in model.policy.state_dict().items()}
    slots = env_shape_of(model)["max_jobs"]
    grow_width_outputs(model, "v3")
    assert env_shape_of(model)["width_classes"] == WIDTH_CLASSES
    assert model.action_space.shape == (slots * (1 + WIDTH_CLASSES) + 1,)
    assert model.policy.env_kwargs["width_classes"] == WIDTH_CLASSES
    after = model.policy.state_dict()
    table = "mlp_extractor.application_table.weight"
    for key, old in before.items():
        if key == "score_log_std":  # [scores, lending] + widths at the scores' deviation
            assert th.equal(after[key], th.cat([old, old[:1]]))
        else:
            assert th.equal(after[key][: old.shape[0]], old), key
    assert not after[table][1:].any()
    assert width_table(model).tolist() == [0.0] * len(width_names()) == [0.0] * (WIDTH_CLASSES * len(APP_NAMES))
    assert _played(model, busy) == _played(load_checkpoint(V3), busy)
    with pytest.raises(WidthTableError, match="has width scores already"):
        grow_width_outputs(model, "v3")
    with pytest.raises(WidthTableError, match="has no width scores"):
        width_table(load_checkpoint(V3), "v3")


@needs_v3
def test_a_width_table_is_written_where_the_names_say_and_moves_the_schedule(busy) -> None:
    model = grow_width_outputs(load_checkpoint(V3))
    values = np.linspace(-0.5, 0.5, len(width_names()))
    set_width_table(model, values)
    assert width_table(model) == pytest.approx(values, abs=1e-7)
    weights = model.policy.mlp_extractor.application_table.weight.detach().numpy()
    for value, name in zip(values, width_names(), strict=True):
        app, cls = name.split("/")
        row = 1 + ("two", "node", "split").index(cls)
        assert weights[row, APP_NAMES.index(app)] == pytest.approx(value, abs=1e-7)
    assert _played(model, busy) != _played(load_checkpoint(V3), busy)
    for bad in (values[:-1], np.full(len(values), np.nan)):
        with pytest.raises(WidthTableError, match="finite values"):
            set_width_table(model, bad, "m.zip")


@needs_v6
def test_state_scores_grow_at_zero_read_the_jobs_features_and_save(busy, tmp_path: Path) -> None:
    """Grown state scores keep the policy bit for bit; a weight on one feature moves each job's
    score by that weight times the feature, and the model saves and loads with them."""
    model = load_checkpoint(V6)
    table = width_table(model, score_row=True)
    with pytest.raises(WidthTableError, match="has no state scores"):
        width_table(model, "v6", score_row=True, state_scores=True)
    grow_state_scores(model, "v6")
    assert model.policy_kwargs["application_scores"] == 2
    values = width_table(model, score_row=True, state_scores=True)
    assert values[: len(table)] == pytest.approx(table, abs=0) and not values[len(table) :].any()
    assert len(values) == len(width_names(True, True)) == len(table) + len(STATE_FEATURES)
    assert _played(model, busy) == _played(load_checkpoint(V6), busy)
    with pytest.raises(WidthTableError, match="has state scores already"):
        grow_state_scores(model, "v6")
    network = model.policy.mlp_extractor
    features = th.rand(3, network.job_width)
    features[:, 1 : 1 + len(APP_NAMES)] = 0.0
    features[:, 1] = 1.0  # one application: the table adds the same to every row
    before = network.state_scores(features[:, 1 + len(APP_NAMES) :])
    values[len(table) + STATE_FEATURES.index("attained_service")] = 2.0
    set_width_table(model, values, "v6", score_row=True, state_scores=True)
    after = network.state_scores(features[:, 1 + len(APP_NAMES) :])
    service = features[:, 1 + len(APP_NAMES) + STATE_FEATURES.index("attained_service")]
    assert (after - before)[:, 0].detach().numpy() == pytest.approx(2.0 * service.numpy(), abs=1e-6)
    assert not (after - before)[:, 1:].any()
    assert _played(model, busy) != _played(load_checkpoint(V6), busy)
    model.save(tmp_path / "m.zip")
    loaded = load_checkpoint(tmp_path / "m.zip")
    assert width_table(loaded, score_row=True, state_scores=True) == pytest.approx(values, abs=1e-7)
    with pytest.raises(WidthTableError, match="state scores holds"):
        set_width_table(model, values[:-1], "m.zip", score_row=True, state_scores=True)


@needs_v6
def test_es_over_state_scores_grows_them_and_trains_them_with_the_table(tmp_path: Path) -> None:
    argv = _es_argv(tmp_path, "-i", str(V6), "-n", "1", "-params", "score_row:1", "state_scores:1")
    run = train_policy.run(argv)
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["trains"] == "application table and state scores"
    names = width_names(score_row=True, state_scores=True)
    start = width_table(load_checkpoint(run / "start_model.zip"), score_row=True, state_scores=True)
    assert start[: -len(STATE_FEATURES)] == pytest.approx(width_table(load_checkpoint(V6), score_row=True), abs=0)
    assert not start[-len(STATE_FEATURES) :].any()
    state = json.loads((run / "state.json").read_text())
    assert len(state["theta"]) == len(names) and np.any(state["theta"][-len(STATE_FEATURES) :])
    final = load_checkpoint(run / "final_model.zip")
    assert width_table(final, score_row=True, state_scores=True) == pytest.approx(state["theta"], abs=1e-7)
    assert (run / "generations.csv").read_text().splitlines()[0].split(",")[-len(names) :] == list(names)


def _es_argv(runs: Path, *extra: str) -> list[str]:
    return es_smoke_argv("width-es", runs, *extra)


@needs_v3
def test_es_over_a_models_widths_grows_it_trains_the_table_and_resumes(tmp_path: Path) -> None:
    run = train_policy.run(_es_argv(tmp_path, "-i", str(V3), "-n", "1"))
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["trains"] == "width table" and config["start_model"] == str(V3)
    start = load_checkpoint(run / "start_model.zip")
    assert width_table(start).tolist() == [0.0] * len(width_names())
    state = json.loads((run / "state.json").read_text())
    final = load_checkpoint(run / "final_model.zip")
    assert width_table(final) == pytest.approx(state["theta"], abs=1e-7) and np.any(state["theta"])
    header = (run / "generations.csv").read_text().splitlines()[0].split(",")
    assert header[-len(width_names()) :] == list(width_names())
    assert load_agent_policy(run / "best_model.zip").codec.width_classes == WIDTH_CLASSES
    resumed = train_policy.run(_es_argv(tmp_path, "--resume", str(run), "-n", "1"))
    assert resumed == run
    assert yaml.safe_load((run / "config.yml").read_text())["start_model"] == str(V3)
    state = json.loads((run / "state.json").read_text())
    assert state["generation"] == 2 and len(state["theta"]) == len(width_names())
    assert width_table(load_checkpoint(run / "final_model.zip")) == pytest.approx(state["theta"], abs=1e-7)
    assert width_table(load_checkpoint(run / "start_model.zip")).tolist() == [0.0] * len(width_names())


def test_es_refuses_a_model_without_an_application_table(tmp_path: Path, capsys) -> None:
    argv = [
        "--preset", "score", "-n", "64", "--workload", "family:short-period", "--eval-freq", "0",
        "--n-envs", "1", "--group-size", "1", "--env-kwargs", "max_jobs:8",
        "--hyperparams", "n_steps:64", "batch_size:64", "n_epochs:1",
        "policy_kwargs:dict(embed_dim=16,attention_heads=2,attention_layers=1)",
        "--log-folder", str(tmp_path / "runs"), "--no-progress", "--verbose", "0",
    ]  # fmt: skip
    model = train_policy.run(argv) / "final_model.zip"
    with pytest.raises(SystemExit) as stop:
        train_policy.main(_es_argv(tmp_path, "-i", str(model), "-n", "1"))
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a score model with an application table" in err[0]


@needs_v3
def test_ppo_resuming_a_score_model_with_width_classes_grows_them(tmp_path: Path) -> None:
    argv = [
        "--preset", "score-app", "-i", str(V3), "--env-kwargs", "width_classes:3", "-n", "64",
        "--workload", "family:short-period", "--eval-freq", "0", "--n-envs", "2",
        "--hyperparams", "n_steps:32", "batch_size:64", "n_epochs:1",
        "--log-folder", str(tmp_path / "runs"), "--no-progress", "--verbose", "0",
    ]  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = train_policy.run(argv)
        gc.collect()  # a run closes its logs itself: nothing is left for the collector to find open
    assert not [str(w.message) for w in caught if "unclosed" in str(w.message)]
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["env_kwargs"]["width_classes"] == WIDTH_CLASSES
    model = load_checkpoint(run / "final_model.zip")
    assert env_shape_of(model)["width_classes"] == WIDTH_CLASSES
    assert model.num_timesteps >= 64 and len(width_table(model)) == len(width_names())


def _whole_table_argv(runs: Path, *extra: str) -> list[str]:
    argv = _es_argv(runs, *extra)
    argv.insert(argv.index("eval_freq:1") + 1, "score_row:1")
    return argv


@needs_v3
def test_es_with_score_row_trains_the_whole_table_from_the_models_own_and_resumes(tmp_path: Path) -> None:
    names = width_names(score_row=True)
    assert names == tuple(f"{app}/score" for app in APP_NAMES) + width_names()
    own = load_checkpoint(V3).policy.mlp_extractor.application_table.weight[0].detach().numpy()
    run = train_policy.run(_whole_table_argv(tmp_path, "-i", str(V3), "-n", "1"))
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["trains"] == "application table" and config["settings"]["score_row"] == 1
    start = width_table(load_checkpoint(run / "start_model.zip"), score_row=True)
    assert start.tolist() == own.astype(float).tolist() + [0.0] * len(width_names())  # v3 grown: its own scores
    state = json.loads((run / "state.json").read_text())
    final = width_table(load_checkpoint(run / "final_model.zip"), score_row=True)
    assert final == pytest.approx(state["theta"], abs=1e-7) and len(state["theta"]) == len(names)
    assert np.any(final[: len(APP_NAMES)] != start[: len(APP_NAMES)])  # the scores are trained too
    header = (run / "generations.csv").read_text().splitlines()[0].split(",")
    assert header[-len(names) :] == list(names)
    train_policy.run(["--resume", str(run), "-n", "1"])  # the saved settings go on: every one from the folder
    state = json.loads((run / "state.json").read_text())
    assert state["generation"] == 2 and len(state["theta"]) == len(names)
    final = width_table(load_checkpoint(run / "final_model.zip"), score_row=True)
    assert final == pytest.approx(state["theta"], abs=1e-7)


def test_score_row_without_a_model_is_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        train_policy.main(_whole_table_argv(tmp_path))
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "score_row trains a score model's table" in err[0]
    assert not list(tmp_path.glob("es_*"))  # refused before a run folder is made
    with pytest.raises(EsConfigError, match="score_row must be 0 or 1"):
        EsSettings.of({"score_row": 2})
