"""A set-based actor-critic for DeepBoot observations (``train_policy.py --policy-arch set``).

The ``mlp`` policy flattens the 32 job slots into one vector: each slot's weights are learned
separately, and the policy depends on the order and the number of slots. This policy treats the
active jobs as a *set*, as Decima (Mao et al., SIGCOMM 2019) treats a job DAG's stages:

* one **job encoder**, shared by every slot: a job's features (and, in residual mode, the base
  policy's GPUs for it) -> an embedding of ``embed_dim``;
* ``attention_layers`` blocks of masked multi-head **self-attention** over the present jobs
  (pre-norm Transformer blocks without positional encoding; 0 layers: DeepSets), then
  ``pool_layers`` **pooled-context** blocks, in which each job reads the mean of its state's jobs
  (the equivariant layer of DeepSets: a quarter of an attention block's arithmetic per job);
* a permutation-invariant **summary**: masked mean and max of the job embeddings, with the
  embedding of every non-slot entry (``cluster``, ``outlook``), through one layer;
* **per-job logits** from shared weights applied to ``[job embedding, summary]``, and the lending
  level's logits from the summary; the **critic** reads the summary alone.

Permuting the job slots therefore permutes the per-slot action distributions and leaves the
lending distribution and the value unchanged (``tests/agents/test_set_policy.py``). The per-job
layers run on the present jobs only, packed (a state holds 5-9 of 32 slots on average, so this is
where the update's time goes); empty slots take no part in attention or pooling, and an empty slot's
logits are the shared head of the empty row's embedding with the summary (MaskablePPO masks those
actions; in the score mode they do not act).

The network is SB3's ``mlp_extractor``: its policy latent *is* the flat vector of logits (per
slot, then lending), so the policy's ``action_net`` is the identity and everything else (PPO and
MaskablePPO updates, saving, loading, ``predict``, CUDA) is SB3's own. The policies are
:class:`SetActorCriticPolicy` (PPO) and :class:`MaskableSetActorCriticPolicy` (MaskablePPO);
:func:`set_policy_class` picks one. Observation entries named in :data:`SLOT_KEYS` hold one row
per slot; every other entry is global.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, ClassVar, NamedTuple, cast

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy
from stable_baselines3.common.policies import MultiInputActorCriticPolicy
from torch import nn
from torch.nn import functional as F

from agents.hyperparameters import SET_POLICY_KWARGS, SET_SIZE_MAXIMUMS, SET_SIZE_MINIMUMS
from agents.models.described_policy import DescribedPolicyMixin
from agents.models.env_shape import spaces_env_shape
from deepboot_env.sim.apps import APP_NAMES

SLOT_KEYS: tuple[str, ...] = ("jobs", "base", "prior")
"""Observation entries that hold one row per job slot (``jobs``: the slot matrix; ``base``: the
residual base policy's GPUs per slot; ``prior``: the score mode's prior log-weight per slot). The
first feature of a ``jobs`` row is ``present``."""

NOISE_KEY = "noise"
"""The score mode's exploration codes (uniform per slot, held per job, then the lending code):
read by the sampler of :class:`SetActorCriticPolicy`, never by the network."""


LAYOUT_COLUMNS = 16
"""The compact layout's width is a multiple of this: torch's CPU softmax is vectorised over a last
dimension of 16 or more and takes about 10x longer per element under 16 (measured: width 13,
3.8 ms forward and backward; width 16, 0.55 ms), and the padded columns cost little else."""


class _JobLayout(NamedTuple):
    """Where the packed jobs sit in the compact ``(batch, width)`` layout that attention works on:
    each observation's jobs side by side from column 0, ``width`` the most jobs of any
    observation in the batch rounded up to :data:`LAYOUT_COLUMNS`, not the 32 slots: attention
    costs what ``width`` squared costs (rollouts on ``train`` hold 2-20 jobs per state on
    average, 29 at most)."""

    place: tuple[th.Tensor, th.Tensor]
    """(observation, column) of every packed job."""
    width: int
    """Columns of the layout (a multiple of :data:`LAYOUT_COLUMNS`)."""
    keys: th.Tensor
    """(batch, 1, width) additive mask: 0 where a job is, -inf past the observation's jobs
    (an observation without jobs has no queries; its keys stay open, so that no padded row
    holds NaN, even where nothing reads it)."""


def _job_layout(present: th.Tensor, where: tuple[th.Tensor, th.Tensor], dtype: th.dtype) -> _JobLayout:
    """The compact layout of ``present``'s jobs, packed at ``where`` (its row-major order)."""
    counts = present.sum(dim=1, keepdim=True)
    column = (present.cumsum(dim=1) - 1)[where]
    most = int(counts.max()) if present.shape[0] else 0
    width = max(1, -(-most // LAYOUT_COLUMNS)) * LAYOUT_COLUMNS
    open_key = th.arange(width, device=present.device) < counts
    open_key |= counts == 0
    keys = th.zeros(open_key.shape, dtype=dtype, device=present.device).masked_fill_(~open_key, float("-inf"))
    return _JobLayout((where[0], column), width, keys[:, None, :])


class _SegmentPeak(th.autograd.Function):
    """The largest of each observation's packed job embeddings in every dimension (zeros for
    an observation without jobs): ``scatter_reduce(..., "amax", include_self=False)`` with a
    backward of its own.

    The gradient is the one torch gives (a job at its observation's maximum gets the gradient
    split over the jobs tied there, the others none), computed with one-dimensional
    ``index_select``/``index_add_`` where torch's backward gathers and scatters through a
    (jobs, dim) index: 0.59 ms instead of 1.04 ms forward and backward for 256 observations of
    7 jobs (measured), in every minibatch of every update. (Where an observation's maximum is
    exactly 0, torch also counts the zero it starts from as a tie: two jobs at 0 get a third of
    the gradient each, here a half. Without attention or pooled-context blocks such zeros come
    out of the job encoder's ReLU, whose backward sends none of it on either way; after a block's
    residual sum a maximum of exactly 0 does not occur in practice.)"""

    @staticmethod
    def forward(ctx: Any, h: th.Tensor, batch_index: th.Tensor, batch: int) -> th.Tensor:
        spread = batch_index.unsqueeze(1).expand_as(h)
        peak = h.new_zeros(batch, h.shape[1]).scatter_reduce(0, spread, h, "amax", include_self=False)
        ctx.save_for_backward(h, batch_index, peak)
        return peak

    @staticmethod
    def backward(ctx: Any, grad: th.Tensor) -> tuple[th.Tensor, None, None]:
        h, batch_index, peak = ctx.saved_tensors
        at_peak = (h == peak.index_select(0, batch_index)).to(grad.dtype)
        ties = grad.new_zeros(grad.shape).index_add_(0, batch_index, at_peak)
        return (grad / ties.clamp(min=1.0)).index_select(0, batch_index) * at_peak, None, None


def _segment_mean(h: th.Tensor, batch_index: th.Tensor, count: th.Tensor) -> th.Tensor:
    """(batch, dim): the mean of each observation's packed rows of ``h`` (jobs, dim), ``batch_index``
    each row's observation and ``count`` (batch, 1) the rows per observation (at least 1)."""
    return h.new_zeros(count.shape[0], h.shape[1]).index_add_(0, batch_index, h) / count


class _AttentionBlock(nn.Module):
    """A pre-norm Transformer encoder block over the present jobs' embeddings.

    The embeddings arrive *packed*, one row per present job (``(jobs, dim)``), so that the
    per-job layers (norms, projections, feed-forward) cost what the jobs cost, not what 32 slots
    cost. Only the attention itself works on a padded layout, the compact one of
    :class:`_JobLayout`. The weights are those of ``nn.MultiheadAttention`` (checkpoints keep its
    parameter names); the call is functional because the module's own forward takes padded
    input."""

    def __init__(self, dim: int, heads: int, activation: type[nn.Module]) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.feed_forward = nn.Sequential(nn.Linear(dim, 2 * dim), activation(), nn.Linear(2 * dim, dim))

    def forward(self, h: th.Tensor, layout: _JobLayout) -> th.Tensor:
        """``h`` (jobs, dim), packed as ``layout`` places them."""
        jobs, dim = h.shape
        heads = self.heads
        head_dim = dim // heads
        mha = self.attention
        x = self.norm1(h)
        q, k, v = (
            self._padded(F.linear(x, weight, bias).view(jobs, heads, head_dim), layout)
            for weight, bias in zip(mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3), strict=True)
        )
        # plain matmuls over (heads, batch, columns, head_dim): on the CPU, scaled_dot_product_attention
        # with a mask took 1.3-1.4x longer, and a (batch, columns, 3 * dim) layout more in copies
        scores = th.matmul(q, k.transpose(-1, -2)) * head_dim**-0.5 + layout.keys
        mixed = th.matmul(th.softmax(scores, dim=-1), v)[:, layout.place[0], layout.place[1]]
        h = h + F.linear(mixed.transpose(0, 1).reshape(jobs, dim), mha.out_proj.weight, mha.out_proj.bias)
        return h + self.feed_forward(self.norm2(h))

    @staticmethod
    def _padded(packed: th.Tensor, layout: _JobLayout) -> th.Tensor:
        """(heads, batch, columns, head_dim) of ``packed`` (jobs, heads, head_dim), zero past the jobs."""
        heads, head_dim = packed.shape[1:]
        padded = packed.new_zeros(heads, layout.keys.shape[0], layout.width, head_dim)
        padded[:, layout.place[0], layout.place[1]] = packed.transpose(0, 1)
        return padded


class _PoolBlock(nn.Module):
    """A pooled-context block over the present jobs' packed embeddings: each job's
    ``h + W_o act(W_s x + W_p mean(x))``, ``x = LayerNorm(h)`` and the mean over its observation's
    jobs (the permutation-equivariant layer of DeepSets, Zaheer et al. 2017, pre-norm and
    residual as the attention block is). Every job reads the others through their mean alone: two
    ``dim x dim`` products per job and one per observation, where an attention block costs eight
    per job and its scores (the set learner's speed target, docs/results.md §7)."""

    def __init__(self, dim: int, activation: type[nn.Module]) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.own = nn.Linear(dim, dim)
        self.pooled = nn.Linear(dim, dim, bias=False)
        self.act = activation()
        self.out = nn.Linear(dim, dim)

    def forward(self, h: th.Tensor, batch_index: th.Tensor, count: th.Tensor) -> th.Tensor:
        """``h`` (jobs, dim) packed; ``batch_index`` each job's observation; ``count`` (batch, 1)
        the jobs per observation (at least 1)."""
        x = self.norm(h)
        context = self.pooled(_segment_mean(x, batch_index, count))
        return h + self.out(self.act(self.own(x) + context[batch_index]))


class _Encoded(NamedTuple):
    """What :meth:`SetNetwork.encode` makes of a batch of observations."""

    jobs: th.Tensor
    """(jobs, d): the present jobs' embeddings, packed in ``present``'s row-major order."""
    present: th.Tensor
    """(batch, slots) bool: where a job is."""
    where: tuple[th.Tensor, th.Tensor]
    """(observation, slot) of each packed job: ``present.nonzero(as_tuple=True)``, found once
    and used as the index of every gather and scatter between slots and packed jobs (a boolean
    mask index finds them again at each use, forward and backward)."""
    summary: th.Tensor
    """(batch, d): the permutation-invariant summary."""
    job_rows: th.Tensor
    """(jobs, features): the present jobs' observed rows, packed as ``jobs``."""


class SetNetwork(nn.Module):
    """The set encoder and its heads (SB3's ``mlp_extractor`` of the set policies).

    Args:
        observation_space: the env's ``Dict`` observation space.
        slots: job slots (the action's dimensions but the last).
        slot_choices: choices per slot.
        lend_levels: choices of the last action dimension.
        embed_dim: the width of the job and cluster embeddings.
        attention_heads: heads per attention block.
        attention_layers: attention blocks over the jobs.
        pool_layers: pooled-context blocks after the attention blocks (:class:`_PoolBlock`).
        application_scores: 1: a job's logits are one learned row per application (a table
            over the ``jobs`` rows' application one-hot), the same in every state; the lending
            logits and the critic still read the whole state. 2: that row plus a linear function
            (no bias, starting at zero) of the job's own features after the one-hot (its size,
            age, service, restarts, progress, speedups, lent share, stall and prior weight):
            scores that move with the job's state and stay per job, so still
            permutation-equivariant. 0: the slot head over the job's embedding and the summary.
        activation: the hidden layers' activation.
        firsts_apart: the score action's layout with width scores (``slot_choices`` = 1 + width
            classes): the slots' scores, then their width scores slot-major, then lending.

    ``forward`` takes the features SB3's ``CombinedExtractor`` makes of a Dict observation (each
    entry flattened, concatenated in the space's key order) and returns ``(logits, summary)``:
    ``latent_dim_pi = slots * slot_choices + lend_levels``, ``latent_dim_vf = embed_dim``.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        slots: int,
        slot_choices: int,
        lend_levels: int,
        embed_dim: int = SET_POLICY_KWARGS["embed_dim"],
        attention_heads: int = SET_POLICY_KWARGS["attention_heads"],
        attention_layers: int = SET_POLICY_KWARGS["attention_layers"],
        application_scores: int = SET_POLICY_KWARGS["application_scores"],
        pool_layers: int = SET_POLICY_KWARGS["pool_layers"],
        activation: type[nn.Module] = nn.ReLU,
        firsts_apart: bool = False,
    ) -> None:
        super().__init__()
        if embed_dim % attention_heads:
            raise ValueError(f"embed_dim {embed_dim} must be a multiple of attention_heads {attention_heads}")
        self.slots, self.slot_choices, self.lend_levels = slots, slot_choices, lend_levels
        self.firsts_apart = firsts_apart
        """Lay the flat outputs out as the score action with width scores does: every slot's first
        output, then the others slot-major, then lending (else slot-major throughout)."""
        self.slot_parts: list[tuple[int, int, int]] = []
        """(offset, size, per-slot width) of each slot entry in the flat features."""
        self.global_parts: list[tuple[int, int]] = []
        """(offset, size) of each global entry."""
        self._present_column = self._read_entries(observation_space, slots)
        """Column of the ``jobs`` rows' ``present`` feature in the stacked slot rows."""
        self._app_columns = slice(self._present_column + 1, self._present_column + 1 + len(APP_NAMES))
        """The ``jobs`` rows' application one-hot (``JOB_FEATURES``: present, then the one-hot)."""
        job_width = sum(width for _, _, width in self.slot_parts)
        self.job_width = job_width
        """Features of one job row (every slot entry's, side by side)."""
        global_width = sum(size for _, size in self.global_parts)
        d = embed_dim
        self.job_encoder = nn.Sequential(nn.Linear(job_width, d), activation(), nn.Linear(d, d), activation())
        self.blocks = nn.ModuleList(_AttentionBlock(d, attention_heads, activation) for _ in range(attention_layers))
        self.pools = nn.ModuleList(_PoolBlock(d, activation) for _ in range(pool_layers))
        self.global_encoder = nn.Sequential(nn.Linear(global_width, d), activation()) if global_width else None
        self.summary = nn.Sequential(nn.Linear(3 * d if global_width else 2 * d, d), activation())
        self.slot_head = nn.Sequential(nn.Linear(2 * d, d), activation(), nn.Linear(d, slot_choices))
        self.lend_head = nn.Sequential(nn.Linear(d, d), activation(), nn.Linear(d, lend_levels))
        self.application_table = nn.Linear(len(APP_NAMES), slot_choices) if application_scores else None
        """With ``application_scores``: the per-application logits (read through the one-hot)."""
        self._state_columns = slice(self._app_columns.stop, job_width)
        """The job row's columns after the one-hot: what the state scores read."""
        self.state_width = job_width - self._app_columns.stop
        """How many features the state scores read (whether the network has them or not)."""
        self.state_scores = nn.Linear(self.state_width, slot_choices, bias=False) if application_scores == 2 else None
        """With ``application_scores`` 2: the logits' linear part in the job's features (zeroed
        once the policy is built, so that they start as the table alone)."""
        self.value_head = nn.Sequential(nn.Linear(d, d), activation())
        self.latent_dim_pi = slots * slot_choices + lend_levels
        self.latent_dim_vf = d

    def _read_entries(self, observation_space: spaces.Dict, slots: int) -> int:
        """Fill :attr:`slot_parts` and :attr:`global_parts` from the observation's entries (the
        noise codes are neither); returns the ``present`` column of the stacked slot rows.

        Raises:
            ValueError: a slot entry that is not ``slots`` rows, or no ``jobs`` entry.
        """
        present = -1
        offset = column = 0
        for key, space in observation_space.spaces.items():
            size = int(np.prod(space.shape or ()))
            if key == NOISE_KEY:
                pass
            elif key in SLOT_KEYS:
                if size % slots:
                    raise ValueError(f"observation entry {key!r} of size {size} is not {slots} slot rows")
                if key == "jobs":
                    present = column
                self.slot_parts.append((offset, size, size // slots))
                column += size // slots
            else:
                self.global_parts.append((offset, size))
            offset += size
        if present < 0:
            raise ValueError("the observation has no 'jobs' entry")
        return present

    def output_layers(self) -> tuple[nn.Linear, nn.Linear]:
        """The last layers of the slot (or application table) and lending heads (small-gain
        init, residual start)."""
        slot_layer = self.application_table if self.application_table is not None else self.slot_head[-1]
        return slot_layer, self.lend_head[-1]  # type: ignore[return-value]

    def encode(self, features: th.Tensor) -> _Encoded:
        """The present jobs' embeddings and the summary of flat ``features``."""
        batch = features.shape[0]
        rows = th.cat(
            [features[:, off : off + size].reshape(batch, self.slots, width) for off, size, width in self.slot_parts],
            dim=2,
        )
        present = rows[:, :, self._present_column] > 0.5
        batch_index, slot_index = present.nonzero(as_tuple=True)
        where = (batch_index, slot_index)
        job_rows = rows[where]
        h = self.job_encoder(job_rows)
        if len(self.blocks):
            layout = _job_layout(present, where, h.dtype)
            for block in self.blocks:
                h = block(h, layout)
        count = present.sum(dim=1, keepdim=True).clamp(min=1).to(h.dtype)
        for pool in self.pools:
            h = pool(h, batch_index, count)
        mean = _segment_mean(h, batch_index, count)
        peak = cast(th.Tensor, _SegmentPeak.apply(h, batch_index, batch))
        parts = [mean, peak]
        if self.global_encoder is not None:
            glob = th.cat([features[:, off : off + size] for off, size in self.global_parts], dim=1)
            parts.append(self.global_encoder(glob))
        return _Encoded(h, present, where, self.summary(th.cat(parts, dim=1)), job_rows)

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """(flat logits, summary) of ``features``."""
        encoded = self.encode(features)
        return self._logits(encoded), self.value_head(encoded.summary)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        """The flat logits: per slot (shared weights), then the lending level."""
        return self._logits(self.encode(features))

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        """The critic's latent (from the summary only)."""
        return self.value_head(self.encode(features).summary)

    def _logits(self, encoded: _Encoded) -> th.Tensor:
        """Per slot, the shared head of ``[job embedding, summary]``; an empty slot's logits are
        the head of the empty row's embedding (the job encoder of zeros, no attention) with the
        summary: one row per observation, copied to its empty slots."""
        jobs, present, where, summary, job_rows = encoded
        batch, slots = present.shape
        table = self.application_table
        if table is not None:  # an empty row has no application: the table's bias
            empty = table.bias.expand(batch, -1)
            present_logits = table(job_rows[:, self._app_columns])
            if self.state_scores is not None:
                present_logits = present_logits + self.state_scores(job_rows[:, self._state_columns])
        else:
            # the head's first layer over [job, summary], split: its summary half runs once per
            # observation, not once per job (the same sum; a ninth of the per-job arithmetic)
            first: nn.Linear = cast(nn.Linear, self.slot_head[0])
            rest = self.slot_head[1:]
            job_part, summary_part = first.weight.split(jobs.shape[1], dim=1)
            per_observation = F.linear(summary, summary_part, first.bias)
            empty_job = F.linear(self.job_encoder(summary.new_zeros(1, self.job_width)), job_part)
            empty = rest(empty_job + per_observation)
            present_logits = rest(F.linear(jobs, job_part) + per_observation[where[0]])
        per_slot = empty.unsqueeze(1).expand(batch, slots, self.slot_choices).clone()
        per_slot[where] = present_logits
        if self.firsts_apart:
            parts = [per_slot[:, :, 0], per_slot[:, :, 1:].reshape(batch, -1)]
        else:
            parts = [per_slot.reshape(batch, -1)]
        return th.cat([*parts, self.lend_head(summary)], dim=1)


def set_network(
    observation_space: spaces.Dict, action_space: spaces.Space, activation: type[nn.Module], sizes: dict[str, int]
) -> SetNetwork:
    """The :class:`SetNetwork` of a set policy over these spaces, with the network ``sizes``
    (``embed_dim`` and the others of :data:`~agents.hyperparameters.SET_POLICY_KWARGS`), on
    torch's current default device: the policy builds it, and the loader builds it on the
    ``meta`` device to count a checkpoint's parameters before allocating any
    (:func:`agents.models.algorithms.parameter_count`)."""
    firsts_apart = False
    if isinstance(action_space, spaces.Box):  # score mode: means per slot, then the lending share
        shape = spaces_env_shape(observation_space, action_space)
        slots, lend_levels = shape["max_jobs"], 1
        slot_choices = 1 + shape.get("width_classes", 0)  # a score, then its width scores
        firsts_apart = slot_choices > 1
    else:
        nvec = np.asarray(cast(spaces.MultiDiscrete, action_space).nvec).reshape(-1)
        if nvec.size < 2 or len(set(nvec[:-1].tolist())) != 1:
            raise ValueError(f"the set policy needs slots of equal choices plus a lending level, got nvec {nvec}")
        slots, slot_choices, lend_levels = int(nvec.size - 1), int(nvec[0]), int(nvec[-1])
    return SetNetwork(
        observation_space,
        slots=slots,
        slot_choices=slot_choices,
        lend_levels=lend_levels,
        activation=activation,
        firsts_apart=firsts_apart,
        **sizes,
    )


class _SetPolicyMixin(DescribedPolicyMixin):
    """What both set policies add to SB3's multi-input actor-critic: the set network as
    ``mlp_extractor`` and an identity ``action_net``, and the env arguments of
    :class:`~agents.models.described_policy.DescribedPolicyMixin`. (The methods reach the host policy's
    SB3 attributes through ``policy: Any``: a mixin's host cannot be typed.)"""

    deepboot_arch: ClassVar[str] = "set"
    """Plain-text marker of the architecture (stored in the checkpoint's JSON, read by the loader)."""

    def __init__(
        self,
        *args: Any,
        embed_dim: int = SET_POLICY_KWARGS["embed_dim"],
        attention_heads: int = SET_POLICY_KWARGS["attention_heads"],
        attention_layers: int = SET_POLICY_KWARGS["attention_layers"],
        application_scores: int = SET_POLICY_KWARGS["application_scores"],
        pool_layers: int = SET_POLICY_KWARGS["pool_layers"],
        **kwargs: Any,
    ) -> None:
        self._set_sizes(embed_dim, attention_heads, attention_layers, application_scores, pool_layers)
        kwargs.setdefault("activation_fn", nn.ReLU)
        super().__init__(*args, **kwargs)

    def _set_sizes(
        self, embed_dim: int, attention_heads: int, attention_layers: int, application_scores: int, pool_layers: int
    ) -> None:
        sizes = {
            "embed_dim": embed_dim,
            "attention_heads": attention_heads,
            "attention_layers": attention_layers,
            "application_scores": application_scores,
            "pool_layers": pool_layers,
        }
        for name, value in sizes.items():
            low, high = SET_SIZE_MINIMUMS[name], SET_SIZE_MAXIMUMS.get(name)
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < low
                or (high is not None and value > high)
            ):
                span = f">= {low}" if high is None else f"{low} to {high}"
                raise ValueError(f"{name} must be an integer {span}, got {value!r}")
        self.set_sizes = sizes

    def _build_mlp_extractor(self) -> None:
        policy: Any = self
        policy.mlp_extractor = set_network(
            policy.observation_space, policy.action_space, policy.activation_fn, self.set_sizes
        ).to(policy.device)

    def _build(self, lr_schedule: Any) -> None:
        policy: Any = self
        super()._build(lr_schedule)  # type: ignore[misc]
        policy.action_net = nn.Identity()
        if isinstance(policy.action_space, spaces.Box):
            # one log std for every slot's score (no slot order), one for the lending share, one
            # for every width score if any; the means start at exactly 0, so the deterministic
            # policy starts as the prior itself
            start = float(policy.log_std.detach().reshape(-1)[0])
            del policy.log_std
            groups = 3 if policy.mlp_extractor.slot_choices > 1 else 2
            policy.score_log_std = nn.Parameter(th.full((groups,), start, device=policy.device))
            for layer in policy.mlp_extractor.output_layers():
                nn.init.zeros_(layer.weight)
                nn.init.zeros_(layer.bias)
        elif policy.ortho_init:
            for layer in policy.mlp_extractor.output_layers():
                layer.apply(partial(policy.init_weights, gain=0.01))
        if policy.mlp_extractor.state_scores is not None:  # SB3's orthogonal init reached it too
            nn.init.zeros_(policy.mlp_extractor.state_scores.weight)
        policy.optimizer = policy.optimizer_class(policy.parameters(), lr=lr_schedule(1), **policy.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data: dict[str, Any] = super()._get_constructor_parameters()
        data.update(self.set_sizes)
        return data

    def set_state_independent(self, logit_bias: np.ndarray) -> None:
        """Make the actor ignore the state: the flat logits become ``logit_bias`` (per slot, the
        same for every slot, then lending), by zeroing the heads' last layers (and the state
        scores, if any)."""
        network: SetNetwork = cast(Any, self).mlp_extractor
        slots, k = network.slots, network.slot_choices
        bias = np.asarray(logit_bias, dtype=np.float32).reshape(-1)
        per_slot = bias[: slots * k].reshape(slots, k)
        if not np.allclose(per_slot, per_slot[0]):
            raise ValueError("a set policy has one slot head: the per-slot logit bias must be the same for every slot")
        slot_layer, lend_layer = network.output_layers()
        with th.no_grad():
            for layer, values in ((slot_layer, per_slot[0]), (lend_layer, bias[slots * k :])):
                layer.weight.zero_()
                layer.bias.copy_(th.as_tensor(values, device=layer.bias.device))
            if network.state_scores is not None:
                network.state_scores.weight.zero_()


class SetActorCriticPolicy(_SetPolicyMixin, MultiInputActorCriticPolicy):
    """The set-based actor-critic for ``PPO`` (Dict observations; MultiDiscrete actions, or the
    score mode's ``Box``).

    With a ``Box`` action (``action_mode="score"``) the policy is Gaussian: slot i's score is
    ``N(mean_i, std)``, the lending share's ``N(mean, std_lend)`` and, with width scores
    (``width_classes``), each of slot i's width scores ``N(mean_ik, std_width)``; the log stds are
    learnt and shared by every slot (``log_std_init`` sets them all). Exploration is held per
    job: a sampled action is ``mean + std * z``, z the standard normal of the observation's
    ``noise`` codes, which the env draws once per job (one per score and width score) and keeps
    for the job's life (a job keeps its deviation instead of flipping ranks with new noise at
    every decision; rl-scheduling notes). The log probability is the Gaussian's, of the present
    jobs' scores (and width scores) and the lending share only (empty
    slots do not act), and so is the entropy.
    """

    deepboot_algo: ClassVar[str] = "ppo"
    score_log_std: nn.Parameter
    """Score mode: the log std of every slot's score, of the lending share, then (with width
    scores) of every width score (set in ``_build``)."""

    def _score_gaussian(
        self, obs: dict[str, th.Tensor], latent_pi: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """(means, stds, acting weights) of the score action: weight 1 for present jobs' slots
        and the lending share, 0 for empty slots."""
        mean = self.action_net(latent_pi)
        network = cast(SetNetwork, self.mlp_extractor)
        slots, widths = network.slots, network.slot_choices - 1
        stds = self.score_log_std
        log_std = th.cat([stds[:1].expand(slots), stds[2:].expand(slots * widths), stds[1:2]])
        rows = obs["jobs"].reshape(mean.shape[0], slots, -1)
        present = (rows[:, :, 0] > 0.5).to(mean.dtype)
        acting = th.cat([present, present.repeat_interleave(widths, dim=1), th.ones_like(mean[:, :1])], dim=1)
        return mean, log_std.exp().expand_as(mean), acting

    def score_means(self, obs: dict[str, th.Tensor]) -> tuple[th.Tensor, th.Tensor]:
        """The score action's means for ``obs`` (a batch of observations as tensors) and their
        acting weights (1: a present job's entry, or lending; 0: an empty slot's), with gradients:
        what a regression on teacher labels fits (:mod:`agents.trainers.learner`)."""
        features = cast(th.Tensor, self.extract_features(obs))  # one shared extractor: a tensor
        mean, _, acting = self._score_gaussian(obs, self.mlp_extractor.forward_actor(features))
        return mean, acting

    @staticmethod
    def _held_normal(obs: dict[str, th.Tensor]) -> th.Tensor:
        """The standard normal draws of the observation's noise codes."""
        codes = obs[NOISE_KEY].clamp(1e-6, 1.0 - 1e-6)
        return th.special.ndtri(codes)

    @staticmethod
    def _entry_log_prob(mean: th.Tensor, std: th.Tensor, actions: th.Tensor) -> th.Tensor:
        """The Gaussian log density of every action entry (batch, slots + 1)."""
        z = (actions - mean) / std
        return -0.5 * z * z - th.log(std) - 0.5 * math.log(2 * math.pi)

    @classmethod
    def _log_prob(cls, mean: th.Tensor, std: th.Tensor, acting: th.Tensor, actions: th.Tensor) -> th.Tensor:
        return (cls._entry_log_prob(mean, std, actions) * acting).sum(dim=1)

    def entry_log_probs(self, obs: Any, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """Score mode: the log probability of each entry of ``actions`` (batch, slots + 1) and the
        acting weights (1 for a present job's slot and the lending share, 0 for an empty slot),
        for an update that treats each job's score as its own decision
        (:class:`agents.models.group_ppo.GroupPPO` with ``per_job_ratio``)."""
        features = cast(th.Tensor, self.extract_features(obs))  # one shared extractor: a tensor
        latent_pi = self.mlp_extractor.forward_actor(features)
        mean, std, acting = self._score_gaussian(obs, latent_pi)
        return self._entry_log_prob(mean, std, actions), acting

    def forward(self, obs: Any, deterministic: bool = False) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """SB3's rollout call; in score mode, actions with noise held per job (class docstring)."""
        if not isinstance(self.action_space, spaces.Box):
            return super().forward(obs, deterministic)
        latent_pi, latent_vf = self.mlp_extractor(self.extract_features(obs))
        mean, std, acting = self._score_gaussian(obs, latent_pi)
        actions = mean if deterministic else mean + std * self._held_normal(obs)
        return actions, self.value_net(latent_vf), self._log_prob(mean, std, acting, actions)

    def evaluate_actions(self, obs: Any, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """Values, log probabilities and entropies of ``actions`` (score mode: of the acting entries)."""
        if not isinstance(self.action_space, spaces.Box):
            return super().evaluate_actions(obs, actions)
        latent_pi, latent_vf = self.mlp_extractor(self.extract_features(obs))
        mean, std, acting = self._score_gaussian(obs, latent_pi)
        entropy = ((0.5 + 0.5 * math.log(2 * math.pi) + th.log(std)) * acting).sum(dim=1)
        return self.value_net(latent_vf), self._log_prob(mean, std, acting, actions), entropy

    def _predict(self, observation: Any, deterministic: bool = False) -> th.Tensor:
        """The most likely action, or (score mode) one sampled with the held noise."""
        if not isinstance(self.action_space, spaces.Box):
            return super()._predict(observation, deterministic)
        return self.forward(observation, deterministic)[0]


class MaskableSetActorCriticPolicy(_SetPolicyMixin, MaskableMultiInputActorCriticPolicy):
    """The set-based actor-critic for sb3-contrib ``MaskablePPO``."""

    deepboot_algo: ClassVar[str] = "maskable_ppo"


def set_policy_class(algo: str) -> type[SetActorCriticPolicy] | type[MaskableSetActorCriticPolicy]:
    """The set policy class of ``algo`` (``ppo`` or ``maskable_ppo``)."""
    return MaskableSetActorCriticPolicy if algo == "maskable_ppo" else SetActorCriticPolicy
