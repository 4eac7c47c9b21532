"""DeepBoot-v0 and DeepBoot-v1: a Gymnasium adapter over the gym-free simulator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from deepboot_env.config import EnvConfig
from deepboot_env.env.action import ActionCodec, Counts, ScoreCodec
from deepboot_env.env.observation import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    OUTLOOK_FEATURES,
    OutlookEncoder,
    agent_observation,
    observation_limits,
)
from deepboot_env.env.reference import ReferenceEpisode, reference_curve
from deepboot_env.evaluation import episode_driver
from deepboot_env.limits import shown
from deepboot_env.sim.array_episode import ArrayEpisode
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.simulator import Simulator
from deepboot_env.sim.state import ClusterState
from deepboot_env.workload_sources import (
    ScenarioSampler,
    WorkloadLoader,
    WorkloadSource,
    load_scenarios,
    scenario_sampler,
)


def spaces_for(codec: ActionCodec, outlook: bool = False) -> tuple[spaces.Dict, spaces.MultiDiscrete | spaces.Box]:
    """The observation and action spaces of the env with action codec ``codec`` (its slots,
    lending levels and extra observation entries), with the ``outlook`` entry if asked; the
    action is ``MultiDiscrete``, or a ``Box(-1, 1)`` for a continuous codec (score mode)."""
    entries: dict[str, spaces.Space[Any]] = {
        "jobs": spaces.Box(0.0, 1.0, (codec.max_jobs * len(JOB_FEATURES),), dtype=np.float32),
        "cluster": spaces.Box(0.0, 1.0, (len(CLUSTER_FEATURES),), dtype=np.float32),
    }
    if outlook:
        entries["outlook"] = spaces.Box(0.0, 1.0, (len(OUTLOOK_FEATURES),), dtype=np.float32)
    for key, size in codec.extra_observation().items():
        entries[key] = spaces.Box(0.0, 1.0, (size,), dtype=np.float32)
    if codec.continuous:
        return spaces.Dict(entries), spaces.Box(-1.0, 1.0, (codec.action_size,), dtype=np.float32)
    return spaces.Dict(entries), spaces.MultiDiscrete(codec.nvec)


class DeepBootEnv(gym.Env):
    """Allocate GPUs of a training cluster (and idle inference GPUs) to elastic training jobs.

    ## Description
    One step is one scheduling boundary (60 s by default) of the DeepBoot/Pollux simulator
    (:mod:`deepboot_env.sim`): the agent sets a GPU target for each active training job and how
    much of the idle inference cluster training may borrow; the simulator then runs every event up
    to the next boundary (inference arrivals, warm-pod lifecycle, reclaims by the ATS-I rule, or by
    the base policy's or prior's own rule in residual and score mode, job completions). Jobs
    progress at their Pollux goodput; changes pay the restart model's cost.

    ## Observation Space
    ``Dict(jobs=Box(0, 1, (max_jobs * 21,)), cluster=Box(0, 1, (13,)))``, float32; ``jobs`` is the
    (max_jobs, 21) slot matrix flattened row by row (SB3 wants 1-D vectors). Slot i holds the
    i-th active job in arrival order (features :data:`~deepboot_env.env.observation.JOB_FEATURES`:
    present, application one-hot, current and maximum GPUs, log age, log attained service,
    restarts, epoch fraction, speedup curve at 1..32 GPUs normalised to its peak, share on lent
    GPUs, restart stall left). Cluster features
    (:data:`~deepboot_env.env.observation.CLUSTER_FEATURES`): free training GPUs, idle inference
    GPUs, SLEEP/PROTECT/RUNNING pods, lent GPUs, waiting requests, recent inference arrivals,
    time of day (sin/cos), active jobs and jobs beyond the slots. No remaining-work oracle.
    With ``outlook=True`` an entry ``outlook=Box(0, 1, (10,))`` adds what a scheduler needs to
    anticipate, learnt from the episode's past only
    (:data:`~deepboot_env.env.observation.OUTLOOK_FEATURES`): inference demand now (running pods +
    waiting requests over the inference GPUs, / 2), its forecast 0.5, 1, 2, 4 and 8 h ahead and
    its forecast peak over 8 h (one harmonic of the best-fitting period in 4-24 h, refitted online:
    :class:`~deepboot_env.forecast.PeriodicForecaster`), how much of that period the history
    covers, jobs holding no GPU over the slots, and the jobs' GPU limits over all GPUs.

    ## Action Space
    Defined by the action codec of ``action_mode`` (:mod:`deepboot_env.env.action`):

    * ``target`` (default): ``MultiDiscrete([7] * max_jobs + [lend_levels])``: per slot an index
      into :data:`~deepboot_env.env.action.GPU_BUCKETS` (0, 1, 2, 4, 8, 16, 32 GPUs), then a lending
      level l: training may use l / (lend_levels - 1) of the lendable inference GPUs.
    * ``residual`` (residual policy learning): a base scheduler (``base_policy``, ATS by default)
      proposes an allocation at every boundary; the action is ``MultiDiscrete([9] * max_jobs +
      [lend_levels])``, per slot a correction from :data:`~deepboot_env.env.action.RESIDUAL_DELTAS`
      (-8..+8 GPUs) to the proposed count, then the lending level. :meth:`neutral_action` (zero
      corrections, top lending level) reproduces the base policy exactly. The observation gains
      ``base=Box(0, 1, (max_jobs,))``: the proposed GPUs per slot over the cluster's GPUs.

    :meth:`action_masks` masks choices above a job's limit and non-zero choices of empty slots
    (for MaskablePPO). Targets that do not fit are repaired deterministically by the codec;
    ``info["repaired_gpus"]`` counts them.

    ## Rewards
    ``reward = jct + infer`` with the named terms in ``info``:

    * ``reward_jct`` = -(training job-seconds in the system during the step) / (interval x
      ``jct_scale``): the episode sum is -(sum of training JCTs) / (interval x jct_scale), so
      maximising the return minimises mean JCT (Park/Decima construction);
    * ``reward_infer`` = -``infer_weight`` x (seconds inference requests waited for a GPU during
      the step, beyond any cold start) / interval.

    ## Episode End
    ``terminated`` when every training job has finished (remaining inference is simulated to the
    end for the metrics); ``truncated`` after ``max_rounds`` steps. The final ``info`` holds the
    episode metrics under ``episode_metrics``, the scenario under ``episode_scenario`` (family,
    seed, workload name) and, with ``relative_reward`` on a finished episode, the base policy's
    mean JCT on it under ``reference_jct_mean``.

    ## Arguments
    ``workload``: a workload source (:mod:`deepboot_env.workload_sources`): a Workload (or a
    :class:`~deepboot_env.sim.scenario.Scenario`, which also sets the cluster and restart model), a
    name (a shipped workload, a split ``train``/``val``/``test``, a CSV path) resolved by
    ``workload_loader`` (default: the registered one), or a list of them; one is drawn per reset
    with the env's RNG, or chosen by ``reset(options={"workload": ...})``. Or a distribution of
    worlds: a workload family ``"family:<name>[:<split>]"`` (:mod:`traces.families`; split
    ``train`` by default) or any :class:`~deepboot_env.workload_sources.ScenarioSampler`. Each
    reset then draws a scenario seed of the split with the env's RNG (so ``reset(seed=s)`` gives
    the same scenario for the same ``s``), or takes ``reset(options={"scenario_seed": k})``, and
    runs that scenario's workload on its cluster with its restart model (they replace ``cluster``
    and ``restart`` of the config; every other setting stays). The scenario is checked against the observation's limits
    (:func:`~deepboot_env.env.observation.observation_limits`): the features it would saturate are
    listed in the reset info under ``saturates`` (absent when it fits).
    ``scenario_stream``: with a sampler, the seed of a generator of its own that draws the
    scenarios instead of the env's RNG, so that envs sharing a stream play the same scenarios in
    the same order while their reset seeds (and the score mode's noise) differ.
    ``noise_stream`` (score mode): the seed of a generator of each episode's noise key, so that
    envs sharing it explore with the same per-job noise codes; ``antithetic`` mirrors them
    (``1 - u``: opposite noise on every job). Two envs sharing both streams, one of them
    antithetic, are an antithetic pair on common scenarios (:mod:`agents.models.group_ppo`).
    ``config``: an :class:`~deepboot_env.config.EnvConfig`, or instead its flat options as keyword
    arguments (``cluster``, ``shared_pool``, ``restart``, ``protect_scale``, ``interval``,
    ``interference``, ``max_time``, ``max_jobs``, ``lend_levels``, ``jct_scale``, ``infer_weight``,
    ``max_rounds``, ``action_mode``, ``base_policy``, ``outlook``; defaults and meaning in
    :mod:`deepboot_env.config`). ``render_mode``: "ansi" or "rgb_array".

    ## Version History
    * v0: jobs progress at the fitted goodput model.
    * v1: jobs progress at the measured step times, with the originals' exploration cap
      (``dynamics="v1"``, docs/environment.md §8).
    * Both versions take workload families and scenario samplers (``workload="family:mixed"``).

    ## References
    Chen et al., DeepBoot, IEEE TPDS 34(9), 2023; Qiao et al., Pollux, OSDI 2021.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    observation_space: spaces.Dict  # narrower than gym.Env's Space: set in __init__
    action_space: spaces.MultiDiscrete | spaces.Box

    def __init__(
        self,
        workload: WorkloadSource | Sequence[WorkloadSource] = "train",
        config: EnvConfig | None = None,
        render_mode: str | None = None,
        workload_loader: WorkloadLoader | None = None,
        scenario_stream: int | None = None,
        noise_stream: int | None = None,
        antithetic: bool = False,
        **options: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if config is not None and options:
            raise ValueError(f"give either config or env options, not both (got {', '.join(sorted(options))})")
        self.config = config if config is not None else EnvConfig.from_options(**options)
        self.sim_config = self.config.sim
        self.cluster = self.sim_config.cluster
        self._loader = workload_loader
        self._scenario_rng = None if scenario_stream is None else np.random.default_rng(scenario_stream)
        """Draws the scenarios (None: the env's RNG): envs given the same stream play the same
        sequence of scenarios whatever their reset seeds (common random numbers across a group)."""
        self.sampler: ScenarioSampler | None = scenario_sampler(workload)
        """The scenario distribution each reset draws from, or None for a fixed list of workloads."""
        self.scenarios: list[Scenario] = [] if self.sampler is not None else load_scenarios(workload, workload_loader)
        """The fixed scenarios a reset draws from when there is no sampler (a plain workload runs
        on the config's cluster)."""
        self.scenario: Scenario | None = None
        """The scenario of the current episode (a sampler's draw, or the workload on the config's cluster)."""
        self.render_mode = render_mode
        self.codec: ActionCodec = self.config.make_codec()
        if noise_stream is not None and not isinstance(self.codec, ScoreCodec):
            raise ValueError(f"noise_stream needs action_mode 'score', got {self.codec.mode!r}")
        self._noise_rng = None if noise_stream is None else np.random.default_rng(noise_stream)
        """Draws each episode's noise key (None: the score mode's codes are independent per env):
        envs given the same stream explore with the same per-job codes, mirrored where ``antithetic``."""
        self._antithetic = bool(antithetic)
        self.observation_space, self.action_space = spaces_for(self.codec, self.config.outlook)
        self._outlook = OutlookEncoder(self.config.max_jobs) if self.config.outlook else None
        self._sim: Simulator | None = None
        self._driver: Simulator | ArrayEpisode | None = None
        """What the episode plays on: the simulator, or its :class:`ArrayEpisode` (see :attr:`sim`)."""
        self._state: ClusterState | None = None
        self._reference: ReferenceEpisode | None = None

    @property
    def max_jobs(self) -> int:
        """Job slots (``config.max_jobs``)."""
        return self.config.max_jobs

    @property
    def lend_levels(self) -> int:
        """Lending levels (``config.lend_levels``)."""
        return self.config.lend_levels

    @property
    def state(self) -> ClusterState:
        """The cluster state of the current decision (what the last observation encodes).

        Raises:
            RuntimeError: before :meth:`reset`.
        """
        if self._state is None:
            raise RuntimeError("call reset() first")
        return self._state

    @property
    def sim(self) -> Simulator | None:
        """The episode's simulator, up to date (None before :meth:`reset`).

        Where it is the same episode the env plays on the compiled loop's arrays
        (:func:`~deepboot_env.evaluation.episode_driver`: the events between decisions compiled,
        the score action decoded by its prior's compiled decision), and the simulator's own
        objects are then stale until the episode ends. Asking for the simulator mid-episode
        writes the arrays back and plays the rest of the episode on the simulator (a fork, a
        look into its jobs), so what this returns is always the episode as it stands."""
        driver = self._driver
        if isinstance(driver, ArrayEpisode) and not driver.done:
            driver.stop()
            self._driver = self._sim
        return self._sim

    # ----------------------------------------------------------------- helpers
    def _observe(self) -> dict[str, np.ndarray]:
        driver = self._driver
        assert driver is not None
        state = self._state = driver.observe()
        codec = self.codec
        extra = codec.observe_on_arrays(state, driver) if isinstance(driver, ArrayEpisode) else codec.observe(state)
        return agent_observation(state, self.config.max_jobs, self._outlook, extra)

    def neutral_action(self) -> np.ndarray:
        """The action that reproduces the base policy (residual mode: zero corrections, top
        lending level).

        Raises:
            ValueError: if the action mode has no base policy.
        """
        action = self.codec.neutral_action()
        if action is None:
            raise ValueError(f"action_mode {self.codec.mode!r} has no base policy, hence no neutral action")
        return action

    # --------------------------------------------------------------- Gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode on a workload drawn with the env's RNG (or ``options["workload"]``), or
        on a scenario of the sampler (seed drawn with the env's RNG, or ``options["scenario_seed"]``)."""
        super().reset(seed=seed)
        scenario = self._draw_scenario(options or {})
        self.scenario = scenario
        self.sim_config = scenario.configure(self.config.sim)
        saturates = observation_limits(scenario.workload, self.sim_config)
        self.codec.reset(seed)  # first: a base policy's reset forgets the simulator it is bound to
        self._sim = Simulator(scenario.workload, self.sim_config, self.codec.hooks)
        # rendered: on the simulator, whose ledger and timeline the frames read at every step
        compiled = self.codec.decides_on_arrays
        self._driver = self._sim if self.render_mode else episode_driver(self._sim, decides_compiled=compiled)
        self._reference = (
            reference_curve(self.config.base_policy, scenario, self.sim_config) if self.config.relative_reward else None
        )
        if self._noise_rng is not None:
            assert isinstance(self.codec, ScoreCodec)
            self.codec.pair_noise(int(self._noise_rng.integers(2**63)), self._antithetic)
        if self._outlook is not None:
            self._outlook.reset()
        self.rounds = 0
        self._repaired = 0
        self._reward_from = 0.0
        self._waited_from = 0.0
        obs = self._observe()
        info: dict[str, Any] = {"time": self._sim.now, "workload": scenario.name}
        if saturates:
            info["saturates"] = saturates
        if scenario.family:
            info.update(family=scenario.family, scenario_seed=scenario.seed, cluster=self.sim_config.cluster.describe())
        return obs, info

    def _draw_scenario(self, options: dict[str, Any]) -> Scenario:
        """The scenario of the next episode (see the class docstring's Arguments)."""
        unknown = sorted(set(options) - {"workload", "scenario_seed"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {', '.join(unknown)}; known: scenario_seed, workload")
        if "workload" in options:
            sampler = scenario_sampler(options["workload"])
            if sampler is None:
                return load_scenarios(options["workload"], self._loader)[0]
        else:
            sampler = self.sampler
        if sampler is not None:
            seed = options.get("scenario_seed")
            if seed is None:
                seed = sampler.draw_seed(self._scenario_rng if self._scenario_rng is not None else self.np_random)
            elif isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
                raise ValueError(f"reset option scenario_seed must be an integer >= 0, got {shown(seed)}")
            return sampler.sample(int(seed))
        if "scenario_seed" in options:
            raise ValueError("reset option scenario_seed needs a scenario sampler (workload='family:<name>')")
        return self.scenarios[int(self.np_random.integers(len(self.scenarios)))]

    def action_masks(self) -> np.ndarray:
        """Valid choices per action dimension, flattened (for sb3-contrib MaskablePPO)."""
        if self._state is None:
            raise RuntimeError("call reset() before action_masks()")
        return self.codec.mask(self._state)

    def step(self, action):
        """Apply the allocation, simulate to the next boundary, return the named rewards."""
        driver = self._driver
        if driver is None or self._state is None:
            raise RuntimeError("call reset() before step()")
        if driver.done:
            raise RuntimeError("the episode is over; call reset()")
        self._decide(action)
        t0, waited0 = self._reward_from, self._waited_from
        driver.advance()
        self.rounds += 1
        cfg = self.config
        if cfg.hold > 1:
            self._hold_action()
        if isinstance(driver, ArrayEpisode) and driver.done:
            driver = self._driver = self._sim  # written back: the episode's end is the simulator's
        assert driver is not None
        t1 = self._reward_from = driver.now
        self._waited_from = driver.waiting_seconds
        interval = self.sim_config.interval
        job_seconds = driver.job_seconds(t0, t1)
        waited = driver.waiting_seconds - waited0
        terminated = driver.done
        ref = self._reference
        if ref is not None:
            job_seconds -= ref.jobs.between(t0, t1)
            waited -= ref.waited_between(t0, t1)
            if terminated:  # what the base policy still spends once these jobs are all done
                job_seconds -= ref.jobs.after(t1)
                waited -= ref.waited_after(t1)
        r_jct = -job_seconds / (interval * cfg.jct_scale)
        r_infer = -cfg.infer_weight * waited / interval
        truncated = (not terminated) and self.rounds >= cfg.max_rounds
        obs = self._observe() if not terminated else self._empty_obs()
        info: dict[str, Any] = {
            "reward_jct": r_jct,
            "reward_infer": r_infer,
            "repaired_gpus": self._repaired,
            "time": t1,
            "active_jobs": len(self._state.jobs) if not terminated else 0,
        }
        if terminated or truncated:
            sim = self.sim  # a truncated episode's arrays written back: its metrics so far
            assert sim is not None
            info["episode_metrics"] = sim.metrics().to_dict(include_jcts=False)
            info["episode_scenario"] = self._scenario_key()
            if ref is not None and terminated:
                info["reference_jct_mean"] = ref.jobs.mean_jct
        return obs, float(r_jct + r_infer), terminated, truncated, info

    def _decide(self, action: np.ndarray) -> None:
        """Apply ``action`` decoded on the state just observed (on an array episode, by the
        codec's compiled decision where it has one); sets the repaired GPUs."""
        state, codec = self._state, self.codec
        assert state is not None
        self._repaired = self._apply_decoded(
            partial(codec.decode_on_arrays, action, state), partial(codec.decode, action, state)
        )

    def _apply_decoded(
        self,
        compiled: Callable[[ArrayEpisode], np.ndarray | None],
        in_python: Callable[[], tuple[Counts, int]],
    ) -> int:
        """Apply a decoding to the episode: ``compiled``'s on an array episode where it decodes
        (nothing repaired), else ``in_python``'s counts; the GPUs repaired."""
        driver = self._driver
        assert driver is not None
        wanted = compiled(driver) if isinstance(driver, ArrayEpisode) else None
        if wanted is not None:
            assert isinstance(driver, ArrayEpisode)
            driver.apply_wanted(wanted)
            return 0
        counts, repaired = in_python()
        # the codec built a valid allocation from the state just observed: no second check
        driver.apply_valid_counts(counts)
        return repaired

    def _scenario_key(self) -> dict[str, Any]:
        """What names the episode's scenario for a reference run elsewhere: its family and seed
        (a family scenario), and its workload's name."""
        assert self.scenario is not None
        scenario = self.scenario
        return {"family": scenario.family, "seed": scenario.seed, "workload": scenario.name}

    def _hold_action(self) -> None:
        """Keep the action for up to ``hold`` boundaries in all (the codec decodes the held
        action again at each), until a job arrives or finishes, the episode ends or
        ``max_rounds`` is reached; the next observation is the state after the last one."""
        driver, state = self._driver, self._state
        assert driver is not None and state is not None
        decided = [job.id for job in state.jobs]
        for _ in range(self.config.hold - 1):
            if driver.done or self.rounds >= self.config.max_rounds:
                return
            state = driver.observe()
            if [job.id for job in state.jobs] != decided:
                return
            self._apply_decoded(partial(self.codec.redecode_on_arrays, state), partial(self.codec.redecode, state))
            driver.advance()
            self.rounds += 1

    def _empty_obs(self) -> dict[str, np.ndarray]:
        # every part of the observation is a Box (see __init__)
        return {
            key: np.zeros(cast(spaces.Box, space).shape, dtype=np.float32)
            for key, space in self.observation_space.spaces.items()
        }

    def render(self):
        """``ansi``: a text summary; ``rgb_array``: the GPU-state timeline so far."""
        if self.render_mode is None or self.sim is None:
            return None
        if self.render_mode == "ansi":
            return render_text(self.sim)
        from deepboot_env.env.render import timeline_rgb

        return timeline_rgb(self.sim.timeline, title=f"{self.sim.workload.name} t={self.sim.now / 3600:.1f} h")


def render_text(sim: Simulator) -> str:
    """One-screen text summary of the simulator state."""
    led = sim.ledger
    lines = [
        f"t={sim.now:,.0f}s  workload={sim.workload.name}  cluster={sim.config.cluster.describe()}",
        f"training GPUs={int(led.train.sum())}  pods running/protect/sleep="
        f"{int(led.running.sum())}/{int(led.protect.sum())}/{int(led.sleep.sum())}  free={int(led.free().sum())}",
        f"restarts={sim.restarts}  reclaims={sim.reclaims}",
    ]
    for job in sim.active_jobs[:10]:
        lines.append(
            f"  {job.spec.name:<16} {job.app.name:<11} gpus={job.replicas:<3} epoch={job.epoch}/{job.app.max_epochs}"
        )
    return "\n".join(lines)
