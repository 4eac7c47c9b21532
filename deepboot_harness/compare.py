"""Compare policies over workloads and seeds: one table row per run, a markdown report and plots.

:func:`compare` runs every (policy, workload, seed) through
:func:`deepboot_env.evaluation.run_episode`, in worker processes when ``jobs > 1``, and returns a
:class:`pandas.DataFrame` with one row per run. With ``out_dir`` it also writes

- ``results.csv``: the frame (every scalar metric; GPU-seconds per state as ``gpu_s_<state>``),
- ``results.md``: mean +/- standard deviation per policy, ratio of the mean JCT to the best
  policy's and to the JCT lower bound, and the mean JCT per workload,
- ``jcts.csv`` (per-job JCTs of every run) and ``timeline.csv`` (the chosen run's timeline),
- ``jct_cdf.png``, ``avg_jct.png`` and ``timeline.png`` (see :mod:`deepboot_harness.plots`).

Rows are ordered policy, then workload, then seed, whatever order the runs finish in; apart from
``wall_seconds`` the frame is the same for any ``jobs``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from deepboot_env.sim.metrics import GPU_STATES, EpisodeMetrics

if TYPE_CHECKING:
    from rich.console import Console
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import Workload

RUN_COLUMNS: tuple[str, ...] = ("policy", "workload", "seed", "cluster", "restart", "protect_scale")
"""Columns naming a run, first in :func:`compare`'s frame; the metric columns follow."""

TIMELINE_COLUMNS: tuple[str, ...] = (
    "time",
    *GPU_STATES,
    "waiting_requests",
    "inference_arrivals",
)
"""Columns of :attr:`Comparison.timeline` / ``timeline.csv`` (GPU counts per state at each boundary)."""

SPLIT_NAMES: tuple[str, ...] = ("train", "val", "test")
"""Workload arguments that stand for every shipped workload of that split."""


# ----------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class WorkloadRef:
    """A workload to run: ``source`` is what workers load (shipped name or CSV path)."""

    label: str
    source: str


def expand_workloads(args: Sequence[str | Path]) -> list[WorkloadRef]:
    """Resolve workload arguments into a list of workloads, in order, without duplicates.

    Each argument is a split name (``train``, ``val``, ``test``: every shipped workload of it), a
    directory (every ``*.csv`` in it, sorted), a CSV path, or a shipped workload's name. Labels
    are the shipped name, or the file stem (the path, where two files share a stem).

    Raises:
        ValueError: for no arguments, or a split / directory holding no workload.
    """
    from traces.loaders import list_shipped_workloads

    if not args:
        raise ValueError("no workloads given")
    shipped = list_shipped_workloads()
    sources: list[tuple[str, bool]] = []  # (source, is a file path)
    for arg in args:
        text = str(arg)
        path = Path(text)
        if text in SPLIT_NAMES and not path.exists():
            names = [n for n in shipped if n.split("/", 1)[0] == text]
            if not names:
                raise ValueError(f"no shipped workloads in split {text!r}")
            sources.extend((n, False) for n in names)
        elif path.is_dir():
            files = sorted(path.glob("*.csv"))
            if not files:
                raise ValueError(f"{text}: directory holds no *.csv workload")
            sources.extend((str(f), True) for f in files)
        else:
            sources.append((text, path.is_file()))
    unique: list[tuple[str, bool]] = []
    seen: set[str] = set()
    for source, is_file in sources:
        key = str(Path(source).resolve()) if is_file else source
        if key not in seen:
            seen.add(key)
            unique.append((source, is_file))
    stems = [Path(s).stem if is_file else s for s, is_file in unique]
    return [
        WorkloadRef(label=stem if stems.count(stem) == 1 else source, source=source)
        for stem, (source, _) in zip(stems, unique, strict=True)
    ]


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


# ----------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class _Task:
    index: int
    policy: str
    workload: str  # label
    source: str
    seed: int
    config: SimConfig
    want_timeline: bool


@dataclass
class _Outcome:
    index: int
    metrics: dict[str, object]
    jcts: dict[str, float]
    timeline: list[tuple[float, ...]] | None


_WORKLOAD_CACHE: dict[str, Workload] = {}


def _load(source: str) -> Workload:
    """Load (once per process) the workload named or stored at ``source``."""
    if source not in _WORKLOAD_CACHE:
        from traces.loaders import load_workload

        _WORKLOAD_CACHE[source] = load_workload(source)
    return _WORKLOAD_CACHE[source]


def _run_task(task: _Task, workload: Workload | None = None) -> _Outcome:
    """One run (worker side): only the chosen run sends its timeline back."""
    from deepboot_env.evaluation import run_episode

    metrics: EpisodeMetrics = run_episode(task.policy, workload or _load(task.source), task.config, seed=task.seed)
    return _Outcome(
        index=task.index,
        metrics=metrics.to_dict(include_jcts=False),
        jcts=dict(metrics.jcts),
        timeline=list(metrics.timeline) if task.want_timeline else None,
    )


def _row(task: _Task, metrics: dict[str, object]) -> dict[str, object]:
    row: dict[str, object] = {
        "policy": task.policy,
        "workload": task.workload,
        "seed": task.seed,
        "cluster": task.config.cluster.describe(),
        "restart": task.config.restart,
        "protect_scale": task.config.protect_scale,
    }
    if task.config.interference is not None:  # the column exists only when interference is on
        row["interference"] = task.config.interference.describe()
    for key, value in metrics.items():
        if key == "gpu_seconds_by_state":
            assert isinstance(value, dict)
            row.update({f"gpu_s_{state}": float(v) for state, v in value.items()})
        elif isinstance(value, (bool, int, float, str)) or value is None:
            row[key] = value
    return row


@dataclass
class Comparison:
    """Everything one comparison produced.

    Attributes:
        frame: one row per run (see :func:`compare`).
        jcts: per-job training JCTs (s) of every run, keyed by (policy, workload label, seed).
        timeline: the chosen run's timeline, columns :data:`TIMELINE_COLUMNS`.
        timeline_run: (policy, workload label, seed) of the chosen run.
        config: the simulation settings used.
        workloads: the workloads, in row order.
    """

    frame: pd.DataFrame
    jcts: dict[tuple[str, str, int], dict[str, float]]
    timeline: pd.DataFrame
    timeline_run: tuple[str, str, int]
    config: SimConfig
    workloads: list[WorkloadRef] = field(default_factory=list)

    def jcts_by_policy(self) -> dict[str, list[float]]:
        """Per-job JCTs (s) pooled over every workload and seed, per policy in row order."""
        out: dict[str, list[float]] = {p: [] for p in self.frame["policy"].unique()}
        for (policy, _, _), jcts in self.jcts.items():
            out[policy].extend(jcts.values())
        return out


def run_comparison(
    policies: Sequence[str],
    workloads: Sequence[str | Path],
    seeds: Sequence[int] = (0,),
    config: SimConfig | None = None,
    jobs: int = 1,
    progress: bool = True,
    timeline_policy: str | None = None,
    timeline_workload: str | None = None,
) -> Comparison:
    """Run every (policy, workload, seed) and collect metrics, JCTs and one timeline.

    Args:
        policies: registry names (or ``ppo:<path>``); checked before anything runs.
        workloads: see :func:`expand_workloads`; all are loaded (and so checked) up front.
        seeds: policy seeds.
        config: simulation settings (default :class:`SimConfig`).
        jobs: worker processes (1 = run in this process).
        progress: show a rich progress bar (on stderr).
        timeline_policy: policy of the run whose timeline is kept (default: the first).
        timeline_workload: workload (label or source) of that run (default: the first); the
            seed is the first seed.

    Raises:
        ValueError: empty or unknown policies, seeds or workloads, a bad ``jobs``, or a
            timeline choice that is not part of the comparison.
    """
    from deepboot_env.policy import make_policy

    config = config or SimConfig()
    policies = _unique([str(p) for p in policies])
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    if not policies:
        raise ValueError("no policies given")
    if not seeds:
        raise ValueError("no seeds given")
    if int(jobs) < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    for name in policies:
        make_policy(name)  # raises ValueError naming the known policies
    refs = expand_workloads(workloads)
    loaded = {ref.source: _load(ref.source) for ref in refs}

    chosen_policy = timeline_policy if timeline_policy is not None else policies[0]
    if chosen_policy not in policies:
        raise ValueError(f"timeline policy {chosen_policy!r} is not among the policies: {', '.join(policies)}")
    chosen_ref = refs[0]
    if timeline_workload is not None:
        matches = [r for r in refs if timeline_workload in (r.label, r.source)]
        if not matches:
            raise ValueError(
                f"timeline workload {timeline_workload!r} is not among the workloads: "
                + ", ".join(r.label for r in refs)
            )
        chosen_ref = matches[0]
    chosen = (chosen_policy, chosen_ref.label, seeds[0])

    tasks = [
        _Task(i, policy, ref.label, ref.source, seed, config, (policy, ref.label, seed) == chosen)
        for i, (policy, ref, seed) in enumerate((p, r, s) for p in policies for r in refs for s in seeds)
    ]
    outcomes = _execute(tasks, loaded, int(jobs), progress)

    frame = pd.DataFrame([_row(task, outcomes[task.index].metrics) for task in tasks])
    jcts = {(t.policy, t.workload, t.seed): outcomes[t.index].jcts for t in tasks}
    timeline_rows = next(o.timeline for o in outcomes if o.timeline is not None)
    timeline = pd.DataFrame(timeline_rows, columns=list(TIMELINE_COLUMNS))
    return Comparison(frame, jcts, timeline, chosen, config, refs)


def _execute(tasks: list[_Task], loaded: dict[str, Workload], jobs: int, progress: bool) -> list[_Outcome]:
    """Run ``tasks``; the outcomes are indexed like the tasks whatever order they finish in."""
    outcomes: list[_Outcome | None] = [None] * len(tasks)
    with _ProgressBar(len(tasks), progress) as advance:
        if jobs == 1 or len(tasks) == 1:
            for task in tasks:
                outcomes[task.index] = _run_task(task, loaded[task.source])
                advance(task)
        else:
            # All tasks are submitted before the progress bar's thread starts, so forked workers
            # never inherit a held lock.
            executor = ProcessPoolExecutor(max_workers=min(jobs, len(tasks)))
            try:
                futures: dict[Future[_Outcome], _Task] = {executor.submit(_run_task, t): t for t in tasks}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for fut in done:
                        outcome = fut.result()  # re-raises a worker's error
                        outcomes[outcome.index] = outcome
                        advance(futures[fut])
            finally:
                executor.shutdown(wait=True, cancel_futures=True)
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None]


class _ProgressBar:
    """A rich progress bar on stderr (or nothing); entering gives ``advance(task)``."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self._progress = None

    def __enter__(self) -> Callable[[_Task], None]:
        if not self.enabled:
            return lambda task: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = progress = Progress(
            TextColumn("[bold]compare[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=False,
        )
        progress.start()
        bar = progress.add_task("", total=self.total)

        done = [0]

        def advance(task: _Task) -> None:
            done[0] += 1
            last = "done" if done[0] == self.total else f"{task.policy} on {task.workload} seed {task.seed}"
            progress.update(bar, advance=1, description=last)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


# ----------------------------------------------------------------------------------------------
# summaries


SUMMARY_METRICS: tuple[tuple[str, str, float], ...] = (
    ("train_jct_mean", "JCT mean (s)", 1.0),
    ("train_jct_p99", "JCT p99 (s)", 1.0),
    ("makespan", "makespan (h)", 1 / 3600),
    ("infer_latency_p99", "infer. latency p99 (s)", 1.0),
    ("restarts", "restarts", 1.0),
    ("reclaims", "reclaims", 1.0),
    ("lent_gpu_seconds", "lent GPU-h", 1 / 3600),
)
"""(column, heading with unit, scale) of the per-policy summary."""


def policy_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per policy (in row order): runs, mean and std over runs of :data:`SUMMARY_METRICS`, ratios.

    Columns ``<metric>_mean`` / ``<metric>_std`` (std is NaN with one run), ``runs``,
    ``jobs_done`` / ``jobs`` (summed), ``truncated`` (runs cut at ``max_time``),
    ``jct_vs_best`` (mean JCT / the lowest mean JCT of any policy) and ``jct_vs_bound`` (mean JCT
    / mean JCT lower bound over the same runs).
    """
    rows = []
    for policy, group in frame.groupby("policy", sort=False):
        row: dict[str, object] = {"policy": policy, "runs": len(group)}
        for col, _, _ in SUMMARY_METRICS:
            values = group[col].astype(float)
            row[f"{col}_mean"] = float(values.mean())
            row[f"{col}_std"] = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        row["jobs_done"] = int(group["train_jobs_done"].sum())
        row["jobs"] = int(group["train_jobs"].sum())
        row["truncated"] = int(group["truncated"].astype(bool).sum())
        row["jct_vs_bound"] = row["train_jct_mean_mean"] / float(group["jct_lower_bound_mean"].mean())
        rows.append(row)
    out = pd.DataFrame(rows)
    best = out["train_jct_mean_mean"].min()
    out["jct_vs_best"] = out["train_jct_mean_mean"] / best
    return out


def _fmt(value: float, scale: float = 1.0) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    v = value * scale
    if abs(v) >= 100 or v == round(v):
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    return f"{v:,.2f}"


def _pm(mean: float, std: float, scale: float = 1.0) -> str:
    if std is None or not np.isfinite(std):
        return _fmt(mean, scale)
    return f"{_fmt(mean, scale)} ± {_fmt(std, scale)}"


def summary_rows(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Heading and formatted cells of the per-policy table (shared by markdown and rich)."""
    summary = policy_summary(frame)
    heading = ["policy", "runs", *(h for _, h, _ in SUMMARY_METRICS), "JCT ÷ best", "JCT ÷ lower bound"]
    rows = []
    for _, s in summary.iterrows():
        name = str(s["policy"])
        if s["jobs_done"] < s["jobs"]:
            name += f" ({s['jobs_done']}/{s['jobs']} jobs done)"
        cells = [name, str(int(s["runs"]))]
        cells += [_pm(s[f"{col}_mean"], s[f"{col}_std"], scale) for col, _, scale in SUMMARY_METRICS]
        cells += [f"{s['jct_vs_best']:.2f}", f"{s['jct_vs_bound']:.2f}"]
        rows.append(cells)
    return heading, rows


def per_workload_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Mean training JCT (s) per workload (rows) and policy (columns), ± std over seeds; best in bold."""
    policies = list(frame["policy"].unique())
    heading = ["workload", "lower bound", *policies]
    rows = []
    for workload, group in frame.groupby("workload", sort=False):
        stats = group.groupby("policy", sort=False)["train_jct_mean"].agg(["mean", "std", "count"])
        best = stats["mean"].min()
        cells = [str(workload), _fmt(float(group["jct_lower_bound_mean"].mean()))]
        for policy in policies:
            if policy not in stats.index:
                cells.append("-")
                continue
            mean, std, count = stats.loc[policy, "mean"], stats.loc[policy, "std"], stats.loc[policy, "count"]
            text = _pm(mean, std if count > 1 else math.nan)
            cells.append(f"**{text}**" if mean == best else text)
        rows.append(cells)
    return heading, rows


def _markdown_table(heading: list[str], rows: list[list[str]], align_left: int = 1) -> str:
    lines = ["| " + " | ".join(heading) + " |"]
    lines.append("|" + "|".join(":---" if i < align_left else "---:" for i in range(len(heading))) + "|")
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def results_markdown(comparison: Comparison) -> str:
    """The ``results.md`` report."""
    frame, cfg = comparison.frame, comparison.config
    seeds = list(frame["seed"].unique())
    workloads = list(frame["workload"].unique())
    policy, workload, seed = comparison.timeline_run
    parts = [
        "# Policy comparison",
        "",
        f"- cluster: {cfg.cluster.describe()}; restart model: {cfg.restart}; protect scale P = "
        f"{cfg.protect_scale:g}; scheduling interval {cfg.interval:g} s"
        + (f"; interference: {cfg.interference.describe()}" if cfg.interference is not None else ""),
        f"- workloads ({len(workloads)}): {', '.join(map(str, workloads))}",
        f"- seeds: {' '.join(map(str, seeds))}; runs: {len(frame)}",
        "",
        "## Per policy",
        "",
        f"Mean ± standard deviation over the {len(workloads) * len(seeds)} runs of each policy "
        "(workloads × seeds). *JCT ÷ best*: the policy's mean training JCT over the lowest mean "
        "of any policy; *JCT ÷ lower bound*: over the mean JCT lower bound (each job alone with "
        "its best allocation, no restarts). Latency: queueing plus cold start of inference requests.",
        "",
        _markdown_table(*summary_rows(frame)),
        "",
        "## Training JCT mean per workload (s)",
        "",
        "Mean over seeds (± standard deviation where there are several); the best policy per workload in bold.",
        "",
        _markdown_table(*per_workload_table(frame)),
        "",
    ]
    truncated = frame[frame["truncated"].astype(bool)]
    if len(truncated):
        runs = ", ".join(f"{r.policy}/{r.workload}/seed {r.seed}" for r in truncated.itertuples())
        parts += [f"**Warning**: {len(truncated)} run(s) were cut at the time limit: {runs}.", ""]
    parts += [
        "## Files",
        "",
        "- `results.csv`: one row per run, every metric (seconds; `gpu_s_<state>` = GPU-seconds per state)",
        "- `jcts.csv`: per-job training JCT of every run",
        "- `jct_cdf.png`: CDF of training JCT per policy (all workloads and seeds pooled)",
        "- `avg_jct.png`: mean training JCT per policy, error bars = standard deviation over runs",
        f"- `timeline.png`, `timeline.csv`: GPUs by state over time for {policy} on {workload}, seed {seed}",
        "",
    ]
    return "\n".join(parts)


def print_summary_table(frame: pd.DataFrame, title: str = "policy comparison", console: Console | None = None) -> None:
    """Print the per-policy summary as a rich table."""
    from rich.console import Console
    from rich.table import Table

    heading, rows = summary_rows(frame)
    table = Table(title=title, header_style="bold")
    for i, h in enumerate(heading):
        table.add_column(h, justify="left" if i == 0 else "right")
    for cells in rows:
        table.add_row(*cells)
    if console is None:
        console = Console()
        if not console.is_terminal:  # a pipe or file: do not squeeze the table into 80 columns
            console = Console(width=200)
    console.print(table)


# ----------------------------------------------------------------------------------------------
# writers


def write_results(comparison: Comparison, out_dir: str | Path) -> dict[str, Path]:
    """Write the CSV / markdown / PNG outputs into ``out_dir`` (created); returns them by name."""
    from deepboot_harness import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        name: out / name
        for name in ("results.csv", "results.md", "jcts.csv", "timeline.csv", "jct_cdf.png", "avg_jct.png")
    }
    paths["timeline.png"] = out / "timeline.png"
    frame = comparison.frame
    frame.to_csv(paths["results.csv"], index=False)
    paths["results.md"].write_text(results_markdown(comparison), encoding="utf-8")
    jct_rows = [
        (policy, workload, seed, job, jct)
        for (policy, workload, seed), jcts in comparison.jcts.items()
        for job, jct in jcts.items()
    ]
    pd.DataFrame(jct_rows, columns=["policy", "workload", "seed", "job", "jct"]).to_csv(paths["jcts.csv"], index=False)
    comparison.timeline.to_csv(paths["timeline.csv"], index=False)

    cfg = comparison.config
    plots.plot_jct_cdf(comparison.jcts_by_policy(), paths["jct_cdf.png"], title=_plot_title(comparison))
    plots.plot_avg_jct_bars(frame, paths["avg_jct.png"], title=_plot_title(comparison))
    policy, workload, seed = comparison.timeline_run
    train_gpus = None if cfg.cluster.shared_pool else cfg.cluster.train_nodes * cfg.cluster.gpus_per_node
    plots.plot_timeline(
        comparison.timeline,
        paths["timeline.png"],
        title=f"{policy} on {workload} (seed {seed}, {cfg.cluster.describe()}, restart {cfg.restart})",
        train_gpus=train_gpus,
    )
    return paths


def _plot_title(comparison: Comparison) -> str:
    frame, cfg = comparison.frame, comparison.config
    n_w, n_s = frame["workload"].nunique(), frame["seed"].nunique()
    what = str(frame["workload"].iloc[0]) if n_w == 1 else f"{n_w} workloads"
    return f"{what} × {n_s} seed{'s' if n_s > 1 else ''} ({cfg.cluster.describe()}, restart {cfg.restart})"


def compare(
    policies: Sequence[str],
    workloads: Sequence[str | Path],
    seeds: Sequence[int] = (0,),
    config: SimConfig | None = None,
    jobs: int = 1,
    out_dir: str | Path | None = None,
    progress: bool = True,
    timeline_policy: str | None = None,
    timeline_workload: str | None = None,
) -> pd.DataFrame:
    """Run every (policy, workload, seed) and return one row per run; write the reports if asked.

    Args:
        policies: registry names (see :func:`deepboot_env.policy.available_policies`) or
            ``ppo:<path>``.
        workloads: CSV paths, directories of CSVs, shipped names (``test/test-01``) or splits
            (``train``, ``val``, ``test``).
        seeds: policy seeds.
        config: simulation settings (default :class:`SimConfig`).
        jobs: worker processes; 1 runs everything in this process.
        out_dir: where to write ``results.csv``, ``results.md``, ``jcts.csv``,
            ``timeline.csv`` and the PNG plots (nothing is written if None).
        progress: show a rich progress bar on stderr.
        timeline_policy: policy whose run is drawn in ``timeline.png`` (default: the first).
        timeline_workload: workload of that run (default: the first); the seed is the first.

    Returns:
        Columns :data:`RUN_COLUMNS` (then ``interference`` when the config has co-location
        interference), then every scalar key of
        :meth:`EpisodeMetrics.to_dict` (``include_jcts=False``) with ``gpu_seconds_by_state``
        flattened into ``gpu_s_<state>``; rows ordered by policy, workload, seed as given.
    """
    comparison = run_comparison(
        policies,
        workloads,
        seeds,
        config,
        jobs=jobs,
        progress=progress,
        timeline_policy=timeline_policy,
        timeline_workload=timeline_workload,
    )
    if out_dir is not None:
        write_results(comparison, out_dir)
    return comparison.frame
