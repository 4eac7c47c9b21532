"""The hindsight teacher: training scenarios labelled with what a clairvoyant look at them finds.

Hindsight learning (Sinclair et al., ICML 2023): arrivals and inference load are exogenous and the
simulator is deterministic and forks, so a planner that sees a scenario can label the decisions of
a policy on it. For each training scenario (the first ``seeds`` train seeds of each family) a
worker (:func:`label_scenario`) labels in one of two ways (``labels``):

* ``held`` (:func:`held_labels`): it searches one held score per job on the scenario
  (:func:`baselines.hindsight.search_held_scores`: the ``hindsight`` policy's search, with its
  settings), then plays the scenario in the score-mode env a learner trains in (its prior, slots
  and observation) with those scores as the action: slot i's entry is the score of the job in
  slot i (over the env's ``score_scale``, clipped to the action's [-1, 1]), its width scores and
  the lending entry 0 (the prior's own valuation and share); every decision's observation and
  that action, the label, are recorded, with ``scores``, the held score of every job of the workload;
* ``advantage`` (:func:`advantage_labels`): per-decision counterfactual advantages from forked
  rollouts (their Hindsight MAC): at ``probes`` decisions of the prior's own episode, each job's
  score held up and down by ``delta`` on forks played to the end; the label is ``gain`` times the
  job's advantage. With a ``player`` (policy iteration), the states are a trained score model's
  and its forks are played by copies of it: :func:`played_advantage_labels`.

Either way the result is one compressed ``.npz`` (its ``meta`` inside; ``obs/<entry>`` stacked over
the labelled decisions, ``label`` (decisions, action size), ``slots``, the jobs in slots at each)
and its ``meta``: the scenario key, what the labelling found and its cost.

:func:`teach` writes each scenario's file as it arrives (``<family>-<seed>.npz``, atomically: a
file is whole or absent) and ``teacher.json``: the spec and, per scenario, its meta (CPU seconds
included). A resumed run (``resume``) takes the spec the folder records, refuses another, and
labels only the scenarios without a file. Workers are local processes or Ray tasks
(:class:`deepboot_env.pool.Backend`): a user with more machines points ``--address`` at a cluster.
:func:`read_scenario` reads a file back, bounded and without unpickling anything.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.models.app_table import AppTablePolicy, check_values
from baselines.hindsight import (
    Held,
    HeldScores,
    HindsightSettings,
    held_jct,
    play_out,
    played_fork,
    scored_prior,
    search_held_scores,
)
from deepboot_env import FRONT_END_DYNAMICS
from deepboot_env.atomic import atomic_write, lock_folder, write_text
from deepboot_env.env import DeepBootEnv
from deepboot_env.env.observation import slot_jobs
from deepboot_env.limits import MAX_ZIP_TOTAL_BYTES, parse_json, read_bounded
from deepboot_env.policy import WIDTH_CLASSES
from deepboot_env.pool import LOCAL, Backend, run_pool
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.workload import Workload
from traces.families import FAMILIES, cached_scenario, split_seeds

MANIFEST = "teacher.json"
"""The teacher folder's record: the spec and each labelled scenario's meta."""

PLAYER_FILE = "player.zip"
"""The teacher folder's copy of the model whose states it labels (a spec with a ``player``)."""

MAX_SCENARIO_BYTES = 256 << 20
"""Largest scenario file :func:`read_scenario` reads (a 3,000-decision episode is a few MB)."""

Key = tuple[str, int]
"""(family, train seed) of a scenario."""

LABEL_KINDS = ("held", "advantage")
"""What a teacher labels with: ``held``, the scores a search holds for each job's life over the
whole scenario; ``advantage``, each job's counterfactual advantage at probed decisions
(:func:`advantage_labels`)."""


@dataclass(frozen=True)
class TeacherSpec:
    """What a teacher labels: the first ``seeds`` train seeds of each of ``families`` in the
    score-mode env of ``max_jobs`` slots over ``search``'s prior on ``dynamics``, with ``labels``
    (:data:`LABEL_KINDS`): ``held``, searched with ``search``; ``advantage``, at ``probes``
    decisions with scores held at +-``delta`` and labels ``gain`` x the advantage, on the prior's
    states or, with ``player`` (the SHA-256 of a score model's zip, :data:`PLAYER_FILE` in the
    folder), on that model's (:func:`played_advantage_labels`); with ``app_gain`` > 0 each label
    also adds ``app_gain`` x the advantage of the job's application, all its jobs' scores held
    together (:func:`_app_advantages`); with ``table`` (a held application table's 24 values,
    :mod:`agents.models.app_table`, each in [-1, 1]), on that table's states instead of the
    prior's, its scores the base of every fork and of every label."""

    families: tuple[str, ...]
    seeds: int = 4
    search: HindsightSettings = field(default_factory=HindsightSettings)
    max_jobs: int = 32
    dynamics: str = FRONT_END_DYNAMICS
    labels: str = "held"
    probes: int = 16
    delta: float = 0.5
    gain: float = 30.0
    player: str = ""
    app_gain: float = 0.0
    table: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        unknown = [family for family in self.families if family not in FAMILIES]
        if not self.families or unknown:
            raise ValueError(f"teacher: families must be among {', '.join(FAMILIES)}, got {list(self.families)}")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or not 1 <= self.seeds <= 10_000:
            raise ValueError(f"teacher: seeds must be a whole number from 1 to 10,000, got {self.seeds!r}")
        scored_prior(self.search.prior)  # a prior that takes scores, checked before any work
        if self.labels not in LABEL_KINDS:
            raise ValueError(f"teacher: labels must be one of {', '.join(LABEL_KINDS)}, got {self.labels!r}")
        if isinstance(self.probes, bool) or not isinstance(self.probes, int) or not 1 <= self.probes <= 10_000:
            raise ValueError(f"teacher: probes must be a whole number from 1 to 10,000, got {self.probes!r}")
        for name in ("delta", "gain"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1_000:
                raise ValueError(f"teacher: {name} must be a number in (0, 1000], got {value!r}")
        app_gain = self.app_gain
        if isinstance(app_gain, bool) or not isinstance(app_gain, int | float) or not 0 <= app_gain <= 1_000:
            raise ValueError(f"teacher: app_gain must be a number in [0, 1000], got {app_gain!r}")
        if app_gain and self.labels != "advantage":
            raise ValueError("teacher: app_gain needs advantage labels")
        if self.player and (self.labels != "advantage" or not _is_digest(self.player)):
            raise ValueError(f"teacher: player must be a model's SHA-256 with advantage labels, got {self.player!r}")
        if self.table:
            check_values(self.table, "teacher: table")
            if self.labels != "advantage" or self.player:
                raise ValueError("teacher: a table is the base of advantage labels, without a player")
            if max(map(abs, self.table)) > 1.0:  # the env's action carries it: scale 1, clipped to [-1, 1]
                raise ValueError("teacher: a table's values must lie in [-1, 1] (the score action's range)")

    @property
    def scenarios(self) -> list[Key]:
        """Every scenario to label, family by family."""
        seeds = list(split_seeds("train"))[: self.seeds]
        return [(family, seed) for family in self.families for seed in seeds]

    @property
    def env_kwargs(self) -> dict[str, Any]:
        """The env a learner of these labels trains in (and the teacher plays them in): the
        shipped score model's (score mode over the search's prior, width scores, the outlook)."""
        return {
            "action_mode": "score",
            "base_policy": self.search.prior,
            "max_jobs": self.max_jobs,
            "width_classes": WIDTH_CLASSES,
            "outlook": True,
            "dynamics": self.dynamics,
        }

    def to_json(self) -> dict[str, Any]:
        """The spec as plain JSON (``teacher.json``)."""
        return {**asdict(self), "families": list(self.families), "table": list(self.table)}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> TeacherSpec:
        """The spec ``teacher.json`` records.

        Raises:
            ValueError: a record that is not a spec (one line naming ``where``).
        """
        try:
            search = HindsightSettings(**doc["search"])  # a record without ``widths`` held none: the default
            kind = {key: doc[key] for key in ("labels", "probes", "delta", "gain", "player", "app_gain") if key in doc}
            if "table" in doc:
                kind["table"] = tuple(doc["table"])
            return cls(tuple(doc["families"]), doc["seeds"], search, doc["max_jobs"], doc["dynamics"], **kind)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: not a teacher spec ({exc})") from None


def _is_digest(text: object) -> bool:
    """Whether ``text`` is a SHA-256 in hex."""
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def player_digest(model: bytes) -> str:
    """A player's name in a spec: the SHA-256 of its model zip."""
    return hashlib.sha256(model).hexdigest()


@dataclass
class Labelled:
    """One scenario's labels (:func:`label_scenario`): its file's bytes and its meta."""

    key: Key
    npz: bytes
    meta: dict[str, Any]


def file_name(key: Key) -> str:
    """The file of a scenario's labels."""
    return f"{key[0]}-{key[1]}.npz"


Task = tuple[Key, TeacherSpec, bytes]
"""A worker's job: the scenario, the spec, and the player's model zip (empty without a player)."""


def label_scenario(task: Task) -> Labelled:
    """Search one scenario and record its labelled decisions (a worker's job; the module docstring)."""
    (family, seed), spec, player = task
    start = time.process_time()
    scenario = cached_scenario(family, seed)
    env = DeepBootEnv(workload=scenario, **spec.env_kwargs)
    first, _ = env.reset(seed=0)
    assert env.sim is not None
    if spec.player:
        arrays, meta = played_advantage_labels(env, spec, load_player(player, spec))
    else:
        label = advantage_labels if spec.labels == "advantage" else held_labels
        arrays, meta = label(env, first, spec)
    meta = {"family": family, "seed": seed, "jobs": len(scenario.workload.jobs), **meta}
    meta["cpu_s"] = round(time.process_time() - start, 2)
    return Labelled((family, seed), _npz(arrays, meta), meta)


def held_labels(
    env: DeepBootEnv, first: dict[str, np.ndarray], spec: TeacherSpec
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The held scores a search finds on ``env``'s scenario, replayed as every decision's label
    (the module docstring); the arrays and the meta (the search's ratio, curve and episodes)."""
    assert env.sim is not None
    found = search_held_scores(env.sim, spec.search, lambda held: _fork_jct(env.sim, spec, held))
    observations, labels, slots = _replay(env, first, found.held(env.sim.workload))
    meta = {
        "decisions": len(labels),
        "search_ratio": found.ratio,
        "prior_jct": found.prior_jct,
        "curve": found.curve,
        "episodes": found.episodes,
        "replayed_jct": env.sim.metrics().train_jct_mean,
    }
    arrays: dict[str, Any] = {f"obs/{key}": np.stack([o[key] for o in observations]) for key in observations[0]}
    arrays.update(label=np.stack(labels), slots=np.asarray(slots, dtype=np.int16))
    arrays["scores"] = np.asarray(found.scores, dtype=np.float32)  # per job of the workload, in its order
    if found.widths:  # per application (APP_NAMES order), its width scores
        arrays["widths"] = np.asarray(found.widths, dtype=np.float32)
    return arrays, meta


def _npz(arrays: dict[str, Any], meta: dict[str, Any]) -> bytes:
    """A scenario's file: its arrays and its meta (as uint8 JSON: the file says what it is)."""
    arrays = {**arrays, "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def advantage_labels(
    env: DeepBootEnv, first: dict[str, np.ndarray], spec: TeacherSpec
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Counterfactual advantages from forked rollouts (Hindsight MAC, Sinclair et al. 2023), on
    the prior's own states: play the prior (the zero action) through ``env``; at ``spec.probes``
    decisions evenly spread over its episode, fork the simulator once per job in a slot and per
    sign, the job's score held at ``+delta`` or ``-delta`` for the rest of its life and every
    other job at the prior's, and play each fork to the end on the scenario's true future. The
    job's advantage is the fall of the mean training JCT per unit of score, over the prior's
    (``(jct(-delta) - jct(+delta)) / (2 delta jct_prior)``): exact for the scenario, one job at a
    time (no other job's perturbation in it, unlike a search's). Its label is ``gain`` times that,
    clipped to the action's [-1, 1]: a policy that regresses the labels scores each job by its
    expected advantage given what the state shows, a step of policy improvement over the prior.

    With ``spec.table``, the states are the table's (the env plays its score action, every job
    holding its application's row) and each fork offsets one job's score from its row, every
    other job holding its own; the label is the table's action plus ``gain`` times the advantage.

    Returns the arrays (``obs/<entry>`` and ``label`` at the probed decisions, ``slots``,
    ``advantage`` (probes, max_jobs)) and the meta (decisions, probes, forks, the base's JCT)."""
    assert env.sim is not None
    sim, prior = env.sim, scored_prior(spec.search.prior)
    # the table's values as the env's float32 action carries them, so that forks and env agree
    table = AppTablePolicy(np.asarray(spec.table, dtype=np.float32).tolist(), spec.search.prior) if spec.table else None
    base = table.held_by(sim.workload) if table is not None else Held()

    def fork_jct(offsets: dict[int, float]) -> float:
        scores = {**base.scores, **{j: base.scores.get(j, 0.0) + off for j, off in offsets.items()}}
        return held_jct(sim, HeldScores(prior, scores, base.widths), 0)

    base_jct, total = played_fork(sim, HeldScores.holding(prior, base), 0)  # one play: its JCT and its length
    probed = _probed(total, spec.probes)
    records = _Probes(spec, _app_members(sim.workload))
    size, slots = env.action_space.shape[0], env.config.max_jobs
    obs, decision, done, zero = first, 0, False, np.zeros(size, dtype=np.float32)
    while not done:
        probe = decision in probed
        jobs = slot_jobs(env.state, slots) if probe or table is not None else []  # the prior: jobs at probes only
        action = zero if table is None else table.score_action(jobs, slots, size)
        if probe:
            records.add(obs, action, records.measure(jobs, fork_jct, base_jct), len(jobs))
        obs, _, terminated, truncated, _ = env.step(action)
        decision, done = decision + 1, terminated or truncated
    return records.arrays(), records.meta(len(probed), base_jct)


def played_advantage_labels(env: DeepBootEnv, spec: TeacherSpec, player: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`advantage_labels` over a trained score model, ``player`` (an
    :class:`~agents.saved.policy_adapter.AgentPolicy`): one step of policy iteration. The player
    plays ``env``'s scenario (in the simulator ``env`` would build); at the probed decisions each
    job's score is offset by +-``delta`` in a copy of the player (:meth:`AgentPolicy.fork
    <agents.saved.policy_adapter.AgentPolicy.fork>`, its codec and outlook as they are at the
    fork) that plays a fork of the simulator to the end. The advantage is over the player's own
    JCT, and the label is the player's own action with ``gain`` times the advantage added to
    each present job's score (its width scores and lending as it chose): regressed, it is the
    player improved where the scenario's future shows it should score a job otherwise.

    The forks' simulator hooks (reclaim, the Aryl-mode rule) stay the player's, which are its
    prior's built-in rules: they read the state and keep no episode state of their own."""
    assert env.sim is not None
    player.reset(0)
    sim = Simulator(env.sim.workload, env.sim_config, player)
    played_jct, total = play_out(sim.fork(), player.fork())
    probed = _probed(total, spec.probes)
    scale = float(player.codec.score_scale)
    records = _Probes(spec, _app_members(sim.workload))

    def fork_jct(scores: dict[int, float]) -> float:
        return play_out(sim.fork(), player.fork({job: score / scale for job, score in scores.items()}))[0]

    decision = 0
    while not sim.done:
        state = sim.observe()
        jobs = slot_jobs(state, spec.max_jobs)
        measured = records.measure(jobs, fork_jct, played_jct) if decision in probed else None  # before it decides
        allocation = player.decide(state)
        if measured is not None:
            records.add(player.last_obs, player.last_action, measured, len(jobs))
        sim.apply(allocation, state)
        sim.advance()
        decision += 1
    return records.arrays(), records.meta(len(probed), played_jct)


def _app_members(workload: Workload) -> dict[str, list[int]]:
    """The job ids (workload indices) of each application of ``workload``, in workload order."""
    members: dict[str, list[int]] = {}
    for job_id, job in enumerate(workload.jobs):
        members.setdefault(job.app, []).append(job_id)
    return members


def _probed(total: int, probes: int) -> set[int]:
    """The decisions probed: ``probes`` of ``total``, evenly spread from the first to the last."""
    return set(np.linspace(0, total - 1, min(probes, total)).round().astype(int).tolist())


ForkJct = Callable[[dict[int, float]], float]
"""The mean JCT of a fork played to the end with some jobs' scores offset (job id -> log-weight units)."""

Measured = tuple[np.ndarray, np.ndarray | None]
"""One probe's slot advantages: the jobs', and their applications' (None without ``app_gain``)."""


def _advantages(jobs: list[Any], fork_jct: ForkJct, spec: TeacherSpec, base_jct: float) -> np.ndarray:
    """Each slot job's advantage: ``(fork_jct({job: -delta}) - fork_jct({job: +delta})) / (2
    delta base_jct)`` (the mean JCT a fork reaches with the job's score offset by that many
    log-weight units), 0 for empty slots."""
    advantage = np.zeros(spec.max_jobs, dtype=np.float32)
    for i, job in enumerate(jobs):
        advantage[i] = _advantage(fork_jct, [job.id], spec.delta, base_jct)
    return advantage


def _app_advantages(
    jobs: list[Any], members: dict[str, list[int]], fork_jct: ForkJct, spec: TeacherSpec, base_jct: float
) -> np.ndarray:
    """Each slot job's application's advantage: the same as :func:`_advantages` with the score
    of every job of the application (``members``: the workload's job ids per application) offset
    together, those in the system and those to come, as a per-application score table would: what
    one job's offset cannot show, the applications' standing against each other. 0 for empty slots."""
    advantage = np.zeros(spec.max_jobs, dtype=np.float32)
    of_app: dict[str, float] = {}
    for i, job in enumerate(jobs):
        if job.app not in of_app:
            of_app[job.app] = _advantage(fork_jct, members[job.app], spec.delta, base_jct)
        advantage[i] = of_app[job.app]
    return advantage


def _advantage(fork_jct: ForkJct, members: list[int], delta: float, base_jct: float) -> float:
    """The fall of the mean JCT per unit of score of ``members``, all offset together."""
    up = fork_jct(dict.fromkeys(members, delta))
    down = fork_jct(dict.fromkeys(members, -delta))
    return (down - up) / (2 * delta * base_jct)


class _Probes:
    """The probed decisions of one scenario: observations, labels, jobs in slots, advantages (and
    the applications' with ``spec.app_gain``; ``members``: the workload's job ids per application)."""

    def __init__(self, spec: TeacherSpec, members: dict[str, list[int]]) -> None:
        self.spec = spec
        self.members = members
        self.observations: list[dict[str, np.ndarray]] = []
        self.labels: list[np.ndarray] = []
        self.slots: list[int] = []
        self.advantages: list[np.ndarray] = []
        self.app_advantages: list[np.ndarray] = []
        self.apps_probed = 0

    def measure(self, jobs: list[Any], fork_jct: ForkJct, base_jct: float) -> Measured:
        """The slot jobs' advantages (:func:`_advantages`) and, with ``app_gain``, their
        applications' (:func:`_app_advantages`)."""
        advantage = _advantages(jobs, fork_jct, self.spec, base_jct)
        if not self.spec.app_gain:
            return advantage, None
        self.apps_probed += len({job.app for job in jobs})
        return advantage, _app_advantages(jobs, self.members, fork_jct, self.spec, base_jct)

    def add(self, obs: dict[str, np.ndarray], action: np.ndarray, measured: Measured, used: int) -> None:
        """One probe: the label is ``action`` (clipped) with ``gain`` x the job's advantage (and
        ``app_gain`` x its application's) added to the ``used`` slots' scores."""
        advantage, app_advantage = measured
        label = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        shift = self.spec.gain * advantage[:used]
        if app_advantage is not None:
            shift = shift + self.spec.app_gain * app_advantage[:used]
            self.app_advantages.append(app_advantage)
        label[:used] = np.clip(action[:used] + shift, -1.0, 1.0)
        self.observations.append({key: np.array(value, copy=True) for key, value in obs.items()})
        self.labels.append(label)
        self.slots.append(used)
        self.advantages.append(advantage)

    def arrays(self) -> dict[str, Any]:
        """The scenario file's arrays (:func:`label_scenario`)."""
        arrays: dict[str, Any] = {
            f"obs/{key}": np.stack([o[key] for o in self.observations]) for key in self.observations[0]
        }
        arrays.update(
            label=np.stack(self.labels),
            slots=np.asarray(self.slots, dtype=np.int16),
            advantage=np.stack(self.advantages),
        )
        if self.app_advantages:
            arrays["app_advantage"] = np.stack(self.app_advantages)
        return arrays

    def meta(self, probes: int, played_jct: float) -> dict[str, Any]:
        """The scenario's meta: decisions labelled, probes, forks played (two per job probed, two
        per application probed, and the first play), the JCT the advantages are over."""
        forks = 2 * sum(self.slots) + 2 * self.apps_probed + 2
        return {"decisions": len(self.labels), "probes": probes, "forks": forks, "prior_jct": played_jct}


def load_player(model: bytes, spec: TeacherSpec, where: str = PLAYER_FILE) -> Any:
    """The player ``spec`` names, from its model zip's bytes, as an
    :class:`~agents.saved.policy_adapter.AgentPolicy` (loaded safely, once per process);
    ``where`` names it in errors.

    Raises:
        ValueError: bytes that are not the spec's player, or a model that does not act in the
            env the teacher labels (one line).
    """
    digest = player_digest(model)
    if digest != spec.player:
        raise ValueError(f"teacher: the player's model is not the one the spec names ({spec.player[:12]})")
    if digest not in _PLAYERS:
        from agents.saved.policy_adapter import load_agent_policy  # lazy: torch (a prior's teacher needs none)

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / PLAYER_FILE
            path.write_bytes(model)
            try:
                player = load_agent_policy(path, name="player")
            except ValueError as exc:  # a checkpoint's error names the temporary copy
                raise ValueError(str(exc).replace(str(path), where)) from None
        codec = player.codec
        wanted = (spec.max_jobs, spec.search.prior, WIDTH_CLASSES, True, 1)
        found = (
            player.max_jobs,
            getattr(codec, "base_name", None),
            getattr(codec, "width_classes", 0),
            player.outlook is not None,
            player.hold,
        )
        if player.action_mode != "score" or found != wanted:
            raise ValueError(
                f"{where}: the teacher's player must be a score model over {spec.search.prior} with "
                f"{spec.max_jobs} slots, {WIDTH_CLASSES} width classes, the outlook and hold 1; it has {found}"
            )
        _PLAYERS[digest] = player
    return _PLAYERS[digest]


_PLAYERS: dict[str, Any] = {}
"""Players loaded in this process, by digest (a worker labels several scenarios)."""


def _fork_jct(sim: Simulator | None, spec: TeacherSpec, held: Held) -> float:
    """The mean training JCT of the prior with ``held`` held, on a fork of ``sim`` to the end
    (the fork calls the env's prior's hooks: the same prior)."""
    assert sim is not None
    return held_jct(sim, HeldScores.holding(scored_prior(spec.search.prior), held), 0)


def _replay(
    env: DeepBootEnv, obs: dict[str, np.ndarray], held: Held
) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray], list[int]]:
    """Play ``env`` from its reset (observation ``obs``: the search ran on forks, the env is where
    it was) to the end with the ``held`` scores and width scores as the action; each decision's
    observation, action (the label) and number of jobs in slots."""
    scale = float(getattr(env.codec, "score_scale", 1.0))
    width = int(getattr(env.codec, "width_classes", 0))
    if held.widths and not width:
        raise ValueError("teacher: the search held width scores, and the env's action has none")
    observations: list[dict[str, np.ndarray]] = []
    labels: list[np.ndarray] = []
    slots: list[int] = []
    done = False
    while not done:
        jobs = slot_jobs(env.state, env.config.max_jobs)
        action = np.zeros(env.action_space.shape, dtype=np.float32)
        for i, job in enumerate(jobs):
            action[i] = np.clip(held.scores.get(job.id, 0.0) / scale, -1.0, 1.0)
            if job.id in held.widths:
                first = env.config.max_jobs + i * width
                action[first : first + width] = np.clip(np.asarray(held.widths[job.id]) / scale, -1.0, 1.0)
        observations.append(obs)
        labels.append(action)
        slots.append(len(jobs))
        obs, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    return observations, labels, slots


def teach(
    spec: TeacherSpec,
    out: Path,
    jobs: int = 1,
    backend: Backend = LOCAL,
    resume: bool = False,
    progress: bool = False,
    on_label: Callable[[Labelled], None] | None = None,
    player: bytes = b"",
) -> dict[str, Any]:
    """Label every scenario of ``spec`` missing from ``out`` (the module docstring); returns the
    manifest. A stop (:class:`~deepboot_env.stops.Stopped`) keeps every file written. A spec
    with a player takes its model zip, ``player``, or :data:`PLAYER_FILE` in ``out`` on a resume;
    ``out`` keeps a copy (its labels say whose states they are).

    Raises:
        ValueError: ``out`` holds another spec, or labels without ``resume``; a player that is
            not the spec's.
    """
    out.mkdir(parents=True, exist_ok=True)
    with lock_folder(out, "--out"):
        player = _kept_player(spec, out, player)
        manifest = _start_manifest(spec, out, resume)
        if player and not (out / PLAYER_FILE).is_file():
            with atomic_write(out / PLAYER_FILE, binary=True) as fh:
                fh.write(player)
        _adopt_written(out, spec, manifest)
        todo = [key for key in spec.scenarios if not (out / file_name(key)).is_file()]
        todo.sort(key=lambda key: -len(cached_scenario(*key).workload.jobs))  # the longest first: no long tail

        def keep(_: int, labelled: Labelled) -> None:
            with atomic_write(out / file_name(labelled.key), binary=True) as fh:
                fh.write(labelled.npz)
            labelled.npz = b""  # written: the driver keeps the meta only
            manifest["scenarios"][file_name(labelled.key)] = labelled.meta
            write_text(out / MANIFEST, json.dumps(manifest, indent=1))
            if on_label is not None:
                on_label(labelled)

        run_pool(
            label_scenario,
            [(key, spec, player) for key in todo],
            jobs,
            progress,
            "hindsight teacher",
            describe=lambda task: f"{task[0][0]} seed {task[0][1]}",
            on_result=keep,
            backend=backend,
        )
    return manifest


def _kept_player(spec: TeacherSpec, out: Path, player: bytes) -> bytes:
    """The player's model zip for ``spec`` (b"" without one): ``player``, else the copy ``out``
    keeps.

    Raises:
        ValueError: no player given or kept, or one that is not the spec's (one line).
    """
    if not spec.player:
        return b""
    kept = out / PLAYER_FILE
    if not player and kept.is_file():
        player = read_player(out)
    if not player or player_digest(player) != spec.player:
        raise ValueError(f"--out {out}: the teacher's player ({spec.player[:12]}) is neither given nor in {kept.name}")
    return player


def read_player(path: Path) -> bytes:
    """A player's model zip, bounded: ``path`` a zip, or a folder holding one (a teacher's
    folder keeps :data:`PLAYER_FILE`; a run folder, as ``ppo:<path>`` names one).

    Raises:
        ValueError: no model there, unreadable or too large (one line).
    """
    from agents.saved.policy_adapter import resolve_model_path  # lazy: it imports torch

    zip_path = path / PLAYER_FILE if (path / PLAYER_FILE).is_file() else path
    try:
        return read_bounded(resolve_model_path(zip_path), MAX_ZIP_TOTAL_BYTES, "a player's model zip", ValueError)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    except OSError as exc:
        raise ValueError(f"{zip_path}: cannot read it ({exc.strerror or exc})") from None


def mean_search_ratio(metas: list[dict[str, Any]]) -> float | None:
    """The held scores' mean ratio to the prior over scenarios' metas (None: none holds one, as
    with advantage labels)."""
    ratios = [meta["search_ratio"] for meta in metas if "search_ratio" in meta]
    return sum(ratios) / len(ratios) if ratios else None


def _adopt_written(out: Path, spec: TeacherSpec, manifest: dict[str, Any]) -> None:
    """Enter in the manifest the scenarios whose file is written but not listed (a stop between
    the two writes): each file holds its own meta."""
    missing = [file_name(key) for key in spec.scenarios if (out / file_name(key)).is_file()]
    missing = [name for name in missing if name not in manifest["scenarios"]]
    for name in missing:
        manifest["scenarios"][name] = scenario_meta(read_scenario(out / name), out / name)
    if missing:
        write_text(out / MANIFEST, json.dumps(manifest, indent=1))


def scenario_meta(arrays: dict[str, np.ndarray], path: Path) -> dict[str, Any]:
    """The meta a scenario's file holds (:func:`label_scenario`).

    Raises:
        ValueError: a file without one (one line).
    """
    if "meta" not in arrays:
        raise ValueError(f"{path}: not a teacher's labels (no meta)")
    meta = parse_json(arrays["meta"].tobytes(), str(path))
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: not a teacher's labels (meta is not an object)")
    return meta


def _start_manifest(spec: TeacherSpec, out: Path, resume: bool) -> dict[str, Any]:
    """The folder's manifest: a new one, or with ``resume`` the recorded one (its spec must be ``spec``).

    Raises:
        ValueError: labels in the folder without ``resume``, or another spec recorded.
    """
    path = out / MANIFEST
    if not path.exists():  # a FIFO or a folder in its place is read below, and refused
        if any(out.glob("*.npz")):
            raise ValueError(f"--out {out}: holds labels but no {MANIFEST}; use another folder")
        manifest = {"spec": spec.to_json(), "scenarios": {}}
        write_text(path, json.dumps(manifest, indent=1))
        return manifest
    if not resume:
        raise ValueError(f"--out {out}: holds a teacher's labels; add --resume to go on, or use another folder")
    manifest = read_manifest(out)
    recorded = TeacherSpec.from_json(manifest.get("spec"), str(path))
    if recorded != spec:
        raise ValueError(f"--out {out}: labels another spec ({MANIFEST}); a resume must ask for the same")
    return manifest


def read_manifest(out: Path) -> dict[str, Any]:
    """A teacher folder's ``teacher.json`` (bounded, checked JSON).

    Raises:
        ValueError: unreadable or not a manifest (one line).
    """
    path = out / MANIFEST
    try:
        data = read_bounded(path, 16 << 20, "a teacher manifest", ValueError)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    doc = parse_json(data, str(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("scenarios"), dict):
        raise ValueError(f"{path}: not a teacher manifest")
    return doc


def read_scenario(path: Path) -> dict[str, np.ndarray]:
    """One scenario's labels (:func:`label_scenario`'s file): bounded, arrays only (nothing is
    unpickled: ``allow_pickle=False``).

    Raises:
        ValueError: a file that is too large or not a teacher's (one line).
    """
    try:
        data = read_bounded(path, MAX_SCENARIO_BYTES, "a teacher's labels", ValueError)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a teacher's labels ({exc})") from None
    if "label" not in arrays or "slots" not in arrays or len(arrays["label"]) != len(arrays["slots"]):
        raise ValueError(f"{path}: not a teacher's labels (label and slots missing or of other lengths)")
    return arrays
