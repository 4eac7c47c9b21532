"""The hindsight teacher (agents/trainers/teacher.py, ``deepboot teach``): labels on disk, resumable, read safely."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from agents.models.app_table import AppTableModel, AppTablePolicy
from agents.trainers.teacher import (
    MANIFEST,
    PLAYER_FILE,
    TeacherSpec,
    label_scenario,
    load_player,
    player_digest,
    read_manifest,
    read_scenario,
    teach,
)
from baselines.hindsight import Held, HeldScores, HindsightSettings, held_jct, play_out, scored_prior
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.observation import slot_jobs
from deepboot_env.sim.simulator import Simulator
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


def test_held_width_scores_are_labelled_as_the_search_played_them() -> None:
    """A search that holds width scores (``widths``) is replayed with them in each slot's width
    entries, and the replayed episode is the one the search measured on its fork: no more jobs
    than slots (the action scores the jobs in slots only), values exact in float32 over the
    score scale (the action decodes to the same numbers)."""
    from agents.trainers.teacher import _fork_jct, _replay
    from traces.generate import generate_workload

    spec = TeacherSpec(("mixed",), seeds=1, search=HindsightSettings(generations=1, pairs=1, widths=True))
    workload = generate_workload("crowded", 3, train={"num_jobs": 24})
    env = DeepBootEnv(workload=workload, **spec.env_kwargs)
    first, _ = env.reset(seed=0)
    assert env.sim is not None
    first_app = workload.jobs[0].app
    rows = {j: (-0.5, 0.25, 0.5) if job.app == first_app else (0.25, 0.0, -0.5) for j, job in enumerate(workload.jobs)}
    held = Held({0: 0.5, 3: -0.25}, rows)
    searched, without = _fork_jct(env.sim, spec, held), _fork_jct(env.sim, spec, Held(held.scores))
    _, labels, slots = _replay(env, first, held)
    assert env.sim.metrics().train_jct_mean == searched != without
    widths = np.stack(labels)[:, spec.max_jobs : -1].reshape(len(labels), spec.max_jobs, 3)
    for row, used in zip(widths, slots, strict=True):
        assert not row[used:].any() and {tuple(w) for w in row[:used].tolist()} <= set(rows.values())


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
        (
            {"families": ("mixed",), "labels": "advantage", "app_gain": -1.0},
            r"app_gain must be a number in \[0, 1000\]",
        ),
        ({"families": ("mixed",), "app_gain": 3.0}, "app_gain needs advantage labels"),
        ({"families": ("mixed",), "labels": "advantage", "table": (0.1,) * 23}, "must be 24 finite numbers"),
        ({"families": ("mixed",), "table": (0.1,) * 24}, "the base of advantage labels"),
        ({"families": ("mixed",), "labels": "advantage", "table": (1.5,) * 24}, r"must lie in \[-1, 1\]"),
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
    labelled = label_scenario((("short-period", 1000), spec, b""))
    path = Path(f"{labelled.key[0]}-{labelled.key[1]}.npz")
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


TABLE = tuple(np.round(np.random.default_rng(3).uniform(-0.5, 0.5, 24), 3).tolist())
"""A held application table with every value non-zero."""


def _labelled(spec: TeacherSpec, key: tuple[str, int]) -> tuple[dict[str, np.ndarray], dict]:
    labelled = label_scenario((key, spec, b""))
    with np.load(io.BytesIO(labelled.npz), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}, labelled.meta


def test_advantage_labels_over_a_table_are_its_action_plus_each_job_s_forked_advantage() -> None:
    """With a table, the states are the table's play and each fork offsets one job's score from
    its application's row, the others holding theirs: the first probe recomputed by hand; the
    label is the table's action (score, width scores, full lending) plus gain times the job's
    advantage, clipped. A zero table labels exactly as the prior does."""
    key = ("short-period", 1000)
    spec = TeacherSpec(("short-period",), seeds=1, labels="advantage", probes=3, delta=0.5, gain=30.0, table=TABLE)
    arrays, meta = _labelled(spec, key)
    env = DeepBootEnv(workload=cached_scenario(*key), **spec.env_kwargs)
    env.reset(seed=0)
    assert env.sim is not None
    table = AppTablePolicy(np.float32(TABLE).tolist(), spec.search.prior)
    base = table.held_by(env.sim.workload)
    prior = scored_prior(spec.search.prior)
    base_jct = held_jct(env.sim, HeldScores.holding(prior, base), 0)
    assert meta["prior_jct"] == pytest.approx(base_jct) and base_jct != pytest.approx(
        held_jct(env.sim, HeldScores(prior, {}), 0)
    )
    jobs = slot_jobs(env.state, spec.max_jobs)
    action = table.score_action(jobs, spec.max_jobs, env.action_space.shape[0])
    advantage, labels, used = arrays["advantage"], arrays["label"], int(arrays["slots"][0])
    expected = action.copy()
    expected[:used] = np.clip(action[:used] + 30.0 * advantage[0, :used], -1, 1)
    np.testing.assert_allclose(labels[0], expected, rtol=1e-6, atol=1e-7)
    assert labels[0, spec.max_jobs :].any() and labels[0, -1] == 0.0  # its width scores, the full share
    for i, job in enumerate(jobs):
        up = held_jct(env.sim, HeldScores(prior, {**base.scores, job.id: base.scores[job.id] + 0.5}, base.widths), 0)
        down = held_jct(env.sim, HeldScores(prior, {**base.scores, job.id: base.scores[job.id] - 0.5}, base.widths), 0)
        assert advantage[0, i] == pytest.approx((down - up) / (1.0 * base_jct), rel=1e-5, abs=1e-9)
    zero = TeacherSpec(**{**spec.__dict__, "table": (0.0,) * 24})
    plain = TeacherSpec(**{**spec.__dict__, "table": ()})
    (zero_arrays, zero_meta), (plain_arrays, plain_meta) = _labelled(zero, key), _labelled(plain, key)
    assert zero_meta.pop("cpu_s") > 0 and plain_meta.pop("cpu_s") > 0 and zero_meta == plain_meta
    for name in ("label", "advantage", "slots"):
        np.testing.assert_array_equal(zero_arrays[name], plain_arrays[name])


def test_a_table_spec_round_trips_through_its_manifest() -> None:
    spec = TeacherSpec(("mixed",), seeds=1, labels="advantage", table=TABLE)
    doc = json.loads(json.dumps(spec.to_json()))
    assert doc["table"] == list(TABLE) and TeacherSpec.from_json(doc, "teacher.json") == spec
    assert TeacherSpec.from_json({**doc, "table": []}, "teacher.json").table == ()


def test_deepboot_teach_labels_a_table_s_play(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deepboot_harness.cli import main

    AppTableModel(TABLE).save(tmp_path / "table.json")
    argv = ["teach", "--families", "short-period", "--seeds", "1", "--labels", "advantage", "--probes", "1"]
    assert main([*argv, "--table", str(tmp_path / "table.json"), "--out", str(tmp_path / "t"), "--quiet"]) == 0
    spec = read_manifest(tmp_path / "t")["spec"]
    assert spec["table"] == list(TABLE)
    AppTableModel(TABLE, prior="ats-srpt").save(tmp_path / "other.json")
    assert main([*argv, "--table", str(tmp_path / "other.json"), "--out", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scores ats-srpt, not the prior" in err[0]
    assert not (tmp_path / "u").exists()


def test_application_advantages_hold_every_job_of_the_application_together() -> None:
    """With ``app_gain`` each probe also measures, per application in the slots, the fall of the
    mean JCT when every job of the application (present and to come) is held at +delta rather
    than -delta; each slot job's label adds ``app_gain`` x its application's. The first probe
    recomputed by hand; the per-job advantages are those of the same spec without ``app_gain``."""
    spec = TeacherSpec(("mixed",), seeds=1, labels="advantage", probes=2, delta=0.5, gain=30.0, app_gain=20.0)
    labelled = label_scenario((("mixed", 1000), spec, b""))
    with np.load(io.BytesIO(labelled.npz), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    advantage, apps_adv, labels, slots = arrays["advantage"], arrays["app_advantage"], arrays["label"], arrays["slots"]
    shift = 30.0 * advantage + 20.0 * apps_adv
    np.testing.assert_allclose(labels[:, : spec.max_jobs], np.clip(shift, -1, 1), rtol=1e-6, atol=1e-7)
    plain = label_scenario((("mixed", 1000), TeacherSpec(**{**spec.__dict__, "app_gain": 0.0}), b""))
    with np.load(io.BytesIO(plain.npz), allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["advantage"], advantage)
        assert "app_advantage" not in npz.files
    env = DeepBootEnv(workload=cached_scenario("mixed", 1000), **spec.env_kwargs)
    env.reset(seed=0)
    assert env.sim is not None
    prior, base = scored_prior(spec.search.prior), labelled.meta["prior_jct"]
    apps = [job.app for job in env.sim.workload.jobs]
    jobs = slot_jobs(env.state, spec.max_jobs)
    assert apps_adv[0].any()
    for i, job in enumerate(jobs):
        members = [j for j, app in enumerate(apps) if app == apps[job.id]]
        up = held_jct(env.sim, HeldScores(prior, dict.fromkeys(members, 0.5)), 0)
        down = held_jct(env.sim, HeldScores(prior, dict.fromkeys(members, -0.5)), 0)
        assert apps_adv[0, i] == pytest.approx((down - up) / base, rel=1e-5, abs=1e-9)
    assert not apps_adv[0, slots[0] :].any()
    assert labelled.meta["forks"] >= 2 * int(slots.sum()) + 2 * len(slots) + 2  # one application at least per probe


@pytest.fixture(scope="module")
def player_zip() -> bytes:
    """A small score model (untrained: its scores are its initial network's), saved as a zip."""
    return _score_model_zip()


def _score_model_zip(**env: object) -> bytes:
    from agents.trainers.learner import model_bytes
    from agents.trainers.ppo import build_model, make_vec_env_for

    env_kwargs = {**TeacherSpec(("short-period",)).env_kwargs, "relative_reward": True, **env}
    vec = make_vec_env_for("tiny", 2, 0, env_kwargs, group_size=2, antithetic=True)
    hyperparams = {
        "policy": "SetPolicy",
        "n_steps": 64,
        "batch_size": 64,
        "policy_kwargs": {"embed_dim": 16, "attention_heads": 2, "pool_layers": 1, "application_scores": 0},
    }
    return model_bytes(build_model("ppo", vec, hyperparams=hyperparams, env_kwargs=env_kwargs, group_size=2))


def _played(spec: TeacherSpec, player: object) -> tuple[Simulator, DeepBootEnv]:
    """A new episode of ``player`` on the spec's first scenario, in the simulator the teacher builds."""
    env = DeepBootEnv(workload=cached_scenario(spec.families[0], 1000), **spec.env_kwargs)
    env.reset(seed=0)
    assert env.sim is not None
    player.reset(0)  # type: ignore[attr-defined]
    return Simulator(env.sim.workload, env.sim_config, player), env  # type: ignore[arg-type]


def test_a_forked_player_goes_on_as_the_episode_would(player_zip: bytes) -> None:
    """Policy iteration's forks: a copy of the player made mid-episode, with no offset, plays a
    fork of the simulator to the very JCT of the episode it was forked from (its codec's held
    scores and its outlook are copied, not shared); an offset moves the job's score entry."""
    spec = TeacherSpec(("short-period",), labels="advantage", player=player_digest(player_zip))
    player = load_player(player_zip, spec)
    sim, _ = _played(spec, player)
    forked = None
    for _ in range(12):
        state = sim.observe()
        sim.apply(player.decide(state), state)
        sim.advance()
    forked = play_out(sim.fork(), player.fork())[0]
    episode = play_out(sim, player)[0]
    assert forked == episode
    sim, _ = _played(spec, player)
    state = sim.observe()
    job = slot_jobs(state, spec.max_jobs)[0].id
    plain, offset = player.fork().predict(state)[0], player.fork({job: 0.25}).predict(state)[0]
    assert offset[0] == pytest.approx(plain[0] + 0.25) and np.array_equal(offset[1:], plain[1:])


def test_policy_iteration_labels_the_player_s_states_with_its_own_advantages(player_zip: bytes) -> None:
    """With a player, the probed states are the player's and the advantages are over its JCT:
    the first probe (the first decision) recomputed by hand from forks played by copies of it;
    the label is its own action with gain x the advantage added to the present jobs' scores."""
    spec = TeacherSpec(("short-period",), labels="advantage", probes=2, player=player_digest(player_zip))
    labelled = label_scenario((("short-period", 1000), spec, player_zip))
    with np.load(io.BytesIO(labelled.npz), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    assert labelled.meta["decisions"] == 2 and labelled.meta["forks"] == 2 * int(arrays["slots"].sum()) + 2
    player = load_player(player_zip, spec)
    sim, env = _played(spec, player)
    state = sim.observe()
    base = play_out(sim.fork(), player.fork())[0]
    assert base == labelled.meta["prior_jct"]
    scale = player.codec.score_scale
    jobs = slot_jobs(state, spec.max_jobs)
    assert arrays["slots"][0] == len(jobs)
    for i, job in enumerate(jobs):
        up = play_out(sim.fork(), player.fork({job.id: 0.5 / scale}))[0]
        down = play_out(sim.fork(), player.fork({job.id: -0.5 / scale}))[0]
        assert arrays["advantage"][0, i] == pytest.approx((down - up) / (1.0 * base), rel=1e-5, abs=1e-9)
    action = player.predict(state)[0]
    wanted = np.clip(action, -1, 1)
    wanted[: len(jobs)] = np.clip(action[: len(jobs)] + 30.0 * arrays["advantage"][0, : len(jobs)], -1, 1)
    np.testing.assert_allclose(arrays["label"][0], wanted, rtol=1e-6)
    first, _ = env.reset(seed=0)  # the states are the env's observations of the player's episode
    for key, value in first.items():
        np.testing.assert_array_equal(arrays[f"obs/{key}"][0], value)


def test_a_teacher_keeps_its_player_and_refuses_another(player_zip: bytes, tmp_path: Path) -> None:
    spec = TeacherSpec(("short-period",), labels="advantage", probes=1, player=player_digest(player_zip))
    out = tmp_path / "pi"
    with pytest.raises(ValueError, match="neither given nor in player.zip"):
        teach(spec, out)
    teach(spec, out, player=player_zip)
    assert (out / PLAYER_FILE).read_bytes() == player_zip
    teach(spec, out, resume=True)  # the kept copy plays on a resume
    with pytest.raises(ValueError, match="not the one the spec names"):
        load_player(b"not a model", spec)
    with pytest.raises(ValueError, match="player must be a model's SHA-256 with advantage labels"):
        TeacherSpec(("short-period",), player=spec.player)
    held = _score_model_zip(hold=4)
    with pytest.raises(ValueError, match="hold 1"):
        load_player(held, TeacherSpec(("short-period",), labels="advantage", player=player_digest(held)))


def test_deepboot_teach_labels_a_player_s_play(player_zip: bytes, tmp_path: Path, capsys) -> None:
    from deepboot_harness.cli import main

    (tmp_path / "model.zip").write_bytes(player_zip)
    argv = ["teach", "--families", "short-period", "--seeds", "1", "--labels", "advantage", "--probes", "1"]
    assert main([*argv, "--player", str(tmp_path / "model.zip"), "--out", str(tmp_path / "t"), "--quiet"]) == 0
    assert (tmp_path / "t" / PLAYER_FILE).read_bytes() == player_zip
    spec = TeacherSpec.from_json(read_manifest(tmp_path / "t")["spec"], "t")
    assert spec.player == player_digest(player_zip)
    (tmp_path / "text.zip").write_text("not a model")
    assert main([*argv, "--player", str(tmp_path / "text.zip"), "--out", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err.strip()
    assert "text.zip" in err and "\n" not in err
    assert not (tmp_path / "u").exists()
