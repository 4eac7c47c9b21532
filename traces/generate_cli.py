"""``deepboot generate``: the command line of the workload generator (:mod:`traces.generate`).

    deepboot generate --out my.csv --seed 7 [--load 1.5] [--inference-mean-gpus 14 --inference-amplitude 0.85]
    deepboot generate --family heavy-inference --seed 2000000 --out s.csv   # also writes s.scenario.json
    deepboot generate --philly-replay ../shared/data/philly/philly.csv [--jobs 10000] --out philly.csv

Writes a generated workload as a DeepBoot-format CSV (or to standard output) and reports the peak
offered inference load against the inference cluster, with a warning when the peaks exceed it.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser, number, whole
from deepboot_env.atomic import write_json
from deepboot_env.sim.scenario import Scenario
from deepboot_env.sim.workload import Workload
from traces.families import FAMILIES, sample_scenario
from traces.generate import (
    DEEPBOOT_OUTPUT_COLUMNS,
    DEFAULT_HORIZON_HOURS,
    DEFAULT_INFERENCE_AMPLITUDE,
    DEFAULT_INFERENCE_MEAN_GPUS,
    DEFAULT_PERIOD_HOURS,
    DEFAULT_PHASE_HOURS,
    generate_workload,
    peak_offered_gpus,
    workload_csv_rows,
    write_workload_csv,
)
from traces.loaders import load_philly
from traces.philly import load_philly_stats
from traces.philly_replay import PhillyReplay, philly_replay


def build_generate_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Add the ``deepboot generate`` flags to ``parser`` (or a new one) and return it."""
    if parser is None:
        parser = ArgumentParser(
            prog="deepboot generate",
            description="Generate a workload: Philly-derived training jobs plus periodic inference (DeepBoot CSV).",
        )
    p = parser
    p.add_argument("--out", metavar="FILE", default=None, help="output CSV (default: standard output)")
    p.add_argument(
        "--inference-gpus",
        type=whole(1, 1_000_000),
        default=32,
        help="GPUs of the inference cluster the peak offered load is compared with (default 32: 8x4)",
    )
    p.add_argument("--name", default=None, help="workload name (default: the output file stem)")
    p.add_argument("--seed", type=whole(0, 2**63 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--num-jobs", type=int, default=160, help="training jobs at load 1.0 (default 160)")
    p.add_argument("--load", type=float, default=1.0, help="relative job load: round(num_jobs * load) jobs")
    p.add_argument("--start-hour", type=float, default=2.0, help="Philly time of day of the window start (default 2)")
    p.add_argument("--window-hours", type=float, default=8.0, help="arrival window length in hours (default 8)")
    p.add_argument(
        "--inference-mean-gpus",
        type=float,
        default=DEFAULT_INFERENCE_MEAN_GPUS,
        help=f"mean offered inference load in GPUs (default {DEFAULT_INFERENCE_MEAN_GPUS:g})",
    )
    p.add_argument(
        "--inference-amplitude",
        type=float,
        default=DEFAULT_INFERENCE_AMPLITUDE,
        help=f"relative day/night amplitude in [0, 1] (default {DEFAULT_INFERENCE_AMPLITUDE:g})",
    )
    p.add_argument(
        "--period-hours", type=number(0.01, 1e6), default=DEFAULT_PERIOD_HOURS, help="period of the inference rate"
    )
    p.add_argument(
        "--phase-hours",
        type=number(-1e6, 1e6),
        default=DEFAULT_PHASE_HOURS,
        help=f"phase of the inference rate (default {DEFAULT_PHASE_HOURS:g}: trough at 2 h, peak at 14 h)",
    )
    p.add_argument(
        "--horizon-hours",
        type=number(0.01, 1e6),
        default=DEFAULT_HORIZON_HOURS,
        help="inference arrivals in [0, horizon)",
    )
    p.add_argument(
        "--instances-per-app", type=whole(1, 1000), default=1, help="inference app instances per model (default 1)"
    )
    p.add_argument("--no-inference", action="store_true", help="training jobs only")
    p.add_argument("--stats", metavar="JSON", default=None, help="Philly statistics (default: shipped)")
    p.add_argument(
        "--family",
        default=None,
        metavar="NAME",
        help="draw scenario --seed of a workload family instead (every generator parameter, the cluster and the "
        "restart model); with --out it also writes <out stem>.scenario.json; see --list-families",
    )
    p.add_argument("--list-families", action="store_true", help="list the workload families and exit")
    p.add_argument(
        "--philly-replay",
        metavar="PHILLY_CSV",
        default=None,
        help="replay every filtered job of this raw Philly trace at its own arrival time, with periodic inference "
        "at the default relative load, on a cluster sized like Philly's (docs/workloads.md §9)",
    )
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="with --philly-replay: the first N jobs only")
    p.add_argument(
        "--service-scale",
        type=float,
        default=None,
        metavar="S",
        help="with --philly-replay: inference service times over the default ones (default: inference GPUs / 32)",
    )
    return p


GENERATOR_FLAGS: tuple[str, ...] = (
    "num_jobs",
    "load",
    "start_hour",
    "window_hours",
    "inference_mean_gpus",
    "inference_amplitude",
    "period_hours",
    "phase_hours",
    "horizon_hours",
    "instances_per_app",
    "no_inference",
    "stats",
)
"""Flags that set the generator's parameters; a family draws its own, so they go without ``--family``."""


def _flag_workload(args: argparse.Namespace) -> Workload:
    """The workload the generator flags describe."""
    stats = load_philly_stats(args.stats) if args.stats else None
    train = {
        "num_jobs": args.num_jobs,
        "start_hour": args.start_hour,
        "window_hours": args.window_hours,
        "load": args.load,
    }
    inference = None
    if not args.no_inference:
        inference = {
            "horizon_s": args.horizon_hours * 3600.0,
            "instances_per_app": args.instances_per_app,
            "mean_gpus": args.inference_mean_gpus,
            "amplitude": args.inference_amplitude,
            "period_s": args.period_hours * 3600.0,
            "phase_s": args.phase_hours * 3600.0,
        }
    name = args.name or (Path(args.out).stem if args.out else f"generated-{args.seed}")
    return generate_workload(name, args.seed, train=train, inference=inference, stats=stats)


def _changed_flags(args: argparse.Namespace, flags: tuple[str, ...]) -> list[str]:
    """The ``flags`` (as ``--flag-name``) that ``args`` sets to other than their defaults."""
    defaults = build_generate_parser().parse_args([])
    return [f"--{flag.replace('_', '-')}" for flag in flags if getattr(args, flag) != getattr(defaults, flag)]


def _family_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario ``--family`` and ``--seed`` name (the generator flags must keep their defaults)."""
    changed = _changed_flags(args, GENERATOR_FLAGS)
    if changed:
        raise ValueError(f"--family draws every generator parameter itself; drop {', '.join(changed)}")
    return sample_scenario(args.family, args.seed)


REPLAY_FLAGS: tuple[str, ...] = ("jobs", "service_scale")
"""Flags of ``--philly-replay`` only."""


def _philly_replay(args: argparse.Namespace) -> PhillyReplay:
    """The replay ``--philly-replay`` names (the other generator flags must keep their defaults)."""
    changed = _changed_flags(args, tuple(f for f in GENERATOR_FLAGS if f != "no_inference") + ("family",))
    if changed:
        raise ValueError(f"--philly-replay replays the trace as it is; drop {', '.join(changed)}")
    name = args.name or (Path(args.out).stem if args.out else None)
    trace = load_philly(args.philly_replay)
    return philly_replay(
        trace, args.jobs, args.seed, inference=not args.no_inference, service_scale=args.service_scale, name=name
    )


def scenario_sidecar(csv_path: str | Path) -> Path:
    """Where ``deepboot generate --family`` writes a scenario's description next to its CSV
    (``x.csv`` -> ``x.scenario.json``)."""
    path = Path(csv_path)
    return path.with_name(path.stem + ".scenario.json")


def list_families() -> str:
    """One line per workload family: its name and description."""
    return "\n".join(f"{name:<16} {family.description}" for name, family in FAMILIES.items())


def run_generate(args: argparse.Namespace) -> int:
    """Run ``deepboot generate`` with parsed arguments; returns the exit status."""
    if args.list_families:
        print(list_families())
        return 0
    try:
        scenario = None
        replay = None
        if args.philly_replay:
            replay = _philly_replay(args)
            wl = replay.workload
        elif _changed_flags(args, REPLAY_FLAGS):
            raise ValueError(f"{', '.join(_changed_flags(args, REPLAY_FLAGS))}: only with --philly-replay")
        elif args.family:
            scenario = _family_scenario(args)
            wl = scenario.workload
        else:
            wl = _flag_workload(args)
        if args.out:
            path = write_workload_csv(wl, args.out)
            s = wl.summary()
            print(
                f"wrote {path}: {s['training_jobs']} training jobs, {s['inference_requests']} inference requests "
                f"on {s['inference_instances']} instances, last arrival {s['last_arrival_s']:g} s"
            )
            if scenario is not None:
                sidecar = scenario_sidecar(path)
                write_json(sidecar, scenario.describe())
                print(f"wrote {sidecar}: cluster {scenario.describe()['cluster']}, restart {scenario.restart}")
        else:
            w = csv.writer(sys.stdout, lineterminator="\n")
            w.writerow(DEEPBOOT_OUTPUT_COLUMNS)
            w.writerows(workload_csv_rows(wl))
        if replay is not None:
            print(
                f"peak concurrent GPU demand in the trace {replay.peak_gpus}, span {replay.span_s / 86400:.1f} days: "
                f"deepboot simulate --workload {args.out or 'FILE'} --cluster {replay.cluster.describe()} "
                f"--max-days {replay.max_days}",
                file=sys.stdout if args.out else sys.stderr,
            )
        inference_gpus = args.inference_gpus
        cluster = replay.cluster if replay is not None else scenario.cluster if scenario is not None else None
        if cluster is not None:
            inference_gpus = cluster.infer_nodes * cluster.gpus_per_node
        if wl.requests:
            peak = peak_offered_gpus(wl.requests)
            share = peak / inference_gpus
            print(
                f"peak offered inference load: {peak:.1f} GPUs ({share:.0%} of a {inference_gpus}-GPU inference "
                "cluster, busiest 10 minutes)",
                file=sys.stderr,
            )
            if share > 1.0:
                print(
                    "warning: the peaks exceed the inference cluster: requests will queue for a GPU "
                    "(and take every lent GPU back)",
                    file=sys.stderr,
                )
    except (ValueError, OSError) as exc:  # bad input: one line and exit status 2, as every deepboot command
        print(f"deepboot generate: error: {exc}", file=sys.stderr)
        return 2
    return 0


def generate_main(argv: list[str] | None = None) -> int:
    """Entry point of ``deepboot generate`` (``argv`` without the sub-command)."""
    return run_generate(build_generate_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(generate_main())
