"""``hindsight``: a CLAIRVOYANT REFERENCE, not a deployable policy: the best held per-job scores in hindsight.

The score action (:class:`~deepboot_env.env.action.ScoreCodec`) multiplies each job's knapsack
weight under a prior of the ATS family by ``exp(score)``. What could a policy of that action reach
on a scenario if it knew the scenario? At the start of the episode (``bind_simulator``) this
policy knows it: it forks the simulator and searches one log-weight score per job, held for the
job's life, and each application's width scores (the multipliers of its 2-GPU, whole-node and
split options, :func:`baselines.ats.width_scored_options`, held by all its jobs), by evolution
strategies (:func:`search_held_scores`): ``pairs`` antithetic pairs ``theta +- sigma e`` per
generation, each an episode played to the end on a fork, fitness its mean training JCT over the
prior's; Adam on the pairs' differences (:mod:`deepboot_env.es`, the ES trainer's steps); the
mean vector played every generation. Generation 0 is the prior (every score 0). It then plays the
best mean vector seen on the real episode. Every episode is deterministic, so the real episode is
the one the search played: never worse than the prior on its scenario, and an achievable schedule
(the optimum lies between the lower bounds and it).

Settings [defaults]: the prior [``ats-srpt-fcfs-place-rr-warm``, the shipped score model's],
``generations`` [16], ``pairs`` [8], ``sigma`` [0.05], ``learning_rate`` [0.02], ``seed`` [0:
the search's noise], ``widths`` [true for the policy; a :class:`HindsightSettings` record without
it, the teacher's before width scores were searched, holds none]. The width scores matter where
the prior's speed-up curve misjudges a width: on val seed 1,000,001 of ``mixed`` the search
reaches 0.933 x the prior with them and 0.963 without (16 generations). Cost: ``1 + generations x
(2 pairs + 1)`` episodes of the prior (273), in this process; :attr:`HindsightPolicy.search`
records what it found and spent.

The same search labels the teacher's scenarios (issue 69): it is the one place the held scores of
a scenario are found.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from baselines.ats import AtsPolicy, held_arrays
from deepboot_env.es import adam_update, antithetic_gradient
from deepboot_env.evaluation import decide_once, episode_driver
from deepboot_env.policy import WIDTH_CLASSES, Allocation, BasePolicy, ClusterState, make_policy
from deepboot_env.sim.apps import APP_NAMES

if TYPE_CHECKING:
    from deepboot_env.sim.array_episode import ArrayEpisode
    from deepboot_env.sim.simulator import Simulator
    from deepboot_env.sim.workload import Workload

DEFAULT_PRIOR = "ats-srpt-fcfs-place-rr-warm"
"""The prior the search scores: the shipped score model's."""


@dataclass(frozen=True)
class HindsightSettings:
    """The search's settings (the module docstring)."""

    prior: str = DEFAULT_PRIOR
    generations: int = 16
    pairs: int = 8
    sigma: float = 0.05
    learning_rate: float = 0.02
    seed: int = 0
    widths: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.widths, bool):
            raise ValueError(f"hindsight: widths must be true or false, got {self.widths!r}")
        for name in ("generations", "pairs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "generations" else 1):
                raise ValueError(f"hindsight: {name} must be a whole number >= {0 if name == 'generations' else 1}")
        for name in ("sigma", "learning_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 10:
                raise ValueError(f"hindsight: {name} must be a number in (0, 10], got {value!r}")

    @property
    def episodes(self) -> int:
        """Episodes a search plays: the prior, then per generation the pairs and the mean vector."""
        return 1 + self.generations * (2 * self.pairs + 1)


@dataclass
class Search:
    """What a search found: per job (index in the workload) its score, the ratio of that
    vector's mean training JCT to the prior's, the prior's, the mean vector's ratio per
    generation, the episodes played, the CPU seconds spent and, where it held them
    (``widths``), per application (:data:`~deepboot_env.sim.apps.APP_NAMES` order) its
    :data:`~deepboot_env.policy.WIDTH_CLASSES` width scores."""

    scores: list[float]
    ratio: float
    prior_jct: float
    curve: list[float] = field(default_factory=list)
    episodes: int = 0
    cpu_s: float = 0.0
    widths: list[list[float]] = field(default_factory=list)

    def held(self, workload: Workload) -> Held:
        """What a player of ``workload`` holds to play the vector found."""
        return held_vector(np.asarray(self.scores + [w for row in self.widths for w in row]), workload)


@dataclass(frozen=True)
class Held:
    """What a player holds for each job's life: its score (job index -> log-weight change;
    absent: 0) and its width-class log-multipliers (absent: none, the prior's values)."""

    scores: dict[int, float] = field(default_factory=dict)
    widths: dict[int, tuple[float, ...]] = field(default_factory=dict)


def held_vector(vector: np.ndarray, workload: Workload) -> Held:
    """The :class:`Held` of a search vector over ``workload``: one score per job, then (when
    the vector is longer) :data:`WIDTH_CLASSES` width scores per application, which every job
    of the application holds."""
    jobs = len(workload.jobs)
    scores = dict(enumerate(vector[:jobs].tolist()))
    if len(vector) == jobs:
        return Held(scores)
    table = vector[jobs:].reshape(len(APP_NAMES), WIDTH_CLASSES).tolist()
    rows = {app: tuple(table[i]) for i, app in enumerate(APP_NAMES)}
    return Held(scores, {j: rows[job.app] for j, job in enumerate(workload.jobs)})


def scored_prior(name: str) -> AtsPolicy:
    """The registered policy ``name``, which must be one of ATS's variants (they take scores).

    Raises:
        ValueError: if it is not.
    """
    policy = make_policy(name)
    if not isinstance(policy, AtsPolicy):
        raise ValueError(f"hindsight: prior {name!r} is not one of ATS's variants (ats, ats-srpt, ...)")
    return policy


class HeldScores(BasePolicy):
    """A prior of the ATS family with fixed per-job scores (job index -> log-weight score) and
    width scores (job index -> its width-class log-multipliers), held for each job's life; the
    prior's own simulator hooks (its reclaim and Aryl-mode rules)."""

    def __init__(
        self, prior: AtsPolicy, scores: Mapping[int, float], widths: Mapping[int, Sequence[float]] | None = None
    ) -> None:
        self.prior = prior
        self.scores = dict(scores)
        self.widths = dict(widths) if widths else None
        self.name = prior.name
        self._arrays: tuple[int, tuple[np.ndarray, np.ndarray] | None] | None = None
        """The held scores as arrays over an episode's job count (built at its first compiled decision)."""

    @classmethod
    def holding(cls, prior: AtsPolicy, held: Held) -> HeldScores:
        """``prior`` holding what ``held`` holds (a search's candidate or its best vector)."""
        return cls(prior, held.scores, held.widths)

    # bound methods keep the marks the simulator reads (its built-in rules run directly)
    @property
    def adaptive_batch(self) -> bool:  # type: ignore[override]
        """The prior's choice."""
        return bool(self.prior.adaptive_batch)

    @property
    def choose_reclaim(self) -> Callable[..., object]:  # type: ignore[override]
        """The prior's reclaim rule."""
        return self.prior.choose_reclaim

    @property
    def choose_inference_server(self) -> Callable[..., object]:  # type: ignore[override]
        """The prior's Aryl-mode server rule."""
        return self.prior.choose_inference_server

    def reset(self, seed: int | None = None) -> None:
        """The prior's reset."""
        self.prior.reset(seed)

    @property
    def relist_restarts(self) -> bool:
        """The prior's choice (an array episode plays no relisted restarts)."""
        return bool(self.prior.relist_restarts)

    def decide(self, state: ClusterState) -> Allocation:
        """The prior's decision with the held scores (:meth:`AtsPolicy.decide_scored`)."""
        return self.prior.decide_scored(state, self.scores, 1.0, self.widths)

    @property
    def decides_on_arrays(self) -> bool:
        """Whether the prior decides compiled (:meth:`decide_on_arrays`)."""
        return self.prior.decides_on_arrays

    def decide_on_arrays(self, episode: ArrayEpisode) -> np.ndarray | None:
        """:meth:`decide` compiled over ``episode``'s arrays
        (:meth:`AtsPolicy.decide_on_arrays <baselines.ats.AtsPolicy.decide_on_arrays>`), or None
        where it decides in Python."""
        jobs = len(episode.sim.jobs)
        if self._arrays is None or self._arrays[0] != jobs:
            self._arrays = (jobs, held_arrays(jobs, self.scores, self.widths))
        held = self._arrays[1]
        return None if held is None else self.prior.decide_on_arrays(episode, *held)


def held_jct(sim: Simulator, player: HeldScores, seed: int | None) -> float:
    """The mean training JCT (unfinished jobs counted to the end) of ``player`` on a fork of
    ``sim`` played to the end. The fork calls the hooks of ``sim``'s policy: a
    :class:`HindsightPolicy` serves them with the player's while it plays."""
    return played_fork(sim, player, seed)[0]


def played_fork(sim: Simulator, player: HeldScores, seed: int | None) -> tuple[float, int]:
    """:func:`held_jct`'s play: the mean training JCT, and the decisions the player took."""
    player.reset(seed)
    return play_out(sim.fork(), player)


def play_out(twin: Simulator, player: BasePolicy) -> tuple[float, int]:
    """Play ``twin`` (a fork) to the end with ``player`` deciding, as it stands (not reset: a
    player forked mid-episode goes on from its own state), on the compiled loop's arrays where
    that is the same episode (:func:`~deepboot_env.evaluation.episode_driver`); the mean
    training JCT (unfinished jobs counted to the end) and the decisions taken."""
    decisions = 0
    driver = episode_driver(twin, player)
    while not driver.done:
        decide_once(driver, player)
        driver.advance()
        decisions += 1
    return twin.job_seconds(0.0, twin.now) / max(len(twin.jobs), 1), decisions


def search_held_scores(sim: Simulator, settings: HindsightSettings, play: Callable[[Held], float]) -> Search:
    """ES over one held score per job of ``sim``'s workload and, with ``settings.widths``, the
    width scores of each application (the module docstring): ``play`` gives the mean training
    JCT of what a player holds on ``sim``'s scenario."""
    start = time.process_time()
    workload = sim.workload
    jobs = len(workload.jobs)
    size = jobs + (len(APP_NAMES) * WIDTH_CLASSES if settings.widths else 0)
    rng = np.random.default_rng([settings.seed, jobs])
    theta, m, v = np.zeros(size), np.zeros(size), np.zeros(size)

    def ratio(vector: np.ndarray) -> float:
        return play(held_vector(vector, workload)) / prior_jct

    prior_jct = play(Held())
    best, best_ratio, curve = theta, 1.0, [1.0]
    for generation in range(settings.generations):
        noise = rng.standard_normal((settings.pairs, size))
        plus = np.array([ratio(theta + settings.sigma * e) for e in noise])
        minus = np.array([ratio(theta - settings.sigma * e) for e in noise])
        grad = antithetic_gradient(plus, minus, noise, settings.sigma)
        theta, m, v = adam_update(theta, m, v, generation, grad, settings.learning_rate)
        curve.append(ratio(theta))
        if curve[-1] < best_ratio:
            best, best_ratio = theta, curve[-1]
    widths = best[jobs:].reshape(-1, WIDTH_CLASSES).tolist()
    cpu_s = time.process_time() - start
    return Search(best[:jobs].tolist(), best_ratio, prior_jct, curve, settings.episodes, cpu_s, widths)


class HindsightPolicy(BasePolicy):
    """``hindsight``: the prior with the held scores searched on the scenario being played
    (ORACLE: it forks the simulator it runs in; the module docstring).

    Attributes:
        settings: the search's settings.
        search: the last episode's search (None before one).
    """

    name = "hindsight"

    def __init__(
        self,
        prior: str = DEFAULT_PRIOR,
        generations: int = 16,
        pairs: int = 8,
        sigma: float = 0.05,
        learning_rate: float = 0.02,
        seed: int = 0,
        widths: bool = True,
    ) -> None:
        self.settings = HindsightSettings(prior, generations, pairs, sigma, learning_rate, seed, widths)
        self._held = HeldScores(scored_prior(prior), {})
        self._playing: HeldScores | None = None
        self._seed: int | None = None
        self.search: Search | None = None

    def _hooks(self) -> HeldScores:
        """Whose hooks the simulator calls now: the player on a fork, else the episode's own."""
        return self._playing if self._playing is not None else self._held

    @property
    def adaptive_batch(self) -> bool:  # type: ignore[override]
        """The prior's choice (every player's prior is the same policy)."""
        return self._held.adaptive_batch

    @property
    def choose_reclaim(self) -> Callable[..., object]:  # type: ignore[override]
        """The reclaim rule of the prior being played (on a fork) or of the episode's."""
        return self._hooks().choose_reclaim

    @property
    def choose_inference_server(self) -> Callable[..., object]:  # type: ignore[override]
        """The Aryl-mode server rule of the prior being played or of the episode's."""
        return self._hooks().choose_inference_server

    def reset(self, seed: int | None = None) -> None:
        """A new episode: the search runs when the simulator binds."""
        self._seed = seed
        self._held = HeldScores(scored_prior(self.settings.prior), {})
        self._held.reset(seed)
        self.search = None

    def bind_simulator(self, sim: Simulator) -> None:
        """ORACLE: search the held scores on forks of ``sim`` (its true future) before the first
        decision, then hold the best vector for the episode."""
        self.search = search_held_scores(sim, self.settings, lambda held: self._play(sim, held))
        self._held = HeldScores.holding(self._held.prior, self.search.held(sim.workload))
        self._held.reset(self._seed)

    def _play(self, sim: Simulator, held: Held) -> float:
        """One candidate on a fork, its hooks served by its own prior."""
        self._playing = HeldScores.holding(scored_prior(self.settings.prior), held)
        try:
            return held_jct(sim, self._playing, self._seed)
        finally:
            self._playing = None

    def decide(self, state: ClusterState) -> Allocation:
        """The prior's decision with the scores found."""
        return self._held.decide(state)


def sized(spec: str) -> HindsightPolicy:
    """The ``hindsight:<generations>[,<pairs>]`` prefix: the search at another size (more
    generations search further; ``hindsight:0`` is the prior), named as written.

    Raises:
        ValueError: if ``spec`` is not one or two whole numbers separated by a comma (one line).
    """
    parts = spec.split(",")
    if not 1 <= len(parts) <= 2 or not all(part.strip().isdigit() for part in parts):
        raise ValueError(f"hindsight:<generations>[,<pairs>] needs one or two whole numbers, got {spec!r}")
    sizes = [int(part) for part in parts]
    policy = HindsightPolicy(generations=sizes[0], pairs=sizes[1] if len(sizes) > 1 else HindsightSettings.pairs)
    policy.name = f"hindsight:{spec}"
    return policy
