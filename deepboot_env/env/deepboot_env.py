"""DeepBoot-v0: a Gymnasium adapter over the gym-free simulator."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from deepboot_env.env.encoding import (
    CLUSTER_FEATURES,
    GPU_BUCKETS,
    JOB_FEATURES,
    action_mask,
    decode_action_counts,
    encode_observation,
)
from deepboot_env.env.residual import NEUTRAL, RESIDUAL_DELTAS, ResidualCodec
from deepboot_env.policy import BasePolicy
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.workload import Workload

WorkloadSource = str | Path | Workload

ACTION_MODES: tuple[str, ...] = ("target", "residual")
"""``target``: per-slot GPU targets; ``residual``: per-slot corrections to a base policy."""


class _EnvReclaim(BasePolicy):
    """The environment's reclaim hook: DeepBoot's ATS-I rule, adaptive batch sizes."""

    name = "env"


def resolve_workloads(source: WorkloadSource | Sequence[WorkloadSource]) -> list[WorkloadSource]:
    """Expand a split name (``train``/``val``/``test``) or a list into workload sources."""
    from traces.loaders import list_shipped_workloads

    items = list(source) if isinstance(source, list | tuple) else [source]
    out: list[WorkloadSource] = []
    for item in items:
        if isinstance(item, str) and item in ("train", "val", "test"):
            out.extend(n for n in list_shipped_workloads() if n.startswith(item + "/"))
        else:
            out.append(item)
    if not out:
        raise ValueError(f"no workloads in {source!r}")
    return out


class DeepBootEnv(gym.Env):
    """Allocate GPUs of a training cluster (and idle inference GPUs) to elastic training jobs.

    ## Description
    One step is one scheduling boundary (60 s by default) of the DeepBoot/Pollux simulator
    (:mod:`deepboot_env.sim`): the agent sets a GPU target for each active training job and how
    much of the idle inference cluster training may borrow; the simulator then runs every event up
    to the next boundary (inference arrivals, warm-pod lifecycle, reclaims by the ATS-I rule, job
    completions). Jobs progress at their Pollux goodput; changes pay the restart model's cost.

    ## Observation Space
    ``Dict(jobs=Box(0, 1, (max_jobs * 21,)), cluster=Box(0, 1, (13,)))``, float32; ``jobs`` is the
    (max_jobs, 21) slot matrix flattened row by row (SB3 wants 1-D vectors). Slot i holds the
    i-th active job in arrival order (features :data:`~deepboot_env.env.encoding.JOB_FEATURES`:
    present, application one-hot, current and maximum GPUs, log age, log attained service,
    restarts, epoch fraction, speedup curve at 1..32 GPUs normalised to its peak, share on lent
    GPUs, restart stall left). Cluster features
    (:data:`~deepboot_env.env.encoding.CLUSTER_FEATURES`): free training GPUs, idle inference
    GPUs, SLEEP/PROTECT/RUNNING pods, lent GPUs, waiting requests, recent inference arrivals,
    time of day (sin/cos), active jobs and jobs beyond the slots. No remaining-work oracle.

    ## Action Space
    ``MultiDiscrete([7] * max_jobs + [lend_levels])``: per slot an index into
    :data:`~deepboot_env.env.encoding.GPU_BUCKETS` (0, 1, 2, 4, 8, 16, 32 GPUs), then a lending
    level l: training may use l / (lend_levels - 1) of the lendable inference GPUs.
    :meth:`action_masks` masks targets above a job's limit and non-zero targets of empty slots
    (for MaskablePPO). Targets that do not fit are repaired deterministically
    (:func:`~deepboot_env.env.encoding.decode_action`); ``info["repaired_gpus"]`` counts them.

    With ``action_mode="residual"`` (residual policy learning) a base scheduler (``base_policy``,
    ATS by default) proposes an allocation at every boundary; the action is
    ``MultiDiscrete([9] * max_jobs + [lend_levels])``, per slot a correction from
    :data:`~deepboot_env.env.residual.RESIDUAL_DELTAS` (-8..+8 GPUs) to the proposed count, then
    the lending level. All-zero corrections at the top lending level reproduce the base policy
    exactly. The observation gains ``base=Box(0, 1, (max_jobs,))``: the proposed GPUs per slot over
    the cluster's GPUs. Decoding: :class:`~deepboot_env.env.residual.ResidualCodec`.

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
    episode metrics under ``episode_metrics``.

    ## Arguments
    ``workload`` (a shipped name, split ``train``/``val``/``test``, CSV path, Workload, or a list;
    one is drawn per reset with the env's RNG, or chosen by ``reset(options={"workload": ...})``),
    ``cluster`` ("8x4+8x4"), ``shared_pool`` (e.g. "16x4", overrides cluster), ``restart``
    ("afe"), ``protect_scale`` (1.0), ``max_jobs`` (32), ``lend_levels`` (5), ``jct_scale`` (10),
    ``infer_weight`` (1.0), ``max_rounds`` (3000), ``render_mode`` ("ansi" or "rgb_array"),
    ``action_mode`` ("target" or "residual"), ``base_policy`` ("ats", residual mode only).

    ## Version History
    * v0: initial version.

    ## References
    Chen et al., DeepBoot, IEEE TPDS 34(9), 2023; Qiao et al., Pollux, OSDI 2021.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        workload: WorkloadSource | Sequence[WorkloadSource] = "train",
        cluster: str = "8x4+8x4",
        shared_pool: str | None = None,
        restart: str = "afe",
        protect_scale: float = 1.0,
        max_jobs: int = 32,
        lend_levels: int = 5,
        jct_scale: float = 10.0,
        infer_weight: float = 1.0,
        max_rounds: int = 3000,
        render_mode: str | None = None,
        action_mode: str = "target",
        base_policy: str = "ats",
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if max_jobs < 1 or lend_levels < 1 or max_rounds < 1:
            raise ValueError("max_jobs, lend_levels and max_rounds must be >= 1")
        if action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
        self.cluster = ClusterConfig.parse_shared(shared_pool) if shared_pool else ClusterConfig.parse(cluster)
        self.sim_config = SimConfig(cluster=self.cluster, restart=restart, protect_scale=protect_scale)
        self.workloads = resolve_workloads(workload)
        self._loaded: dict[str, Workload] = {}
        self.max_jobs = max_jobs
        self.lend_levels = lend_levels
        self.jct_scale = jct_scale
        self.infer_weight = infer_weight
        self.max_rounds = max_rounds
        self.render_mode = render_mode
        self.action_mode = action_mode
        self.residual = ResidualCodec(base_policy, max_jobs, lend_levels) if action_mode == "residual" else None
        obs_spaces = {
            "jobs": spaces.Box(0.0, 1.0, (max_jobs * len(JOB_FEATURES),), dtype=np.float32),
            "cluster": spaces.Box(0.0, 1.0, (len(CLUSTER_FEATURES),), dtype=np.float32),
        }
        choices = len(GPU_BUCKETS)
        if self.residual is not None:
            obs_spaces["base"] = spaces.Box(0.0, 1.0, (max_jobs,), dtype=np.float32)
            choices = len(RESIDUAL_DELTAS)
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = spaces.MultiDiscrete([choices] * max_jobs + [lend_levels])
        self.sim: Simulator | None = None
        self._state = None

    # ----------------------------------------------------------------- helpers
    def _workload(self, source: WorkloadSource) -> Workload:
        if isinstance(source, Workload):
            return source
        key = str(source)
        if key not in self._loaded:
            from traces.loaders import load_workload

            self._loaded[key] = load_workload(source)
        return self._loaded[key]

    def _observe(self) -> dict[str, np.ndarray]:
        assert self.sim is not None
        self._state = self.sim.observe()
        obs = encode_observation(self._state, self.max_jobs)
        if self.residual is not None:
            self.residual.propose(self._state)
            obs["base"] = self.residual.base_counts(self._state)
        return obs

    def neutral_action(self) -> np.ndarray:
        """Residual mode: the action that reproduces the base policy (zero corrections, top
        lending level)."""
        action = np.full(self.max_jobs + 1, NEUTRAL, dtype=np.int64)
        action[-1] = self.lend_levels - 1
        return action

    # --------------------------------------------------------------- Gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode on a workload drawn with the env's RNG (or ``options["workload"]``)."""
        super().reset(seed=seed)
        options = options or {}
        if "workload" in options:
            source = options["workload"]
        else:
            source = self.workloads[int(self.np_random.integers(len(self.workloads)))]
        self.sim = Simulator(self._workload(source), self.sim_config, _EnvReclaim())
        if self.residual is not None:
            self.residual.reset(seed)
        self.rounds = 0
        self._reward_from = 0.0
        self._waited_from = 0.0
        obs = self._observe()
        return obs, {"time": self.sim.now, "workload": self.sim.workload.name}

    def action_masks(self) -> np.ndarray:
        """Valid choices per action dimension, flattened (for sb3-contrib MaskablePPO)."""
        if self._state is None:
            raise RuntimeError("call reset() before action_masks()")
        if self.residual is not None:
            return self.residual.mask(self._state)
        return action_mask(self._state, self.max_jobs, self.lend_levels)

    def step(self, action):
        """Apply the allocation, simulate to the next boundary, return the named rewards."""
        if self.sim is None or self._state is None:
            raise RuntimeError("call reset() before step()")
        if self.sim.done:
            raise RuntimeError("the episode is over; call reset()")
        if self.residual is not None:
            alloc, repaired = self.residual.decode(np.asarray(action), self._state)
            self.sim.apply(alloc, self._state)  # validated
        else:
            placed, repaired = decode_action_counts(action, self._state, self.max_jobs, self.lend_levels)
            # decode_action_counts built a valid allocation from the state just observed: no second check
            self.sim.apply_valid_counts(placed)
        t0, waited0 = self._reward_from, self._waited_from
        self.sim.advance()
        t1 = self._reward_from = self.sim.now
        self._waited_from = self.sim.waiting_seconds
        self.rounds += 1
        interval = self.sim_config.interval
        r_jct = -self.sim.job_seconds(t0, t1) / (interval * self.jct_scale)
        r_infer = -self.infer_weight * (self.sim.waiting_seconds - waited0) / interval
        terminated = self.sim.done
        truncated = (not terminated) and self.rounds >= self.max_rounds
        obs = self._observe() if not terminated else self._empty_obs()
        info: dict[str, Any] = {
            "reward_jct": r_jct,
            "reward_infer": r_infer,
            "repaired_gpus": repaired,
            "time": t1,
            "active_jobs": len(self._state.jobs) if not terminated else 0,
        }
        if terminated or truncated:
            info["episode_metrics"] = self.sim.metrics().to_dict(include_jcts=False)
        return obs, float(r_jct + r_infer), terminated, truncated, info

    def _empty_obs(self) -> dict[str, np.ndarray]:
        return {key: np.zeros(space.shape, dtype=np.float32) for key, space in self.observation_space.spaces.items()}

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
