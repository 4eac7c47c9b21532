"""Workload families: named, seeded distributions of whole scenarios (docs/workloads.md §8).

A *family* is a documented range for each scenario parameter (:data:`PARAMETERS`); one seed gives
one :class:`~deepboot_env.sim.scenario.Scenario`: a workload (Philly-derived training jobs plus
periodic inference) and the cluster shape and restart model it runs on. Every family has the
same disjoint seed ranges per split (:data:`SPLIT_SEEDS`): train seeds for learning, val seeds for
model selection, test seeds for the benchmark only.

    >>> from traces.families import sample_scenario
    >>> scenario = sample_scenario("heavy-inference", 2_000_000)   # the first test seed

Randomness: the parameters are drawn from ``PCG64(SeedSequence([seed, crc32(family)]))`` (each
family its own stream) in the order of :data:`PARAMETERS`; the workload is then drawn exactly as
:func:`traces.generate.generate_workload` draws it from ``seed``. So ``philly-periodic`` with
seed 101 is the shipped ``train-01`` (the same generator settings), and families that draw the
same training parameters at a seed share its training jobs (common random numbers).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.workload import Workload
from traces.generate import DAY_S, DEFAULT_SERVICE_TIME_S, TUNED_JOBS, generate_workload

# ----------------------------------------------------------------------------------------------
# parameters


@dataclass(frozen=True)
class Fixed:
    """A parameter every scenario of the family has (no draw)."""

    value: Any

    def draw(self, rng: np.random.Generator) -> Any:
        """The value (no random draw)."""
        return self.value

    def describe(self) -> str:
        """The range as text for tables."""
        return f"{self.value:g}" if isinstance(self.value, float) else str(self.value)


@dataclass(frozen=True)
class Uniform:
    """A real parameter drawn uniformly in ``[low, high)`` and rounded to ``digits`` decimals."""

    low: float
    high: float
    digits: int = 3

    def draw(self, rng: np.random.Generator) -> float:
        """One value."""
        return round(float(rng.uniform(self.low, self.high)), self.digits)

    def describe(self) -> str:
        """The range as text for tables."""
        return f"{self.low:g}-{self.high:g}"


@dataclass(frozen=True)
class Integers:
    """An integer parameter drawn uniformly in ``[low, high]`` (inclusive)."""

    low: int
    high: int

    def draw(self, rng: np.random.Generator) -> int:
        """One value."""
        return int(rng.integers(self.low, self.high + 1))

    def describe(self) -> str:
        """The range as text for tables."""
        return f"{self.low}-{self.high}"


@dataclass(frozen=True)
class Choice:
    """A parameter drawn uniformly among ``options``."""

    options: tuple[Any, ...]

    def draw(self, rng: np.random.Generator) -> Any:
        """One value."""
        return self.options[int(rng.integers(len(self.options)))]

    def describe(self) -> str:
        """The range as text for tables."""
        return " / ".join(str(o) for o in self.options)


Param = Fixed | Uniform | Integers | Choice

PARAMETERS: dict[str, str] = {
    "train_nodes": "training-cluster nodes",
    "infer_nodes": "inference-cluster nodes",
    "gpus_per_node": "GPUs per node (both clusters)",
    "restart": "restart model (afe, full, stopfree)",
    "load": "training load: jobs per hour over 20 x (training GPUs / 32); 1 = Pollux's 160 jobs in 8 h on 32 GPUs",
    "window_hours": "training arrival window (h)",
    "start_hour": "Philly time of day the window starts at (h): the job mix of that time of day",
    "inference_load": "mean offered inference load over the inference cluster's GPUs (peak = x (1 + amplitude))",
    "amplitude": "relative day/night amplitude of the request rate",
    "period_hours": "period of the request rate (h)",
    "phase": "phase of the rate as a fraction of the period (rate rises through its mean at phase x period)",
    "service_scale": "request service times over the default 30 s-8 min (smaller = many short requests)",
    "instances_per_app": "app instances per model (6 models)",
    "bursts": "load bursts per scenario (24 h)",
    "burst_minutes": "length of a burst (min)",
    "burst_factor": "request rate during a burst over the mean rate",
}
"""Every scenario parameter, in drawing order, with its meaning."""

SHIPPED: dict[str, Param] = {
    "train_nodes": Fixed(8),
    "infer_nodes": Fixed(8),
    "gpus_per_node": Fixed(4),
    "restart": Fixed("afe"),
    "load": Fixed(1.0),
    "window_hours": Fixed(8.0),
    "start_hour": Fixed(2.0),
    "inference_load": Fixed(0.3125),
    "amplitude": Fixed(0.85),
    "period_hours": Fixed(24.0),
    "phase": Fixed(1.0 / 3.0),
    "service_scale": Fixed(1.0),
    "instances_per_app": Fixed(1),
    "bursts": Fixed(0),
    "burst_minutes": Fixed(10.0),
    "burst_factor": Fixed(3.0),
}
"""The setting of the shipped workloads (traces/make_shipped.py): 8x4 + 8x4 GPUs, 160 jobs in 8 h,
10 GPUs of mean offered inference load (0.3125 x 32) with amplitude 0.85 over 24 h, trough at 2 h."""

INFERENCE_HORIZON_S = DAY_S
"""Inference arrivals of every scenario fall in the first 24 h."""

MAX_TUNED_REPLICAS = max(reps for options in TUNED_JOBS.values() for reps, _ in options)
"""The most GPUs a generated job requests (imagenet's 48); smaller clusters draw among the options
that fit them."""

JOBS_PER_HOUR = 20.0
"""Training jobs per hour at load 1 on a 32-GPU training cluster (Pollux: 160 jobs in 8 h)."""


@dataclass(frozen=True)
class Family:
    """A named distribution of scenarios: the shipped setting with some parameters drawn."""

    name: str
    description: str
    ranges: Mapping[str, Param] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.ranges) - set(PARAMETERS))
        if unknown:
            raise ValueError(f"family {self.name!r}: unknown parameter(s) {unknown}")

    def param(self, name: str) -> Param:
        """The range of parameter ``name`` in this family."""
        return self.ranges.get(name, SHIPPED[name])

    def draw(self, seed: int) -> dict[str, Any]:
        """The parameters of scenario ``seed`` (drawn in :data:`PARAMETERS` order)."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), zlib.crc32(self.name.encode())])))
        return {name: self.param(name).draw(rng) for name in PARAMETERS}


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("philly-periodic", "the shipped setting: 8x4 + 8x4, 160 jobs in 8 h, inference peak 58 % offered"),
        Family(
            "heavy-inference",
            "peaks beyond the inference cluster: requests queue for minutes, little to lend at the peak",
            {
                "inference_load": Uniform(0.4, 0.6),
                "amplitude": Uniform(0.6, 0.9),
                "phase": Uniform(0.0, 1.0),
                "load": Uniform(0.75, 1.25),
            },
        ),
        Family(
            "short-requests",
            "many short requests (service x 0.12-0.3, 2-4 instances per model): cold starts and warm pods matter",
            {
                "service_scale": Uniform(0.12, 0.3),
                "instances_per_app": Integers(2, 4),
                "inference_load": Uniform(0.25, 0.35),
                "phase": Uniform(0.0, 1.0),
            },
        ),
        Family(
            "short-period",
            "day/night cycles of 4-12 h: several lend/reclaim cycles while jobs run",
            {
                "period_hours": Uniform(4.0, 12.0, 2),
                "phase": Uniform(0.0, 1.0),
                "amplitude": Uniform(0.5, 0.95),
                "inference_load": Uniform(0.25, 0.4),
            },
        ),
        Family(
            "bursty",
            "the periodic load plus 2-6 bursts of 5-20 min at 2-5x the mean rate",
            {
                "bursts": Integers(2, 6),
                "burst_minutes": Uniform(5.0, 20.0, 1),
                "burst_factor": Uniform(2.0, 5.0, 2),
                "phase": Uniform(0.0, 1.0),
                "inference_load": Uniform(0.25, 0.4),
            },
        ),
        Family(
            "mixed",
            "everything drawn: cluster shapes 4x4 to 12x8, restart model, load 0.5-2x, every inference parameter",
            {
                "train_nodes": Integers(4, 12),
                "infer_nodes": Integers(4, 12),
                "gpus_per_node": Choice((4, 8)),
                "restart": Choice(("afe", "full", "stopfree")),
                "load": Uniform(0.5, 2.0),
                "window_hours": Uniform(4.0, 12.0, 1),
                "start_hour": Integers(0, 23),
                "inference_load": Uniform(0.1, 0.55),
                "amplitude": Uniform(0.3, 0.95),
                "period_hours": Uniform(4.0, 24.0, 2),
                "phase": Uniform(0.0, 1.0),
                "service_scale": Uniform(0.15, 1.5),
                "instances_per_app": Integers(1, 3),
                "bursts": Integers(0, 4),
                "burst_minutes": Uniform(5.0, 20.0, 1),
                "burst_factor": Uniform(1.5, 4.0, 2),
            },
        ),
    )
}
"""The named families (docs/workloads.md §8 tabulates their ranges)."""

SPLIT_SEEDS: dict[str, range] = {
    "train": range(1_000, 1_000_000),
    "val": range(1_000_000, 1_001_000),
    "test": range(2_000_000, 2_001_000),
}
"""Seeds of each split, the same for every family; disjoint, and none below 1,000 (the seeds of
the shipped workloads, 101-304)."""


class FamilyError(ValueError):
    """An unknown family or split, or a seed outside the family's seed ranges."""


def get_family(name: str) -> Family:
    """The family named ``name``.

    Raises:
        FamilyError: for an unknown name (listing the known ones).
    """
    if name not in FAMILIES:
        raise FamilyError(f"unknown workload family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def split_seeds(split: str) -> range:
    """The seeds of ``split`` (``train``, ``val`` or ``test``).

    Raises:
        FamilyError: for another split name.
    """
    if split not in SPLIT_SEEDS:
        raise FamilyError(f"unknown split {split!r}; known: {', '.join(SPLIT_SEEDS)}")
    return SPLIT_SEEDS[split]


def val_scenarios(families: Iterable[str], per_family: int) -> list[tuple[str, int]]:
    """The first ``per_family`` val seeds of each of ``families``, as ``(family, seed)`` pairs,
    family by family (the scenarios a training run validates on)."""
    first = split_seeds("val")[:per_family]
    return [(family, seed) for family in families for seed in first]


def split_of(seed: int) -> str | None:
    """The split ``seed`` belongs to, or None."""
    return next((split for split, seeds in SPLIT_SEEDS.items() if seed in seeds), None)


def service_times(scale: float) -> dict[str, tuple[int, int]]:
    """The default service-time ranges times ``scale``, rounded, at least 1 s."""
    return {
        model: (max(1, round(lo * scale)), max(1, round(hi * scale)))
        for model, (lo, hi) in DEFAULT_SERVICE_TIME_S.items()
    }


def workload_of(name: str, seed: int, params: Mapping[str, Any]) -> Workload:
    """The workload of a scenario with parameters ``params``, drawn from ``seed``."""
    train_gpus = params["train_nodes"] * params["gpus_per_node"]
    window = float(params["window_hours"])
    jobs_at_load_1 = round(JOBS_PER_HOUR * window * train_gpus / 32.0)
    train = {"num_jobs": jobs_at_load_1, "start_hour": float(params["start_hour"]), "window_hours": window}
    if params["load"] != 1.0:
        train["load"] = params["load"]
    total_gpus = (params["train_nodes"] + params["infer_nodes"]) * params["gpus_per_node"]
    if total_gpus < MAX_TUNED_REPLICAS:  # gang policies must fit every job on the cluster
        train["max_replicas"] = total_gpus
    period_s = float(params["period_hours"]) * 3600.0
    inference: dict[str, Any] = {
        "horizon_s": INFERENCE_HORIZON_S,
        "instances_per_app": params["instances_per_app"],
        "mean_gpus": params["inference_load"] * params["infer_nodes"] * params["gpus_per_node"],
        "amplitude": params["amplitude"],
        "period_s": period_s,
        "phase_s": float(round(params["phase"] * period_s)),
        "duration_model": service_times(params["service_scale"]),
    }
    if params["bursts"]:
        inference.update(
            bursts=params["bursts"], burst_s=params["burst_minutes"] * 60.0, burst_factor=params["burst_factor"]
        )
    return generate_workload(name, seed, train=train, inference=inference)


def sample_scenario(family: str, seed: int) -> Scenario:
    """Scenario ``seed`` of ``family``: its drawn parameters, workload, cluster and restart model.

    Raises:
        FamilyError: for an unknown family or a negative seed.
    """
    fam = get_family(family)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise FamilyError(f"a scenario seed is an integer >= 0, got {seed!r}")
    seed = int(seed)
    params = fam.draw(seed)
    cluster = ClusterConfig(
        train_nodes=params["train_nodes"], infer_nodes=params["infer_nodes"], gpus_per_node=params["gpus_per_node"]
    )
    return Scenario(
        workload=workload_of(f"{family}-{seed}", seed, params),
        cluster=cluster,
        restart=params["restart"],
        family=family,
        seed=seed,
        params=tuple(params.items()),
    )


@functools.lru_cache(maxsize=16)
def cached_scenario(family: str, seed: int) -> Scenario:
    """:func:`sample_scenario`, kept per process for its last 16 scenarios: the workers of a
    benchmark or of an ES run play many policies on the same scenario (a Scenario is immutable
    in use; every run configures its own simulator from it)."""
    return sample_scenario(family, seed)


@dataclass(frozen=True)
class FamilySampler:
    """Scenarios of one family on one split: what ``workload="family:<name>[:<split>]"`` gives the env.

    Attributes:
        family: the family's name.
        split: the split whose seeds :meth:`draw_seed` draws from.
    """

    family: str
    split: str = "train"

    def __post_init__(self) -> None:
        get_family(self.family)
        split_seeds(self.split)

    @property
    def name(self) -> str:
        """``family:<name>:<split>``."""
        return f"family:{self.family}:{self.split}"

    @property
    def seeds(self) -> range:
        """The seeds of the sampler's split."""
        return split_seeds(self.split)

    def draw_seed(self, rng: np.random.Generator) -> int:
        """A seed of the split, drawn with ``rng``."""
        seeds = self.seeds
        return int(seeds[int(rng.integers(len(seeds)))])

    def sample(self, seed: int) -> Scenario:
        """Scenario ``seed`` of the family (any seed; :meth:`draw_seed` keeps to the split)."""
        return sample_scenario(self.family, seed)


def family_sampler(source: str) -> FamilySampler:
    """The sampler ``source`` names: ``family:<name>`` (train seeds) or ``family:<name>:<split>``.

    Raises:
        FamilyError: for a malformed source, an unknown family or an unknown split.
    """
    prefix, _, rest = source.partition(":")
    name, _, split = rest.partition(":")
    if prefix != "family" or not name:
        raise FamilyError(f"{source!r}: expected family:<name> or family:<name>:<split>")
    return FamilySampler(name, split or "train")


def family_table_markdown() -> str:
    """The families' parameter ranges as a Markdown table (parameters x families), as in
    docs/workloads.md §8."""
    names = list(FAMILIES)
    lines = ["| parameter | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for param in PARAMETERS:
        cells = [FAMILIES[name].param(param).describe() for name in names]
        lines.append(f"| `{param}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)
