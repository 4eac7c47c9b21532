"""The one evaluation loop every policy runs through, heuristic or learned."""

from __future__ import annotations

from deepboot_env.policy import Policy, make_policy
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.workload import Workload


def run_episode(
    policy: Policy | str,
    workload: Workload,
    config: SimConfig | None = None,
    seed: int = 0,
) -> EpisodeMetrics:
    """Simulate ``workload`` from start to end under ``policy`` and return its metrics.

    Args:
        policy: a :class:`~deepboot_env.policy.Policy` or a registry name.
        workload: what arrives.
        config: cluster, restart model, protect scale, interval.
        seed: reseeds the policy (the simulator itself is deterministic).
    """
    if isinstance(policy, str):
        policy = make_policy(policy)
    policy.reset(seed)
    sim = Simulator(workload, config or SimConfig(), policy)
    while not sim.done:
        state = sim.observe()
        sim.apply(policy.decide(state), state)
        sim.advance()
    return sim.metrics()
