"""The ``deepboot`` command line: simulate | compare | benchmark | train | generate | calibrate.

:func:`main` is the console script, and tests call it with an argv list. ``deepboot train ARGS`` is
handed whole to ``train_policy.py``'s own parser (its flags, messages and exit statuses), so that a
wheel, which has no clone to run the script from, trains too; every other sub-command is a
``cmd_<name>(args)`` of the arguments :func:`build_parser` parsed. Errors in user input (bad file,
unknown policy, impossible cluster, a missing optional extra: :data:`USER_ERRORS`) are printed as
one line and exit with status 2, never as a traceback. SIGINT (Ctrl-C) and SIGTERM stop any
command cleanly, in one line, with status 130 / 143 (:mod:`deepboot_env.stops`); a grid of runs
(``compare``, ``benchmark``) stopped before its end keeps its finished runs for ``--resume``, and
exits with 1 when runs failed on Ray (:func:`~deepboot_harness.run_log.grid_stopped`). The simulation
flags of ``simulate`` and ``compare`` and their reading (:func:`add_sim_arguments`, :func:`sim_config_from_args`) are
shared with the speed benchmarks (``benchmarks/bench_simulator.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deepboot_env import FRONT_END_DYNAMICS, REFERENCE_POLICY
from deepboot_env.argparsing import ArgumentParser, number
from deepboot_env.atomic import lock_folder, write_json
from deepboot_env.config import DYNAMICS, dynamics_notes, sim_config
from deepboot_env.evaluation import EpisodeProgress
from deepboot_env.extras import MissingExtraError
from deepboot_env.limits import MIN_INTERVAL_S
from deepboot_env.pool import BACKENDS, Backend
from deepboot_env.sim.aryl_mode import INFERENCE_PLACEMENTS
from deepboot_env.sim.cluster import ClusterConfigError
from deepboot_env.sim.interference import InterferenceError, InterferenceModel
from deepboot_env.sim.jobs import CAP_GROWTH
from deepboot_env.sim.measured import TRACE_SETS, TRUTHS
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.rates import BATCH_STATS
from deepboot_env.sim.restart import RESTART_MODELS
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.state import AllocationError
from deepboot_env.sim.workload import WorkloadError
from deepboot_env.stops import Stopped, StopSignals
from deepboot_harness.dynamics import dynamics_name, dynamics_title, warn_trained_dynamics
from deepboot_harness.run_log import grid_stopped

if TYPE_CHECKING:
    from typing import TypeAlias

    from deepboot_harness.benchmark import BenchmarkSpec

    Subparsers: TypeAlias = "argparse._SubParsersAction[ArgumentParser]"
    """What ``add_subparsers`` returns: each ``_<command>_parser`` adds its command to it."""

DEFAULT_WORKLOAD = "test/test-01"
"""Shipped workload used when ``--workload`` is omitted (periodic inference, 160 jobs)."""


def interference_from_args(args: argparse.Namespace) -> InterferenceModel | None:
    """The co-location interference model of ``--interference`` / ``--interference-matrix``."""
    flat = getattr(args, "interference", None)
    matrix = getattr(args, "interference_matrix", None)
    if flat is not None and matrix is not None:
        raise InterferenceError("give either --interference or --interference-matrix, not both")
    if matrix is not None:
        return InterferenceModel.from_file(matrix)  # read bounded, a regular file only
    if flat is None:
        return None
    try:
        return InterferenceModel.flat(flat)
    except InterferenceError as exc:
        raise InterferenceError(f"--interference: {exc}") from None


def sim_config_from_args(args: argparse.Namespace) -> SimConfig:
    """Simulation settings from the common flags (:func:`deepboot_env.config.sim_config`)."""
    if args.max_days is not None and not args.max_days > 0:
        raise ValueError(f"--max-days must be > 0, got {args.max_days:g}")
    return sim_config(
        cluster=args.cluster,
        shared_pool=args.shared_pool,
        restart=args.restart,
        protect_scale=args.protect_scale,
        interval=args.interval,
        interference=interference_from_args(args),
        truth=args.truth,
        trace_set=args.trace_set,
        batch_stats=args.batch_stats,
        cap_growth=args.cap_growth,
        dynamics=args.dynamics,
        inference_placement=args.inference_placement,
        max_time=None if args.max_days is None else args.max_days * 86400.0,
    )


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """``--jobs``, ``--backend`` and ``--address``: where the runs of a grid run."""
    parser.add_argument(
        "--jobs", "-j", type=int, default=1, help="worker processes, or the CPUs of a local Ray instance (default 1)"
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: worker processes of this machine (default); ray: one Ray task per run (pip install -e '.[ray]')",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="with --backend ray: the Ray cluster to join (auto, or HOST:PORT); default: a new local one",
    )


def backend_from_args(args: argparse.Namespace) -> Backend:
    """The :class:`deepboot_env.pool.Backend` of ``--backend`` / ``--address``, checked (Ray installed)."""
    backend = Backend(args.backend, args.address)
    backend.check()
    return backend


def config_title(config: SimConfig) -> str:
    """``DeepBoot-v1 dynamics, cluster, restart=...[, interference=...][, truth=measured (...), ...]``
    for report titles: the dynamics' name first (:func:`deepboot_harness.dynamics.dynamics_title`),
    the dynamics options that differ from the library's defaults last
    (:func:`deepboot_env.config.dynamics_notes`)."""
    text = f"{dynamics_title(config)}, {config.cluster.describe()}, restart={config.restart}"
    interference = config.interference
    if interference is not None:
        assert isinstance(interference, InterferenceModel)  # SimConfig stores it normalised
        text += f", interference={interference.describe()}"
    return text + "".join(f", {name}={value}" for name, value in dynamics_notes(config).items())


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``simulate`` and ``compare``: cluster, restart model, protect scale,
    interval, interference, truth, inference placement and seed."""
    _cluster_arguments(parser)
    _dynamics_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="policy seed (default 0)")
    parser.add_argument(
        "--max-days", type=float, metavar="D", help="cut the episode at this simulated day (default 30)"
    )


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The cluster, restart model, protect scale, interval and interference flags of :func:`add_sim_arguments`."""
    parser.add_argument("--cluster", help="training+inference cluster, NxG+MxG (default 8x4+8x4)")
    parser.add_argument("--shared-pool", metavar="NxG", help="one shared pool with inference priority, e.g. 16x4")
    parser.add_argument("--restart", choices=RESTART_MODELS, default="afe", help="restart-cost model (default afe)")
    parser.add_argument("--protect-scale", type=float, default=1.0, help="P: pod protect time scale (default 1)")
    parser.add_argument(
        "--interval", type=number(MIN_INTERVAL_S, 86_400.0), default=60.0, help="seconds between scheduling boundaries"
    )
    parser.add_argument(
        "--interference",
        type=float,
        metavar="F",
        help="co-location slowdown (Pollux's rule): distributed jobs sharing a node run at 1 - F (default off)",
    )
    parser.add_argument(
        "--interference-matrix",
        metavar="FILE",
        help="per-application-pair slowdowns (CSV/JSON, or 'default'); see deepboot_env/sim/interference.py",
    )


def _dynamics_arguments(parser: argparse.ArgumentParser) -> None:
    """The dynamics flags of :func:`add_sim_arguments`: the env version, what overrides it, the
    inference placement."""
    parser.add_argument(
        "--dynamics",
        choices=tuple(DYNAMICS),
        default=FRONT_END_DYNAMICS,
        help="the dynamics of DeepBoot-v1 (measured step times, the originals' exploration cap; the default) "
        "or DeepBoot-v0 (fitted goodput model); --truth, --batch-stats and --cap-growth override",
    )
    parser.add_argument(
        "--truth",
        choices=TRUTHS,
        help="what jobs progress at: the fitted model or the step times measured per placement shape "
        "(default: that of --dynamics, measured)",
    )
    parser.add_argument(
        "--trace-set",
        choices=TRACE_SETS,
        default="pollux",
        help="placement traces of --truth measured: Pollux's or DeepBoot's (default pollux)",
    )
    parser.add_argument(
        "--batch-stats",
        choices=BATCH_STATS,
        help="gradient statistics of the batch choice: at M0, or at each candidate batch (default m0)",
    )
    parser.add_argument(
        "--cap-growth",
        choices=CAP_GROWTH,
        help="when the exploration cap grows: at the allocation, or once the job trained at it "
        "(default: that of --dynamics, trained)",
    )
    parser.add_argument(
        "--inference-placement",
        choices=INFERENCE_PLACEMENTS,
        default="deepboot",
        help="where cold inference requests go: DeepBoot's ATS-I or its Aryl mode (inference half only, "
        "whole servers lent and reclaimed; default deepboot)",
    )
    parser.add_argument(
        "--aryl-mode",
        dest="inference_placement",
        action="store_const",
        const="aryl",
        help="shorthand for --inference-placement aryl",
    )


def print_summary(title: str, metrics: EpisodeMetrics) -> None:
    """A readable table of the main metrics (rich)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("training jobs done", f"{metrics.train_jobs_done} / {metrics.train_jobs}"),
        ("training JCT mean (s)", f"{metrics.train_jct_mean:,.1f}"),
        (
            "training JCT p50 / p95 / p99 (s)",
            f"{metrics.train_jct_p50:,.0f} / {metrics.train_jct_p95:,.0f} / {metrics.train_jct_p99:,.0f}",
        ),
        ("JCT lower bound mean (s)", f"{metrics.jct_lower_bound_mean:,.1f}"),
        ("makespan (s)", f"{metrics.makespan:,.0f}"),
        ("restarts", f"{metrics.restarts:,}"),
        (
            "inference requests (cold / warm)",
            f"{metrics.infer_requests:,} ({metrics.infer_cold_starts:,} / {metrics.infer_warm_hits:,})",
        ),
        ("inference latency mean / p99 (s)", f"{metrics.infer_latency_mean:.2f} / {metrics.infer_latency_p99:.2f}"),
        ("lent GPU-hours", f"{metrics.lent_gpu_seconds / 3600:,.1f}"),
        ("reclaims", f"{metrics.reclaims:,}"),
        ("simulated events", f"{metrics.sim_events:,}"),
        ("wall time (s)", f"{metrics.wall_seconds:.2f}"),
    ]
    total = sum(metrics.gpu_seconds_by_state.values()) or 1.0
    for state, seconds in metrics.gpu_seconds_by_state.items():
        rows.append((f"GPU time {state}", f"{100 * seconds / total:.1f} %"))
    if metrics.truncated:
        rows.append(("TRUNCATED", "episode cut at max_time"))
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def check_output_file(path: str | Path, flag: str) -> None:
    """Refuse, before any work, an output file that cannot be written.

    Raises:
        ValueError: naming the flag and the path (a folder, or a missing folder above it).
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{flag} {p}: is a folder, not a file")
    if not p.parent.is_dir():
        raise ValueError(f"{flag} {p}: the folder {p.parent} does not exist")


def check_output_folder(path: str | Path, flag: str) -> None:
    """Refuse, before any work, an output folder that is a file or cannot be created (nothing is
    created here).

    Raises:
        ValueError: naming the flag and the path.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{flag} {p}: is a file, not a folder")
    existing = next(parent for parent in (p, *p.parents) if parent.exists())
    if not existing.is_dir():
        raise ValueError(f"{flag} {p}: {existing} is a file, so the folder cannot be created")
    if not os.access(existing, os.W_OK):
        raise ValueError(f"{flag} {p}: {existing} is not writable")


PROGRESS_EVERY = 250
"""Decisions between two progress lines of ``deepboot simulate``."""

PROGRESS_AFTER_S = 2.0
"""``deepboot simulate`` reports progress only for an episode running longer than this (wall s)."""


class ProgressLine:
    """The progress callback of ``deepboot simulate``: once an episode has run for
    :data:`PROGRESS_AFTER_S` seconds, one line on stderr every :data:`PROGRESS_EVERY` decisions
    (``day 2.41 of 30, 57/160 jobs done, ...``) and a last one when it ends; short episodes print
    nothing."""

    def __init__(self) -> None:
        self.printed = False

    def __call__(self, progress: EpisodeProgress) -> None:
        """Print the line of ``progress`` if the episode is long enough to need one."""
        if progress.done and not self.printed:
            return
        if progress.wall_s >= PROGRESS_AFTER_S or self.printed:
            print(("done: " if progress.done else "") + progress.line(), file=sys.stderr, flush=True)
            self.printed = True


def write_metrics_json(metrics: EpisodeMetrics, config: SimConfig, path: str | Path) -> None:
    """The metrics as JSON at ``path`` with the ``dynamics`` they were simulated with (``v0``,
    ``v1`` or ``custom``), written atomically (a reader never sees half a file)."""
    import json

    doc = {"dynamics": dynamics_name(config), **json.loads(metrics.to_json())}
    write_json(path, doc, sort_keys=True)


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run one episode and print / write its metrics."""
    from deepboot_env.evaluation import run_episode
    from deepboot_env.policy import make_policy
    from traces.loaders import load_workload

    if args.json:
        check_output_file(args.json, "--json")
    workload = load_workload(args.workload)
    config = sim_config_from_args(args)
    if not args.quiet:
        warn_trained_dynamics("simulate", [args.policy], config)
    policy = make_policy(args.policy)
    reporter = None if args.quiet else ProgressLine()
    metrics = run_episode(policy, workload, config, seed=args.seed, progress=reporter, progress_every=PROGRESS_EVERY)
    if not args.quiet:
        print_summary(f"{args.policy} on {workload.name} ({config_title(config)})", metrics)
    if args.json:
        write_metrics_json(metrics, config, args.json)
        if not args.quiet:
            print(f"metrics written to {args.json}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Run policies x workloads x seeds; write results.csv, results.md and plots to ``--out``."""
    from deepboot_env.ray_pool import RunsFailed
    from deepboot_harness.compare import resolve_reference, write_results
    from deepboot_harness.compare_grid import run_comparison
    from deepboot_harness.compare_runs import ROW_FIELDS, outcome_from_row, outcome_row
    from deepboot_harness.compare_tables import print_summary_table
    from deepboot_harness.run_log import append_run, open_run_log

    check_output_folder(args.out, "--out")
    backend = backend_from_args(args)
    reference = resolve_reference(args.policies, args.reference)
    labels = _policy_labels(args.label or [], args.policies)
    config = sim_config_from_args(args)
    if not args.quiet:
        warn_trained_dynamics("compare", args.policies, config)
    seeds = args.seeds if args.seeds is not None else [args.seed]
    out = Path(args.out)
    settings = {"policies": list(args.policies), "workloads": list(map(str, args.workloads)), "seeds": seeds}

    held = contextlib.ExitStack()  # the folder's lock, from the first write to the last

    def saved_runs() -> dict[tuple[str, str, int], Any]:
        held.enter_context(lock_folder(out))
        saved = {**settings, "config": repr(config)}
        rows = open_run_log(out, "comparison", saved, args.resume, ROW_FIELDS, overwrite=True)
        return {(r["policy"], r["workload"], r["seed"]): outcome_from_row(r) for r in rows}

    try:
        with held:
            comparison = run_comparison(
                args.policies,
                args.workloads,
                seeds,
                config,
                jobs=args.jobs,
                progress=not args.quiet,
                timeline_policy=args.timeline_policy,
                timeline_workload=args.timeline_workload,
                timeline_per_policy=args.timeline_per_policy,
                saved=saved_runs,
                on_done=lambda task, outcome: append_run(out, outcome_row(task, outcome)),
                backend=backend,
            )
            paths = write_results(comparison, args.out, reference, labels)
    except (RunsFailed, KeyboardInterrupt) as exc:
        return grid_stopped("compare", args.out, exc)
    if not args.quiet:
        print_summary_table(comparison.frame, title=f"policy comparison ({config_title(config)})")
        print(f"wrote {', '.join(p.name for p in paths.values())} to {args.out}")
    return 0


def _policy_labels(items: Sequence[str], policies: Sequence[str]) -> dict[str, str]:
    """``--label POLICY=LABEL ...`` as a dict, checked before any run (known policies, labels that
    differ: :func:`deepboot_harness.plots.display_names`)."""
    from deepboot_harness.plots import display_names

    out = {}
    for item in items:
        policy, sep, label = item.rpartition("=")
        if not sep or not policy or not label.strip():
            raise ValueError(f"--label {item!r}: expected POLICY=LABEL, e.g. ppo:runs/ppo_3/best_model.zip=mine")
        out[policy] = label.strip()
    display_names(list(policies), out)
    return out


def _policy_seeds(items: Sequence[str]) -> dict[str, int]:
    """``--policy-seeds pollux-lend=3 ...`` as a dict."""
    out = {}
    for item in items:
        policy, sep, count = item.rpartition("=")
        if not sep or not policy or not count.isdigit():
            raise ValueError(f"--policy-seeds {item!r}: expected POLICY=N, e.g. pollux-lend=3")
        out[policy] = int(count)
    return out


def cmd_benchmark(args: argparse.Namespace) -> int:
    """Run policies on the test seeds of workload families; write the results and the leaderboard."""
    import time

    from deepboot_env.ray_pool import RunsFailed
    from deepboot_harness.benchmark import BenchmarkSpec, run_benchmark

    backend = backend_from_args(args)

    options: dict[str, object] = {"dynamics": args.dynamics}
    if not args.quiet:
        warn_trained_dynamics("benchmark", args.policies, sim_config(dynamics=args.dynamics))
    spec = BenchmarkSpec(
        families=tuple(args.families),
        policies=tuple(args.policies),
        seeds=args.seeds,
        split=args.split,
        options=options,
        policy_seeds=_policy_seeds(args.policy_seeds or []),
        reference=args.reference,
        skip_seeds=args.skip_seeds,
    )
    start = time.perf_counter()

    made = [0]

    def progress(done: int, total: int, row: dict[str, Any]) -> None:
        made[0] += 1
        if not args.quiet:
            print(
                f"[{done}/{total}] {row['policy']} on {row['family']} seed {row['seed']}: mean JCT "
                f"{float(row['train_jct_mean']):,.0f} s ({float(row['cpu_s']):.1f} CPU s, "
                f"{time.perf_counter() - start:,.0f} s elapsed)",
                file=sys.stderr,
                flush=True,
            )

    held = contextlib.ExitStack()  # the folder's lock, held until the leaderboard is written
    with held:
        try:
            rows = run_benchmark(
                spec, args.out, jobs=args.jobs, resume=args.resume, progress=progress, backend=backend, hold=held
            )
            _write_leaderboard(args, spec, rows, time.perf_counter() - start, made[0])
        except (RunsFailed, KeyboardInterrupt) as exc:
            return grid_stopped("benchmark", args.out, exc)
    return 0


def _write_leaderboard(
    args: argparse.Namespace, spec: BenchmarkSpec, rows: list[dict[str, Any]], wall: float, made: int
) -> None:
    """Write a finished benchmark's results, leaderboard and plots to ``--out`` (and print the
    leaderboard unless ``--quiet``): ``made`` of the ``rows`` ran in this invocation, in ``wall`` s."""
    from deepboot_harness.leaderboard import write_outputs

    how = f"--jobs {args.jobs}" + (f" --backend {args.backend}" if args.backend != "local" else "")
    cpu_hours = sum(float(row["cpu_s"]) for row in rows) / 3600.0
    notes = [
        f"Families {', '.join(spec.families)}; {_seed_range(spec)} of each; "
        f"DeepBoot-{args.dynamics} dynamics (each scenario sets its cluster and restart model).",
        f"{len(rows)} runs, {cpu_hours:.2f} CPU-hours in all (the sum of the runs' CPU time); this invocation of "
        f"`deepboot benchmark {how}` made {made} of them in {wall / 60:.1f} min of wall time.",
    ]
    title = f"Benchmark leaderboard (DeepBoot-{args.dynamics} dynamics)"
    paths = write_outputs(rows, args.out, title, notes, spec.reference)
    if not args.quiet:
        print(Path(paths["leaderboard"]).read_text(encoding="utf-8"))
        print(f"wrote {', '.join(p.name for p in paths.values())} to {args.out}")


def _seed_range(spec: BenchmarkSpec) -> str:
    """The benchmark's seeds in words: "the first 10 test seeds", or "val seeds 9 to 32" after
    ``--skip-seeds 8``."""
    if not spec.skip_seeds:
        return f"the first {spec.seeds} {spec.split} seeds"
    return f"{spec.split} seeds {spec.skip_seeds + 1} to {spec.skip_seeds + spec.seeds}"


def cmd_train(argv: Sequence[str]) -> int:
    """``deepboot train ARGS``: ``train_policy.py ARGS`` (its flags, messages and exit statuses)."""
    from train_policy import main as train_main

    return train_main(list(argv), prog="deepboot train")


def cmd_generate(args: argparse.Namespace) -> int:
    """Generate a workload (Philly-derived training jobs, periodic inference)."""
    from traces.generate_cli import run_generate

    return run_generate(args)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Refit the application profiles from raw traces."""
    from traces.calibrate import format_report, run_calibration

    report = run_calibration(Path(args.apps), Path(args.out) if args.out else None)
    print(format_report(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``deepboot`` argument parser: one sub-parser per command, in ``--help``'s order."""
    parser = ArgumentParser(prog="deepboot", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        _simulate_parser,
        _compare_parser,
        _benchmark_parser,
        _train_parser,
        _teach_parser,
        _generate_parser,
        _calibrate_parser,
    )
    for add in commands:
        add(sub)
    return parser


def _teach_parser(sub: Subparsers) -> None:
    """``deepboot teach``: the hindsight teacher (:mod:`deepboot_harness.teach`)."""
    from deepboot_harness.teach import add_teach_parser

    add_teach_parser(sub, add_backend_arguments)


def _simulate_parser(sub: Subparsers) -> None:
    """``deepboot simulate``: one episode of a workload under a policy."""
    sim = sub.add_parser("simulate", help="run one episode of a workload under a policy")
    sim.add_argument(
        "--workload", default=DEFAULT_WORKLOAD, help="CSV path or shipped workload name (default %(default)s)"
    )
    sim.add_argument("--policy", default="fifo", help="policy name (default fifo)")
    add_sim_arguments(sim)
    sim.add_argument("--json", metavar="FILE", help="write the metrics as JSON")
    sim.add_argument("--quiet", action="store_true", help="print nothing")
    sim.set_defaults(func=cmd_simulate)


def _compare_parser(sub: Subparsers) -> None:
    """``deepboot compare``: policies x workloads x seeds, with tables and plots."""
    cmp = sub.add_parser("compare", help="run policies x workloads x seeds; write results.csv, results.md, plots")
    cmp.add_argument(
        "--workloads",
        nargs="+",
        required=True,
        metavar="W",
        help="CSV paths, directories of CSVs, shipped workload names, or a split: train, val, test",
    )
    cmp.add_argument("--policies", nargs="+", required=True, metavar="P", help="policy names")
    add_sim_arguments(cmp)
    cmp.add_argument("--seeds", nargs="+", type=int, metavar="S", help="policy seeds (default: --seed)")
    add_backend_arguments(cmp)
    _compare_output_arguments(cmp)
    cmp.set_defaults(func=cmd_compare)


def _compare_output_arguments(cmp: argparse.ArgumentParser) -> None:
    """``deepboot compare``'s plots, output folder, resume and quiet flags."""
    cmp.add_argument("--timeline-policy", metavar="P", help="policy of the run in timeline.png (default: the first)")
    cmp.add_argument(
        "--timeline-workload", metavar="W", help="workload of the run in timeline.png (default: the first)"
    )
    cmp.add_argument(
        "--timeline-per-policy",
        action="store_true",
        help="also draw timeline-<policy>.png for every policy on that workload and seed",
    )
    cmp.add_argument(
        "--label",
        nargs="+",
        metavar="P=LABEL",
        help="a policy's name in the plots, e.g. ppo:runs/ppo_3/best_model.zip=wide (default: a model by its "
        "run folder, ppo:ppo_3)",
    )
    cmp.add_argument(
        "--reference",
        metavar="P",
        help="policy of the paired JCT ratios in results.md and jct_ratio.png (default: ats)",
    )
    cmp.add_argument(
        "--out", required=True, metavar="DIR", help="output folder (created; each finished run is saved in runs.jsonl)"
    )
    cmp.add_argument(
        "--resume", action="store_true", help="reuse the finished runs saved in --out (same policies, workloads, seeds)"
    )
    cmp.add_argument("--quiet", action="store_true", help="no progress bar or table")


def _benchmark_parser(sub: Subparsers) -> None:
    """``deepboot benchmark``: policies on the test seeds of workload families, and the leaderboard."""
    from deepboot_harness.benchmark import DEFAULT_POLICIES
    from traces.families import FAMILIES

    bench = sub.add_parser(
        "benchmark",
        help="run policies on the test seeds of workload families; write results, leaderboard.md and plots",
    )
    bench.add_argument(
        "--families", nargs="+", default=list(FAMILIES), metavar="F", help="workload families (default: all)"
    )
    bench.add_argument(
        "--policies",
        nargs="+",
        default=list(DEFAULT_POLICIES),
        metavar="P",
        help="policies (default: the leaderboard's)",
    )
    bench.add_argument("--seeds", type=int, default=10, help="seeds per family: the split's first N (default 10)")
    bench.add_argument("--split", default="test", help="seed range: test (default), val or train")
    bench.add_argument(
        "--skip-seeds",
        type=int,
        default=0,
        metavar="K",
        help="pass over the split's first K seeds, e.g. the val seeds a model was selected on (default 0)",
    )
    bench.add_argument(
        "--policy-seeds", nargs="+", metavar="P=N", help="fewer seeds for slow policies, e.g. pollux-lend=3"
    )
    bench.add_argument(
        "--reference",
        default=REFERENCE_POLICY,
        metavar="P",
        help=f"the policy every JCT ratio is paired against, one of --policies (default {REFERENCE_POLICY}), "
        "e.g. a model's prior",
    )
    bench.add_argument(
        "--dynamics",
        choices=tuple(DYNAMICS),
        default=FRONT_END_DYNAMICS,
        help=f"environment dynamics (default {FRONT_END_DYNAMICS}: measured step times)",
    )
    add_backend_arguments(bench)
    bench.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    bench.add_argument("--resume", action="store_true", help="continue the benchmark in --out, skipping finished runs")
    bench.add_argument("--quiet", action="store_true", help="print nothing but errors")
    bench.set_defaults(func=cmd_benchmark)


def _train_parser(sub: Subparsers) -> None:
    """``deepboot train``, listed for ``--help`` only: :func:`main` hands ``deepboot train ...`` to
    ``train_policy.py``'s own parser."""
    sub.add_parser(
        "train",
        add_help=False,
        help="train a PPO agent or the learned priority: the flags of train_policy.py (deepboot train --help)",
    )


def _generate_parser(sub: Subparsers) -> None:
    """``deepboot generate``: the flags of :func:`traces.generate_cli.build_generate_parser`."""
    from traces.generate_cli import build_generate_parser

    gen = sub.add_parser("generate", help="generate a workload CSV (Philly-derived jobs + periodic inference)")
    build_generate_parser(gen)
    gen.set_defaults(func=cmd_generate)


def _calibrate_parser(sub: Subparsers) -> None:
    """``deepboot calibrate``: refit the application profiles from raw traces."""
    cal = sub.add_parser(
        "calibrate", help="fit application profiles and tabulate measured step times from raw Pollux traces"
    )
    cal.add_argument("--apps", required=True, help="folder with <app>/origin_placements.csv etc.")
    cal.add_argument(
        "--out",
        help="output apps.json; step_times.json is written beside it (default: the shipped deepboot_env/sim/data/)",
    )
    cal.set_defaults(func=cmd_calibrate)


USER_ERRORS = (WorkloadError, ClusterConfigError, AllocationError, ValueError, OSError, KeyError, MissingExtraError)
"""Errors a user's input (or a missing optional extra) causes: one line on stderr and exit status 2,
never a traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deepboot`` console script. SIGINT and SIGTERM stop every command
    cleanly (:mod:`deepboot_env.stops`): one line on stderr, exit status 130 / 143, what finished
    saved (``compare`` and ``benchmark``: every finished run, for ``--resume``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        return cmd_train(argv[1:])
    command = argv[0] if argv else ""
    with StopSignals():
        try:
            args = build_parser().parse_args(argv)
            command = args.command
            return int(args.func(args) or 0)
        except USER_ERRORS as exc:
            print(f"deepboot {command}: error: {exc}", file=sys.stderr)
            return 2
        except Stopped as stop:
            print(f"deepboot {command}: {stop}: stopped (files are written whole or not at all)", file=sys.stderr)
            return stop.exit_status


if __name__ == "__main__":
    raise SystemExit(main())
