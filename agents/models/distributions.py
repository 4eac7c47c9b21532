"""One-tensor action distributions for the env's MultiDiscrete actions (the same law as SB3's).

SB3's ``MultiCategoricalDistribution`` and sb3-contrib's ``MaskableMultiCategoricalDistribution``
build one ``torch.distributions.Categorical`` per action dimension (33 of them for 32 job slots and
a lending level) at every forward pass, and loop over them to sample, score and take entropies:
most of a rollout step's and an update's CPU time went there (``benchmarks/bench_learner.py``).
:class:`PaddedMultiCategorical` holds the whole action as one (batch, dimensions, choices) tensor
of logits, the dimensions with fewer choices padded with logits that have probability 0, and does
each operation in a few batched tensor calls:

* the same parameters: its ``proba_distribution_net`` is the same ``Linear`` layer (flat logits,
  dimension after dimension), so checkpoints are interchangeable with SB3's distributions;
* the same law: per dimension a softmax over its own choices; masked choices get the logit -1e8,
  as sb3-contrib's masking does, and contribute 0 to the entropy; ``mode`` is the per-dimension
  argmax of the masked logits (SB3 takes it after normalising, which shifts each dimension by
  one constant: the same choice, the first maximal one on ties, unless the shift rounds two
  logits within an ulp of each other together);
* sampling draws from the same per-dimension categorical laws, but in one call, so a seeded run's
  random actions differ from those of SB3's per-dimension loop.

:func:`use_padded_distribution` installs it on a policy (SB3 ``PPO`` and ``MaskablePPO`` policies,
the MLP and the set architectures); :func:`agents.trainers.ppo.build_model` and the project's checkpoint
loader do so for every model they make.

:func:`distribution_checks` turns torch's validation of distribution arguments on or off for a
block (training runs without it unless ``--distribution-checks``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableMultiCategoricalDistribution
from stable_baselines3.common.distributions import MultiCategoricalDistribution

MASKED_LOGIT = -1e8
"""Logit of a masked choice (sb3-contrib's value)."""
PADDING_LOGIT = -1e9
"""Logit of a padding choice: below every masked one, so that the argmax of a fully masked
dimension is its first real choice, as with SB3; finite, so that no gradient is NaN."""

Self = TypeVar("Self", bound="_PaddedMixin")


class _PaddedMixin:
    """The padded implementation; the two public classes add SB3's or sb3-contrib's base class so
    that the policies' ``isinstance`` checks accept them."""

    action_dims: list[int]

    def _setup(self, action_dims: list[int]) -> None:
        dims = [int(d) for d in action_dims]
        width = max(dims)
        # flat logit index of each padded cell (dimension, choice), and which cells are real
        offsets = np.concatenate(([0], np.cumsum(dims)[:-1]))
        choice = np.arange(width)
        real = choice[None, :] < np.asarray(dims)[:, None]
        index = np.where(real, offsets[:, None] + choice[None, :], 0)
        self._index = th.as_tensor(index.reshape(-1), dtype=th.long)
        self._real = th.as_tensor(real)
        self._shape = (len(dims), width)
        self._logits: th.Tensor | None = None
        self._raw: th.Tensor | None = None
        self._allowed: th.Tensor | None = None

    def _padded(self, flat: th.Tensor) -> th.Tensor:
        """(batch, sum of dims) -> (batch, dims, width), padding cells unspecified."""
        index = self._index if self._index.device == flat.device else self._index.to(flat.device)
        self._index = index
        return flat.index_select(1, index).view(flat.shape[0], *self._shape)

    def proba_distribution(self: Self, action_logits: th.Tensor) -> Self:
        """Set the flat logits (batch, sum of dims); clears any masking."""
        flat = action_logits.reshape(-1, sum(self.action_dims))
        real = self._real if self._real.device == flat.device else self._real.to(flat.device)
        self._real = real
        self._raw = self._padded(flat)
        self._allowed = real.expand_as(self._raw)
        self._set_logits()
        return self

    def apply_masking(self, masks: Any) -> None:
        """Give masked choices (False in ``masks``, flat per action or (batch, sum of dims)) the
        logit -1e8; ``None`` removes the masking."""
        assert self._raw is not None, "call proba_distribution first"
        real = self._real
        if masks is None:
            self._allowed = real.expand_as(self._raw)
        else:
            flat = th.as_tensor(masks, dtype=th.bool, device=self._raw.device).reshape(-1, sum(self.action_dims))
            self._allowed = self._padded(flat) & real
        self._set_logits()

    def _set_logits(self) -> None:
        self._logits = None  # normalised when first needed (masking usually follows at once)

    def _masked(self) -> th.Tensor:
        """The padded logits with masked choices at -1e8 and padding at -1e9 (batch, dims, width)."""
        assert self._raw is not None and self._allowed is not None, "call proba_distribution first"
        fill = th.where(self._real, MASKED_LOGIT, PADDING_LOGIT).to(self._raw.dtype)
        return th.where(self._allowed, self._raw, fill)

    def _log_probs(self) -> th.Tensor:
        """Per-dimension log-softmax of the masked, padded logits (batch, dims, width)."""
        if self._logits is None:
            logits = self._masked()
            self._logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        return self._logits

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        """Log-probability of each action (batch, dims), summed over dimensions."""
        logp = self._log_probs()
        picked = logp.gather(2, actions.long().reshape(logp.shape[0], -1, 1)).squeeze(2)
        return picked.sum(dim=1)

    def entropy(self) -> th.Tensor:
        """Entropy per action, summed over dimensions; masked and padding choices add 0."""
        logp = self._log_probs()
        assert self._allowed is not None
        p_log_p = th.where(self._allowed, logp.exp() * logp, th.zeros_like(logp))
        return -p_log_p.sum(dim=(1, 2))

    def sample(self) -> th.Tensor:
        """One draw per dimension from its categorical law."""
        logp = self._log_probs()
        batch, dims, width = logp.shape
        return th.multinomial(logp.exp().reshape(-1, width), 1).reshape(batch, dims)

    def mode(self) -> th.Tensor:
        """The most likely choice per dimension (the first one on ties): the argmax of the masked
        logits, which the normalisation shifts by one constant per dimension."""
        return self._masked().argmax(dim=2)

    def actions_from_params(self, action_logits: th.Tensor, deterministic: bool = False) -> th.Tensor:
        """Actions drawn (or the mode) from flat logits."""
        self.proba_distribution(action_logits)
        return self.mode() if deterministic else self.sample()

    def log_prob_from_params(self, action_logits: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Sampled actions and their log-probabilities, from flat logits."""
        actions = self.actions_from_params(action_logits)
        return actions, self.log_prob(actions)


class PaddedMultiCategorical(_PaddedMixin, MultiCategoricalDistribution):
    """MultiDiscrete actions for SB3 ``PPO`` policies (see the module docstring)."""

    def __init__(self, action_dims: list[int]) -> None:
        MultiCategoricalDistribution.__init__(self, list(action_dims))
        self._setup(self.action_dims)


class MaskablePaddedMultiCategorical(_PaddedMixin, MaskableMultiCategoricalDistribution):
    """MultiDiscrete actions with masks for sb3-contrib ``MaskablePPO`` policies."""

    def __init__(self, action_dims: list[int]) -> None:
        MaskableMultiCategoricalDistribution.__init__(self, list(action_dims))
        self._setup(self.action_dims)


def use_padded_distribution(policy: Any) -> None:
    """Give ``policy`` (an SB3 or sb3-contrib actor-critic policy) the padded distribution of its
    MultiDiscrete action space; other action spaces keep theirs. Parameters are untouched."""
    space = policy.action_space
    if not isinstance(space, spaces.MultiDiscrete):
        return
    dims = [int(d) for d in np.asarray(space.nvec).reshape(-1)]
    if isinstance(policy.action_dist, MaskableMultiCategoricalDistribution):
        policy.action_dist = MaskablePaddedMultiCategorical(dims)
    elif isinstance(policy.action_dist, MultiCategoricalDistribution):
        policy.action_dist = PaddedMultiCategorical(dims)


@contextmanager
def distribution_checks(enabled: bool) -> Iterator[None]:
    """torch's validation of distribution arguments on (``enabled``) or off for the block, then as
    it was (torch keeps one default for every ``Distribution`` of the process).

    MaskablePPO built one ``Categorical`` per action dimension (33 by default) at every step;
    validating their arguments cost ~30% of the training time and checks nothing the env's
    actions need, so training runs with it off unless ``--distribution-checks``."""
    before = th.distributions.Distribution._validate_args
    th.distributions.Distribution.set_default_validate_args(bool(enabled))
    try:
        yield
    finally:
        th.distributions.Distribution.set_default_validate_args(before)
