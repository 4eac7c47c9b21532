"""The set policy under its first name: checkpoints saved before the policies moved to
:mod:`agents.models.set_policy` name their class ``agents.set_policy.<Class>``, and a trusted load
(``trust=True``) imports it from here. New code imports :mod:`agents.models.set_policy`."""

from agents.models.set_policy import (
    MaskableSetActorCriticPolicy,
    SetActorCriticPolicy,
    SetNetwork,
    set_network,
    set_policy_class,
)

__all__ = ["MaskableSetActorCriticPolicy", "SetActorCriticPolicy", "SetNetwork", "set_network", "set_policy_class"]
