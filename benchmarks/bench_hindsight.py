"""Benchmark: what held per-job scores gain over their prior in hindsight, one scenario at a time.

    python benchmarks/bench_hindsight.py [--prior ats-srpt-fcfs-place-rr-warm]
                                         [--families mixed heavy-inference ...] [--seeds 1]
                                         [--generations 16] [--pairs 8] [--sigma 0.05]
                                         [--learning-rate 0.02] [--widths] [--tie job] [--jobs 2] [--seed 0]
                                         [--robustness 8] [--save hindsight.json] [--transfer 8]

What could any policy of the score action gain over its prior on a scenario, if it knew the
scenario? For each val scenario (the first ``--seeds`` of each family), evolution strategies search
one log-weight score per job, held for the job's life (with ``--widths`` also its
:data:`~deepboot_env.policy.WIDTH_CLASSES` width scores), on that scenario itself: ``--pairs``
antithetic pairs ``theta +- sigma e`` per generation, fitness the episode's mean JCT over the
prior's, Adam on the pairs' differences. With ``--tie application`` the search holds one row of
scores per application instead of per job (every job of an application shares it): what the static
per-application tables of the shipped score models could reach on the scenario. The prior is the
zero vector, so generation 0 is 1.0 exactly. Reported per generation: the ratio of the *mean*
vector's episode to the prior's (what the search has learned, not the best of its samples, which is
a best-of-N of the schedule's noise: docs/history.md#chaos) and the best sample so far; at
the end, the mean over the scenarios of each one's best mean-vector ratio. A reference for what
held per-job scores are worth over the prior when the future is known (the issue's "<= 0.98 x its
own prior"), not a bound: the search stops before it converges (48 generations go well below 16's),
and a policy may also vary its scores over time.

Is a hindsight vector knowledge or luck? The schedule is chaotic in the scores (one part in a
thousand of a job's weight can move a scenario's mean JCT by 1 %), so a search on the scenario
itself may find a lucky route rather than a valuation a policy could learn. ``--robustness N``
re-runs each scenario's best vector N times with persistent jitter of standard deviation
``--robustness-sigma`` (default 0.001) added to every score: a gain that survives it is a
property of the scores, one that vanishes was a route. ``--transfer N`` (with ``--tie
application``) asks whether it is a valuation that carries over: each scenario's best table, and
the mean of them, is played on the next N val seeds of every family (scenarios no search saw) and
reported as its mean ratio to the prior over the families, the scenarios it wins, and per family.
``--save`` writes each scenario's best vector and ratios as JSON (atomically), before the transfer.

Episodes run in ``--jobs`` worker processes; every episode is deterministic (the prior and the
simulator are), so a run is reproducible from its arguments.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

import numpy as np

from agents.trainers.evolution import EsState, adam_step, antithetic_gradient
from baselines.hindsight import scored_prior
from deepboot_env import FRONT_END_DYNAMICS
from deepboot_env.argparsing import ArgumentParser
from deepboot_env.atomic import atomic_write
from deepboot_env.config import sim_config
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import WIDTH_CLASSES, Allocation, ClusterState
from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.sim.workload import TrainingJobSpec
from traces.families import FAMILIES, cached_scenario, split_seeds


class Task(NamedTuple):
    """One episode: the scenario, the prior and the per-job scores (job index -> log-weight
    score; with widths, job index -> width scores)."""

    family: str
    seed: int
    prior: str
    scores: tuple[float, ...]
    widths: tuple[tuple[float, ...], ...]


class Found(NamedTuple):
    """One scenario's search: the best ratio of the mean vector's episode to the prior's, that
    vector (per job its score, then with widths its width scores), and the vector's ratios under
    tiny persistent jitter (``--robustness``; empty without)."""

    ratio: float
    scores: list[float]
    jittered: list[float]


def episode_jct(task: Task) -> float:
    """The scenario's mean training JCT under the prior with the task's scores held per job."""
    scenario = cached_scenario(task.family, task.seed)
    policy = scored_prior(task.prior)
    table = dict(enumerate(task.scores))
    width_table = dict(enumerate(task.widths)) if task.widths else None

    def decide(state: ClusterState) -> Allocation:  # the score codec's decision, scores held fixed
        return policy.decide_scored(state, table, 1.0, width_table)

    policy.decide = decide  # type: ignore[method-assign]
    config = scenario.configure(sim_config(dynamics=FRONT_END_DYNAMICS))  # the benchmark's world
    return run_episode(policy, scenario.workload, config, seed=0).train_jct_mean


def row_size(widths: bool) -> int:
    """Values in one row of a searched table: the score, then with ``widths`` the width scores."""
    return 1 + (WIDTH_CLASSES if widths else 0)


def held_task(family: str, seed: int, prior: str, table: np.ndarray, widths: bool) -> Task:
    """The episode of the scenario with row j of ``table`` held by job j: its score, then with
    ``widths`` its width scores."""
    width_rows = tuple(tuple(map(float, row[1:])) for row in table) if widths else ()
    return Task(family, seed, prior, tuple(map(float, table[:, 0])), width_rows)


def search(
    pool: ProcessPoolExecutor,
    family: str,
    seed: int,
    prior: str,
    args: argparse.Namespace,
) -> Found:
    """ES on one scenario: the best ratio of the mean vector's episode to the prior's, that
    vector, and with ``--robustness`` the ratios of the vector under tiny persistent jitter."""
    workload_jobs = cached_scenario(family, seed).workload.jobs
    jobs = len(workload_jobs)
    per_job = row_size(args.widths)
    rows = searched_rows(workload_jobs, args.tie)
    rng = np.random.default_rng([args.seed, seed])
    zeros = [0.0] * (max(rows) + 1) * per_job
    state = EsState(theta=zeros, m=zeros, v=zeros)  # Adam's moments and step count, as the ES trainer keeps them
    theta = np.zeros(len(zeros))

    def task(vector: np.ndarray) -> Task:
        return held_task(family, seed, prior, vector.reshape(-1, per_job)[rows], args.widths)

    base = episode_jct(task(theta))
    best_mean, best_sample, best_theta = 1.0, 1.0, theta
    print(f"{family} seed {seed}: {jobs} jobs, prior mean JCT {base:,.1f} s", flush=True)
    for generation in range(1, args.generations + 1):
        start = time.perf_counter()
        noise = rng.standard_normal((args.pairs, theta.size))
        vectors = [theta + sign * args.sigma * e for e in noise for sign in (1.0, -1.0)]
        ratios = np.array(list(pool.map(episode_jct, [task(v) for v in [*vectors, theta]]))) / base
        plus, minus, mean_ratio = ratios[0:-1:2], ratios[1:-1:2], ratios[-1]
        if mean_ratio < best_mean:
            best_mean, best_theta = float(mean_ratio), theta
        best_sample = min(best_sample, float(ratios[:-1].min()))
        grad = antithetic_gradient(plus, minus, noise, args.sigma)  # of the ratio, which Adam descends
        print(
            f"  gen {generation - 1:>2}: mean vector {mean_ratio:.4f} (best {best_mean:.4f}), samples "
            f"{ratios[:-1].mean():.4f} (best {best_sample:.4f}), |theta| {np.sqrt((theta**2).mean()):.3f}, "
            f"{time.perf_counter() - start:.0f} s",
            flush=True,
        )
        adam_step(state, grad, args.learning_rate)
        state.generation += 1
        theta = np.array(state.theta)
    jittered = best_theta + args.robustness_sigma * rng.standard_normal((args.robustness, theta.size))
    robust = (np.array(list(pool.map(episode_jct, [task(v) for v in jittered]))) / base).tolist()
    if robust:
        print(
            f"  best vector {best_mean:.4f}; under jitter {args.robustness_sigma:g}: {np.mean(robust):.4f}", flush=True
        )
    return Found(best_mean, best_theta.tolist(), robust)


def searched_rows(jobs: Sequence[TrainingJobSpec], tie: str) -> list[int]:
    """Each job's row in the searched table: its own (``tie`` "job") or its application's
    (``tie`` "application": one row per :data:`~deepboot_env.sim.apps.APP_NAMES` entry, every
    job of an application holding the same scores)."""
    if tie == "job":
        return list(range(len(jobs)))
    return [APP_NAMES.index(job.app) for job in jobs]


def transfer(pool: ProcessPoolExecutor, results: dict[tuple[str, int], Found], args: argparse.Namespace) -> None:
    """Play each scenario's best per-application table, and with several their mean, on the
    ``--transfer`` val seeds of every family after the searched ones, and print each one's mean
    ratio to the prior over the families, the scenarios it wins and its ratio per family."""
    per_app = row_size(args.widths)
    tables = {
        f"{family} {seed}": np.reshape(found.scores, (len(APP_NAMES), per_app))
        for (family, seed), found in results.items()
    }
    if len(tables) > 1:
        tables["mean of the tables"] = np.mean(list(tables.values()), axis=0)
    seeds = list(split_seeds("val"))[args.seeds : args.seeds + args.transfer]
    scenarios = [(family, seed) for seed in seeds for family in FAMILIES]
    job_rows = [searched_rows(cached_scenario(family, seed).workload.jobs, "application") for family, seed in scenarios]

    def episodes(table: np.ndarray) -> np.ndarray:
        tasks = [
            held_task(family, seed, args.prior, table[rows], args.widths)
            for (family, seed), rows in zip(scenarios, job_rows, strict=True)
        ]
        return np.array(list(pool.map(episode_jct, tasks)))

    base = episodes(np.zeros((len(APP_NAMES), per_app)))
    print(
        f"each table on val seeds {seeds[0]}-{seeds[-1]} of every family ({len(scenarios)} scenarios), over the prior:"
    )
    for name, table in tables.items():
        ratios = episodes(table) / base
        by_family = {family: float(ratios[[f == family for f, _ in scenarios]].mean()) for family in FAMILIES}
        shown = ", ".join(f"{family} {ratio:.4f}" for family, ratio in by_family.items())
        wins = f"better on {int((ratios < 1).sum())}/{len(ratios)}"
        print(f"  {name:<24} {np.mean(list(by_family.values())):.4f} ({wins}): {shown}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prior", default="ats-srpt-fcfs-place-rr-warm")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--seeds", type=int, default=1, help="val scenarios per family (the first ones)")
    parser.add_argument("--generations", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=8, help="antithetic pairs per generation")
    parser.add_argument("--sigma", type=float, default=0.05)
    parser.add_argument("--learning-rate", type=float, default=0.02)
    parser.add_argument("--widths", action="store_true", help="also search per-job width scores")
    parser.add_argument(
        "--tie", choices=("job", "application"), default="job", help="one searched row per job or per application"
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--seed", type=int, default=0, help="the search's noise")
    parser.add_argument("--robustness", type=int, default=0, help="re-runs of each best vector under tiny jitter")
    parser.add_argument("--robustness-sigma", type=float, default=0.001)
    parser.add_argument("--save", help="JSON file for each scenario's best vector and ratios")
    parser.add_argument(
        "--transfer", type=int, default=0, help="with --tie application: val seeds per family to play the tables on"
    )
    args = parser.parse_args(argv)
    if args.transfer and args.tie != "application":
        parser.error("--transfer needs --tie application (a per-job vector belongs to its scenario's jobs)")
    try:
        scored_prior(args.prior)  # fail early on a prior that takes no scores
    except ValueError as exc:
        parser.error(str(exc))
    results: dict[tuple[str, int], Found] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for family in args.families:
            for seed in list(split_seeds("val"))[: args.seeds]:
                results[(family, seed)] = search(pool, family, seed, args.prior, args)
        print("best mean-vector ratio to the prior per scenario (under jitter):")
        for (family, seed), found in results.items():
            robust = f" ({np.mean(found.jittered):.4f})" if found.jittered else ""
            print(f"  {family:<16} {seed}: {found.ratio:.4f}{robust}")
        print(f"mean over the scenarios: {np.mean([found.ratio for found in results.values()]):.4f}", flush=True)
        if args.save:  # before the transfer, which may take long
            rows = [{"family": family, "seed": seed, **found._asdict()} for (family, seed), found in results.items()]
            with atomic_write(args.save) as out:
                json.dump({"prior": args.prior, "widths": args.widths, "tie": args.tie, "scenarios": rows}, out)
        if args.transfer:
            transfer(pool, results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
