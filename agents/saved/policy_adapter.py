"""A saved PPO / MaskablePPO model as a :class:`~deepboot_env.policy.Policy` (``ppo:<path>``).

``make_policy("ppo:runs/maskable_ppo_1/best_model.zip")`` calls :func:`load_agent_policy`, so
``deepboot simulate`` / ``deepboot compare`` run a trained agent through the same
:func:`~deepboot_env.evaluation.run_episode` loop as the heuristics.

At each decision :meth:`AgentPolicy.decide` encodes the :class:`ClusterState` with the env's own
:func:`~deepboot_env.env.observation.agent_observation` (the one encoder: ``DeepBootEnv`` calls it
too) and the env's action codec (:mod:`deepboot_env.env.action`: its extra observation and mask),
asks the model for a deterministic action (with the mask for MaskablePPO) and decodes it with the
same codec, which repairs targets that do not fit. The deterministic action is SB3's
``predict(deterministic=True)``, computed by one actor pass and the mode of the one-tensor action
distribution (:mod:`agents.models.distributions`, installed on the model: same parameters, same law).
Reclaim (ATS-I) and adaptive batch sizes are those of the env.

The env arguments the model depends on (``max_jobs``, ``lend_levels``, the action mode) are read
from the model's spaces (:mod:`agents.models.env_shape`); a ``config.yml`` next to the model (written by
``train_policy.py``) names the algorithm, otherwise it is read from the saved policy class. A codec that corrects a base
policy (residual mode) reads the base policy's name from :func:`agent_env_kwargs`: the env
arguments the policy keeps (:mod:`agents.models.described_policy`), else ``deepboot_env.json`` inside
the zip (older exports), else ``config.yml``'s ``env_kwargs``, else it is ``ats``.
:func:`load_agent` returns a saved model with a factory of its env.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
import numpy as np

from agents.models.algorithms import resolve_device
from agents.models.env_shape import env_shape_of
from agents.saved.checkpoint import (
    METADATA_FILE,
    CheckpointError,
    SavedModel,
    optional_entry,
    read_data,
    refuse_named_files,
    saved_algo,
    saved_env_kwargs,
)
from agents.saved.shipped import SUFFIXES, resolve_shipped
from agents.threads import use_torch_threads
from deepboot_env.env.action import SCORE_SCALE, make_codec
from deepboot_env.env.observation import OutlookEncoder, agent_observation, encode_observation, slot_jobs
from deepboot_env.extras import require_extra
from deepboot_env.limits import MAX_CONFIG_BYTES, MAX_JSON_BYTES, parse_json, parse_yaml, read_bounded
from deepboot_env.policy import Allocation, BasePolicy, ClusterState
from deepboot_env.sim.state import GpuRef, RequestView

if TYPE_CHECKING:
    from deepboot_env.sim.simulator import Simulator

__all__ = [
    "METADATA_FILE",
    "MODEL_FILES",
    "AgentPolicy",
    "agent_env_kwargs",
    "detect_algo",
    "encode_observation",
    "load_agent",
    "load_agent_policy",
    "load_model",
    "model_env_kwargs",
    "resolve_model_path",
    "saved_dynamics",
    "uses_masks",
]

MODEL_FILES: tuple[str, ...] = ("best_model.zip", "final_model.zip")
"""Files looked for, in order, when ``ppo:<path>`` names a run folder."""


def uses_masks(model: Any) -> bool:
    """Whether ``model`` is an sb3-contrib MaskablePPO (which takes ``action_masks``)."""
    try:
        from sb3_contrib import MaskablePPO  # lazy: SB3 is slow to import
    except ImportError:  # pragma: no cover - sb3-contrib is a dependency
        return False
    return isinstance(model, MaskablePPO)


class AgentPolicy(BasePolicy):
    """A trained SB3 model deciding the training allocation at each boundary.

    Args:
        model: a ``PPO`` or ``MaskablePPO`` trained on ``DeepBoot-v0``.
        deterministic: take the most likely action (evaluation) instead of sampling.
        name: the policy's name in results tables.
        base_policy: the base policy a residual model corrects, or a score model's prior
            (ignored for target models).
        score_scale: a score model's log-weight change per unit of score.
        hold: boundaries a score model's action is kept for (as in training: the env's ``hold``;
            the policy decides earlier when a job arrives or finishes).

    Attributes:
        max_jobs, lend_levels, action_mode: the env arguments read from the model's spaces
            (with a score model's ``width_classes``).
        codec: the env's action codec for those arguments.
        masked: whether predictions pass action masks (MaskablePPO).
        last_action, last_mask, last_obs: the latest raw action, its mask and the observation it
            was predicted from (for inspection, tests and the hindsight teacher's labels).
        score_offsets: job id -> a number added to the job's score entry in every action (a
            score model): what a counterfactual fork holds (:meth:`fork`); empty by default.
        on_decision: None, or called with the state after each new action is decoded (not at
            the boundaries a held action is decoded again): what inspection tools read the
            codec's held scores from (:mod:`agents.saved.score_sizes`).
        repaired_gpus: GPUs the decoding repair removed so far in this episode.
    """

    def __init__(
        self,
        model: Any,
        deterministic: bool = True,
        name: str = "ppo",
        base_policy: str = "ats",
        score_scale: float = SCORE_SCALE,
        hold: int = 1,
    ) -> None:
        self.model = model
        self.deterministic = bool(deterministic)
        self.name = name
        shape = env_shape_of(model)
        self.max_jobs = shape["max_jobs"]
        self.lend_levels = shape["lend_levels"]
        self.action_mode = shape["action_mode"]
        self.codec = make_codec(
            self.action_mode, self.max_jobs, self.lend_levels, base_policy, score_scale, shape.get("width_classes", 0)
        )
        self.hold = int(hold)
        self._held: tuple[list[int], int] = ([], 0)
        """The job ids of the latest decision and the boundaries its action was kept for."""
        self.on_decision: Callable[[ClusterState], None] | None = None
        self.outlook = OutlookEncoder(self.max_jobs) if shape.get("outlook") else None
        self.masked = uses_masks(model)
        self.last_action: np.ndarray | None = None
        self.last_mask: np.ndarray | None = None
        self.last_obs: dict[str, np.ndarray] | None = None
        self.score_offsets: dict[int, float] = {}
        self.repaired_gpus = 0
        self._device: Any = None
        if self.deterministic:  # most_likely reads the one-tensor distribution (same parameters, same law)
            from agents.models.distributions import use_padded_distribution  # lazy: SB3 is slow to import

            use_padded_distribution(model.policy)

    # The simulator's hooks are the codec's (as in the env): ATS-I for a target model, a residual
    # model's base policy's or a score model's prior's own rules; bound methods keep their marks.
    @property
    def adaptive_batch(self) -> bool:  # type: ignore[override]
        """The codec's hooks' choice (the env's world for this model)."""
        return bool(self.codec.hooks.adaptive_batch)

    @property
    def choose_reclaim(self) -> Callable[[ClusterState, RequestView], GpuRef | None]:
        """The codec's hooks' reclaim rule."""
        return self.codec.hooks.choose_reclaim

    @property
    def choose_inference_server(self) -> Callable[[ClusterState, RequestView], int | None]:
        """The codec's hooks' Aryl-mode server rule."""
        return self.codec.hooks.choose_inference_server

    @property
    def bind_simulator(self) -> Callable[[Simulator], None]:
        """The codec's hooks' binding (a base policy that looks into the simulator)."""
        return self.codec.hooks.bind_simulator

    def reset(self, seed: int | None = None) -> None:
        """Forget the episode; seed torch's sampling when the policy is stochastic."""
        self.last_action = self.last_mask = None
        self.repaired_gpus = 0
        self._held = ([], 0)
        self.codec.reset(seed)
        if self.outlook is not None:
            self.outlook.reset()
        if seed is not None and not self.deterministic:
            import torch  # lazy: torch is slow to import

            torch.manual_seed(int(seed))

    def predict(self, state: ClusterState) -> tuple[np.ndarray, np.ndarray]:
        """The model's raw action for ``state`` and the mask it was given."""
        obs = self.last_obs = agent_observation(state, self.max_jobs, self.outlook, self.codec.observe(state))
        continuous = self.codec.continuous
        mask = np.ones(0, dtype=bool) if continuous else self.codec.mask(state)
        if self.deterministic:
            action = self.most_likely(obs, mask)
        elif self.masked:
            action, _ = self.model.predict(obs, action_masks=mask, deterministic=self.deterministic)
        else:
            action, _ = self.model.predict(obs, deterministic=self.deterministic)
        action = np.asarray(action, dtype=np.float32 if continuous else np.int64).reshape(-1)
        if self.score_offsets:
            for slot, job in enumerate(slot_jobs(state, self.max_jobs)):
                action[slot] += self.score_offsets.get(job.id, 0.0)
        return action, mask

    def fork(self, score_offsets: dict[int, float] | None = None) -> AgentPolicy:
        """A copy that goes on from here on its own, as a forked simulator does
        (:meth:`Simulator.fork <deepboot_env.sim.simulator.Simulator.fork>`): the model is shared,
        the episode's state (the codec's held scores, the outlook, the held action) is copied, and
        the copy adds ``score_offsets`` (job id -> score units) to those jobs' score entries in
        every action it takes (a score model; the hindsight teacher's counterfactual forks).

        Raises:
            ValueError: offsets for a model whose actions are not scores.
        """
        if score_offsets and self.action_mode != "score":
            raise ValueError(f"{self.name}: score offsets need a score model, this one acts in {self.action_mode} mode")
        twin = copy.copy(self)
        twin.codec = copy.deepcopy(self.codec)
        twin.outlook = copy.deepcopy(self.outlook)
        twin._held = (list(self._held[0]), self._held[1])
        twin.score_offsets = dict(score_offsets or {})
        twin.on_decision = None
        return twin

    def most_likely(self, obs: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
        """The model's most likely action for one observation: what ``model.predict(obs,
        deterministic=True)`` returns (with ``action_masks=mask`` for MaskablePPO), from one
        forward pass of the actor and the mode of the policy's padded distribution
        (:mod:`agents.models.distributions`), without SB3's per-call checks and conversions."""
        import torch  # lazy: torch is slow to import
        from stable_baselines3.common.policies import BaseModel  # lazy: SB3 is slow to import

        policy = self.model.policy
        if policy.training:  # SB3's predict sets it at every call; a module walk costs ~0.15 ms
            policy.set_training_mode(False)
        with torch.no_grad():
            # the env's encoder made obs for these spaces: one batch of one, without SB3's checks
            device = self._device = self._device or policy.device  # SB3's device walks every module
            obs_t = {key: torch.as_tensor(value, device=device)[None] for key, value in obs.items()}
            features = BaseModel.extract_features(policy, obs_t, policy.pi_features_extractor)
            logits = policy.action_net(policy.mlp_extractor.forward_actor(features))
            if self.codec.continuous:  # a Gaussian's most likely action is its mean
                return logits.reshape(-1).cpu().numpy()
            dist = policy.action_dist.proba_distribution(logits)
            if self.masked:
                dist.apply_masking(mask)
            return dist.mode().reshape(-1).cpu().numpy()

    def decide(self, state: ClusterState) -> Allocation:
        """Encode, predict (with masks for MaskablePPO), decode with the env's repair; with
        ``hold`` > 1, the held action decoded again while the jobs stay the same (as the env does)."""
        if self.hold > 1:
            jobs, kept = self._held
            ids = [job.id for job in state.jobs]
            if 0 < kept < self.hold and ids == jobs:
                self._held = (jobs, kept + 1)
                return self.codec.decode_allocation_held(state)
            self._held = (ids, 1)
        action, mask = self.predict(state)
        self.last_action, self.last_mask = action, mask
        alloc, repaired = self.codec.decode_allocation(action, state)
        self.repaired_gpus += repaired
        if self.on_decision is not None:
            self.on_decision(state)
        return alloc


def resolve_model_path(path: str | Path) -> Path:
    """A model zip from ``path``: a shipped model's short name (``deepboot-v0``:
    :mod:`agents.saved.shipped`), the file itself (``.zip`` optional) or, for a run folder, its
    ``best_model.zip``, else ``final_model.zip``.

    Raises:
        FileNotFoundError: naming what was looked for.
    """
    p = resolve_shipped(path, SUFFIXES["ppo"])
    if p.is_dir():
        for name in MODEL_FILES:
            if (p / name).is_file():
                return p / name
        raise FileNotFoundError(f"no {' or '.join(MODEL_FILES)} in {p}")
    if p.exists():  # a file (anything but a regular one is refused when it is opened)
        return p
    if p.with_name(p.name + ".zip").exists():
        return p.with_name(p.name + ".zip")
    raise FileNotFoundError(f"no saved model at {p}")


def run_config(path: str | Path) -> dict[str, Any]:
    """The ``config.yml`` that ``train_policy.py`` wrote beside a saved model ({} if none or
    unreadable)."""
    conf = Path(path).parent / "config.yml"
    if not conf.is_file():
        return {}
    try:
        data = parse_yaml(read_bounded(conf, MAX_CONFIG_BYTES, "config.yml").decode("utf-8"), str(conf))
    except (OSError, ValueError):  # unreadable, too large, not YAML: callers fall back to the zip
        return {}
    return data if isinstance(data, dict) else {}


def model_env_kwargs(path: str | Path) -> dict[str, Any]:
    """The env arguments a saved model was trained with: the zip's :data:`METADATA_FILE`, else
    ``config.yml``'s ``env_kwargs`` ({} if neither)."""
    metadata = optional_entry(Path(path), METADATA_FILE, MAX_JSON_BYTES)
    if metadata is not None:
        data = parse_json(metadata, f"{path}: entry {METADATA_FILE!r}", CheckpointError)
        field = data.get("env_kwargs", {}) if isinstance(data, dict) else None
        return saved_env_kwargs(Path(path), field)
    kwargs = run_config(path).get("env_kwargs")
    if not isinstance(kwargs, dict):
        return {}
    refuse_named_files(Path(path).parent / "config.yml", kwargs)
    return dict(kwargs)


def agent_env_kwargs(model: Any, path: str | Path | None = None) -> dict[str, Any]:
    """The env arguments ``model`` needs, later sources winning: its spaces
    (:func:`~agents.models.env_shape.env_shape_of`: ``action_mode``, ``max_jobs``, ``lend_levels``, ``outlook``), those
    saved with it (:func:`model_env_kwargs` of ``path``: older exports and run folders), those its
    policy keeps (:mod:`agents.models.described_policy`).

    Raises:
        ValueError: if the spaces are not those of ``DeepBoot-v0``.
    """
    saved = model_env_kwargs(path) if path is not None else {}
    return {**env_shape_of(model), **saved, **getattr(model.policy, "env_kwargs", {})}


def saved_dynamics(path: str | Path) -> str:
    """The dynamics (``v0`` / ``v1``) the saved model at ``path`` was trained on, read without
    torch and without unpickling: ``dynamics`` of the env arguments its policy keeps (plain JSON in
    the zip), else of those saved beside it (:func:`model_env_kwargs`); ``v0`` where none is
    recorded, the env of every model from before DeepBoot-v1 (as
    :func:`agents.models.described_policy.env_spec` reads it).

    Raises:
        FileNotFoundError: no model at ``path``.
        agents.saved.checkpoint.CheckpointError: a file that is not a model zip.
    """
    model_path = resolve_model_path(path)
    kept = read_data(model_path).get("policy_kwargs")
    env_kwargs = kept.get("env_kwargs") if isinstance(kept, dict) else None
    if not isinstance(env_kwargs, dict) or "dynamics" not in env_kwargs:
        env_kwargs = model_env_kwargs(model_path)
    return str(env_kwargs.get("dynamics") or "v0")


def detect_algo(path: str | Path) -> str:
    """``maskable_ppo`` or ``ppo`` for a saved model: ``config.yml`` beside it, else the policy
    class the zip names (read as text, never unpickled).

    Raises:
        agents.saved.checkpoint.CheckpointError: if the file is not a PPO / MaskablePPO zip.
    """
    p = Path(path)
    algo = run_config(p).get("algo")
    if algo in ("ppo", "maskable_ppo"):
        return algo
    return saved_algo(p, read_data(p))


def load_model(
    path: str | Path,
    device: str = "cpu",
    algo: str | None = None,
    trust: bool = False,
    num_threads: int | None = None,
) -> Any:
    """Load a saved PPO / MaskablePPO without unpickling anything (:mod:`agents.saved.checkpoint`;
    ``trust=True`` loads pickled fields as plain SB3 does). The algorithm is the one the zip's
    policy class names; ``algo``, if given, must match it.

    Sets torch to one thread unless the user chose a count (``OMP_NUM_THREADS`` /
    ``MKL_NUM_THREADS``, or ``num_threads``): these small networks run several times faster on one
    (:mod:`agents.threads`).

    Raises:
        deepboot_env.extras.MissingExtraError: without the ``rl`` extra (torch, SB3), one line.
        agents.saved.checkpoint.CheckpointError: a file that is not such a model, or that cannot be
            loaded safely (the message names the field).
    """
    require_extra("rl", "a saved PPO model (ppo:<path>, agents.load_agent)")
    saved = SavedModel.read(resolve_model_path(path), algo, trust)  # a bad file is refused before torch loads
    use_torch_threads(num_threads)
    return saved.load(resolve_device(device))


def load_agent_policy(
    path: str | Path,
    device: str = "cpu",
    deterministic: bool = True,
    algo: str | None = None,
    num_threads: int | None = None,
    name: str | None = None,
    trust: bool = False,
) -> AgentPolicy:
    """The saved model at ``path`` as a :class:`AgentPolicy` (the ``ppo:<path>`` factory).

    Args:
        path: a model zip, or a run folder (its best model, else its final model).
        device: torch device for inference (``cpu`` is fastest for these small MLPs).
        deterministic: most likely action (True, for evaluation) or sampled.
        algo: ``ppo`` / ``maskable_ppo`` (None: detected).
        num_threads: ``torch.set_num_threads(num_threads)`` before loading (process-wide). None,
            the default: one thread unless ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` chose a
            count (:mod:`agents.threads`): one is several times faster for these small networks
            and keeps ``deepboot compare --jobs N`` from hanging (workers forked after the parent
            ran torch ops with several OpenMP threads deadlock on their first parallel op).
        name: policy name in results (default ``ppo:<path>``).
        trust: unpickle the checkpoint's pickled fields (runs any code in the file; warns).
    """
    model = load_model(path, device=device, algo=algo, trust=trust, num_threads=num_threads)
    kwargs = agent_env_kwargs(model, resolve_model_path(path))
    return AgentPolicy(
        model,
        deterministic=deterministic,
        name=name or f"ppo:{path}",
        base_policy=str(kwargs.get("base_policy", "ats")),
        score_scale=float(kwargs.get("score_scale", SCORE_SCALE)),
        hold=int(kwargs.get("hold", 1)),
    )


def load_agent(
    path: str | Path, *, device: str = "cpu", trust: bool = False, num_threads: int | None = None
) -> tuple[Any, Any]:
    """A saved model and a factory of the env it needs: ``model, make_env = load_agent(path)``,
    then ``env = make_env(workload="val")`` (keyword arguments are added to or override the
    model's env arguments) and ``evaluate_policy(model, env)``.

    The model is loaded without unpickling anything (:func:`load_model`; ``trust=True`` loads
    pickled fields as plain SB3 does, and warns), and torch is set to one thread unless the user
    chose a count (``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``, or ``num_threads``), so that a user's
    own ``evaluate_policy`` runs at the speed of ``deepboot compare`` (:mod:`agents.threads`). ``make_env`` is
    ``functools.partial(gymnasium.make, "DeepBoot-vN", **env_kwargs)`` with the arguments of
    :func:`agent_env_kwargs` (``dynamics`` picks the id), so ``make_env.args[0]`` and
    ``make_env.keywords`` say which env it makes.

    Raises:
        FileNotFoundError: no model at ``path``.
        agents.saved.checkpoint.CheckpointError: a file that is not such a model or cannot be loaded safely.
        ValueError: a model whose spaces are not those of a DeepBoot env.
    """
    from agents.models.described_policy import env_spec  # lazy: SB3 is slow to import

    model_path = resolve_model_path(path)
    model = load_model(model_path, device=device, trust=trust, num_threads=num_threads)
    env_id, kwargs = env_spec(agent_env_kwargs(model, model_path))
    return model, functools.partial(gymnasium.make, env_id, **kwargs)
