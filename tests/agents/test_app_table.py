"""The held application table (``agents.models.app_table``): what it plays, its file, and ES
training it from zeros (``train_policy.py --algo es --preset table-es``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from builders import REPO, es_smoke_argv

import train_policy
from agents.models.app_table import (
    TABLE_SIZE,
    AppTableError,
    AppTableModel,
    AppTablePolicy,
    table_names,
)
from deepboot_env import evaluation
from deepboot_env.config import sim_config
from deepboot_env.env import DeepBootEnv
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import WIDTH_CLASSES, make_policy
from deepboot_env.sim.apps import APP_NAMES
from traces.generate import generate_workload

PRIOR = "ats-srpt-fcfs-place-rr-warm"
TABLE = np.round(np.random.default_rng(7).uniform(-0.6, 0.6, TABLE_SIZE), 3)
"""A table with every value non-zero (inside the score action's [-1, 1] at scale 1)."""


@pytest.fixture(scope="module")
def busy():
    """Twelve jobs of every application in half an hour: they contend, so the table moves the schedule."""
    return generate_workload(
        "busy", 4, train={"num_jobs": 12, "window_hours": 0.5}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0}
    )


def _metrics(policy, workload, arrays: bool):
    before = evaluation.ARRAY_EPISODES
    evaluation.ARRAY_EPISODES = arrays
    try:
        played = run_episode(policy, workload, sim_config(dynamics="v1"), seed=0).to_dict()
    finally:
        evaluation.ARRAY_EPISODES = before
    played.pop("wall_seconds")  # the one entry that is not the episode's
    return played


def test_the_names_are_each_applications_score_then_its_width_classes() -> None:
    names = table_names()
    assert len(names) == TABLE_SIZE == (1 + WIDTH_CLASSES) * len(APP_NAMES)
    assert names[: len(APP_NAMES)] == tuple(f"{app}/score" for app in APP_NAMES)
    assert names[len(APP_NAMES)] == f"{APP_NAMES[0]}/two" and names[-1] == f"{APP_NAMES[-1]}/split"


@pytest.mark.parametrize("arrays", [False, True], ids=["simulator", "arrays"])
def test_a_zero_table_is_its_prior_bit_for_bit(busy, arrays: bool) -> None:
    assert _metrics(AppTablePolicy([0.0] * TABLE_SIZE), busy, arrays) == _metrics(make_policy(PRIOR), busy, arrays)


def test_a_table_plays_the_same_episode_compiled_and_in_python_and_moves_it(busy) -> None:
    table = AppTablePolicy(TABLE)
    compiled, python = _metrics(table, busy, True), _metrics(table, busy, False)
    assert compiled == python
    assert compiled["train_jct_mean"] != _metrics(make_policy(PRIOR), busy, True)["train_jct_mean"]
    table.reset(0)  # a new episode starts with no job held (a second workload's jobs are its own)
    assert table.scores == {} and table.widths == {}


def test_a_table_is_the_score_action_of_its_rows_at_full_lending(busy) -> None:
    """The env's score action built at every step from each slot job's row (scale 1, the last
    entry 0: the full lending share) plays the episode the table plays: its values mean what a
    score model's table means."""
    env = DeepBootEnv(
        workload=busy, action_mode="score", base_policy=PRIOR, width_classes=WIDTH_CLASSES, score_scale=1.0
    )
    env.reset(seed=0)
    slots, apps = env.config.max_jobs, len(APP_NAMES)
    rows = TABLE.reshape(1 + WIDTH_CLASSES, apps)
    done = False
    while not done:
        action = np.zeros(env.action_space.shape, dtype=np.float32)
        for i, job in enumerate(env.state.jobs[:slots]):
            column = APP_NAMES.index(job.app)
            action[i] = rows[0, column]
            action[slots + i * WIDTH_CLASSES : slots + (i + 1) * WIDTH_CLASSES] = rows[1:, column]
        _, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    assert len(busy.jobs) <= slots  # every active job in a slot: the action scores them all
    played = _metrics(AppTablePolicy(TABLE.astype(np.float32).astype(float)), busy, True)
    assert env.sim.metrics().train_jct_mean == played["train_jct_mean"]


def test_a_table_file_round_trips_and_plays_by_name(tmp_path: Path, busy) -> None:
    path = tmp_path / "table.json"
    AppTableModel(tuple(TABLE.tolist()), info={"made": "by hand"}).save(path)
    model = AppTableModel.load(path)
    assert model.values == tuple(TABLE.tolist()) and model.prior == PRIOR and model.info == {"made": "by hand"}
    policy = make_policy(f"table:{path}")
    assert policy.name == f"table:{path}"
    assert _metrics(policy, busy, True) == _metrics(AppTablePolicy(TABLE), busy, True)


def _doc(**changes: object) -> dict:
    doc = {"format": "deepboot-app-table/1", "prior": PRIOR, "names": list(table_names()), "values": [0.0] * 24}
    return {**doc, **changes}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a JSON table"),
        (json.dumps([1, 2]), "expected a JSON object"),
        (json.dumps(_doc(format="deepboot-priority/1")), "field 'format'"),
        (json.dumps(_doc(names=list(table_names())[::-1])), "field 'names'"),
        (json.dumps(_doc(values=[0.0] * 23)), "field 'values': must be 24 finite numbers"),
        (json.dumps(_doc(values=[True] + [0.0] * 23)), "field 'values'"),
        (json.dumps(_doc(values=[1e400] + [0.0] * 23)), "field 'values'"),
        (json.dumps(_doc(prior="ppo:/tmp/model.zip")), "field 'prior' must be a registered policy's name"),
        (json.dumps(_doc(prior="fifo")), "field 'prior'"),
        (json.dumps(_doc(info=[])), "field 'info' must be an object"),
        (" " * (2 << 20), "larger than"),
    ],
    ids=["json", "list", "format", "names", "short", "bool", "inf", "a-file-prior", "not-ats", "info", "huge"],
)
def test_a_bad_table_file_fails_in_one_line_naming_it(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(AppTableError) as error:
        AppTableModel.load(path)
    text = str(error.value)
    assert str(path) in text and message in text and "\n" not in text


def test_a_missing_table_file_and_bad_values_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(AppTableError, match="no such table file"):
        make_policy(f"table:{tmp_path / 'nope.json'}")
    with pytest.raises(AppTableError, match="must be 24 finite numbers"):
        AppTablePolicy([0.0] * 3)
    with pytest.raises(AppTableError, match="must be 24 finite numbers"):
        AppTablePolicy([float("nan")] * TABLE_SIZE)


def test_es_trains_a_table_from_zeros_saves_it_and_resumes(tmp_path: Path) -> None:
    argv = es_smoke_argv("table-es", tmp_path, "-n", "1")
    assert argv[:2] == ["--algo", "es"]
    run = train_policy.run(argv[2:])  # an ES-only preset needs no --algo es (the README's command)
    assert run.name == "es_1"
    config = yaml.safe_load((run / "config.yml").read_text())
    assert config["trains"] == "held application table" and config["settings"]["app_table"] == 1
    header = (run / "generations.csv").read_text().splitlines()[0].split(",")
    assert header[-TABLE_SIZE:] == list(table_names())
    state = json.loads((run / "state.json").read_text())
    final = AppTableModel.load(run / "final_model.json")
    assert list(final.values) == state["theta"] and any(final.values)  # moved from zeros
    assert final.info["generation"] == 1 and final.prior == PRIOR
    rows = (run / "evaluations.csv").read_text().splitlines()
    assert len(rows) == 3  # the header, generation 0 (the prior itself) and 1
    best = AppTableModel.load(run / "best_model.json")
    assert best.info["val_jct_ratio_to_ats"] is not None
    train_policy.run(["--resume", str(run), "-n", "1", "--verbose", "0"])
    state = json.loads((run / "state.json").read_text())
    assert state["generation"] == 2 and len(state["theta"]) == TABLE_SIZE


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-params", "app_features:1"], "app_table trains a table, not a priority"),
        (
            ["-i", str(REPO / "agents" / "pretrained" / "deepboot-score-v8.zip")],
            "app_table trains a held table from zeros",
        ),
        (["-params", "app_table:2"], "app_table must be 0 or 1"),
    ],
    ids=["app-features", "a-model", "value"],
)
def test_es_table_settings_that_do_not_fit_are_one_line(tmp_path: Path, capsys, extra: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as stop:
        train_policy.main(es_smoke_argv("table-es", tmp_path, *extra))
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not list(tmp_path.glob("es_*"))
