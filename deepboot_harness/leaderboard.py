"""The benchmark's results: tidy tables, the Markdown leaderboard and its plots.

:func:`results_frame` makes one row per run, :func:`jobs_frame` one row per training job.
:func:`leaderboard` gives, per policy and family, the mean training JCT with its 95 % confidence
interval over seeds (Student's t), the mean of the per-seed JCT ratios to a reference policy
(``ats``) with its interval, the mean inference p99 latency and the mean JCT over the JCT lower
bound, and the paired bootstrap statistics of the ratios (interval of the mean ratio, interquartile
mean, probability of improvement; :mod:`deepboot_harness.paired_stats`);
:func:`leaderboard_markdown` writes them as tables (policies x families, then the aggregate over
every family and seed). The plots are the JCT ratio to the reference per family and its aggregates
(:func:`plot_ratio_figures`) and the CDF of job JCTs per family (:func:`plot_job_cdfs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from deepboot_env import REFERENCE_POLICY
from deepboot_env.atomic import write_csv, write_text
from deepboot_harness.compare_tables import markdown_table
from deepboot_harness.paired_stats import Estimate, paired_ratios, summarize
from deepboot_harness.plots import display_name, policy_colors, save_png
from deepboot_harness.ratio_plots import plot_aggregates, plot_paired_ratios, ratio_summaries

ALL = "all families"
"""The column of the leaderboard that pools every family."""

CLAIRVOYANT = ("oracle-lookahead", "hesrpt-oracle", "hindsight")
"""Policies that read the future: labelled as upper references, never as deployable."""

HINDSIGHT = "hindsight"
"""The score action's best held scores in hindsight (:mod:`baselines.hindsight`): the gap from the
reference to it is what a scheduler of that action could still take."""


def is_hindsight(policy: str) -> bool:
    """Whether ``policy`` is ``hindsight`` at some size (``hindsight:<generations>[,<pairs>]``)."""
    return policy == HINDSIGHT or policy.startswith(f"{HINDSIGHT}:")


def is_clairvoyant(policy: str) -> bool:
    """Whether ``policy`` reads the true future (:data:`CLAIRVOYANT`, ``hindsight`` at any size)."""
    return policy in CLAIRVOYANT or is_hindsight(policy)


BOUND = "jct_bound"
"""A run's column of the tightest lower bound on its scenario's mean JCT (docs/bounds.md), when
the benchmark computed it; older runs have only the per-job ``jct_lower_bound_mean``."""


def results_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run, without the per-job JCTs."""
    return pd.DataFrame([{k: v for k, v in row.items() if k != "jcts"} for row in rows])


def jobs_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per training job: policy, family, seed, job, jct."""
    records = [
        (row["policy"], row["family"], row["seed"], job, jct)
        for row in rows
        for job, jct in (row.get("jcts") or {}).items()
    ]
    return pd.DataFrame(records, columns=["policy", "family", "seed", "job", "jct"])


def mean_ci(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (Student's t; NaN with one value)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), math.nan
    half = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return float(x.mean()), half


def with_ratios(frame: pd.DataFrame, reference: str = REFERENCE_POLICY) -> pd.DataFrame:
    """``frame`` with ``jct_ratio`` (a run's mean JCT over the reference's on the same family and
    seed; NaN where the reference did not run) and ``jct_vs_bound`` (mean JCT over its lower bound)."""
    out = frame.copy()
    out["jct_ratio"] = paired_ratios(frame, reference, ["family", "seed"])
    bound = frame[BOUND] if BOUND in frame else frame["jct_lower_bound_mean"]
    out["jct_vs_bound"] = frame["train_jct_mean"] / bound
    if BOUND in frame:  # the bound over the reference's JCT on the same scenario
        ref = frame[frame["policy"] == reference].set_index(["family", "seed"])["train_jct_mean"]
        keys = pd.MultiIndex.from_frame(frame[["family", "seed"]])
        out["bound_ratio"] = frame[BOUND].to_numpy() / ref.reindex(keys).to_numpy()
    return out


def leaderboard(frame: pd.DataFrame, reference: str = REFERENCE_POLICY) -> pd.DataFrame:
    """Per (policy, family), and per policy over all families (family :data:`ALL`): seeds,
    ``jct`` / ``jct_ci``, ``ratio`` / ``ratio_ci`` (to ``reference``), ``p99`` / ``p99_ci``
    (inference latency), ``bound`` (mean JCT over the lower bound) and ``cpu_s`` (mean CPU
    seconds per run); policies and families in the frame's order. The ``_ci`` columns are
    Student-t half-widths over seeds (NaN for :data:`ALL`).

    Paired bootstrap statistics of the per-seed ratios (:mod:`deepboot_harness.paired_stats`;
    for :data:`ALL`, resampled within each family): ``ratio_lo`` / ``ratio_hi`` (95 % interval of
    the mean ratio), ``iqm`` / ``iqm_lo`` / ``iqm_hi`` (interquartile mean), ``p_improve`` /
    ``p_improve_lo`` / ``p_improve_hi`` (share of scenarios with a lower JCT than the reference's),
    ``wins`` (those scenarios) and ``scenarios``."""
    data = with_ratios(frame, reference)
    policies = list(dict.fromkeys(data["policy"]))
    families = list(dict.fromkeys(data["family"]))
    rows = []
    for policy in policies:
        mine = data[data["policy"] == policy]
        for family in [*families, ALL]:
            group = mine if family == ALL else mine[mine["family"] == family]
            if group.empty:
                continue
            if family == ALL:  # the mean over families of the per-family means
                per_family = group.groupby("family", sort=False)
                jct = (float(per_family["train_jct_mean"].mean().mean()), math.nan)
                ratio = (float(per_family["jct_ratio"].mean().mean()), math.nan)
                p99 = (float(per_family["infer_latency_p99"].mean().mean()), math.nan)
                over_bound = float(per_family["jct_vs_bound"].mean().mean())
            else:
                jct = mean_ci(group["train_jct_mean"])
                ratio = mean_ci(group["jct_ratio"])
                p99 = mean_ci(group["infer_latency_p99"])
                over_bound = float(group["jct_vs_bound"].mean())
            paired = summarize(group["jct_ratio"], group["family"])
            to_bound = _bound_columns(group, family == ALL, ratio[0])
            rows.append(
                {
                    "policy": policy,
                    "family": family,
                    "seeds": int(group["seed"].nunique()),
                    "jct": jct[0],
                    "jct_ci": jct[1],
                    "ratio": ratio[0],
                    "ratio_ci": ratio[1],
                    "p99": p99[0],
                    "p99_ci": p99[1],
                    "bound": over_bound,
                    "cpu_s": float(group["cpu_s"].mean()),
                    "ratio_lo": paired.mean.lo,
                    "ratio_hi": paired.mean.hi,
                    "iqm": paired.iqm.value,
                    "iqm_lo": paired.iqm.lo,
                    "iqm_hi": paired.iqm.hi,
                    "p_improve": paired.improvement.value,
                    "p_improve_lo": paired.improvement.lo,
                    "p_improve_hi": paired.improvement.hi,
                    "wins": paired.wins,
                    "scenarios": paired.n,
                    **to_bound,
                }
            )
    return pd.DataFrame(rows)


def _bound_columns(group: pd.DataFrame, pooled: bool, ratio: float) -> dict[str, float]:
    """``bound_ratio`` (the lower bound over the reference's JCT, mean over seeds; over families
    for :data:`ALL`) and ``gap_to_bound`` (the share of the gap from the reference to the bound
    the policy closes, ``(1 - ratio) / (1 - bound_ratio)``), when the runs have the bound."""
    if "bound_ratio" not in group:
        return {}
    if pooled:
        bound_ratio = float(group.groupby("family", sort=False)["bound_ratio"].mean().mean())
    else:
        bound_ratio = float(group["bound_ratio"].mean())
    gap = (1.0 - ratio) / (1.0 - bound_ratio) if bound_ratio < 1.0 else math.nan
    return {"bound_ratio": bound_ratio, "gap_to_bound": gap}


def _pm(value: float, half: float, fmt: str) -> str:
    if not math.isfinite(value):
        return "-"
    return format(value, fmt) + ("" if not math.isfinite(half) else " ± " + format(half, fmt))


def _label(policy: str) -> str:
    name = display_name(policy)
    return f"{name} (clairvoyant upper reference)" if is_clairvoyant(policy) else name


def _table(board: pd.DataFrame, cell: Any, families: list[str]) -> str:
    """One Markdown table, policies x ``families``; a policy run on fewer seeds says so."""
    full = int(board["seeds"].max())
    rows = []
    for policy in dict.fromkeys(board["policy"]):
        mine = board[board["policy"] == policy].set_index("family")
        label = _label(policy)
        fewer = mine.loc[[f for f in families if f != ALL and f in mine.index], "seeds"]
        if len(fewer) and int(fewer.max()) < full:
            label += f" ({int(fewer.max())} seeds)"
        rows.append([label, *(cell(mine.loc[f]) if f in mine.index else "-" for f in families)])
    return markdown_table(pd.DataFrame(rows, columns=["policy", *families]))


def leaderboard_markdown(
    board: pd.DataFrame, title: str, notes: Sequence[str] = (), reference: str = REFERENCE_POLICY
) -> str:
    """The leaderboard as Markdown: JCT ratio to ``reference``, mean JCT, inference p99, and mean
    JCT over the lower bound, each a policies x families table (± 95 % CI over seeds)."""
    families = [f for f in dict.fromkeys(board["family"]) if f != ALL]
    cols = [*families, ALL]
    parts = [f"## {title}", "", *notes, ""] if notes else [f"## {title}", ""]
    sections = [
        (
            f"Mean training JCT over `{reference}`'s on the same scenario (mean of per-seed ratios "
            f"[95 % paired bootstrap CI]; lower is better; '{ALL}' is the mean of the family means, "
            "its interval resampled within each family)",
            lambda r: Estimate(r["ratio"], r["ratio_lo"], r["ratio_hi"]).cell(".3f"),
            cols,
        ),
        ("Mean training JCT, s (± 95 % CI over seeds)", lambda r: _pm(r["jct"], r["jct_ci"], ",.0f"), families),
        ("Inference latency p99, s (± 95 % CI over seeds)", lambda r: _pm(r["p99"], r["p99_ci"], ".1f"), families),
        (
            "Mean training JCT over its lower bound (1 = every job alone at its best size)",
            lambda r: f"{r['bound']:.2f}",
            families,
        ),
        ("CPU seconds per episode (mean)", lambda r: f"{r['cpu_s']:.1f}", families),
    ]
    gap_heading = (
        f"Share of the gap from `{reference}` to the lower bound closed: (1 - ratio) / (1 - the bound's ratio "
        f"to `{reference}`), from the mean ratios (the last table gives that ratio)"
    )
    if "gap_to_bound" in board:
        sections[3:4] = [
            (
                "Mean training JCT over the tightest lower bound of its scenario (docs/bounds.md; mean of per-seed "
                f"ratios; '{ALL}' as above)",
                lambda r: f"{r['bound']:.2f}",
                cols,
            ),
            (
                gap_heading,
                lambda r: f"{r['gap_to_bound']:.0%}" if math.isfinite(r["gap_to_bound"]) else "-",
                cols,
            ),
        ]
    hindsight = board["policy"].map(is_hindsight)
    lookahead = board["policy"].map(is_clairvoyant) & ~hindsight
    for name, runs in (("the clairvoyant reference", lookahead), (f"`{HINDSIGHT}`", hindsight)):
        oracle = board[runs].groupby("family")["ratio"].min()
        if not oracle.empty:
            sections.insert(1, _gap_section(reference, name, oracle, cols))
    for heading, cell, columns in sections:
        parts += [f"### {heading}", "", _table(board, cell, columns), ""]
        if heading == gap_heading:
            parts += [_bound_row(board, reference, cols), ""]
    parts += [
        f"### Against `{reference}` over every family and seed",
        "",
        f"Interquartile mean of the per-scenario JCT ratios and probability of improvement (share of "
        f"scenarios with a lower mean JCT than `{reference}`'s), each [95 % CI from a bootstrap "
        "stratified by family]; the estimators of rliable (Agarwal et al., 2021), paired by scenario.",
        "",
        aggregate_table(board, reference),
        "",
    ]
    return "\n".join(parts)


def _bound_row(board: pd.DataFrame, reference: str, columns: list[str]) -> str:
    """One-row table: the lower bound's mean ratio to ``reference`` per family (0 % of the gap
    closed is ``reference``, 100 % this ratio)."""
    ref = board[board["policy"] == reference].set_index("family")
    cells = [f"{ref.loc[f, 'bound_ratio']:.3f}" if f in ref.index else "-" for f in columns]
    return markdown_table(pd.DataFrame([["lower bound: its ratio to " + reference, *cells]], columns=["", *columns]))


def aggregate_table(board: pd.DataFrame, reference: str = REFERENCE_POLICY) -> str:
    """The :data:`ALL` rows as a Markdown table: IQM of the ratio, probability of improvement,
    scenarios won, mean ratio (the reference's own row left out)."""
    rows = [
        [
            _label(str(r["policy"])),
            Estimate(r["iqm"], r["iqm_lo"], r["iqm_hi"]).cell(".3f"),
            Estimate(r["p_improve"], r["p_improve_lo"], r["p_improve_hi"]).cell(".2f"),
            f"{int(r['wins'])}/{int(r['scenarios'])}",
            Estimate(r["ratio"], r["ratio_lo"], r["ratio_hi"]).cell(".3f"),
        ]
        for _, r in board[(board["family"] == ALL) & (board["policy"] != reference)].iterrows()
    ]
    heading = ["policy", "IQM of JCT ratio", f"P(better than {reference})", "scenarios won", "mean JCT ratio"]
    return markdown_table(pd.DataFrame(rows, columns=heading))


def _gap_section(reference: str, name: str, oracle: pd.Series, columns: list[str]) -> tuple[str, Any, list[str]]:
    """The section of the share of the gap from ``reference`` to ``name`` (its mean ratio per
    family: ``oracle``) that each policy closes."""
    heading = (
        f"Share of the gap from `{reference}` to {name} closed: (1 - ratio) / (1 - its ratio), from the mean "
        f"ratios; negative: worse than `{reference}`"
    )
    return heading, lambda r: _gap_closed(r["ratio"], float(oracle.get(r.name, math.nan))), columns


def _gap_closed(ratio: float, oracle_ratio: float) -> str:
    """``(1 - ratio) / (1 - oracle_ratio)`` as a percentage, '-' when the reference gains nothing."""
    if not (math.isfinite(ratio) and oracle_ratio < 1.0):
        return "-"
    return f"{(1.0 - ratio) / (1.0 - oracle_ratio):.0%}"


# ----------------------------------------------------------------------------------------------
# plots


def plot_job_cdfs(jobs: pd.DataFrame, path: str | Path, policies: Sequence[str] | None = None) -> Path:
    """Per family, the CDF of job JCTs (all seeds pooled) of each policy, log-scaled hours."""
    families = list(dict.fromkeys(jobs["family"]))
    policies = list(policies or dict.fromkeys(jobs["policy"]))
    colors = policy_colors(list(dict.fromkeys(jobs["policy"])))
    cols = min(3, len(families))
    rows = math.ceil(len(families) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.3 * rows))
    for k, family in enumerate(families):
        ax = fig.add_subplot(rows, cols, k + 1)
        mine = jobs[jobs["family"] == family]
        for policy in policies:
            values = np.sort(mine[mine["policy"] == policy]["jct"].to_numpy() / 3600.0)
            if values.size:
                ax.step(
                    values,
                    np.arange(1, values.size + 1) / values.size,
                    where="post",
                    lw=1.2,
                    color=colors[policy],
                    label=_label(policy),
                )
        ax.set_xscale("log")
        ax.set_title(family, fontsize=9)
        ax.set_xlabel("job JCT (h)", fontsize=8)
        ax.set_ylabel("fraction of jobs", fontsize=8)
        ax.grid(alpha=0.3)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.suptitle("CDF of training-job JCTs per family (every test seed pooled)", fontsize=10)
    fig.tight_layout()
    fig.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return save_png(fig, path, tight=True)


def plot_ratio_figures(frame: pd.DataFrame, out: Path, reference: str = REFERENCE_POLICY) -> dict[str, Path]:
    """``jct_ratio.png`` (per family) and ``jct_aggregate.png`` (IQM and probability of
    improvement over every family and seed) against ``reference``; their paths by name."""
    data = with_ratios(frame, reference)
    labels = {p: _label(p) for p in dict.fromkeys(frame["policy"])}
    colors = policy_colors(list(labels))
    summaries = ratio_summaries(data[data["policy"] != reference], "family", stratify=True)
    return {
        "ratio_plot": plot_paired_ratios(
            data, out / "jct_ratio.png", reference, "family", True, labels, colors, all_label=ALL
        ),
        "aggregate_plot": plot_aggregates(summaries, out / "jct_aggregate.png", reference, labels, colors),
    }


def write_outputs(
    rows: Sequence[dict[str, Any]],
    out: str | Path,
    title: str,
    notes: Sequence[str] = (),
    reference: str = REFERENCE_POLICY,
) -> dict[str, Path]:
    """Write ``results.csv``, ``jobs.csv``, ``leaderboard.csv``, ``leaderboard.md``,
    ``jct_ratio.png``, ``jct_aggregate.png`` and ``jct_cdf.png`` to ``out``, the ratios paired
    against ``reference``; their paths by name."""
    out = Path(out)
    frame = results_frame(rows)
    jobs = jobs_frame(rows)
    board = leaderboard(frame, reference)
    paths = {
        "results": out / "results.csv",
        "jobs": out / "jobs.csv",
        "leaderboard_csv": out / "leaderboard.csv",
        "leaderboard": out / "leaderboard.md",
    }
    write_csv(frame, paths["results"])
    write_csv(jobs, paths["jobs"])
    write_csv(board, paths["leaderboard_csv"])
    write_text(paths["leaderboard"], leaderboard_markdown(board, title, notes, reference) + "\n")
    if reference in set(frame["policy"]):
        paths.update(plot_ratio_figures(frame, out, reference))
    paths["cdf_plot"] = plot_job_cdfs(jobs, out / "jct_cdf.png")
    return paths
