"""Plots that answer "is policy X better than the reference?": paired JCT ratios with intervals.

:func:`plot_paired_ratios` draws, per group (a family or a workload), each policy's per-seed JCT
ratios to the reference and their mean with a 95 % bootstrap interval, and, in a last group, the
interquartile mean over every group and seed with a stratified-bootstrap interval; the legend
says how many scenarios each policy wins. Policies far from the reference go to a log-scaled top
panel, the close ones to a linear close-up below. :func:`plot_aggregates` is the rliable-style
summary: IQM of the ratio and probability of improvement per policy, with their intervals.
Statistics come from :mod:`deepboot_harness.paired_stats`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from deepboot_harness.paired_stats import Estimate, RatioSummary, bootstrap, mean, summarize
from deepboot_harness.plots import policy_colors, save_png

ZOOM_BELOW = 1.25
"""Policies whose mean ratio stays below this in every group are drawn in the linear close-up."""


def ratio_summaries(
    data: pd.DataFrame, group: str, stratify: bool, policies: Sequence[str] | None = None
) -> dict[str, RatioSummary]:
    """Per policy, :func:`~deepboot_harness.paired_stats.summarize` of its ``jct_ratio`` over
    every row (group x seed), resampled within ``group`` when ``stratify``."""
    out = {}
    for policy in policies or list(dict.fromkeys(data["policy"])):
        mine = data[data["policy"] == policy]
        out[policy] = summarize(mine["jct_ratio"], mine[group] if stratify else None)
    return out


def _interval(ax: Axes, x: float, est: Estimate, color: str, marker: str, label: str | None) -> None:
    """A marker at ``est.value`` with its interval (none when it is NaN)."""
    has = np.isfinite(est.lo) and np.isfinite(est.hi)
    yerr = [[est.value - est.lo], [est.hi - est.value]] if has else None
    ax.errorbar(x, est.value, yerr=yerr, fmt=marker, ms=5.5, color=color, capsize=2.5, lw=1.3, zorder=3, label=label)


def plot_paired_ratios(
    data: pd.DataFrame,
    path: str | Path,
    reference: str,
    group: str,
    stratify: bool,
    labels: Mapping[str, str],
    colors: Mapping[str, str] | None = None,
    subtitle: str = "",
    all_label: str | None = None,
) -> Path:
    """Per ``group`` value, each policy's per-seed JCT ratios to ``reference`` (dots) and their
    mean with its 95 % bootstrap interval (circle); last, over every group and seed, the IQM with
    its (stratified when ``stratify``) bootstrap interval (diamond).

    Args:
        data: columns ``policy``, ``group``, ``jct_ratio`` (the reference's rows are left out).
        path: the PNG to write.
        reference: the policy of ratio 1.
        group: the grouping column (``family`` or ``workload``).
        stratify: resample within each group for the aggregate (fixed groups such as families);
            False pools the rows (groups drawn from one distribution, such as a split's workloads).
        labels: display name per policy.
        colors: per policy (default :func:`policy_colors` in row order).
        subtitle: appended to the title.
        all_label: the tick of the aggregate (default ``all <group>s``).
    """
    data = data[data["policy"] != reference]
    policies = list(dict.fromkeys(data["policy"]))
    groups = list(dict.fromkeys(data[group]))
    colors = dict(colors or policy_colors(policies))
    summaries = ratio_summaries(data, group, stratify, policies)
    cells = {
        (p, g): data[(data["policy"] == p) & (data[group] == g)]["jct_ratio"].dropna().to_numpy()
        for p in policies
        for g in groups
    }
    worst = {p: max((float(v.mean()) for g in groups if (v := cells[(p, g)]).size), default=np.nan) for p in policies}
    close = [p for p in policies if worst[p] < ZOOM_BELOW]
    far = [p for p in policies if p not in close]
    panels: list[tuple[list[str], bool]] = [(policies, True)] if far else []
    if close:
        panels.append((close, False))
    fig = Figure(figsize=(max(8.0, 1.7 * (len(groups) + 1) + 2.5), 4.6 * len(panels) + 0.4))
    all_label = all_label or f"all {group}s"
    for k, (shown, log) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, k + 1)
        width = 0.8 / max(len(shown), 1)
        for i, policy in enumerate(shown):
            s = summaries[policy]
            label: str | None = f"{labels[policy]}: IQM {s.iqm.cell('.3f')}, wins {s.wins}/{s.n}"
            for j, g in enumerate(groups):
                values = cells[(policy, g)]
                if values.size == 0:
                    continue
                x = j - 0.4 + width * (i + 0.5)
                ax.scatter(np.full(values.size, x), values, s=7, color=colors[policy], alpha=0.45, zorder=2)
                _interval(ax, x, bootstrap(values, mean), colors[policy], "o", label)
                label = None
            _interval(ax, len(groups) - 0.4 + width * (i + 0.5), s.iqm, colors[policy], "D", label)
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.axvspan(len(groups) - 0.5, len(groups) + 0.5, color="grey", alpha=0.1, lw=0)
        ax.set_xticks(range(len(groups) + 1), [*map(str, groups), f"{all_label}\n(IQM)"])
        ax.set_xlim(-0.5, len(groups) + 0.5)
        for j in range(1, len(groups) + 1):
            ax.axvline(j - 0.5, color="grey", lw=0.5, alpha=0.5)
        ax.grid(axis="y", alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        if log:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_ylabel(f"mean JCT / {reference}'s (log scale)")
            top = max(far, key=lambda p: worst[p])
            ax.set_title(
                f"every policy, log scale: {labels[top]} reaches {worst[top]:.1f}x {reference} "
                f"(policies within {ZOOM_BELOW:g}x: close-up below)"
                if close
                else "log scale",
                fontsize=9,
            )
        else:
            ax.set_ylabel(f"mean JCT / {reference}'s")
            if far:
                ax.set_title(
                    f"close-up, linear: the policies within {ZOOM_BELOW:g}x of {reference} everywhere", fontsize=9
                )
    pooled = f"stratified by {group}" if stratify else f"{group}s x seeds pooled"
    fig.suptitle(
        f"Training JCT relative to {reference} on the same scenario{subtitle} (lower is better)\n"
        f"dots: seeds; circles: mean, 95 % bootstrap CI; diamonds: interquartile mean, 95 % bootstrap CI "
        f"({pooled}); legend: IQM and scenarios won",
        fontsize=10,
    )
    fig.tight_layout()
    return save_png(fig, path, tight=True)


def plot_aggregates(
    summaries: Mapping[str, RatioSummary],
    path: str | Path,
    reference: str,
    labels: Mapping[str, str],
    colors: Mapping[str, str] | None = None,
    subtitle: str = "",
) -> Path:
    """rliable-style summary per policy: the IQM of the JCT ratio to ``reference`` and the
    probability of improvement over it (share of scenarios with a lower mean JCT), each with its
    95 % bootstrap interval. The IQM axis is clipped at :data:`ZOOM_BELOW`: a policy beyond it is
    drawn as an arrow at the edge with its value written."""
    policies = [p for p in summaries if p != reference]
    colors = dict(colors or policy_colors(policies))
    fig = Figure(figsize=(10.0, 0.42 * len(policies) + 1.8))
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    y = np.arange(len(policies))[::-1]
    lows = [summaries[p].iqm.lo if np.isfinite(summaries[p].iqm.lo) else summaries[p].iqm.value for p in policies]
    x_min = min([1.0, *lows]) - 0.02
    beyond = []
    for yi, policy in zip(y, policies, strict=True):
        s = summaries[policy]
        for ax, est in ((left, s.iqm), (right, s.improvement)):
            if ax is left and est.value >= ZOOM_BELOW:
                beyond.append(policy)
                ax.plot(ZOOM_BELOW, yi, marker=">", ms=7, color=colors[policy], clip_on=False)
                ax.text(ZOOM_BELOW - 0.005, yi, f"{est.cell('.2f')} ", ha="right", va="center", fontsize=7)
                continue
            has = np.isfinite(est.lo) and np.isfinite(est.hi)
            xerr = [[est.value - est.lo], [est.hi - est.value]] if has else None
            ax.errorbar(est.value, yi, xerr=xerr, fmt="o", ms=5, color=colors[policy], capsize=3, lw=2)
    left.axvline(1.0, color="black", ls="--", lw=1)
    right.axvline(0.5, color="black", ls="--", lw=1)
    left.set_yticks(y, [labels[p] for p in policies], fontsize=8)
    right.set_yticks(y, [""] * len(policies))
    left.set_xlim(x_min, ZOOM_BELOW)
    clipped = f"\n(axis clipped at {ZOOM_BELOW:g}: arrows, values written)" if beyond else ""
    left.set_xlabel(f"IQM of mean JCT / {reference}'s\nlower is better{clipped}")
    right.set_xlabel(f"P(mean JCT < {reference}'s on a scenario)\nhigher is better")
    right.set_xlim(-0.02, 1.02)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3, which="both")
    fig.suptitle(
        f"Against {reference}{subtitle}: interquartile mean and probability of improvement "
        "(95 % stratified bootstrap CIs)",
        fontsize=10,
    )
    fig.tight_layout()
    return save_png(fig, path, tight=True)
