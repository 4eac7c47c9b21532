"""The self-describing policies under their first name: checkpoints saved before the policies moved
to :mod:`agents.models.described_policy` name their class ``agents.described_policy.<Class>``, and a
trusted load (``trust=True``) imports it from here. New code imports
:mod:`agents.models.described_policy`."""

from agents.models.described_policy import (
    ENV_ARGUMENTS_KEY,
    DescribedMultiInputPolicy,
    DescribedPolicyMixin,
    EnvMismatchError,
    MaskableDescribedMultiInputPolicy,
    described_policy_class,
)

__all__ = [
    "ENV_ARGUMENTS_KEY",
    "DescribedMultiInputPolicy",
    "DescribedPolicyMixin",
    "EnvMismatchError",
    "MaskableDescribedMultiInputPolicy",
    "described_policy_class",
]
