"""The hindsight teacher (agents/trainers/teacher.py, ``deepboot teach``): labels on disk, resumable, read safely."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.trainers.teacher import MANIFEST, TeacherSpec, label_scenario, read_manifest, read_scenario, teach
from baselines.hindsight import HeldScores, HindsightSettings, held_jct, scored_prior
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.observation import slot_jobs
from traces.families import cached_scenario

SMALL = TeacherSpec(("mixed",), seeds=1, search=HindsightSettings(generations=1, pairs=1))
"""One scenario, a search of one generation of one pair (4 episodes): a few seconds."""


@pytest.fixture(scope="module")
def taught(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("teacher") / "labels"
    teach(SMALL, out)
    return out


def test_a_scenario_is_labelled_with_its_held_scores_in_the_learner_s_env(taught: Path) -> None:
    (name,) = [path.name for path in taught.glob("*.npz")]
    assert name == "mixed-1000.npz"  # the first train seed
    arrays = read_scenario(taught / name)
    labels, slots, scores = arrays["label"], arrays["slots"], arrays["scores"]
    decisions = len(labels)
    slot_scores = SMALL.max_jobs  # then the width scores (3 per slot, zero: the search holds none) and lending
    assert labels.shape == (decisions, SMALL.max_jobs * 4 + 1) and decisions > 10
    assert not labels[:, slot_scores:].any()
    labels = labels[:, : slot_scores + 1]  # the slots' scores, and one zero for the checks below
    assert {f"obs/{key}" for key in ("jobs", "cluster", "prior", "noise", "outlook")} <= set(arrays)
    assert all(len(arrays[key]) == decisions for key in arrays if key.startswith("obs/"))
    assert np.abs(labels).max() <= 1.0 and not labels[:, -1].any()  # the prior's lending share
    for row, used in zip(labels, slots, strict=True):
        assert not row[used:-1].any()  # empty slots hold no score
        assert set(np.round(row[:used], 6)) <= set(np.round(np.clip(scores, -1, 1), 6)) | {0.0}
    meta = read_manifest(taught)["scenarios"][name]
    assert meta["decisions"] == decisions and meta["episodes"] == SMALL.search.episodes == 4
    assert meta["search_ratio"] <= 1.0 and meta["cpu_s"] > 0 and meta["curve"][0] == 1.0


def test_a_resume_labels_what_is_missing_and_refuses_another_spec(taught: Path, tmp_path: Path) -> None:
    labelled: list[object] = []
    manifest = read_manifest(taught)
    entry = manifest["scenarios"].pop("mixed-1000.npz")  # as if stopped between the file and its entry
    (taught / MANIFEST).write_text(json.dumps(manifest))
    teach(SMALL, taught, resume=True, on_label=labelled.append)
    assert labelled == []  # every scenario has its file
    assert read_manifest(taught)["scenarios"]["mixed-1000.npz"] == entry  # the file's own meta
    with pytest.raises(ValueError, match="add --resume to go on"):
        teach(SMALL, taught)
    other = TeacherSpec(("mixed",), seeds=2, search=SMALL.search)
    with pytest.raises(ValueError, match="labels another spec"):
        teach(other, taught, resume=True)
    json.loads((taught / MANIFEST).read_text())  # still whole


def test_labels_are_read_bounded_and_without_unpickling(tmp_path: Path) -> None:
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, label=np.array([object()], dtype=object), slots=np.zeros(1))
    with pytest.raises(ValueError, match="not a teacher's labels") as err:
        read_scenario(pickled)
    assert "\n" not in str(err.value)
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="not a teacher's labels"):
        read_scenario(tmp_path / "text.npz")
    with pytest.raises(ValueError, match="cannot read it"):
        read_scenario(tmp_path / "missing.npz")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"families": ("nope",)}, "families must be among"),
        ({"families": ("mixed",), "seeds": 0}, "seeds must be a whole number"),
        ({"families": ("mixed",), "search": HindsightSettings(prior="fifo")}, "is not one of ATS's variants"),
        ({"families": ("mixed",), "labels": "guess"}, "labels must be one of held, advantage"),
        ({"families": ("mixed",), "probes": 0}, "probes must be a whole number"),
        ({"families": ("mixed",), "delta": 0.0}, "delta must be a number"),
    ],
)
def test_a_bad_spec_is_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TeacherSpec(**kwargs)


def test_deepboot_teach_labels_and_summarises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deepboot_harness.cli import main

    argv = ["teach", "--families", "mixed", "--seeds", "1", "--generations", "1", "--pairs", "1"]
    assert main([*argv, "--out", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err
    assert "1 scenarios" in err and "x the prior on average" in err and "CPU s per scenario" in err
    assert main([*argv, "--out", str(tmp_path / "t")]) == 2  # labels there, no --resume: one line
    assert "add --resume" in capsys.readouterr().err
    assert main(["teach", "--families", "nope", "--out", str(tmp_path / "u")]) == 2


def test_advantage_labels_are_each_job_s_forked_difference_on_the_prior_s_states() -> None:
    """At each probed decision of the prior's episode, a job's advantage is the fall of the mean
    JCT when its score is held at +delta rather than -delta, over 2 delta and the prior's JCT: the
    first probe (the episode's first decision) recomputed by hand from forks of a fresh env; the
    label is gain times it, clipped; only the present slots' scores are labelled."""
    spec = TeacherSpec(("short-period",), seeds=1, labels="advantage", probes=3, delta=0.5, gain=30.0)
    labelled = label_scenario((("short-period", 1000), spec))
    path = Path(f"{labelled.key[0]}-{labelled.key[1]}.npz")
    import io

    with np.load(io.BytesIO(labelled.npz), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    meta = labelled.meta
    assert meta["probes"] == meta["decisions"] == 3 and len(arrays["label"]) == 3, path
    advantage, labels, slots = arrays["advantage"], arrays["label"], arrays["slots"]
    assert meta["forks"] == 2 * int(slots.sum()) + 2
    np.testing.assert_allclose(labels[:, : spec.max_jobs], np.clip(30.0 * advantage, -1, 1), rtol=1e-6)
    assert not labels[:, spec.max_jobs :].any()
    for row, used in zip(advantage, slots, strict=True):
        assert not row[used:].any()  # a job alone has no rival: its score may change nothing
    assert advantage.any()
    env = DeepBootEnv(workload=cached_scenario("short-period", 1000), **spec.env_kwargs)
    env.reset(seed=0)
    prior = scored_prior(spec.search.prior)
    base = held_jct(env.sim, HeldScores(prior, {}), 0)
    assert base == pytest.approx(meta["prior_jct"])
    for i, job in enumerate(slot_jobs(env.state, spec.max_jobs)):
        up = held_jct(env.sim, HeldScores(prior, {job.id: 0.5}), 0)
        down = held_jct(env.sim, HeldScores(prior, {job.id: -0.5}), 0)
        assert advantage[0, i] == pytest.approx((down - up) / (1.0 * base), rel=1e-5, abs=1e-9)
