"""The result tables of a comparison: per-policy summary, per-workload JCTs, ``results.md``.

:func:`policy_summary` gives the per-policy statistics as a frame; :func:`summary_rows` and
:func:`per_workload_table` format them as table cells, which :func:`results_markdown` writes as
Markdown and :func:`print_summary_table` prints as a rich table.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from deepboot_env.config import dynamics_notes
from deepboot_env.sim.interference import InterferenceModel
from deepboot_harness.compare_grid import Comparison
from deepboot_harness.dynamics import dynamics_title
from deepboot_harness.paired_stats import bootstrap, mean, paired_ratios, summarize

if TYPE_CHECKING:
    from rich.console import Console

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
        means: dict[str, float] = {}
        for col, _, _ in SUMMARY_METRICS:
            values = group[col].astype(float)
            row[f"{col}_mean"] = means[col] = float(values.mean())
            row[f"{col}_std"] = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        row["jobs_done"] = int(group["train_jobs_done"].sum())
        row["jobs"] = int(group["train_jobs"].sum())
        row["truncated"] = int(group["truncated"].astype(bool).sum())
        row["jct_vs_bound"] = means["train_jct_mean"] / float(group["jct_lower_bound_mean"].mean())
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


def summary_rows(frame: pd.DataFrame, reference: str | None = None) -> tuple[list[str], list[list[str]]]:
    """Heading and formatted cells of the per-policy table (shared by markdown and rich); with the
    runs' tightest bounds (``jct_bound``), the mean JCT over them and, with ``reference``, the
    share of the gap from ``reference`` to them each policy closes (:func:`bound_columns`)."""
    summary = policy_summary(frame)
    heading = ["policy", "runs", *(h for _, h, _ in SUMMARY_METRICS), "JCT ÷ best", "JCT ÷ lower bound"]
    extra = bound_columns(frame, reference)
    heading += list(extra)
    rows = []
    for _, s in summary.iterrows():
        name = str(s["policy"])
        if s["jobs_done"] < s["jobs"]:
            name += f" ({s['jobs_done']}/{s['jobs']} jobs done)"
        cells = [name, str(int(s["runs"]))]
        cells += [_pm(s[f"{col}_mean"], s[f"{col}_std"], scale) for col, _, scale in SUMMARY_METRICS]
        cells += [f"{s['jct_vs_best']:.2f}", f"{s['jct_vs_bound']:.2f}"]
        cells += [column[str(s["policy"])] for column in extra.values()]
        rows.append(cells)
    return heading, rows


def bound_columns(frame: pd.DataFrame, reference: str | None) -> dict[str, dict[str, str]]:
    """Per policy, formatted: its mean JCT over the mean of its runs' tightest lower bounds
    (docs/bounds.md), and with ``reference`` the share of the gap from ``reference``'s mean JCT to
    that bound it closes, ``(ref - JCT) / (ref - bound)`` over the same runs; empty when the
    runs carry no bound (older results)."""
    if "jct_bound" not in frame or not frame["jct_bound"].notna().any():
        return {}
    over: dict[str, str] = {}
    gap: dict[str, str] = {}
    ref = frame[frame["policy"] == reference].set_index(["workload", "seed"])["train_jct_mean"] if reference else None
    for policy, group in frame.groupby("policy", sort=False):
        jct, bound = float(group["train_jct_mean"].mean()), float(group["jct_bound"].mean())
        over[str(policy)] = f"{jct / bound:.2f}"
        if ref is not None:
            base = float(ref.reindex(pd.MultiIndex.from_frame(group[["workload", "seed"]])).mean())
            gap[str(policy)] = f"{(base - jct) / (base - bound):.0%}" if base > bound else "-"
    out = {"JCT ÷ tightest bound": over}
    if ref is not None:
        out[f"gap {reference} → bound closed"] = gap
    return out


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


def markdown_table(table: pd.DataFrame) -> str:
    """``table`` (cells already formatted) as a Markdown pipe table: first column left-aligned,
    the others right-aligned, cells kept as written."""
    align = ["left"] + ["right"] * (len(table.columns) - 1)
    return table.to_markdown(index=False, disable_numparse=True, colalign=align)


def _markdown_table(heading: list[str], rows: list[list[str]]) -> str:
    return markdown_table(pd.DataFrame(rows, columns=heading))


def ratio_column(frame: pd.DataFrame, reference: str) -> np.ndarray:
    """Each run's mean training JCT over ``reference``'s on the same workload and seed."""
    return paired_ratios(frame, reference, ["workload", "seed"])


def paired_tables(frame: pd.DataFrame, reference: str) -> tuple[str, str]:
    """Markdown tables of the JCT ratios to ``reference``, paired by workload and seed: per policy
    (mean, IQM and probability of improvement over every run, with 95 % bootstrap intervals,
    and runs won), and per workload (mean over seeds, with its interval when there are several)."""
    data = frame[["policy", "workload", "seed"]].assign(jct_ratio=ratio_column(frame, reference))
    data = data[data["policy"] != reference]
    policies = list(dict.fromkeys(data["policy"]))
    rows = []
    for policy in policies:
        s = summarize(data[data["policy"] == policy]["jct_ratio"])
        rows.append([policy, s.mean.cell(".3f"), s.iqm.cell(".3f"), s.improvement.cell(".2f"), f"{s.wins}/{s.n}"])
    heading = ["policy", "mean JCT ratio", "IQM of JCT ratio", f"P(better than {reference})", "runs won"]
    per_policy = markdown_table(pd.DataFrame(rows, columns=heading))
    cells = data.groupby(["workload", "policy"], sort=False)["jct_ratio"].apply(lambda v: bootstrap(v, mean))
    per_workload = pd.DataFrame(
        [
            [w, *(cells[(w, p)].cell(".3f") if (w, p) in cells else "-" for p in policies)]
            for w in frame["workload"].unique()
        ],
        columns=["workload", *policies],
    )
    return per_policy, markdown_table(per_workload)


def results_markdown(comparison: Comparison, reference: str | None = None) -> str:
    """The ``results.md`` report; with ``reference``, the paired ratios to it too."""
    frame, cfg = comparison.frame, comparison.config
    seeds = list(frame["seed"].unique())
    workloads = list(frame["workload"].unique())
    policy, workload, seed = comparison.timeline_run
    parts = [
        f"# Policy comparison on {dynamics_title(cfg)}",
        "",
        f"- cluster: {cfg.cluster.describe()}; restart model: {cfg.restart}; protect scale P = "
        f"{cfg.protect_scale:g}; scheduling interval {cfg.interval:g} s"
        + (f"; interference: {cfg.interference.describe()}" if isinstance(cfg.interference, InterferenceModel) else "")
        + "".join(f"; {name.replace('_', ' ')}: {value}" for name, value in dynamics_notes(cfg).items()),
        f"- workloads ({len(workloads)}): {', '.join(map(str, workloads))}",
        f"- seeds: {' '.join(map(str, seeds))}; runs: {len(frame)}",
        "",
        "## Per policy",
        "",
        f"Mean ± standard deviation over the {len(workloads) * len(seeds)} runs of each policy "
        "(workloads × seeds). *JCT ÷ best*: the policy's mean training JCT over the lowest mean "
        "of any policy; *JCT ÷ lower bound*: over the mean JCT lower bound (each job alone with "
        "its best allocation, no restarts); *JCT ÷ tightest bound*: over the mean of the tightest lower "
        "bounds of docs/bounds.md, valid for every policy"
        + (
            f"; *gap {reference} → bound closed*: (JCT of {reference} − JCT) / (JCT of {reference} − bound)"
            if reference
            else ""
        )
        + ". Latency: queueing plus cold start of inference requests.",
        "",
        _markdown_table(*summary_rows(frame, reference)),
        "",
        *(_paired_section(frame, reference) if reference is not None and frame["policy"].nunique() > 1 else []),
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
        "- `avg_jct.png`: mean training JCT per policy, error bars = 95 % bootstrap CI of the mean over runs",
        *(
            [f"- `jct_ratio.png`: JCT ratio to {reference} per workload and seed, mean and IQM with 95 % bootstrap CIs"]
            if reference is not None and frame["policy"].nunique() > 1
            else []
        ),
        f"- `timeline.png`, `timeline.csv`: GPUs by state over time for {policy} on {workload}, seed {seed}",
        *(
            [f"- `timeline-<policy>.png`: the same for every policy on {workload}, seed {seed}, on one time axis"]
            if len(comparison.timelines) > 1
            else []
        ),
        "",
    ]
    return "\n".join(parts)


def _paired_section(frame: pd.DataFrame, reference: str) -> list[str]:
    per_policy, per_workload = paired_tables(frame, reference)
    return [
        f"## Paired with {reference}",
        "",
        f"Each run's mean training JCT over {reference}'s on the same workload and seed (below 1: better "
        f"than {reference}), so a workload's difficulty cancels out. Mean and interquartile mean (IQM) "
        f"of those ratios, and the probability of improvement (share of runs with a lower JCT than "
        f"{reference}'s), each [95 % bootstrap CI over runs] (rliable's estimators, Agarwal et al. 2021, "
        "paired by scenario).",
        "",
        per_policy,
        "",
        "Per workload: the mean ratio over seeds [95 % bootstrap CI, with several seeds].",
        "",
        per_workload,
        "",
    ]


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
