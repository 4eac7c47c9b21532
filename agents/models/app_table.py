"""A held application table: the score action's per-application part, played without a network.

A score model with an application table (``--preset score-app``) scores each job from its
application alone: one log-weight change and :data:`~deepboot_env.policy.WIDTH_CLASSES` width
log-multipliers per application (:mod:`agents.models.width_table`). Those 24 numbers, held for
every job's life over the prior at its full lending share, are what :class:`AppTablePolicy` plays:
the prior's decision with held scores (:class:`~baselines.hindsight.HeldScores`), so its episodes
run on the compiled loop's arrays (about 0.1 CPU-s an episode against a score model's 1-4: no
observation, no forward pass). ES trains it from zeros (``--algo es --preset table-es``), and it
is saved as a JSON file (:class:`AppTableModel`, the ``table:<path>`` policy prefix): plain
numbers, nothing in it runs.

The values are in log-weight units, class-major (:func:`table_names`: each application's score,
then its ``two``, ``node`` and ``split`` width values), unclipped: a score model's table value
``v`` plays as ``score_scale * clip(v, -1, 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from baselines.hindsight import DEFAULT_PRIOR, Held, HeldScores, scored_prior
from deepboot_env.atomic import write_json
from deepboot_env.limits import read_json_file, shown
from deepboot_env.policy import WIDTH_CLASSES, Allocation, ClusterState, JobView, available_policies
from deepboot_env.sim.apps import APP_NAMES

if TYPE_CHECKING:
    from deepboot_env.sim.array_episode import ArrayEpisode
    from deepboot_env.sim.workload import Workload

FORMAT = "deepboot-app-table/1"
"""The ``format`` field of a table file."""

TABLE_ROWS: tuple[str, ...] = ("score", "two", "node", "split")
"""The table's rows: the log-weight score, then the width classes a width score values (2 GPUs on
one node, 3 or more on one node, split over nodes; 1 GPU is the reference, valued 0)."""


assert len(TABLE_ROWS) == 1 + WIDTH_CLASSES, "a row per width class the score action values"


def table_names() -> tuple[str, ...]:
    """The table's values by name, class-major: ``<application>/<row>``."""
    return tuple(f"{app}/{row}" for row in TABLE_ROWS for app in APP_NAMES)


TABLE_SIZE = len(TABLE_ROWS) * len(APP_NAMES)
"""How many numbers a table holds (24)."""


class AppTableError(ValueError):
    """A table file or values that cannot be played (one line naming the file or the values)."""


def check_values(values: Sequence[float] | np.ndarray, what: str = "the table") -> tuple[float, ...]:
    """``values`` as :data:`TABLE_SIZE` Python floats.

    Raises:
        AppTableError: not that many finite numbers.
    """
    items = list(values)
    if len(items) != TABLE_SIZE or not all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in items
    ):
        raise AppTableError(
            f"{what}: must be {TABLE_SIZE} finite numbers ({', '.join(table_names()[:2])}, ...), got {shown(items)}"
        )
    return tuple(float(x) for x in items)


class AppTablePolicy(HeldScores):
    """The prior (of ATS's family) with each job's score and width scores read from its
    application's row of a table, held for the job's life, at the prior's lending share.

    Args:
        values: :data:`TABLE_SIZE` numbers in :func:`table_names` order (log-weight units).
        prior: the ATS variant the table scores (default: the score models' prior).
        label: the policy's name in results.

    Raises:
        AppTableError: values that are not a table; ValueError: a prior that takes no scores.
    """

    def __init__(self, values: Sequence[float] | np.ndarray, prior: str = DEFAULT_PRIOR, label: str = "table") -> None:
        self.values = check_values(values)
        self.prior_name = prior
        """The registered name of the ATS variant the table scores."""
        super().__init__(scored_prior(prior), {})
        self.name = label
        apps = len(APP_NAMES)
        rows = [self.values[r * apps : (r + 1) * apps] for r in range(len(TABLE_ROWS))]
        self.app_scores: dict[str, float] = dict(zip(APP_NAMES, rows[0], strict=True))
        """Each application's log-weight score."""
        self.app_widths: dict[str, tuple[float, ...]] = {
            app: tuple(row[i] for row in rows[1:]) for i, app in enumerate(APP_NAMES)
        }
        """Each application's width log-multipliers (:data:`WIDTH_CLASSES` of them)."""
        self.widths = {}

    def reset(self, seed: int | None = None) -> None:
        """A new episode: the prior's reset, and no job held yet."""
        super().reset(seed)
        self.scores, self.widths, self._arrays = {}, {}, None

    def held_by(self, workload: Workload) -> Held:
        """What every job of ``workload`` holds: its application's score and width scores."""
        self._hold({j: spec.app for j, spec in enumerate(workload.jobs)})
        return Held(dict(self.scores), {j: tuple(row) for j, row in (self.widths or {}).items()})

    def score_action(self, jobs: Sequence[JobView], max_jobs: int, size: int) -> np.ndarray:
        """The score-mode env's action (:class:`~deepboot_env.env.action.ScoreCodec` at scale 1
        with width scores) that plays this table on the slot ``jobs``: slot i's score, then its
        width scores after the ``max_jobs`` scores, and the last entry 0 (the full lending share)."""
        action = np.zeros(size, dtype=np.float32)
        for i, job in enumerate(jobs):
            action[i] = self.app_scores[job.app]
            action[max_jobs + i * WIDTH_CLASSES : max_jobs + (i + 1) * WIDTH_CLASSES] = self.app_widths[job.app]
        return action

    def _hold(self, jobs: Mapping[int, str]) -> None:
        """Hold the table's row for each job (id -> application) not held yet."""
        for job_id, app in jobs.items():
            if job_id not in self.scores:
                self.scores[job_id] = self.app_scores[app]
                self.widths[job_id] = self.app_widths[app]  # type: ignore[index]

    def decide(self, state: ClusterState) -> Allocation:
        """The prior's decision with the table's scores for the jobs of ``state``."""
        self._hold({job.id: job.app for job in state.jobs})
        return super().decide(state)

    def decide_on_arrays(self, episode: ArrayEpisode) -> np.ndarray | None:
        """:meth:`decide` compiled over ``episode``'s arrays (every job of its workload held at once)."""
        if self._arrays is None:
            self.held_by(episode.sim.workload)
        return super().decide_on_arrays(episode)


@dataclass(frozen=True)
class AppTableModel:
    """A table file's content: the values, the prior they score, and how they were made.

    Attributes:
        values: :data:`TABLE_SIZE` numbers in :func:`table_names` order.
        prior: the ATS variant they score.
        info: provenance, plain JSON (command, budget, validation score, ...).
    """

    values: tuple[float, ...]
    prior: str = DEFAULT_PRIOR
    info: Mapping[str, Any] = field(default_factory=dict)

    def policy(self, label: str = "table") -> AppTablePolicy:
        """The policy this table defines."""
        return AppTablePolicy(self.values, self.prior, label)

    def save(self, path: Path) -> None:
        """Write the table as JSON to ``path`` (its folder is created; atomically)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "format": FORMAT,
            "prior": self.prior,
            "names": list(table_names()),
            "values": list(self.values),
            "info": dict(self.info),
        }
        write_json(path, doc)

    @classmethod
    def load(cls, path: Path) -> AppTableModel:
        """Read and check a table file (JSON only: nothing in it runs; its size is bounded).

        Raises:
            AppTableError: one line naming the file and what is wrong with it.
        """
        doc = read_json_file(path, "table", FORMAT, AppTableError)
        if doc.get("names") != list(table_names()):
            raise AppTableError(
                f"{path}: field 'names' must be {', '.join(table_names()[:2])}, ... (24), got {shown(doc.get('names'))}"
            )
        listed = doc.get("values")
        values = check_values(listed if isinstance(listed, list) else [], f"{path}: field 'values'")
        prior = doc.get("prior")
        if not isinstance(prior, str) or prior not in available_policies():  # a name, never a file to load
            raise AppTableError(f"{path}: field 'prior' must be a registered policy's name, got {shown(prior)}")
        try:
            scored_prior(prior)
        except ValueError as exc:
            raise AppTableError(f"{path}: field 'prior': {exc}") from None
        info = doc.get("info", {})
        if not isinstance(info, dict):
            raise AppTableError(f"{path}: field 'info' must be an object, got {type(info).__name__}")
        return cls(values, prior, info)


def load_table_policy(path: str, **kwargs: object) -> AppTablePolicy:
    """The policy of the table file at ``path`` (the ``table:<path>`` prefix).

    Raises:
        AppTableError: a missing or bad file; ValueError: options this policy lacks.
    """
    if kwargs:
        raise ValueError(f"table:<path> takes no options, got {sorted(kwargs)}")
    return AppTableModel.load(Path(path)).policy(label=f"table:{path}")
