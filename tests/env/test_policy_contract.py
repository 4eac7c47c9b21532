"""The whole policy contract (:mod:`deepboot_env.policy`, :mod:`deepboot_env.sim.hooks`).

A policy that implements the declared members and nothing else (no :class:`BasePolicy`) runs
through the simulator, the evaluation loop (:func:`run_episode`) and the harness
(:func:`deepboot_harness.compare.compare`, and the training harness's evaluation episodes), and
each member is used as documented:

* ``reset(seed)`` once per episode, before anything else; ``bind_simulator(sim)`` at the end of
  every reset of the simulator, before the first ``decide``; ``decide(state)`` at every boundary;
* ``choose_reclaim`` at every reclaim of DeepBoot's placement and never in Aryl mode;
  ``choose_inference_server`` at every cold request that needs a server in Aryl mode and never
  otherwise; each written out as its documented default gives exactly the default's episode;
* ``repaired_gpus`` is what the harness reports after the episode.

A policy without one of the members is refused with a ``TypeError`` that names it.
"""

from __future__ import annotations

import json

import pytest

from deepboot_env import policy as policy_module
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import POLICY_CONTRACT, Allocation, ClusterState, GpuRef, Policy, PolicySpec, RequestView
from deepboot_env.sim.aryl_mode import aryl_server_of
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.hooks import SIMULATOR_HOOKS
from deepboot_env.sim.reclaim import ats_i_victim
from deepboot_env.sim.simulator import SimConfig, Simulator
from traces.generate import generate_workload, write_workload_csv

ARYL = SimConfig(inference_placement="aryl")
SHARED = SimConfig(cluster=ClusterConfig.parse_shared("8x4"), restart="stopfree")


class ContractOnly:
    """Every member of the contract, written out as its documented default, and nothing else
    but a record of the calls (``decide`` is ATS's, lending idle inference GPUs)."""

    name = "contract-only"
    adaptive_batch = True
    repaired_gpus = 7

    def __init__(self) -> None:
        from baselines.ats import AtsPolicy

        self.calls: list[tuple[str, object]] = []
        self._ats = AtsPolicy(lend=True)

    def reset(self, seed: int | None = None) -> None:
        self.calls.append(("reset", seed))
        self._ats.reset(seed)

    def decide(self, state: ClusterState) -> Allocation:
        self.calls.append(("decide", state.time))
        return self._ats.decide(state)

    def choose_reclaim(self, state: ClusterState, request: RequestView) -> GpuRef | None:
        ref = ats_i_victim(state)
        self.calls.append(("choose_reclaim", ref))
        return ref

    def choose_inference_server(self, state: ClusterState, request: RequestView) -> int | None:
        node = aryl_server_of(state)
        self.calls.append(("choose_inference_server", node))
        return node

    def bind_simulator(self, sim: Simulator) -> None:
        self.calls.append(("bind_simulator", sim))

    def named(self, call: str) -> list[object]:
        """The arguments (or results) recorded for ``call``, in order."""
        return [value for name, value in self.calls if name == call]


@pytest.fixture(scope="module")
def workload():
    return generate_workload(
        "contract", 11, train={"num_jobs": 14}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )


def same_episode(ours, theirs) -> bool:
    """Whether two episodes' deterministic metrics are identical."""
    return json.dumps(ours.deterministic_dict(), sort_keys=True) == json.dumps(
        theirs.deterministic_dict(), sort_keys=True
    )


def test_the_contract_is_declared_whole() -> None:
    """The declared members are the Protocol's: a policy with all of them is a ``Policy``; one
    without any single member is not, and is refused naming it (the simulator names its hooks)."""
    assert isinstance(ContractOnly(), Policy)
    assert set(SIMULATOR_HOOKS) < set(POLICY_CONTRACT)
    for member in POLICY_CONTRACT:
        lacking = type("Lacking", (), {k: v for k, v in vars(ContractOnly).items() if k != member})()
        assert not isinstance(lacking, Policy)
        with pytest.raises(TypeError, match=f"lacks {member} "):
            run_episode(lacking, generate_workload("tiny", 1, train={"num_jobs": 1}), SimConfig())
        if member in SIMULATOR_HOOKS:
            with pytest.raises(TypeError, match=f"lacks the simulator hooks {member};"):
                Simulator(generate_workload("tiny", 1, train={"num_jobs": 1}), SimConfig(), lacking)


@pytest.mark.parametrize("config", [SimConfig(), SHARED], ids=["two-cluster", "shared-stopfree"])
def test_run_episode_calls_each_hook_as_documented(workload, config: SimConfig) -> None:
    policy = ContractOnly()
    metrics = run_episode(policy, workload, config, seed=3)
    names = [name for name, _ in policy.calls]
    assert names[:2] == ["reset", "bind_simulator"] and names[2] == "decide"
    assert policy.named("reset") == [3] and isinstance(policy.named("bind_simulator")[0], Simulator)
    assert names.count("bind_simulator") == 1 and names.count("decide") > 100
    victims = policy.named("choose_reclaim")
    assert metrics.reclaims > 0 and len([v for v in victims if v is not None]) == metrics.reclaims
    assert not policy.named("choose_inference_server")  # DeepBoot's placement: no server hook
    assert same_episode(metrics, run_episode("ats", workload, config, seed=3))  # the defaults' episode


def test_aryl_mode_asks_for_servers_not_gpus(workload) -> None:
    policy = ContractOnly()
    metrics = run_episode(policy, workload, ARYL, seed=0)
    assert len(policy.named("choose_inference_server")) > 10 and not policy.named("choose_reclaim")
    assert same_episode(metrics, run_episode("ats", workload, ARYL, seed=0))


def test_the_simulator_binds_at_every_reset(workload) -> None:
    policy = ContractOnly()
    sim = Simulator(workload, SimConfig(), policy)
    sim.reset()
    assert policy.named("bind_simulator") == [sim, sim] and not policy.named("decide")


def test_the_harness_runs_it_and_reports_its_repairs(workload, tmp_path, monkeypatch) -> None:
    """``deepboot compare``'s library function runs it by name (reset with the run's seed, bound,
    asked to decide); the training harness's evaluation episode reports its ``repaired_gpus``."""
    from agents.runs.validation import EvalEpisode, run_eval_episode
    from deepboot_harness.compare import compare

    built: list[ContractOnly] = []

    def build() -> ContractOnly:
        built.append(ContractOnly())
        return built[-1]

    monkeypatch.setitem(policy_module._REGISTRY, "contract-only", PolicySpec("contract-only", build))
    frame = compare(["contract-only"], [str(write_workload_csv(workload, tmp_path / "w.csv"))], [5], progress=False)
    ran = [policy for policy in built if policy.calls]
    assert len(ran) == 1 and ran[0].named("reset") == [5] and len(ran[0].named("bind_simulator")) == 1
    assert frame["train_jct_mean"].tolist() == [run_episode("ats", workload, SimConfig(), seed=5).train_jct_mean]
    metrics, repaired = run_eval_episode(EvalEpisode("contract-only", "w", workload, SimConfig(), 5))
    victims = [victim for victim in built[-1].named("choose_reclaim") if victim is not None]
    assert repaired == ContractOnly.repaired_gpus and metrics.reclaims == len(victims) > 0
