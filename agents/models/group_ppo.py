"""PPO whose advantage is a group baseline over whole episodes on common scenarios (Decima's).

Decima (Mao et al., SIGCOMM 2019) trains its scheduler on groups of workers that play the same
job-arrival sequence, and takes as the baseline of a decision at wall time ``t`` the mean, over
the group, of the returns from ``t`` on: the arrivals, the main source of variance in a
scheduling return, cancel out, and what is left is the effect of the decisions. :class:`GroupPPO`
does this with SB3's PPO update:

* each iteration plays exactly one whole episode on every env (the envs of a group, ``group_size``
  consecutive envs, play the same scenario: :func:`agents.trainers.ppo.make_vec_env_for`);
* the advantage of a decision taken at simulated time ``t`` in env ``i`` is its return-to-go
  minus the mean over the group of each member's return-to-go from its first decision at or
  after ``t`` (0 past the member's end) (:func:`group_advantages`);
* the value head still learns the returns (for its diagnostics), but no advantage uses it.

With the score action's noise held per job and the envs of a group paired antithetically
(``noise_stream``/``antithetic`` of :class:`~deepboot_env.env.DeepBootEnv`: opposite noise on
every job), the advantage of a pair is half the difference of two episodes that differ only in
the sign of the exploration: the central difference evolution strategies estimate, with PPO's
per-decision update and clipping on top.

Only a ``DummyVecEnv`` is supported (episodes are stepped one env at a time, so that an env that
has finished waits for the others); the rollout size is what the episodes take, not ``n_steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import DictRolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from agents.hyperparameters import TRAINER_FIELD


@dataclass
class Episode:
    """One env's episode as played: per decision its observation, action, value, log-probability,
    reward and simulated time."""

    obs: list[dict[str, np.ndarray]] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def returns(self, gamma: float) -> np.ndarray:
        """The (discounted) return-to-go of every decision."""
        out = np.zeros(len(self.rewards))
        acc = 0.0
        for t in range(len(self.rewards) - 1, -1, -1):
            acc = self.rewards[t] + gamma * acc
            out[t] = acc
        return out


def group_advantages(returns: Sequence[np.ndarray], times: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per member of a group, each decision's return-to-go minus the group's mean return-to-go
    from the same simulated time.

    Args:
        returns: per member, the return-to-go of its decisions.
        times: per member, the simulated time of its decisions (non-decreasing).

    Returns:
        per member, the advantages (for a group of one: zeros).
    """
    out = []
    for own_times, own_returns in zip(times, returns, strict=True):
        baseline = np.zeros(len(own_returns))
        for other_times, other_returns in zip(times, returns, strict=True):
            # the member's return from its first decision at or after t (0 once it has ended)
            at = np.searchsorted(other_times, own_times, side="left")
            padded = np.append(other_returns, 0.0)
            baseline += padded[at]
        out.append(own_returns - baseline / len(returns))
    return out


def per_job_surrogate(
    new: th.Tensor, old: th.Tensor, acting: th.Tensor, advantages: th.Tensor, clip: float
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """PPO's clipped surrogate with one ratio per acting action entry (a job's score, the lending
    share), each entry clipped on its own and the loss averaged over the acting entries.

    The joint ratio of a decision is the product of some 30 jobs' ratios, so small moves of every
    job's score add up to a joint ratio that the clip and the KL limit stop after the first
    minibatch (runs 3-4 of docs/history.md#group); per entry, each job's score is one agent of a
    team that shares the network and the return (as multi-agent PPO does with shared parameters).

    Args:
        new: log probabilities per entry (batch, entries) under the policy being updated.
        old: the same under the policy that acted.
        acting: 1 for the entries that acted, 0 for empty slots (batch, entries).
        advantages: per decision (batch,).
        clip: the clip range.

    Returns:
        (loss, approximate KL per acting entry, share of acting entries clipped).
    """
    log_ratio = new - old
    ratio = th.exp(log_ratio)
    gain = advantages.unsqueeze(1)
    surrogate = th.min(ratio * gain, th.clamp(ratio, 1.0 - clip, 1.0 + clip) * gain)
    count = acting.sum().clamp(min=1.0)
    with th.no_grad():
        kl = (((ratio - 1.0) - log_ratio) * acting).sum() / count
        clipped = (((ratio - 1.0).abs() > clip).to(acting.dtype) * acting).sum() / count
    return -(surrogate * acting).sum() / count, kl, clipped


def trainer_record(group_size: int, per_job_ratio: bool) -> dict[str, Any]:
    """What :data:`TRAINER_FIELD` holds for a GroupPPO of these settings."""
    return {"algorithm": "group_ppo", "group_size": int(group_size), "per_job_ratio": bool(per_job_ratio)}


class GroupPPO(PPO):
    """:class:`stable_baselines3.PPO` with whole-episode rollouts and the group baseline of the
    module docstring. ``group_size``: envs per group (>= 2, dividing the env count).
    ``per_job_ratio``: update with :func:`per_job_surrogate` (the set policy in score mode only;
    the value head is then not trained, since no advantage reads it)."""

    def __init__(self, *args: Any, group_size: int = 2, per_job_ratio: bool = False, **kwargs: Any) -> None:
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
            raise ValueError(f"group_size must be an integer >= 2, got {group_size!r}")
        self.group_size = group_size
        self.per_job_ratio = bool(per_job_ratio)
        super().__init__(*args, **kwargs)
        if self.per_job_ratio and not (
            hasattr(self.policy, "entry_log_probs") and isinstance(self.action_space, spaces.Box)
        ):
            raise ValueError(
                f"per_job_ratio needs the set policy in score mode, got {type(self.policy).__name__} "
                f"over {type(self.action_space).__name__} actions"
            )
        if self.env is not None:
            self._check_env(self.env)

    def _excluded_save_params(self) -> list[str]:
        """``group_size`` and ``per_job_ratio`` stay out of the saved model as such: the model
        names its trainer in :data:`TRAINER_FIELD`, plain JSON written by :meth:`save`, which the
        loader reads back (:func:`agents.saved.checkpoint.saved_trainer`)."""
        return [*super()._excluded_save_params(), "group_size", "per_job_ratio"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        """SB3's ``save``, with the trainer named in the file (:data:`TRAINER_FIELD`), so that a
        run started from it (``-i``) trains on as GroupPPO, not as plain PPO."""
        setattr(self, TRAINER_FIELD, trainer_record(self.group_size, self.per_job_ratio))
        super().save(*args, **kwargs)

    def train(self) -> None:
        """SB3's update, or with ``per_job_ratio`` the per-entry one (:meth:`_train_per_job`)."""
        if self.per_job_ratio:
            self._train_per_job()
        else:
            super().train()

    def _train_per_job(self) -> None:
        """``n_epochs`` passes of minibatch updates of :func:`per_job_surrogate` over the rollout,
        the advantages scaled to unit deviation (the group baseline already centres them); a pass
        stops when the approximate KL per entry exceeds 1.5 x ``target_kl``."""
        policy: Any = self.policy
        policy.set_training_mode(True)
        self._update_learning_rate(policy.optimizer)
        schedule: Any = self.clip_range  # SB3 turns the clip range into a schedule in _setup_model
        clip = float(schedule(self._current_progress_remaining))
        buffer = self.rollout_buffer
        assert isinstance(buffer, DictRolloutBuffer)
        obs = {key: th.as_tensor(value[:, 0], device=self.device) for key, value in buffer.observations.items()}
        actions = th.as_tensor(buffer.actions[:, 0], device=self.device)
        advantages = th.as_tensor(buffer.advantages[:, 0], device=self.device).float()
        advantages = advantages / (advantages.std() + 1e-8)
        old, acting = self._entry_log_probs(obs, actions)
        kls, clipped, losses = [], [], []
        minibatches = (
            idx
            for _ in range(self.n_epochs)
            for idx in th.randperm(len(actions), device=self.device).split(self.batch_size)
        )
        for idx in minibatches:
            new, _ = policy.entry_log_probs({key: value[idx] for key, value in obs.items()}, actions[idx])
            loss, kl, share = per_job_surrogate(new, old[idx], acting[idx], advantages[idx], clip)
            kls.append(float(kl))
            clipped.append(float(share))
            losses.append(float(loss.detach()))
            if self.target_kl is not None and kls[-1] > 1.5 * self.target_kl:
                break  # as SB3: the KL limit ends the whole update, not just the epoch
            policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), self.max_grad_norm)
            policy.optimizer.step()
        self._n_updates += 1
        self.logger.record("train/approx_kl", float(np.mean(kls)))
        self.logger.record("train/clip_fraction", float(np.mean(clipped)))
        self.logger.record("train/n_updates", self._n_updates)
        self._record_per_job_curves(losses)

    def _record_per_job_curves(self, losses: list[float]) -> None:
        """The rest of SB3's ``train/*`` curves for the per-job update, so that TensorBoard shows
        them for the score presets too: the surrogate loss, the score policy's entropy (a Gaussian
        per entry: its log standard deviations), its standard deviation, and the explained variance
        of the value head (which this update does not train: a diagnostic only)."""
        policy: Any = self.policy
        if losses:
            self.logger.record("train/policy_gradient_loss", float(np.mean(losses)))
        log_std = getattr(policy, "score_log_std", None)
        if log_std is not None:
            entropy = 0.5 * (1.0 + np.log(2.0 * np.pi)) + log_std.detach()
            self.logger.record("train/entropy_loss", -float(entropy.mean()))
            self.logger.record("train/std", float(th.exp(log_std.detach()).mean()))
        buffer = self.rollout_buffer
        values, returns = buffer.values.flatten(), buffer.returns.flatten()
        self.logger.record("train/explained_variance", float(explained_variance(values, returns)))

    def _entry_log_probs(self, obs: dict[str, th.Tensor], actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """The acting policy's per-entry log probabilities and acting weights of the whole rollout."""
        policy: Any = self.policy
        parts = []
        with th.no_grad():
            for idx in th.arange(len(actions), device=self.device).split(4096):
                parts.append(policy.entry_log_probs({key: value[idx] for key, value in obs.items()}, actions[idx]))
        return th.cat([p[0] for p in parts]), th.cat([p[1] for p in parts])

    def _check_env(self, env: VecEnv) -> None:
        if not isinstance(env, DummyVecEnv):
            raise ValueError(f"GroupPPO steps a DummyVecEnv's envs one by one, got {type(env).__name__}")
        if env.num_envs % self.group_size:
            raise ValueError(f"group_size {self.group_size} must divide the {env.num_envs} envs")

    def collect_rollouts(self, env: VecEnv, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int) -> bool:
        """Play one whole episode on every env; fill :attr:`rollout_buffer` (a new one, sized to
        the episodes) with the group advantages. Returns False if a callback stopped training."""
        self._check_env(env)
        assert isinstance(env, DummyVecEnv)
        self.policy.set_training_mode(False)
        callback.on_rollout_start()
        episodes = self._play(env, callback)
        if episodes is None:
            return False
        self.rollout_buffer = self._buffer_of(episodes)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _play(self, env: DummyVecEnv, callback: BaseCallback) -> list[Episode] | None:
        """One episode per env, the envs still running stepped together (one forward pass)."""
        n = env.num_envs
        episodes = [Episode() for _ in range(n)]
        obs: list[Any] = [None] * n
        times = [0.0] * n
        for i, member in enumerate(env.envs):
            obs[i], info = member.reset()
            times[i] = float(info.get("time", 0.0))
        running = list(range(n))
        while running:
            batch = {key: np.stack([obs[i][key] for i in running]) for key in obs[running[0]]}
            with th.no_grad():
                actions, values, log_probs = self.policy(obs_as_tensor(batch, self.device))
            actions_np = actions.cpu().numpy()
            clipped = actions_np
            if isinstance(self.action_space, spaces.Box):  # an unbounded Gaussian's sample, clipped
                clipped = np.clip(actions_np, self.action_space.low, self.action_space.high)
            infos: list[dict[str, Any]] = [{} for _ in range(n)]
            dones = np.zeros(n, dtype=bool)
            for row, i in enumerate(running):
                episode = episodes[i]
                episode.obs.append(obs[i])
                episode.actions.append(actions_np[row])
                episode.values.append(float(values[row]))
                episode.log_probs.append(float(log_probs[row]))
                episode.times.append(times[i])
                obs[i], reward, terminated, truncated, infos[i] = env.envs[i].step(clipped[row])
                episode.rewards.append(float(reward))
                times[i] = float(infos[i].get("time", times[i]))
                dones[i] = terminated or truncated
            self.num_timesteps += len(running)
            callback.update_locals({"infos": infos, "dones": dones, "rewards": None, "new_obs": None})
            if not callback.on_step():
                return None
            self._update_info_buffer(infos, dones)
            running = [i for i in running if not dones[i]]
        return episodes

    def _buffer_of(self, episodes: list[Episode]) -> DictRolloutBuffer:
        """A full rollout buffer of every decision, advantages from the group baseline."""
        returns = [episode.returns(self.gamma) for episode in episodes]
        advantages: list[np.ndarray] = []
        for start in range(0, len(episodes), self.group_size):
            group = range(start, start + self.group_size)
            advantages += group_advantages([returns[i] for i in group], [np.asarray(episodes[i].times) for i in group])
        size = sum(len(episode.rewards) for episode in episodes)
        assert isinstance(self.observation_space, spaces.Dict)
        buffer = DictRolloutBuffer(
            size, self.observation_space, self.action_space, device=self.device, gamma=self.gamma, n_envs=1
        )
        steps = [step for episode in episodes for step in episode.obs]
        for key in buffer.observations:
            buffer.observations[key][:, 0] = np.stack([step[key] for step in steps]).reshape(
                buffer.observations[key][:, 0].shape
            )
        buffer.actions[:, 0] = np.concatenate([np.stack(episode.actions) for episode in episodes])
        buffer.rewards[:, 0] = np.concatenate([episode.rewards for episode in episodes])
        buffer.values[:, 0] = np.concatenate([episode.values for episode in episodes])
        buffer.log_probs[:, 0] = np.concatenate([episode.log_probs for episode in episodes])
        buffer.returns[:, 0] = np.concatenate(returns)
        buffer.advantages[:, 0] = np.concatenate(advantages)
        buffer.episode_starts[:, 0] = np.concatenate([np.arange(len(episode.rewards)) == 0 for episode in episodes])
        buffer.pos, buffer.full = size, True
        return buffer
