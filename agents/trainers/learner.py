"""The state-reading learner's first stage: a score policy regressed on the hindsight teacher's labels.

The teacher (:mod:`agents.trainers.teacher`) labels every decision of its training scenarios with
the score each job in a slot holds in hindsight. A set policy whose per-job scores come from the
job's own features and the cluster's (``application_scores`` 0: the application is one feature
among them, :mod:`agents.models.set_policy`) learns them by regression, as Hindsight Learning
(Sinclair et al., ICML 2023) fits its policy to the hindsight planner's actions:

* :func:`read_labels` reads a teacher's folder into one :class:`LabelSet` (every scenario the
  manifest lists, through the teacher's bounded reader);
* :func:`clone_labels` minimises the mean squared error between the policy's score means and the
  labels over the entries that act (the present jobs' scores and width scores, the lending share),
  the same entries the policy's log probability counts. A held score is noisy per job (a search of
  a few hundred episodes finds it), so the regression learns its mean given what the state shows:
  what generalises to a scenario the teacher never saw.

:func:`hindsight_start` is the stage a training run (``train_policy.py`` with ``teacher_seeds``,
the ``hindsight`` preset) runs on its new model: the teacher in ``<run>/teacher`` (resumable),
then the regression; with ``teacher_rounds`` R > 1, policy iteration: R - 1 more rounds, each
teacher labelling the advantages over the last regression as it plays, each regression from the
model's first weights. PPO may then fine-tune it (:mod:`agents.trainers.training_run`; the
``hindsight`` preset trains no PPO steps: they did not pay).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agents.errors import ConfigError
from agents.models.app_table import AppTableModel
from agents.runs.run_config import env_config
from agents.trainers.evolution import train_table
from agents.trainers.teacher import (
    MANIFEST,
    PLAYER_FILE,
    TeacherSpec,
    mean_search_ratio,
    player_digest,
    read_manifest,
    read_player,
    read_scenario,
    teach,
)
from baselines.hindsight import DEFAULT_PRIOR, HindsightSettings
from deepboot_env.pool import Backend
from deepboot_env.stops import Stopped, stop_requested
from traces.families import FAMILIES

TEACHER_FOLDER = "teacher"
"""The run folder's sub-folder of the teacher's labels."""

TABLE_FOLDER = "table"
"""The run folder's sub-folder of the held table's ES run (``table_generations``)."""


@dataclass
class LabelSet:
    """Labelled decisions: observations (entry -> stacked rows), the labels (decisions, action
    size) and the scenario each decision came from (its index in ``scenarios``)."""

    obs: dict[str, np.ndarray]
    labels: np.ndarray
    scenario: np.ndarray
    scenarios: list[str]

    def __len__(self) -> int:
        return len(self.labels)


def read_labels(folder: Path, manifest: Mapping[str, Any] | None = None) -> LabelSet:
    """Every scenario a teacher's folder lists (its ``teacher.json``, or ``manifest`` where the
    caller has read it already), in the manifest's order.

    Raises:
        ValueError: no scenario labelled yet, or a file that is not a teacher's (one line).
    """
    names = sorted((read_manifest(folder) if manifest is None else manifest)["scenarios"])
    if not names:
        raise ValueError(f"{folder}: the teacher has labelled no scenario yet")
    parts = [read_scenario(folder / name) for name in names]
    keys = sorted(key for key in parts[0] if key.startswith("obs/"))
    for name, part in zip(names, parts, strict=True):
        if sorted(key for key in part if key.startswith("obs/")) != keys:
            raise ValueError(f"{folder / name}: its observation entries differ from {names[0]}'s")
    return LabelSet(
        obs={key[len("obs/") :]: np.concatenate([part[key] for part in parts]) for key in keys},
        labels=np.concatenate([part["label"] for part in parts]).astype(np.float32),
        scenario=np.concatenate([np.full(len(part["label"]), i, dtype=np.int32) for i, part in enumerate(parts)]),
        scenarios=[name.removesuffix(".npz") for name in names],
    )


def held_out(labels: LabelSet, every: int = 4) -> tuple[LabelSet, LabelSet | None]:
    """(fit, held): every ``every``-th scenario in name order held out (one train seed in four of
    each family: names sort by family, then seed), the rest to fit; no held set with ``every`` 0
    or fewer than ``every`` scenarios."""
    if every < 1 or len(labels.scenarios) < every:
        return labels, None
    held = np.arange(len(labels.scenarios)) % every == every - 1
    return _scenarios(labels, ~held), _scenarios(labels, held)


def _scenarios(labels: LabelSet, keep: np.ndarray) -> LabelSet:
    """The decisions of the scenarios ``keep`` marks, renumbered."""
    rows = keep[labels.scenario]
    number = np.cumsum(keep) - 1
    return LabelSet(
        {key: value[rows] for key, value in labels.obs.items()},
        labels.labels[rows],
        number[labels.scenario[rows]].astype(np.int32),
        [name for name, kept in zip(labels.scenarios, keep, strict=True) if kept],
    )


def clone_labels(
    model: Any,
    labels: LabelSet,
    epochs: int = 20,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    seed: int = 0,
    held: LabelSet | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[dict[str, float]]:
    """Regress ``model.policy``'s score means (a score-mode set policy) on ``labels`` (the module
    docstring); per-epoch mean losses, each also passed to ``on_epoch`` with the epoch from 1.
    With ``held`` (scenarios it does not fit, :func:`held_out`) each epoch also scores them
    (:func:`held_error`) and the policy ends at the epoch that did best there: a network fits
    the noise of the labels it sees within a few epochs, and what it learns past that does not
    carry to other scenarios. ``should_stop`` is asked before every batch: once true, the
    regression ends there (at the best epoch so far).

    Raises:
        ValueError: bad sizes, or labels of another action size than the policy's.
    """
    import torch  # lazy: torch is slow to import (the teacher's workers need none)

    policy = _checked(model, labels, epochs, batch_size, learning_rate)
    obs_t, label_t = _tensors(labels, policy.device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    history: list[dict[str, float]] = []
    best: tuple[float, dict[str, Any]] | None = None
    try:
        for _ in range(epochs):
            policy.set_training_mode(True)
            order = torch.randperm(len(labels), generator=generator).to(policy.device)
            total, weight = 0.0, 0.0
            for start in range(0, len(labels), batch_size):
                if should_stop is not None and should_stop():
                    return history
                idx = order[start : start + batch_size]
                loss, acting = _regression_step(policy, optimizer, {k: v[idx] for k, v in obs_t.items()}, label_t[idx])
                total, weight = total + loss * acting, weight + acting
            history.append({"mse": total / max(weight, 1.0)})
            if held is not None:
                history[-1].update(held_error(policy, held))
                if best is None or history[-1]["held_mse"] < best[0]:
                    best = (history[-1]["held_mse"], {k: v.clone() for k, v in policy.state_dict().items()})
            if on_epoch is not None:
                on_epoch(len(history), history[-1])
    finally:
        policy.set_training_mode(False)
        if best is not None:
            policy.load_state_dict(best[1])
    return history


def _checked(model: Any, labels: LabelSet, epochs: int, batch_size: int, learning_rate: float) -> Any:
    """``model.policy``, once the regression's sizes and the labels' shape are checked.

    Raises:
        ValueError: one line naming what is wrong.
    """
    if epochs < 0 or batch_size < 1 or not learning_rate > 0:
        raise ValueError(
            f"clone_labels needs epochs >= 0, batch_size >= 1, learning_rate > 0; got "
            f"{epochs}, {batch_size}, {learning_rate}"
        )
    policy = model.policy
    if labels.labels.shape[1:] != tuple(policy.action_space.shape):
        raise ValueError(
            f"the labels are actions of shape {labels.labels.shape[1:]}, the policy's are {policy.action_space.shape}"
        )
    return policy


def _tensors(labels: LabelSet, device: Any) -> tuple[dict[str, Any], Any]:
    """The labels' observations and actions as tensors on ``device``."""
    import torch  # lazy: torch is slow to import (the teacher's workers need none)

    return {k: torch.as_tensor(v, device=device) for k, v in labels.obs.items()}, torch.as_tensor(
        labels.labels, device=device
    )


def held_error(policy: Any, held: LabelSet, batch_size: int = 1024) -> dict[str, float]:
    """How well ``policy`` predicts ``held``'s present jobs' scores: ``held_mse``, the mean
    squared error of the acting entries (as the regression's), and ``held_explained``, the share
    of the scores' mean square (about 0, the prior's) that its score predictions explain (1 -
    their squared error over it: 0 for the prior, 1 for a perfect fit)."""
    import torch  # lazy: torch is slow to import (the teacher's workers need none)

    slots = policy.mlp_extractor.slots
    sums = np.zeros(4)  # acting error, acting entries, score error, score mean square
    obs_t, label_t = _tensors(held, policy.device)
    with torch.no_grad():
        for start in range(0, len(held), batch_size):
            obs = {k: v[start : start + batch_size] for k, v in obs_t.items()}
            labels = label_t[start : start + batch_size]
            mean, acting = policy.score_means(obs)
            error = (mean - labels) ** 2 * acting
            square = labels[:, :slots] ** 2 * acting[:, :slots]
            sums += [error.sum().item(), acting.sum().item(), error[:, :slots].sum().item(), square.sum().item()]
    return {"held_mse": sums[0] / max(sums[1], 1.0), "held_explained": 1.0 - sums[2] / max(sums[3], 1e-12)}


def _regression_step(policy: Any, optimizer: Any, obs: dict[str, Any], labels: Any) -> tuple[float, float]:
    """One gradient step of the acting entries' mean squared error; (that error, acting entries)."""
    import torch  # lazy: torch is slow to import (the teacher's workers need none)

    mean, acting = policy.score_means(obs)
    count = acting.sum().clamp_min(1.0)
    loss = (((mean - labels) ** 2) * acting).sum() / count
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    return float(loss.item()), float(count.item())


def teacher_spec(settings: Mapping[str, Any]) -> TeacherSpec:
    """The teacher a run's resolved ``settings`` ask for (:data:`~agents.runs.run_config.TEACHER_KEYS`),
    or the one whose labels ``teacher_labels`` names, checked to label the env the run trains in.

    Raises:
        ConfigError: a training env that is not the one the teacher labels (the score mode over a
            prior of ATS's family, with width scores and the outlook), or unreadable labels.
    """
    env = settings["env_kwargs"]
    if env.get("action_mode") != "score":
        raise ConfigError("the hindsight teacher labels score actions: --env-kwargs action_mode:score")
    try:
        spec = _labels_spec(settings) if settings["teacher_labels"] else _asked_spec(settings)
    except ValueError as exc:  # a prior that takes no scores, or a folder of something else
        raise ConfigError(str(exc)) from None
    if settings["teacher_rounds"] > 1 and env.get("hold", 1) != 1:
        raise ConfigError("policy iteration (teacher_rounds > 1) labels every decision its player takes: hold:1")
    config = env_config(env)  # the options the run leaves at their defaults
    differ = [key for key, value in spec.env_kwargs.items() if env.get(key, getattr(config, key, None)) != value]
    if differ:
        wanted = ", ".join(f"{key}:{spec.env_kwargs[key]}" for key in differ)
        raise ConfigError(f"the hindsight teacher labels the env it trains in: --env-kwargs {wanted}")
    return spec


def _asked_spec(settings: Mapping[str, Any]) -> TeacherSpec:
    """The teacher ``settings`` ask for, over the run's env (and its ``teacher_table``'s play).

    Raises:
        ValueError: a table file that cannot be read or scores another prior (one line)."""
    env = settings["env_kwargs"]
    table = AppTableModel.load(Path(settings["teacher_table"])) if settings["teacher_table"] else None
    if table is not None and table.prior != env.get("base_policy"):
        raise ValueError(f"teacher_table {settings['teacher_table']}: scores {table.prior}, not the env's base_policy")
    if settings["table_generations"] and settings["teacher_kind"] != "advantage":
        raise ValueError("table_generations trains the base of advantage labels: teacher_kind advantage")
    if settings["table_generations"] and env.get("base_policy") != DEFAULT_PRIOR:
        raise ValueError(f"table_generations trains a table over {DEFAULT_PRIOR}: base_policy:{DEFAULT_PRIOR}")
    search = HindsightSettings(
        env.get("base_policy", ""),
        settings["teacher_generations"],
        settings["teacher_pairs"],
        learning_rate=settings["teacher_lr"],
    )
    return TeacherSpec(
        tuple(settings["teacher_families"] or FAMILIES),
        settings["teacher_seeds"],
        search,
        env_config(env).max_jobs,
        env["dynamics"],
        labels=settings["teacher_kind"],
        probes=settings["teacher_probes"],
        delta=settings["teacher_delta"],
        gain=settings["teacher_gain"],
        app_gain=settings["teacher_app_gain"],
        table=table.values if table is not None else (),
    )


def _labels_spec(settings: Mapping[str, Any]) -> TeacherSpec:
    """The spec ``teacher_labels``' manifest records."""
    folder = Path(settings["teacher_labels"])
    return TeacherSpec.from_json(read_manifest(folder).get("spec"), str(folder / MANIFEST))


def hindsight_start(
    model: Any,
    settings: Mapping[str, Any],
    run_dir: Path,
    seed: int,
    backend: Backend,
    jobs: int,
    progress: bool,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Label the training scenarios in ``run_dir/teacher`` (going on from what it holds; or read
    the ``teacher_labels`` folder) and regress ``model`` on them, one train seed in four held out
    to pick the epoch (:func:`held_out`; the module docstring). With ``teacher_rounds`` R > 1,
    policy iteration: R - 1 more rounds, round r in ``run_dir/teacher-<r>``, label the
    advantages over the previous round's regression as it plays (its model the player,
    :func:`agents.trainers.teacher.played_advantage_labels`), and ``model`` regresses each
    round's labels from its first weights. Returns what ``config.yml`` records of it, with
    ``complete`` false where a signal stopped it: a resumed run starts again from a new model,
    at the last round whose player is kept (the labels and players kept: the result is the same
    as without the stop). ``on_epoch`` gets the regression's epochs numbered on across rounds."""
    given, rounds, epochs = settings["teacher_labels"], settings["teacher_rounds"], settings["clone_epochs"]
    spec, table = _with_table(teacher_spec(settings), settings, run_dir, (seed, backend, jobs))
    if table is not None and not table["complete"]:
        stopped = "stopped while ES trained the table; its state is kept"
        return {"table": table, "rounds": [], "complete": False, "interrupted": stopped}
    folders = [Path(given) if given else run_dir / TEACHER_FOLDER]
    folders += [run_dir / f"{TEACHER_FOLDER}-{r}" for r in range(2, rounds + 1)]
    record: dict[str, Any] = {
        "folder": str(folders[0]) if given else TEACHER_FOLDER,
        "families": list(spec.families),
        "seeds": spec.seeds,
        "labels": spec.labels,
        "search": {"generations": spec.search.generations, "pairs": spec.search.pairs, "lr": spec.search.learning_rate},
        "rounds": [],
        "complete": False,
    }
    if table is not None:
        record["table"] = table
    first = max([r for r in range(2, rounds + 1) if (folders[r - 1] / PLAYER_FILE).is_file()], default=1)
    player = read_player(folders[first - 1]) if first > 1 else b""
    record["rounds"] += [_labelled_round(r, folders[r - 1], r == 1 and bool(given)) for r in range(1, first)]
    weights = {key: value.clone() for key, value in model.policy.state_dict().items()}
    for r in range(first, rounds + 1):
        if r > 1:
            model.policy.load_state_dict(weights)  # each round's regression starts afresh
        round_spec = replace(spec, labels="advantage", player=player_digest(player), table=()) if player else spec
        numbered = None if on_epoch is None else functools.partial(_numbered, on_epoch, (r - 1) * epochs)
        done = _round(model, settings, round_spec, folders[r - 1], player, (seed, backend, jobs, progress), numbered)
        record["rounds"].append({"round": r, "folder": _shown(folders[r - 1], r == 1 and bool(given)), **done})
        if "interrupted" in done:
            return {**record, "interrupted": f"round {r}: {done['interrupted']}"}
        if r < rounds:
            player = model_bytes(model)
    last = record["rounds"][-1]
    record.update({key: last[key] for key in ROUND_RESULTS})
    record["teacher_cpu_s"] = round(sum(done["teacher_cpu_s"] for done in record["rounds"]), 1)
    record["complete"] = True
    return record


def _with_table(
    spec: TeacherSpec, settings: Mapping[str, Any], run_dir: Path, work: tuple[int, Backend, int]
) -> tuple[TeacherSpec, dict[str, Any] | None]:
    """``spec`` over the held table ``table_generations`` trains in ``run_dir/table`` (its values
    clipped to the score action's [-1, 1]), and the stage's record; ``spec`` and None without
    one (or with given labels). A stage a signal stopped is recorded incomplete, ``spec`` as it was."""
    if not settings["table_generations"] or settings["teacher_labels"]:
        return spec, None
    seed, backend, jobs = work
    generations = settings["table_generations"]
    path, record = train_table(run_dir / TABLE_FOLDER, spec.families, generations, seed, jobs, backend, stop_requested)
    if not record["complete"]:
        return spec, record
    return replace(spec, table=tuple(np.clip(AppTableModel.load(path).values, -1.0, 1.0).tolist())), record


ROUND_RESULTS = ("scenarios", "decisions", "held_scenarios", "search_ratio", "clone_epochs_done", "clone")
"""What the hindsight start's record shows of its last round (the model's)."""


def _labelled_round(r: int, folder: Path, given: bool) -> dict[str, Any]:
    """The record of round ``r``, labelled in ``folder`` before a stop (a resume starts past it):
    its scenarios and teacher's cost, from its manifest."""
    metas = list(read_manifest(folder)["scenarios"].values())
    cpu = round(sum(m["cpu_s"] for m in metas), 1)
    return {"round": r, "folder": _shown(folder, given), "scenarios": len(metas), "teacher_cpu_s": cpu}


def _round(
    model: Any,
    settings: Mapping[str, Any],
    spec: TeacherSpec,
    folder: Path,
    player: bytes,
    work: tuple[int, Backend, int, bool],
    on_epoch: Callable[[int, dict[str, float]], None] | None,
) -> dict[str, Any]:
    """One round of :func:`hindsight_start`: the teacher labels ``folder`` (unless it is the
    given ``teacher_labels``), ``model`` regresses the labels; what the round's record holds,
    with ``interrupted`` where a signal stopped it."""
    seed, backend, jobs, progress = work
    try:
        if settings["teacher_labels"] and not spec.player:
            manifest = read_manifest(folder)
        else:
            manifest = teach(spec, folder, jobs, backend, folder.is_dir(), progress, player=player)
    except Stopped as exc:
        return {
            "teacher_cpu_s": 0.0,
            "interrupted": f"stopped by {exc} while the teacher labelled; its labels are kept",
        }
    metas = list(manifest["scenarios"].values())
    fit, held = held_out(read_labels(folder, manifest))
    epochs = settings["clone_epochs"]
    history = clone_labels(
        model,
        fit,
        epochs,
        batch_size=settings["clone_batch"],
        learning_rate=settings["clone_lr"],
        seed=seed,
        held=held,
        on_epoch=on_epoch,
        should_stop=stop_requested,
    )
    done: dict[str, Any] = {
        "player": spec.player[:12] or ("held table" if spec.table else spec.search.prior),
        "scenarios": len(metas),
        "decisions": len(fit) + (len(held) if held is not None else 0),
        "held_scenarios": held.scenarios if held is not None else [],
        "search_ratio": None if (ratio := mean_search_ratio(metas)) is None else round(ratio, 4),
        "teacher_cpu_s": round(sum(m["cpu_s"] for m in metas), 1),
        "clone_epochs_done": len(history),
        "clone": _best_epoch(history),
    }
    if len(history) < epochs:
        done["interrupted"] = f"stopped after {len(history)} of {epochs} regression epochs"
    return done


def _shown(folder: Path, given: bool) -> str:
    """A round's folder as the record shows it: a given one as given, else its name in the run."""
    return str(folder) if given else folder.name


def _numbered(
    on_epoch: Callable[[int, dict[str, float]], None], before: int, epoch: int, losses: dict[str, float]
) -> None:
    """``on_epoch`` with the epoch numbered on from ``before`` (the rounds' epochs before it)."""
    on_epoch(before + epoch, losses)


def model_bytes(model: Any) -> bytes:
    """``model`` saved as a zip, in memory (a next round's player)."""
    buffer = io.BytesIO()
    model.save(buffer)
    return buffer.getvalue()


def _best_epoch(history: list[dict[str, float]]) -> dict[str, float]:
    """The epoch the regression ended at (the best held-out error, else the last) and its errors."""
    if not history:
        return {}
    epoch = min(range(len(history)), key=lambda i: history[i].get("held_mse", -i))
    return {"epoch": epoch + 1, **{key: round(float(value), 6) for key, value in history[epoch].items()}}
