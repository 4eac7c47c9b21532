"""Warm-starting PPO from an expert scheduler: demonstrations and behaviour cloning.

Learning per-slot GPU targets from scratch takes far more than the hour of CPU a user should
need, so ``train_policy.py --pretrain-expert ats`` first clones a heuristic (DeepBoot's ATS by
default) and only then lets PPO improve on it, the usual warm start of RL schedulers.

* The expert's label for each state is the env codec's
  :meth:`~deepboot_env.env.action.ActionCodec.expert_action`: in target mode each job's GPU count
  rounded *down* to a bucket and the smallest lending level that covers what the expert borrowed
  (on the validation workloads ATS passed through this encoding reaches within a few percent of
  ATS itself, both directions); in residual mode the expert must be the base policy, whose label
  is exactly the neutral action.
* :func:`collect_demonstrations`: run the expert through ``DeepBootEnv`` episodes and record
  (observation, expert action, action mask, discounted return). With ``noise > 0`` each slot's
  executed action is replaced, with that probability, by a random valid choice while the label
  stays the expert's (DART-style noise injection: the clone sees the states its own small errors
  lead to and learns to recover from them).
* :func:`pretrain`: maximum likelihood of the expert actions under the masked policy (cross-entropy
  per action dimension) plus a value-function regression on the returns, so PPO starts with a
  critic that already matches the cloned policy and its first updates do not undo the cloning.
* A codec with a neutral action (residual mode): after cloning, :func:`init_residual_policy` makes
  the actor state-independent again: the neutral choice with probability ``neutral_prob`` per
  action dimension, the rest spread over the other choices. The deterministic policy is then
  exactly the base policy while sampling explores small corrections around it; the critic keeps
  what it learnt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from agents.saved.policy_adapter import uses_masks
from deepboot_env.env import DeepBootEnv
from deepboot_env.policy import make_policy
from deepboot_env.pool import run_pool


@dataclass
class Demonstrations:
    """Expert transitions: observations (dict of stacked arrays), actions, masks and returns."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    masks: np.ndarray
    returns: np.ndarray
    episode_jct: list[float]

    def __len__(self) -> int:
        return len(self.actions)


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """Return-to-go of every step of one episode."""
    out = np.zeros(len(rewards), dtype=np.float64)
    acc = 0.0
    for i in range(len(rewards) - 1, -1, -1):
        acc = rewards[i] + gamma * acc
        out[i] = acc
    return out


@dataclass(frozen=True)
class DemoEpisode:
    """One demonstration episode to run: the expert on a workload at a noise level; the env is
    reset with ``seed`` and the perturbations are drawn from seed ``(seed, index)``."""

    expert: str
    workload: Any
    env_kwargs: dict[str, Any]
    gamma: float
    noise: float
    seed: int
    index: int

    def __str__(self) -> str:
        name = getattr(self.workload, "name", self.workload)
        return f"{self.expert} on {name}, noise {self.noise:g}"


def run_demo_episode(episode: DemoEpisode) -> Demonstrations:
    """The transitions of one :class:`DemoEpisode` (a worker's job)."""
    rng = np.random.default_rng((episode.seed, episode.index))
    policy = make_policy(episode.expert)
    env = DeepBootEnv(workload=[episode.workload], **episode.env_kwargs)
    obs, _ = env.reset(seed=episode.seed)
    obs_parts: dict[str, list[np.ndarray]] = {}
    actions, masks, rewards = [], [], []
    done = False
    while not done:
        mask = env.action_masks()
        label = env.codec.expert_action(episode.expert, policy, env.state)
        for key, value in obs.items():
            obs_parts.setdefault(key, []).append(value)
        actions.append(label)
        masks.append(mask)
        p = episode.noise
        nvec = cast(spaces.MultiDiscrete, env.action_space).nvec  # cloning needs discrete actions
        executed = perturb(label, mask, nvec, p, rng) if p > 0 else label
        obs, reward, terminated, truncated, info = env.step(executed)
        rewards.append(reward)
        done = terminated or truncated
    return Demonstrations(
        obs={k: np.stack(v) for k, v in obs_parts.items()},
        actions=np.stack(actions),
        masks=np.stack(masks),
        returns=discounted_returns(rewards, episode.gamma).astype(np.float32),
        episode_jct=[float(info["episode_metrics"]["train_jct_mean"])],
    )


def collect_demonstrations(
    expert: str,
    workloads: Sequence[Any],
    env_kwargs: dict[str, Any] | None = None,
    gamma: float = 0.995,
    noise: Sequence[float] = (0.0,),
    seed: int = 0,
    jobs: int = 1,
    progress: bool = False,
) -> Demonstrations:
    """Run ``expert`` (a registry name) on every workload once per noise level, in ``jobs``
    worker processes (the pool of ``deepboot compare``,
    :func:`deepboot_env.pool.run_pool`; a progress bar on stderr if
    ``progress``). Episode i draws its perturbations from seed ``(seed, i)``, so the result does
    not depend on ``jobs``.

    Raises:
        ValueError: unknown expert, or a noise level outside [0, 1).
    """
    for p in noise:
        if not 0.0 <= p < 1.0:
            raise ValueError(f"demonstration noise must lie in [0, 1), got {p}")
    make_policy(expert)  # an unknown expert fails here, not in a worker
    episodes = [
        DemoEpisode(expert, workload, dict(env_kwargs or {}), gamma, float(p), seed, index=i)
        for i, (p, workload) in enumerate((p, w) for p in noise for w in workloads)
    ]
    parts = run_pool(run_demo_episode, episodes, jobs, progress, "warm start: demonstrations")
    return Demonstrations(
        obs={k: np.concatenate([d.obs[k] for d in parts]) for k in parts[0].obs},
        actions=np.concatenate([d.actions for d in parts]),
        masks=np.concatenate([d.masks for d in parts]),
        returns=np.concatenate([d.returns for d in parts]),
        episode_jct=[j for d in parts for j in d.episode_jct],
    )


def perturb(action: np.ndarray, mask: np.ndarray, nvec: np.ndarray, p: float, rng: np.random.Generator) -> np.ndarray:
    """``action`` with each dimension replaced, with probability ``p``, by a random valid choice."""
    out = action.copy()
    offsets = np.concatenate([[0], np.cumsum(nvec)])
    for d in np.flatnonzero(rng.random(len(action)) < p):
        valid = np.flatnonzero(mask[offsets[d] : offsets[d + 1]])
        if len(valid) > 1:
            out[d] = int(rng.choice(valid))
    return out


def pretrain(
    model: Any,
    demos: Demonstrations,
    epochs: int = 10,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    vf_coef: float = 0.5,
    seed: int = 0,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[dict[str, float]]:
    """Behaviour cloning of ``demos`` into ``model.policy`` (PPO or MaskablePPO); per-epoch losses
    (also passed, with the epoch from 1, to ``on_epoch`` as each epoch ends). ``should_stop`` is
    asked before every batch: once true, cloning ends there (the epoch in progress is not
    reported) and the value head is rescaled as after a full run.

    The value head regresses the (scaled) returns; the scale is the returns' RMS so both losses
    have comparable magnitudes, and it is undone exactly (the head's last layer is rescaled
    afterwards) so PPO sees values in reward units.
    """
    import torch  # lazy: torch is slow to import (the demonstration workers need none)

    if epochs < 0 or batch_size < 1:
        raise ValueError(f"pretrain needs epochs >= 0 and batch_size >= 1, got {epochs}, {batch_size}")
    policy = model.policy
    device = policy.device
    masked = uses_masks(model)
    obs_t = {k: torch.as_tensor(v, device=device) for k, v in demos.obs.items()}
    act_t = torch.as_tensor(demos.actions, device=device)
    mask_t = torch.as_tensor(demos.masks, device=device)
    scale = float(np.sqrt(np.mean(demos.returns.astype(np.float64) ** 2))) or 1.0
    ret_t = torch.as_tensor(demos.returns / scale, device=device)
    with _values_divided(policy.value_net, scale):  # predict returns / scale during cloning
        optimizer = torch.optim.Adam(policy.parameters(), lr=learning_rate)
        gen = torch.Generator().manual_seed(seed)
        history: list[dict[str, float]] = []
        policy.set_training_mode(True)
        try:
            for _ in range(epochs):
                order = torch.randperm(len(demos), generator=gen).to(device)
                sums = {"bc_loss": 0.0, "value_loss": 0.0, "mean_prob": 0.0}
                for start in range(0, len(demos), batch_size):
                    if should_stop is not None and should_stop():
                        return history
                    idx = order[start : start + batch_size]
                    batch = ({k: v[idx] for k, v in obs_t.items()}, act_t[idx], mask_t[idx] if masked else None)
                    _clone_batch(policy, optimizer, batch, ret_t[idx], vf_coef, sums)
                history.append({k: v / len(demos) for k, v in sums.items()})
                if on_epoch is not None:
                    on_epoch(len(history), history[-1])
        finally:
            policy.set_training_mode(False)
    return history


@contextmanager
def _values_divided(value_layer: Any, scale: float) -> Iterator[None]:
    """The value head's last layer divided by ``scale`` for the block, then multiplied back."""
    import torch  # lazy: torch is slow to import (the demonstration workers need none)

    with torch.no_grad():
        value_layer.weight.div_(scale)
        value_layer.bias.div_(scale)
    try:
        yield
    finally:
        with torch.no_grad():
            value_layer.weight.mul_(scale)
            value_layer.bias.mul_(scale)


def _clone_batch(
    policy: Any, optimizer: Any, batch: tuple[Any, Any, Any], returns: Any, vf_coef: float, sums: dict[str, float]
) -> None:
    """One gradient step of cloning on ``batch`` (observations, expert actions, masks or None)
    and the scaled ``returns``; adds the batch's losses (times its size) and mean probability of
    the expert's choices to ``sums``."""
    import torch  # lazy: torch is slow to import (the demonstration workers need none)

    obs, actions, masks = batch
    if masks is not None:
        values, log_prob, _ = policy.evaluate_actions(obs, actions, action_masks=masks)
    else:
        values, log_prob, _ = policy.evaluate_actions(obs, actions)
    bc_loss = -log_prob.mean() / actions.shape[1]
    value_loss = torch.nn.functional.mse_loss(values.flatten(), returns)
    loss = bc_loss + vf_coef * value_loss
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    n = len(actions)
    sums["bc_loss"] += bc_loss.item() * n
    sums["value_loss"] += value_loss.item() * n
    sums["mean_prob"] += torch.exp(log_prob.detach() / actions.shape[1]).sum().item()


def init_residual_policy(model: Any, neutral_action: np.ndarray, neutral_prob: float = 0.9) -> None:
    """Make the actor state-independent around ``neutral_action`` (the env codec's, e.g. zero
    corrections at the top lending level): in every action dimension the neutral choice gets
    probability ``neutral_prob`` when all choices are valid, the others share the rest equally
    (masked choices drop out).

    Raises:
        ValueError: if ``neutral_prob`` is not in (0, 1) or the action does not fit the model.
    """
    import torch  # lazy: torch is slow to import (the demonstration workers need none)

    if not 0.0 < neutral_prob < 1.0:
        raise ValueError(f"neutral_prob must lie in (0, 1), got {neutral_prob}")
    nvec = np.asarray(model.action_space.nvec, dtype=np.int64).reshape(-1)
    neutral = np.asarray(neutral_action, dtype=np.int64).reshape(-1)
    if neutral.shape != nvec.shape or np.any(neutral < 0) or np.any(neutral >= nvec):
        raise ValueError(f"neutral action {neutral.tolist()} does not fit the action space {model.action_space}")
    bias = np.zeros(int(nvec.sum()), dtype=np.float32)
    offsets = np.concatenate([[0], np.cumsum(nvec)])
    for d, n in enumerate(nvec):
        if n > 1:
            bias[offsets[d] + neutral[d]] = math.log(neutral_prob * (n - 1) / (1.0 - neutral_prob))
    if hasattr(model.policy, "set_state_independent"):  # the set policy: shared per-slot head
        model.policy.set_state_independent(bias)
        return
    layer = model.policy.action_net
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.copy_(torch.as_tensor(bias, device=layer.bias.device))
