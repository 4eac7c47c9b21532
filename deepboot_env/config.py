"""The environment's settings, defined, checked and defaulted in one place: :class:`EnvConfig`.

``DeepBootEnv``, ``gym.make("DeepBoot-v0", **options)``, ``train_policy.py`` (its ``env_kwargs``
and YAML presets), the training callbacks and saved checkpoints all go through
:meth:`EnvConfig.from_options`, which takes the flat option names below and refuses any other.

Simulation options (:func:`sim_config`): ``cluster`` ("8x4+8x4": training + inference nodes x
GPUs), ``shared_pool`` ("16x4": one pool with inference priority, instead of ``cluster``),
``restart`` ("afe", "full", "stopfree" or "pollux"), ``protect_scale`` (1.0), ``interval`` (60 s
between scheduling boundaries), ``interference`` (None, a flat slowdown F in [0, 1), or an
:class:`~deepboot_env.sim.interference.InterferenceModel`), ``max_time`` (30 days), ``truth``
("fitted" or "measured": what jobs progress at, docs/goodput.md §9), ``trace_set`` ("pollux"
or "deepboot": the placement traces of the measured truth), ``inference_placement`` ("deepboot"
or "aryl": DeepBoot's ATS-I or its Aryl mode, :mod:`deepboot_env.sim.aryl_mode`), ``batch_stats``
("m0" or "at_batch") and ``cap_growth`` ("allocated" or "trained"), the two rules of
docs/goodput.md §9.7; ``dynamics`` ("v0" or "v1", :data:`DYNAMICS`) sets the defaults of
``truth``, ``batch_stats`` and ``cap_growth`` at once: the dynamics of the environment versions
``DeepBoot-v0`` and ``DeepBoot-v1`` (docs/environment.md).

Agent options (fields of :class:`EnvConfig`): ``max_jobs`` (32 job slots), ``lend_levels`` (5),
``jct_scale`` (10), ``infer_weight`` (1.0), ``max_rounds`` (3000 decisions per episode),
``action_mode`` ("target", "residual" or "score", see :mod:`deepboot_env.env.action`),
``base_policy`` ("ats", the policy a residual action corrects or the score mode's prior),
``outlook`` (False: add the forecast entry of :class:`~deepboot_env.env.observation.OutlookEncoder`
to the observation), ``score_scale`` (1.0), ``width_classes`` (0: no width scores in the score
action), ``hold`` (1 boundary per decision) and
``relative_reward`` (False: the JCT reward relative to the base policy's on the same scenario).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields
from typing import Any

from deepboot_env import FRONT_END_DYNAMICS, MAX_EPISODE_STEPS
from deepboot_env.env.action import CODECS, SCORE_SCALE, ActionCodec, make_codec
from deepboot_env.limits import JCT_SCALE_RANGE, MAX_JOB_SLOTS, MAX_LEND_LEVELS, names, shown
from deepboot_env.policy import WIDTH_CLASSES
from deepboot_env.sim.choices import validate_choice
from deepboot_env.sim.cluster import ClusterConfig, ClusterConfigError
from deepboot_env.sim.interference import InterferenceModel
from deepboot_env.sim.simulator import SimConfig

DEFAULT_CLUSTER = "8x4+8x4"
"""The default two clusters: 8 training nodes and 8 inference nodes of 4 GPUs."""

DYNAMICS: dict[str, dict[str, str]] = {
    "v0": {"truth": "fitted", "batch_stats": "m0", "cap_growth": "allocated"},
    "v1": {"truth": "measured", "batch_stats": "m0", "cap_growth": "trained"},
}
"""The dynamics of each environment version: ``v0`` advances jobs at the fitted goodput model;
``v1`` at the step times measured for their placement shape, with the originals' exploration
cap (docs/goodput.md §9). Explicit ``truth``/``batch_stats``/``cap_growth`` options override."""

SIM_OPTIONS: tuple[str, ...] = (
    "dynamics",
    "cluster",
    "shared_pool",
    "restart",
    "protect_scale",
    "interval",
    "interference",
    "max_time",
    "truth",
    "trace_set",
    "batch_stats",
    "cap_growth",
    "inference_placement",
)
"""Flat option names that set the :class:`~deepboot_env.sim.simulator.SimConfig`."""


_V0 = SimConfig()
"""The simulation dataclass's own field defaults (DeepBoot-v0's dynamics): what
:func:`dynamics_notes` names differences from. The library builds v1 by default (:func:`sim_config`)."""


def dynamics_notes(sim: SimConfig) -> dict[str, str]:
    """The dynamics options of ``sim`` that differ from the defaults, as text by option name,
    for run titles, result rows and report headers: ``truth`` (with its trace set),
    ``batch_stats``, ``cap_growth`` and ``inference_placement``."""
    notes = {}
    if sim.truth != _V0.truth:
        notes["truth"] = f"{sim.truth} ({sim.trace_set} traces)"
    for name in ("batch_stats", "cap_growth", "inference_placement"):
        if getattr(sim, name) != getattr(_V0, name):
            notes[name] = str(getattr(sim, name))
    return notes


class EnvConfigError(ValueError):
    """An environment option is unknown or out of range (the message names it)."""


def cluster_config(cluster: str | None = None, shared_pool: str | None = None) -> ClusterConfig:
    """The cluster of a ``cluster`` spec ("NxG+MxG") or a ``shared_pool`` spec ("NxG").

    Raises:
        ClusterConfigError: if both are given, or a spec is malformed.
    """
    if shared_pool and cluster:
        raise ClusterConfigError("give either a cluster (--cluster) or a shared pool (--shared-pool), not both")
    if shared_pool:
        return ClusterConfig.parse_shared(shared_pool)
    return ClusterConfig.parse(cluster or DEFAULT_CLUSTER)


def _real(name: str, value: Any) -> float:
    """``value`` of option ``name`` as a float (SimConfig checks its range).

    Raises:
        ValueError: for a value that is not a number (a bool, a text) or too large for a float.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, got {shown(value)}") from None


def sim_config(
    cluster: str | None = None,
    shared_pool: str | None = None,
    restart: str = "afe",
    protect_scale: float = 1.0,
    interval: float = 60.0,
    interference: InterferenceModel | float | None = None,
    max_time: float | None = None,
    truth: str | None = None,
    trace_set: str = "pollux",
    batch_stats: str | None = None,
    cap_growth: str | None = None,
    dynamics: str | None = None,
    inference_placement: str = "deepboot",
) -> SimConfig:
    """The :class:`~deepboot_env.sim.simulator.SimConfig` of the flat simulation options;
    ``truth``, ``batch_stats`` and ``cap_growth`` default to those of ``dynamics`` (``v1``, as
    every command: :data:`~deepboot_env.FRONT_END_DYNAMICS`; ``v0`` by name).

    Raises:
        ValueError: for an unknown ``dynamics`` (naming the known ones) or a bad option.
    """
    preset = DYNAMICS[validate_choice("dynamics", dynamics or FRONT_END_DYNAMICS, tuple(DYNAMICS))]
    extra = {} if max_time is None else {"max_time": _real("max_time", max_time)}
    return SimConfig(
        cluster=cluster_config(cluster, shared_pool),
        restart=restart,
        protect_scale=_real("protect_scale", protect_scale),
        interval=_real("interval", interval),
        interference=interference,
        truth=preset["truth"] if truth is None else truth,
        trace_set=trace_set,
        batch_stats=preset["batch_stats"] if batch_stats is None else batch_stats,
        cap_growth=preset["cap_growth"] if cap_growth is None else cap_growth,
        inference_placement=inference_placement,
        **extra,
    )


@dataclass(frozen=True)
class EnvConfig:
    """Every setting of :class:`~deepboot_env.env.DeepBootEnv` (see the module docstring).

    Attributes:
        sim: the simulation settings (default: :func:`sim_config`, DeepBoot-v1's dynamics).
        max_jobs: job slots in the observation and the action.
        lend_levels: lending levels L: level l lets training use l / (L - 1) of the lendable
            inference GPUs.
        jct_scale: the JCT reward's divisor (reward = -job-seconds / (interval x jct_scale)).
        infer_weight: weight of the inference-wait penalty.
        max_rounds: decisions per episode before truncation.
        action_mode: ``target`` (GPU targets per slot), ``residual`` (corrections to a base
            policy) or ``score`` (per-job scores over a prior's knapsack weights).
        base_policy: the policy a residual action corrects, or the prior of the score mode (a
            registry name).
        outlook: add the ``outlook`` observation entry (inference demand forecast learnt online,
            queue pressure; :class:`~deepboot_env.env.observation.OutlookEncoder`).
        score_scale: score mode: the log-weight change of a score of 1.
        width_classes: score mode: width scores per slot (0, or
            :data:`~deepboot_env.policy.WIDTH_CLASSES`: each job's option values reshaped by
            width class, :class:`~deepboot_env.env.action.ScoreCodec`).
        hold: boundaries one action is kept for (score mode: the held scores are decoded again
            at each); the env asks earlier when a job arrives or finishes. 1: every boundary.
        relative_reward: subtract, from the JCT reward, the base policy's on the same scenario
            over the same time (its episode is simulated once per scenario and cached), so that
            the return is the difference in total JCT to the base policy's.
    """

    sim: SimConfig = field(default_factory=lambda: sim_config())
    max_jobs: int = 32
    lend_levels: int = 5
    jct_scale: float = 10.0
    infer_weight: float = 1.0
    max_rounds: int = MAX_EPISODE_STEPS
    action_mode: str = "target"
    base_policy: str = "ats"
    outlook: bool = False
    score_scale: float = SCORE_SCALE
    width_classes: int = 0
    hold: int = 1
    relative_reward: bool = False

    def __post_init__(self) -> None:
        for flag in ("outlook", "relative_reward"):
            if not isinstance(getattr(self, flag), bool):
                raise EnvConfigError(f"{flag} must be true or false, got {shown(getattr(self, flag))}")
        if isinstance(self.score_scale, bool) or not (
            isinstance(self.score_scale, int | float) and 0 < self.score_scale < math.inf
        ):
            raise EnvConfigError(f"score_scale must be a finite number > 0, got {shown(self.score_scale)}")
        if isinstance(self.width_classes, bool) or self.width_classes not in (0, WIDTH_CLASSES):
            raise EnvConfigError(f"width_classes must be 0 or {WIDTH_CLASSES}, got {shown(self.width_classes)}")
        if self.width_classes and self.action_mode != "score":
            raise EnvConfigError(
                f"width_classes needs action_mode 'score' (width scores per slot), got {shown(self.action_mode)}"
            )
        if self.hold != 1 and self.action_mode != "score":
            raise EnvConfigError(
                f"hold > 1 needs action_mode 'score' (held per-job scores), got {shown(self.action_mode)}"
            )
        if self.relative_reward and self.action_mode == "target":
            raise EnvConfigError("relative_reward needs a base policy: action_mode residual or score")
        for name in ("max_jobs", "lend_levels", "max_rounds", "hold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise EnvConfigError(f"{name} must be an integer >= 1, got {shown(value)}")
        for name, most in (("max_jobs", MAX_JOB_SLOTS), ("lend_levels", MAX_LEND_LEVELS)):
            if getattr(self, name) > most:
                raise EnvConfigError(f"{name} must be <= {most} (the limit), got {shown(getattr(self, name))}")
        low, high = JCT_SCALE_RANGE
        if isinstance(self.jct_scale, bool) or not (
            isinstance(self.jct_scale, int | float) and low <= self.jct_scale <= high
        ):
            raise EnvConfigError(f"jct_scale must be a number from {low:g} to {high:g}, got {shown(self.jct_scale)}")
        if not (
            isinstance(self.infer_weight, int | float) and math.isfinite(self.infer_weight) and self.infer_weight >= 0
        ):
            raise EnvConfigError(f"infer_weight must be a finite number >= 0, got {shown(self.infer_weight)}")
        if not isinstance(self.action_mode, str) or self.action_mode not in CODECS:
            raise EnvConfigError(f"action_mode must be one of {tuple(CODECS)}, got {shown(self.action_mode)}")
        if not isinstance(self.base_policy, str) or not self.base_policy:
            raise EnvConfigError(f"base_policy must be a policy name, got {shown(self.base_policy)}")

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """Every flat option :meth:`from_options` accepts."""
        return (*SIM_OPTIONS, *(f.name for f in fields(cls) if f.name != "sim"))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The default value of every agent option (the fields other than ``sim``)."""
        base = cls()
        return {f.name: getattr(base, f.name) for f in fields(cls) if f.name != "sim"}

    @classmethod
    def from_options(cls, **options: Any) -> EnvConfig:
        """The config of flat options (``restart="full", max_jobs=16, ...``); absent ones default.

        Raises:
            EnvConfigError: for an unknown option (with the closest known ones) or a value out of range.
        """
        unknown = sorted(set(options) - set(cls.option_names()))
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), cls.option_names(), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise EnvConfigError(
                f"unknown env option(s) {names(unknown, most=3)}{hint} (all {len(cls.option_names())} options: "
                "docs/usage.md §5)"
            )
        sim_options = {k: options.pop(k) for k in SIM_OPTIONS if k in options}
        try:
            sim = sim_config(**sim_options)
        except ValueError as exc:
            raise EnvConfigError(str(exc)) from None
        return cls(sim=sim, **options)

    def make_codec(self) -> ActionCodec:
        """The action codec of :attr:`action_mode` for these slots and lending levels."""
        return make_codec(
            self.action_mode, self.max_jobs, self.lend_levels, self.base_policy, self.score_scale, self.width_classes
        )
