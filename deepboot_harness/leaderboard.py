"""The benchmark's results: tidy tables, the Markdown leaderboard and its plots.

:func:`results_frame` makes one row per run, :func:`jobs_frame` one row per training job.
:func:`leaderboard` gives, per policy and family, the mean training JCT with its 95 % confidence
interval over seeds (Student's t), the mean of the per-seed JCT ratios to a reference policy
(``ats``) with its interval, the mean inference p99 latency and the mean JCT over the JCT lower
bound; :func:`leaderboard_markdown` writes them as tables (policies x families). The plots are
the JCT ratio to the reference per family (:func:`plot_ratios`) and the CDF of job JCTs per
family (:func:`plot_job_cdfs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from scipy import stats

from deepboot_harness.plots import display_name, policy_colors, save_png

REFERENCE = "ats"
"""The policy every ratio is taken against."""

ALL = "all families"
"""The column of the leaderboard that pools every family."""

CLAIRVOYANT = ("oracle-lookahead",)
"""Policies that read the future: labelled as upper references, never as deployable."""


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


def with_ratios(frame: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """``frame`` with ``jct_ratio`` (a run's mean JCT over the reference's on the same family and
    seed; NaN where the reference did not run) and ``jct_vs_bound`` (mean JCT over its lower bound)."""
    ref = frame[frame["policy"] == reference].set_index(["family", "seed"])["train_jct_mean"]
    keys = pd.MultiIndex.from_frame(frame[["family", "seed"]])
    out = frame.copy()
    out["jct_ratio"] = frame["train_jct_mean"].to_numpy() / ref.reindex(keys).to_numpy()
    out["jct_vs_bound"] = frame["train_jct_mean"] / frame["jct_lower_bound_mean"]
    return out


def leaderboard(frame: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Per (policy, family), and per policy over all families (family :data:`ALL`): seeds,
    ``jct`` / ``jct_ci``, ``ratio`` / ``ratio_ci`` (to ``reference``), ``p99`` / ``p99_ci``
    (inference latency), ``bound`` (mean JCT over the lower bound) and ``cpu_s`` (mean CPU
    seconds per run); policies and families in the frame's order."""
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
            else:
                jct = mean_ci(group["train_jct_mean"])
                ratio = mean_ci(group["jct_ratio"])
                p99 = mean_ci(group["infer_latency_p99"])
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
                    "bound": float(group["jct_vs_bound"].mean()),
                    "cpu_s": float(group["cpu_s"].mean()),
                }
            )
    return pd.DataFrame(rows)


def _pm(value: float, half: float, fmt: str) -> str:
    if not math.isfinite(value):
        return "-"
    return format(value, fmt) + ("" if not math.isfinite(half) else " ± " + format(half, fmt))


def _label(policy: str) -> str:
    name = display_name(policy)
    return f"{name} (clairvoyant upper reference)" if policy in CLAIRVOYANT else name


def _table(board: pd.DataFrame, cell: Any, families: list[str]) -> list[str]:
    """One Markdown table, policies x ``families``; a policy run on fewer seeds says so."""
    head = ["policy", *families]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    full = int(board["seeds"].max())
    for policy in dict.fromkeys(board["policy"]):
        mine = board[board["policy"] == policy].set_index("family")
        label = _label(policy)
        fewer = mine.loc[[f for f in families if f != ALL and f in mine.index], "seeds"]
        if len(fewer) and int(fewer.max()) < full:
            label += f" ({int(fewer.max())} seeds)"
        cells = [cell(mine.loc[f]) if f in mine.index else "-" for f in families]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return lines


def leaderboard_markdown(board: pd.DataFrame, title: str, notes: Sequence[str] = (), reference: str = REFERENCE) -> str:
    """The leaderboard as Markdown: JCT ratio to ``reference``, mean JCT, inference p99, and mean
    JCT over the lower bound, each a policies x families table (± 95 % CI over seeds)."""
    families = [f for f in dict.fromkeys(board["family"]) if f != ALL]
    cols = [*families, ALL]
    parts = [f"## {title}", "", *notes, ""] if notes else [f"## {title}", ""]
    sections = [
        (
            f"Mean training JCT over `{reference}`'s on the same scenario (mean of per-seed ratios ± 95 % CI; "
            f"lower is better; '{ALL}' is the mean of the family means)",
            lambda r: _pm(r["ratio"], r["ratio_ci"], ".3f"),
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
    oracle = board[board["policy"].isin(CLAIRVOYANT)].groupby("family")["ratio"].min()
    if not oracle.empty:
        sections.insert(
            1,
            (
                f"Share of the gap from `{reference}` to the clairvoyant reference closed: "
                f"(1 - ratio) / (1 - the reference's ratio), from the mean ratios; negative: worse than `{reference}`",
                lambda r: _gap_closed(r["ratio"], float(oracle.get(r.name, math.nan))),
                cols,
            ),
        )
    for heading, cell, columns in sections:
        parts += [f"### {heading}", "", *_table(board, cell, columns), ""]
    return "\n".join(parts)


def _gap_closed(ratio: float, oracle_ratio: float) -> str:
    """``(1 - ratio) / (1 - oracle_ratio)`` as a percentage, '-' when the reference gains nothing."""
    if not (math.isfinite(ratio) and oracle_ratio < 1.0):
        return "-"
    return f"{(1.0 - ratio) / (1.0 - oracle_ratio):.0%}"


# ----------------------------------------------------------------------------------------------
# plots


ZOOM_BELOW = 1.25
"""The lower panel of :func:`plot_ratios` shows the policies whose mean ratio stays below this."""


def plot_ratios(frame: pd.DataFrame, path: str | Path, reference: str = REFERENCE) -> Path:
    """Per family, each policy's per-seed JCT ratio to ``reference`` (small dots) and their mean
    with its 95 % CI (marker and bar): every policy on a log scale (top), and the policies whose
    mean ratio stays below :data:`ZOOM_BELOW` in every family on a linear scale (bottom)."""
    data = with_ratios(frame, reference)
    data = data[data["policy"] != reference]
    policies = list(dict.fromkeys(data["policy"]))
    families = list(dict.fromkeys(data["family"]))
    colors = policy_colors(list(dict.fromkeys(frame["policy"])))
    means = data.groupby(["policy", "family"], sort=False)["jct_ratio"].mean()
    close = [p for p in policies if float(means.loc[p].max()) < ZOOM_BELOW]
    fig = Figure(figsize=(max(8.0, 1.9 * len(families) + 2), 9.0))
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    for ax, shown in ((top, policies), (bottom, close)):
        width = 0.8 / max(len(shown), 1)
        for i, policy in enumerate(shown):
            label: str | None = _label(policy)  # on the policy's first marker only
            for j, family in enumerate(families):
                mine = data[(data["policy"] == policy) & (data["family"] == family)]
                values = mine["jct_ratio"].dropna().to_numpy()
                if values.size == 0:
                    continue
                x = j - 0.4 + width * (i + 0.5)
                mean, half = mean_ci(values)
                bar = half if math.isfinite(half) else 0.0
                ax.scatter(np.full(values.size, x), values, s=6, color=colors[policy], alpha=0.45, zorder=2)
                ax.errorbar(
                    x,
                    mean,
                    yerr=[[min(bar, mean * 0.95)], [bar]],  # above 0 on the log axis
                    fmt="o",
                    ms=5,
                    color=colors[policy],
                    capsize=2,
                    lw=1.2,
                    zorder=3,
                    label=label,
                )
                label = None
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.set_xticks(range(len(families)), families)
        for j in range(1, len(families)):
            ax.axvline(j - 0.5, color="grey", lw=0.5, alpha=0.5)
        ax.grid(axis="y", alpha=0.3, which="both")
        if shown:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            ax.text(0.5, 0.5, f"no policy within {ZOOM_BELOW:g}x of {reference}", ha="center", transform=ax.transAxes)
    top.set_yscale("log")
    top.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    top.set_ylabel(f"mean JCT / {reference}'s (log)")
    top.set_title(f"Training JCT relative to {reference} on the same scenario (dots: seeds; markers: mean ± 95 % CI)")
    bottom.set_ylabel(f"mean JCT / {reference}'s")
    bottom.set_title(f"close-up: the policies within {ZOOM_BELOW:g}x of {reference} in every family", fontsize=10)
    fig.tight_layout()
    return save_png(fig, path, tight=True)


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


def write_outputs(
    rows: Sequence[dict[str, Any]], out: str | Path, title: str, notes: Sequence[str] = ()
) -> dict[str, Path]:
    """Write ``results.csv``, ``jobs.csv``, ``leaderboard.csv``, ``leaderboard.md``,
    ``jct_ratio.png`` and ``jct_cdf.png`` to ``out``; their paths by name."""
    out = Path(out)
    frame = results_frame(rows)
    jobs = jobs_frame(rows)
    board = leaderboard(frame)
    paths = {
        "results": out / "results.csv",
        "jobs": out / "jobs.csv",
        "leaderboard_csv": out / "leaderboard.csv",
        "leaderboard": out / "leaderboard.md",
    }
    frame.to_csv(paths["results"], index=False)
    jobs.to_csv(paths["jobs"], index=False)
    board.to_csv(paths["leaderboard_csv"], index=False)
    paths["leaderboard"].write_text(leaderboard_markdown(board, title, notes) + "\n", encoding="utf-8")
    if REFERENCE in set(frame["policy"]):
        paths["ratio_plot"] = plot_ratios(frame, out / "jct_ratio.png")
    paths["cdf_plot"] = plot_job_cdfs(jobs, out / "jct_cdf.png")
    return paths
