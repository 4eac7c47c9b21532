"""The one-tensor MultiDiscrete distributions give the law SB3's per-dimension ones give.

Log-probabilities, entropies and modes are compared with SB3's ``MultiCategoricalDistribution``
and sb3-contrib's ``MaskableMultiCategoricalDistribution`` on random logits and masks (a fully
masked dimension included); samples never take a masked choice and follow the probabilities;
gradients stay finite; every model the project builds or loads uses it, and a policy's
``evaluate_actions`` is the same with either distribution.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.distributions import MaskableMultiCategoricalDistribution
from stable_baselines3.common.distributions import MultiCategoricalDistribution

from agents.models.distributions import (
    MaskablePaddedMultiCategorical,
    PaddedMultiCategorical,
    use_padded_distribution,
)
from agents.trainers.ppo import build_model, make_vec_env_for
from traces.generate import generate_workload

DIMS = [5, 5, 5, 3]


@pytest.fixture(scope="module")
def tiny_workload():
    return generate_workload("tiny", 1, train={"num_jobs": 10}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0})


def _logits_and_masks(seed: int, batch: int = 7) -> tuple[th.Tensor, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = th.as_tensor(rng.normal(0.0, 3.0, (batch, sum(DIMS))), dtype=th.float32)
    masks = rng.random((batch, sum(DIMS))) < 0.6
    masks[0, :5] = False  # a fully masked dimension
    masks[:, 5] = True  # at least one valid choice elsewhere
    return logits, masks


def _actions(masks: np.ndarray, seed: int) -> th.Tensor:
    rng = np.random.default_rng(seed)
    out = []
    for row in masks:
        picks, start = [], 0
        for d in DIMS:
            valid = np.flatnonzero(row[start : start + d])
            picks.append(int(rng.choice(valid)) if valid.size else int(rng.integers(d)))
            start += d
        out.append(picks)
    return th.as_tensor(out)


@pytest.mark.parametrize("seed", range(5))
def test_masked_law_equals_sb3_contrib(seed: int) -> None:
    logits, masks = _logits_and_masks(seed)
    ours = MaskablePaddedMultiCategorical(DIMS).proba_distribution(logits)
    ours.apply_masking(masks)
    theirs = MaskableMultiCategoricalDistribution(DIMS).proba_distribution(logits)
    theirs.apply_masking(masks)
    actions = _actions(masks, seed)
    assert th.allclose(ours.log_prob(actions), theirs.log_prob(actions), atol=1e-4)
    assert th.allclose(ours.entropy(), theirs.entropy(), atol=1e-5)
    assert th.equal(ours.mode(), theirs.mode())
    ours.apply_masking(None)  # masking removed: the plain law again
    theirs.apply_masking(None)
    assert th.allclose(ours.log_prob(actions), theirs.log_prob(actions), atol=1e-4)


@pytest.mark.parametrize("seed", range(5))
def test_unmasked_law_equals_sb3(seed: int) -> None:
    logits, masks = _logits_and_masks(seed)
    ours = PaddedMultiCategorical(DIMS).proba_distribution(logits)
    theirs = MultiCategoricalDistribution(DIMS).proba_distribution(logits)
    actions = _actions(np.ones_like(masks), seed)
    assert th.allclose(ours.log_prob(actions), theirs.log_prob(actions), atol=1e-4)
    assert th.allclose(ours.entropy(), theirs.entropy(), atol=1e-5)
    assert th.equal(ours.mode(), theirs.mode())


def test_samples_respect_masks_and_follow_the_probabilities() -> None:
    logits, masks = _logits_and_masks(3, batch=2)
    repeat = 20_000
    dist = MaskablePaddedMultiCategorical(DIMS).proba_distribution(logits.repeat(repeat, 1))
    dist.apply_masking(np.tile(masks, (repeat, 1)))
    th.manual_seed(0)
    samples = dist.sample().reshape(repeat, 2, len(DIMS))
    reference = MaskableMultiCategoricalDistribution(DIMS).proba_distribution(logits)
    reference.apply_masking(masks)
    for d, (size, cat) in enumerate(zip(DIMS, reference.distributions, strict=True)):
        start = sum(DIMS[:d])
        for row in range(2):
            picked = samples[:, row, d].numpy()
            allowed = masks[row, start : start + size]
            if allowed.any():
                assert allowed[picked].all()
            freq = np.bincount(picked, minlength=size) / repeat
            assert np.abs(freq - cat.probs[row].numpy()).max() < 0.015


def test_gradients_are_finite_with_masks() -> None:
    logits, masks = _logits_and_masks(1)
    logits.requires_grad_(True)
    dist = MaskablePaddedMultiCategorical(DIMS).proba_distribution(logits)
    dist.apply_masking(masks)
    loss = -(dist.log_prob(_actions(masks, 1)).sum() + dist.entropy().sum())
    loss.backward()
    assert logits.grad is not None and th.isfinite(logits.grad).all()


def test_non_multidiscrete_policies_keep_their_distribution() -> None:
    class Stub:
        action_space = __import__("gymnasium").spaces.Discrete(3)
        action_dist = object()

    stub = Stub()
    before = stub.action_dist
    use_padded_distribution(stub)
    assert stub.action_dist is before


@pytest.mark.parametrize("algo", ["ppo", "maskable_ppo"])
def test_models_use_it_and_evaluate_actions_like_sb3(algo: str, tiny_workload) -> None:
    env = make_vec_env_for(tiny_workload, n_envs=1, env_kwargs={"max_jobs": 8})
    model = build_model(algo, env, hyperparams={"n_steps": 32, "batch_size": 32})
    expected = MaskablePaddedMultiCategorical if algo == "maskable_ppo" else PaddedMultiCategorical
    assert type(model.policy.action_dist) is expected
    obs = env.reset()
    obs_t, _ = model.policy.obs_to_tensor(obs)
    masks = np.stack(env.env_method("action_masks"))
    kwargs = {"action_masks": masks} if algo == "maskable_ppo" else {}
    with th.no_grad():
        actions, _, _ = model.policy(obs_t, deterministic=True, **kwargs)
        _, ours_logp, ours_ent = model.policy.evaluate_actions(obs_t, actions, **kwargs)
        original = MaskableMultiCategoricalDistribution if algo == "maskable_ppo" else MultiCategoricalDistribution
        model.policy.action_dist = original(list(map(int, env.action_space.nvec)))
        sb3_actions, _, _ = model.policy(obs_t, deterministic=True, **kwargs)
        _, sb3_logp, sb3_ent = model.policy.evaluate_actions(obs_t, actions, **kwargs)
    assert th.equal(actions, sb3_actions)
    assert th.allclose(ours_logp, sb3_logp, atol=1e-4)
    assert th.allclose(ours_ent, sb3_ent, atol=1e-4)
    env.close()
