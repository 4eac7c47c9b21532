"""The shipped models by short name from any folder (agents.saved.shipped), and torch's threads where the
project loads a model (agents.threads, the Zoo's config)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from builders import REPO

import agents
from agents.saved.policy_adapter import resolve_model_path
from agents.saved.shipped import PRETRAINED_DIR, resolve_shipped, shipped_names
from deepboot_env.policy import make_policy

SHIPPED_PPO = PRETRAINED_DIR / "deepboot-v0.zip"
SHIPPED_PRIORITY = PRETRAINED_DIR / "deepboot-priority-v1.json"
SHIPPED_TABLE = PRETRAINED_DIR / "deepboot-table-v1.table.json"
GOLDEN_TABLE_TEST01_JCT = 1343.8
"""Mean JCT of ``table:deepboot-table-v1`` on test/test-01 (DeepBoot-v1, as ``deepboot simulate``
prints it; ATS: 1,528.3)."""
LINEAGE_DIR = REPO / "models" / "lineage"
"""The score models before the current one (in the repository, not the wheel: docs/history.md)."""


def lineage(version: str) -> str:
    """The path of lineage model ``deepboot-score-<version>`` (``v1`` .. ``v7``)."""
    return str(LINEAGE_DIR / f"deepboot-score-{version}.zip")


GOLDEN_SCORE_JCT = 2210.3166666666666
"""Mean JCT of the shipped score model on the crowded workload of its test (seed 17, 60 jobs)."""
GOLDEN_PRIOR_JCT = 2223.0
"""... and of its prior, ``ats-srpt-fcfs``, on the same workload."""
GOLDEN_SCORE_V2_JCT = 2229.866666666667
"""Mean JCT of ``deepboot-score-v2`` on the same workload ..."""
GOLDEN_PLACE_JCT = 2223.6833333333334
"""... and of its prior, ``ats-srpt-fcfs-place``."""
GOLDEN_SCORE_V3_JCT = 2240.133333333333
"""Mean JCT of ``deepboot-score-v3`` on the same workload ..."""
GOLDEN_RR_JCT = 2223.6666666666665
"""... and of its prior, ``ats-srpt-fcfs-place-rr``."""
GOLDEN_SCORE_V4_JCT = 2261.4666666666667
"""Mean JCT of ``deepboot-score-v4`` (v3 with an ES width table) on the same workload."""
GOLDEN_SCORE_V6_JCT = 2258.4166666666665
"""Mean JCT of ``deepboot-score-v6`` (v5 with an ES application table) on the same workload."""
GOLDEN_SCORE_V7_JCT = 2242.3
"""Mean JCT of ``deepboot-score-v7`` (v6's table trained on, with the p99 term) on the same workload."""
GOLDEN_SCORE_V8_JCT = 2269.75
"""Mean JCT of ``deepboot-score-v8`` (v7 fine-tuned by PPO) on the same workload."""


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder outside the repository (no relative path into a clone resolves)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_shipped_model_has_a_short_name() -> None:
    assert shipped_names() == [
        "ppo:deepboot-score-v8",
        "ppo:deepboot-v0",
        "priority:deepboot-priority-v1",
        "table:deepboot-table-v1",
    ]


def test_short_names_reach_the_shipped_files_from_any_folder(elsewhere: Path) -> None:
    assert resolve_model_path("deepboot-v0") == SHIPPED_PPO
    assert resolve_model_path("deepboot-score-v8") == PRETRAINED_DIR / "deepboot-score-v8.zip"
    with pytest.raises(FileNotFoundError, match="no saved model at deepboot-score-v7"):
        resolve_model_path("deepboot-score-v7")  # the lineage is not shipped: a path in a clone
    assert resolve_shipped("deepboot-priority-v1", ".json") == SHIPPED_PRIORITY
    assert resolve_shipped("deepboot-table-v1", ".table.json") == SHIPPED_TABLE
    assert resolve_shipped("deepboot-table-v1", ".json") == Path("deepboot-table-v1")  # a table is no priority


def test_paths_and_suffixed_names_are_not_short_names(elsewhere: Path) -> None:
    (elsewhere / "mine").mkdir()
    assert resolve_shipped("mine/deepboot-v0", ".zip") == Path("mine/deepboot-v0")
    assert resolve_shipped("deepboot-v0.zip", ".zip") == Path("deepboot-v0.zip")
    with pytest.raises(FileNotFoundError, match="no saved model at deepboot-v9"):
        resolve_model_path("deepboot-v9")


def test_priority_short_name_is_the_shipped_model_and_keeps_its_short_label(elsewhere: Path) -> None:
    short = make_policy("priority:deepboot-priority-v1")
    full = make_policy(f"priority:{SHIPPED_PRIORITY}")
    assert short.name == "priority:deepboot-priority-v1"
    assert list(short.theta) == list(full.theta)


def test_table_short_name_plays_the_shipped_table(elsewhere: Path) -> None:
    import json

    from agents.models.app_table import AppTableModel
    from deepboot_harness.cli import main

    short = make_policy("table:deepboot-table-v1")
    assert short.name == "table:deepboot-table-v1"
    assert short.values == AppTableModel.load(SHIPPED_TABLE).values
    out = elsewhere / "m.json"
    assert (
        main(["simulate", "--workload", "test/test-01", "--policy", "table:deepboot-table-v1", "--json", str(out)]) == 0
    )
    assert round(json.loads(out.read_text())["train_jct_mean"], 1) == GOLDEN_TABLE_TEST01_JCT
    with pytest.raises(ValueError, match="deepboot-table-v9: no such table file"):
        make_policy("table:deepboot-table-v9")


def test_the_shipped_table_was_made_by_the_table_preset() -> None:
    """The README's command (``--preset table-es``, seed 0) remakes the shipped table: its file
    records the preset's settings, all six families and the seed."""
    from dataclasses import asdict

    from agents.models.app_table import AppTableModel
    from agents.runs.run_config import load_conf
    from agents.trainers.evolution import TABLE_PRESET, EsSettings
    from traces.families import FAMILIES

    info = AppTableModel.load(SHIPPED_TABLE).info
    assert info["settings"] == asdict(EsSettings.of(load_conf(None, TABLE_PRESET, "es", common=False)))
    assert info["training_families"] == list(FAMILIES)
    assert f"--preset {TABLE_PRESET}" in info["command"] and info["command"].endswith("--seed 0")
    assert info["generation"] == info["settings"]["generations"]


def test_ppo_short_name_loads_the_shipped_model(elsewhere: Path) -> None:
    policy = make_policy("ppo:deepboot-v0")
    assert policy.name == "ppo:deepboot-v0"
    model, make_env = agents.load_agent("deepboot-v0")
    assert make_env.keywords["action_mode"] == "residual"
    assert model.policy.state_dict().keys() == policy.model.policy.state_dict().keys()


def _crowded_jcts(*names: str) -> dict[str, float]:
    """Mean JCT of each policy on the crowded workload of the score models' tests (60 jobs on
    4x4+4x4, six hours of inference, seed 17; DeepBoot-v0)."""
    from deepboot_env.evaluation import run_episode
    from deepboot_env.sim.cluster import ClusterConfig
    from deepboot_env.sim.simulator import SimConfig
    from traces.generate import generate_workload

    workload = generate_workload(
        "crowded", 17, train={"num_jobs": 60}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )
    config = SimConfig(cluster=ClusterConfig.parse("4x4+4x4"))
    return {name: run_episode(name, workload, config, seed=1).train_jct_mean for name in names}


def _application_scores(model) -> dict[str, float]:
    from deepboot_env.sim.apps import APP_NAMES

    table = model.policy.mlp_extractor.application_table
    return dict(zip(APP_NAMES, (table.weight[0] + table.bias[0]).tolist(), strict=True))


@pytest.mark.parametrize(
    ("name", "prior", "golden"),
    [
        (
            lineage("v1"),
            "ats-srpt-fcfs",
            {f"ppo:{lineage('v1')}": GOLDEN_SCORE_JCT, "ats-srpt-fcfs": GOLDEN_PRIOR_JCT},
        ),
        (
            lineage("v2"),
            "ats-srpt-fcfs-place",
            {f"ppo:{lineage('v2')}": GOLDEN_SCORE_V2_JCT, "ats-srpt-fcfs-place": GOLDEN_PLACE_JCT},
        ),
        (
            lineage("v3"),
            "ats-srpt-fcfs-place-rr",
            {f"ppo:{lineage('v3')}": GOLDEN_SCORE_V3_JCT, "ats-srpt-fcfs-place-rr": GOLDEN_RR_JCT},
        ),
        (
            lineage("v4"),
            "ats-srpt-fcfs-place-rr",
            {f"ppo:{lineage('v4')}": GOLDEN_SCORE_V4_JCT, "ats-srpt-fcfs-place-rr": GOLDEN_RR_JCT},
        ),
        (  # no inference load there reaches the keep-warm rule's: v4's schedule and prior's
            lineage("v5"),
            "ats-srpt-fcfs-place-rr-warm",
            {f"ppo:{lineage('v5')}": GOLDEN_SCORE_V4_JCT, "ats-srpt-fcfs-place-rr-warm": GOLDEN_RR_JCT},
        ),
    ],
)
def test_score_models_are_ppo_over_their_prior_with_one_score_per_application(
    elsewhere: Path, name: str, prior: str, golden: dict[str, float]
) -> None:
    """The shipped PPO schedulers (docs/history.md#lineage): score mode over their prior in their own
    world, a table that ranks yolov3 lowest, and a schedule of their own on a crowded cluster."""
    model, _ = agents.load_agent(name)
    kwargs = model.policy.env_kwargs
    assert (kwargs["action_mode"], kwargs["base_policy"], kwargs["dynamics"]) == ("score", prior, "v1")
    scores = _application_scores(model)
    assert min(scores, key=scores.__getitem__) == "yolov3" and scores["yolov3"] < -0.05
    assert _crowded_jcts(*golden) == golden


def test_loading_a_model_sets_one_torch_thread_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
        torch.set_num_threads(2)
        agents.load_agent("deepboot-v0")
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice is left alone
        agents.load_agent("deepboot-v0")
        assert torch.get_num_threads() == 2
        agents.load_agent("deepboot-v0", num_threads=1)  # ... unless the call says otherwise
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_zoo_config_is_the_shipped_yaml_with_the_one_thread_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import yaml

    from agents import zoo

    assert zoo.hyperparams == yaml.safe_load(zoo.ZOO_CONF.read_text())
    assert {conf["callback"] for conf in zoo.hyperparams.values()} == {"agents.zoo.OneTorchThread"}
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(sys, "argv", ["rl_zoo3.train", "--num-threads", "2"])
        zoo.OneTorchThread()
        assert torch.get_num_threads() == 2  # the Zoo's --num-threads wins
        monkeypatch.setattr(sys, "argv", ["rl_zoo3.train", "--algo", "ppo"])
        zoo.OneTorchThread()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_score_v4_is_v3_grown_with_a_width_table_and_nothing_else(elsewhere: Path) -> None:
    """``deepboot-score-v4`` is v3 grown to width scores (agents.models.width_table) whose width outputs
    ES trained (docs/history.md#score-v4): every other weight is v3's."""
    import torch

    from agents.models.width_table import grow_width_outputs, width_table

    v3, _ = agents.load_agent(lineage("v3"))
    v4, _ = agents.load_agent(lineage("v4"))
    grown = grow_width_outputs(v3).policy.state_dict()
    table = "mlp_extractor.application_table.weight"
    for key, value in v4.policy.state_dict().items():
        if key == table:
            assert torch.equal(value[:1], grown[key][:1])
        else:
            assert torch.equal(value, grown[key]), key
    values = width_table(v4)
    assert values.shape == (18,) and 0.01 < abs(values).max() < 0.5


def test_score_v5_is_v4_over_the_prior_that_keeps_warm_pods(elsewhere: Path) -> None:
    """``deepboot-score-v5`` is v4's network, every weight, decoding over
    ``ats-srpt-fcfs-place-rr-warm`` (``python -m agents.saved.export ... --prior``, docs/history.md#score-v5);
    re-exported here it is the same model; the export refuses a prior for a model that is not a
    score model, or a prior that takes no scores."""
    import torch

    from agents.saved.export import export_model

    v4, _ = agents.load_agent(lineage("v4"))
    v5, _ = agents.load_agent(lineage("v5"))
    assert v5.policy.state_dict().keys() == v4.policy.state_dict().keys()
    assert all(torch.equal(value, v4.policy.state_dict()[key]) for key, value in v5.policy.state_dict().items())
    assert v5.policy.env_kwargs == {**v4.policy.env_kwargs, "base_policy": "ats-srpt-fcfs-place-rr-warm"}
    again, _ = agents.load_agent(export_model(Path(lineage("v4")), elsewhere / "v5.zip", "ats-srpt-fcfs-place-rr-warm"))
    assert again.policy.env_kwargs == v5.policy.env_kwargs
    with pytest.raises(ValueError, match="applies to a score model"):
        export_model(resolve_model_path("deepboot-v0"), elsewhere / "x.zip", "ats")
    with pytest.raises(ValueError, match="'fifo' takes no scores"):
        export_model(Path(lineage("v4")), elsewhere / "x.zip", "fifo")


def _table_moved(before: str, after: str) -> tuple[Any, Any, Any]:
    """Shipped models ``before`` and ``after``, and how far each application-table weight moved,
    asserting that nothing else differs: every other weight and the env arguments (the prior)."""
    import torch

    old_model, _ = agents.load_agent(before)
    new_model, _ = agents.load_agent(after)
    table = "mlp_extractor.application_table.weight"
    old, new = old_model.policy.state_dict(), new_model.policy.state_dict()
    assert [key for key in old if not torch.equal(old[key], new[key])] == [table]
    assert new_model.policy.env_kwargs == old_model.policy.env_kwargs
    return old_model, new_model, (new[table] - old[table]).abs()


def test_score_v6_is_v5_with_an_es_trained_application_table(elsewhere: Path) -> None:
    """``deepboot-score-v6`` is v5 whose whole application table (per-application scores and
    width outputs) ES trained (``-params score_row:1``, docs/history.md#score-v6): every other weight,
    and the prior, are v5's; the table holds imagenet and yolov3 down and plays its own schedule."""
    _, v6, moved = _table_moved(lineage("v5"), lineage("v6"))
    assert moved[0].max() > 0.1 and moved[1:].max() > 0.1  # scores and width outputs both trained
    scores = _application_scores(v6)
    assert sorted(scores, key=scores.__getitem__)[:2] == ["imagenet", "yolov3"]
    assert scores["imagenet"] < -0.15 and scores["yolov3"] < -0.15
    assert _crowded_jcts(f"ppo:{lineage('v6')}") == {f"ppo:{lineage('v6')}": GOLDEN_SCORE_V6_JCT}


def test_score_v7_is_v6_with_its_application_table_trained_on(elsewhere: Path) -> None:
    """``deepboot-score-v7`` is v6 whose application table ES trained on for 56 generations with
    the p99 term (``-params p99_weight:0.002``, docs/history.md#score-v7): every other weight and the
    prior are v6's; imagenet is held down further and the table plays its own schedule."""
    v6, v7, moved = _table_moved(lineage("v6"), lineage("v7"))
    assert moved.max() > 0.1
    scores = _application_scores(v7)
    assert min(scores, key=scores.__getitem__) == "imagenet"
    assert scores["imagenet"] < _application_scores(v6)["imagenet"]
    assert _crowded_jcts(f"ppo:{lineage('v7')}") == {f"ppo:{lineage('v7')}": GOLDEN_SCORE_V7_JCT}


def test_score_v8_is_v7_fine_tuned_by_ppo(elsewhere: Path) -> None:
    """``deepboot-score-v8`` is v7 that PPO trained on for 103k steps (every weight, lr 1e-4, the
    ``score-app`` preset; docs/results.md §7): the same env arguments (the prior) and layers,
    every layer the policy uses moved (the application table, the lending head and the encoders
    under it), none far, and it plays its own schedule."""
    v7, _ = agents.load_agent(lineage("v7"))
    v8, _ = agents.load_agent("deepboot-score-v8")
    old, new = v7.policy.state_dict(), v8.policy.state_dict()
    assert new.keys() == old.keys()
    assert v8.policy.env_kwargs == v7.policy.env_kwargs
    moved = {key: float((new[key] - old[key]).abs().max()) for key in old}
    for layer in ("job_encoder", "blocks.0.attention", "summary", "application_table", "lend_head"):
        assert max(value for key, value in moved.items() if layer in key) > 1e-3, layer
    assert max(moved.values()) < 0.05
    assert _crowded_jcts("ppo:deepboot-score-v8") == {"ppo:deepboot-score-v8": GOLDEN_SCORE_V8_JCT}
