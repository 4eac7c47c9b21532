"""ATS's decision compiled over an array episode's rows (:mod:`baselines.ats_loops`) is the policy's.

At every decision of real episodes, on the arrays, the compiled decision
(:meth:`AtsPolicy.decide_on_arrays`) and the policy's own (:meth:`AtsPolicy.decide` on the state
built from the rows) give every job the same GPUs on the same nodes; then the policy's own is
applied and the episode goes on. Every ATS variant is played: lending or not, the ``-srpt``
weights, the arrival tilt, placement-aware rows, the restart-aware reclaim and warm pods kept, on
the fitted and the measured truth, two clusters and a shared pool.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from baselines import ats_loops
from baselines.ats import AtsPolicy
from baselines.hindsight import HeldScores, played_fork
from deepboot_env.config import sim_config
from deepboot_env.policy import WIDTH_CLASSES, BasePolicy, make_policy
from deepboot_env.sim.array_episode import ArrayEpisode
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import Allocation
from traces.generate import generate_workload

VARIANTS = [
    "ats",
    "ats-nolend",
    "ats-srpt",
    "ats-srpt-fcfs",
    "ats-srpt-fcfs-place",
    "ats-srpt-fcfs-place-rr",
    "ats-srpt-warm",
    "ats-srpt-fcfs-place-rr-warm",
]


def wanted_of(allocation: Allocation, shape: tuple[int, int]) -> np.ndarray:
    """An allocation as the compiled decision writes it: GPUs per node by job, -1 rows for none."""
    wanted = np.full(shape, -1, dtype=np.int64)
    for job_id, row in allocation.gpus.items():
        wanted[job_id] = row
    return wanted


def compared_decisions(workload, config: SimConfig, name: str | BasePolicy, fixed_batch: bool = False) -> int:
    """Play ``workload`` on the arrays by policy ``name`` (or this policy; ``fixed_batch``: the
    jobs keep their submitted batch sizes), comparing the compiled and the Python decision at each
    decision (over the active jobs); the decisions compared."""
    policy = make_policy(name) if isinstance(name, str) else name
    if fixed_batch:
        policy.adaptive_batch = False
    episode = ArrayEpisode(Simulator(workload, config, policy))
    compared = 0
    while not episode.done:
        episode.advance_holders()
        ours = policy.decide_on_arrays(episode)
        active = episode.active
        theirs_state = episode.observe()
        allocation = policy.decide(theirs_state)
        theirs = wanted_of(allocation, episode.train[4].shape)
        assert ours is not None
        assert ours[active].tolist() == theirs[active].tolist(), f"{name} at t={episode.now:.0f}s"
        compared += 1
        episode.apply(allocation, theirs_state)
        episode.advance()
    return compared


@pytest.mark.parametrize("name", VARIANTS)
def test_compiled_decision_is_the_policys_at_every_decision(name: str) -> None:
    workload = generate_workload(
        "ats-loops", 5, train={"num_jobs": 40}, inference={"horizon_s": 10 * 3600.0, "mean_gpus": 12.0}
    )
    assert compared_decisions(workload, SimConfig(), name) > 300


@pytest.mark.parametrize(
    "name, config, fixed_batch",
    [
        ("ats", sim_config(), False),  # DeepBoot-v1: the measured truth, caps grown once trained
        ("ats-srpt-fcfs-place-rr-warm", sim_config(), False),
        ("ats-srpt-fcfs-place", SimConfig(cluster=ClusterConfig.parse_shared("8x4")), False),
        ("ats-srpt-warm", SimConfig(restart="pollux"), True),
        (AtsPolicy(lend=0.5, srpt_power=0.25), SimConfig(), False),  # half the lendable GPUs, by node order
    ],
    ids=["ats-v1", "prior-v1", "place-shared", "warm-fixed-batch", "half-lend"],
)
def test_compiled_decision_holds_on_other_configurations(
    name: str | AtsPolicy, config: SimConfig, fixed_batch: bool
) -> None:
    workload = generate_workload(
        "ats-loops", 8, train={"num_jobs": 30}, inference={"horizon_s": 8 * 3600.0, "mean_gpus": 10.0}
    )
    assert compared_decisions(workload, config, name, fixed_batch) > 200


def held_player(workload, seed: int, widths: bool) -> HeldScores:
    """The prior holding random per-job scores and (``widths``) random width scores per application."""
    rng = np.random.default_rng(seed)
    scores = {j: float(rng.normal(0.0, 0.5)) if j % 4 else 0.0 for j in range(len(workload.jobs))}
    table = {app: tuple(rng.normal(0.0, 0.3, WIDTH_CLASSES).tolist()) for app in {job.app for job in workload.jobs}}
    held = {j: table[job.app] for j, job in enumerate(workload.jobs) if j % 3} if widths else None
    return HeldScores(make_policy("ats-srpt-fcfs-place-rr-warm"), scores, held)


@pytest.mark.parametrize("widths", [False, True], ids=["scores", "scores-and-widths"])
def test_compiled_decision_under_held_scores_is_the_policys(widths: bool) -> None:
    """The score action's held per-job scores (some 0) and width scores (some jobs without):
    the compiled decision is ``decide_scored``'s at every decision."""
    workload = generate_workload(
        "ats-loops", 6, train={"num_jobs": 40}, inference={"horizon_s": 10 * 3600.0, "mean_gpus": 12.0}
    )
    assert compared_decisions(workload, sim_config(), held_player(workload, 3, widths)) > 300


def test_hindsight_forks_play_on_the_arrays_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """A held-score player on a fork (the hindsight search's episodes) ends with the same mean JCT
    on the arrays as on the simulator, and the search on them finds the same scores."""
    from deepboot_env import evaluation

    workload = generate_workload("ats-loops", 7, train={"num_jobs": 20}, inference={"horizon_s": 6 * 3600.0})
    sim = Simulator(workload, sim_config(), make_policy("ats-srpt-fcfs-place-rr-warm"))
    sim.observe()
    results = []
    for arrays in (False, True):
        monkeypatch.setattr(evaluation, "ARRAY_EPISODES", arrays)
        results.append(played_fork(sim, held_player(workload, 5, True), None))
    assert results[0] == results[1]
    assert isinstance(evaluation.episode_driver(sim.fork(), held_player(workload, 5, True)), ArrayEpisode)


def test_subclasses_and_the_originals_options_decide_in_python() -> None:
    """A subclass (its weights are its own) and the original's options decline the compiled
    decision, so their episodes observe and decide as always."""
    from baselines.jitter import JitteredAtsPolicy

    workload = generate_workload("ats-loops", 2, train={"num_jobs": 6}, inference={"horizon_s": 3600.0})
    for policy in (JitteredAtsPolicy(sigma=0.1), AtsPolicy(linear_untrained=True), AtsPolicy(relist_restarts=True)):
        episode = ArrayEpisode(Simulator(workload, SimConfig(), make_policy("ats")))
        episode.advance_holders()
        assert policy.decide_on_arrays(episode) is None


def test_the_decision_names_the_progress_kernels_columns_it_compiled_with() -> None:
    """numba caches the decision by ats_loops.py's source alone, and it reads progress_loops.py's
    column numbers: ats_loops.py names the digest of the source it was compiled with."""
    from deepboot_env.sim import progress_loops

    digest = hashlib.sha256(Path(progress_loops.__file__).read_bytes()).hexdigest()[:16]
    assert ats_loops.PROGRESS_LOOPS_DIGEST == digest, f"set PROGRESS_LOOPS_DIGEST in ats_loops.py to {digest!r}"
