"""PNG plots of a comparison: training-JCT CDF, mean JCT bars, GPUs by state over time.

Figures are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas, never through
``pyplot``, so nothing here needs a display or changes matplotlib's global backend. Times are
shown in hours. Each GPU state has one fixed colour
(:data:`deepboot_env.env.render.STATE_COLOURS`); policies get colours in the order given
(:func:`policy_colors`), the same in every plot of one comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from deepboot_env.env.render import STATE_COLOURS
from deepboot_env.sim.metrics import GPU_STATES

STATE_LABELS: dict[str, str] = {
    "training": "training",
    "lent": "lent to training",
    "inference-running": "inference running",
    "protect": "inference protect",
    "sleep": "inference sleep",
    "idle": "idle",
}

_PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#e7ba52",
    "#637939",
    "#ad494a",
    "#7b4173",
    "#3182bd",
    "#31a354",
    "#756bb1",
    "#636363",
    "#e6550d",
)
_DPI = 130


def policy_colors(policies: Sequence[str]) -> dict[str, str]:
    """A colour per policy, in the order given (cycling after twenty)."""
    return {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(policies)}


def display_name(policy: str) -> str:
    """A policy's label in plots: ``ppo:<path>`` shortened to ``ppo:<file stem>``."""
    if policy.startswith("ppo:"):
        return "ppo:" + Path(policy[4:]).stem
    return policy


def _new_figure(width: float = 8.0, height: float = 4.8) -> Figure:
    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | Path, tight: bool = False) -> Path:
    """Write ``fig`` as a PNG at ``path`` (creating its folder); ``tight`` crops to the drawn
    content, legends placed outside the axes included."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=_DPI, bbox_inches="tight" if tight else None)
    return path


def _hours_label(h: float) -> str:
    if h >= 10:
        return f"{h:,.0f} h"
    if h >= 1:
        return f"{h:.1f} h"
    return f"{h * 60:.0f} min" if h * 60 >= 1 else f"{h * 3600:.0f} s"


def plot_jct_cdf(
    jcts_by_policy: Mapping[str, Sequence[float]],
    path: str | Path,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> Path:
    """Empirical CDF of training JCT per policy (log-scaled hours).

    Args:
        jcts_by_policy: per-job JCTs in seconds, per policy (pooled over runs).
        path: the PNG to write.
        title: appended to the figure's title.
        colors: policy colours (default :func:`policy_colors` in the mapping's order).
    """
    colors = dict(colors or policy_colors(list(jcts_by_policy)))
    fig = _new_figure()
    ax = fig.add_subplot()
    drawn: dict[str, np.ndarray] = {}
    for policy, jcts in jcts_by_policy.items():
        raw = np.asarray(jcts, dtype=float)
        values = np.sort(raw[np.isfinite(raw)]) / 3600.0
        if not len(values):
            continue
        # A curve identical to an earlier one would hide it: dash it and say so.
        twin = next((p for p, v in drawn.items() if len(v) == len(values) and np.array_equal(v, values)), None)
        drawn[policy] = values
        frac = np.arange(1, len(values) + 1) / len(values)
        label = f"{policy} (mean {_hours_label(values.mean())}, n={len(values)})"
        ax.step(
            np.concatenate([[values[0]], values]),
            np.concatenate([[0.0], frac]),
            where="post",
            color=colors.get(policy),
            linewidth=1.8,
            linestyle="-" if twin is None else (0, (4, 3)),
            label=label if twin is None else f"{label}, same as {twin}",
        )
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel("training job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs completed")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="x", alpha=0.12)
    ax.set_title("Training JCT CDF" + (f": {title}" if title else ""), fontsize=11)
    ax.legend(loc="upper left", fontsize=9, frameon=True)
    return save_png(fig, path)


def plot_avg_jct_bars(
    df: pd.DataFrame,
    path: str | Path,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> Path:
    """Mean training JCT per policy (hours) with error bars = standard deviation over runs.

    Args:
        df: one row per run with columns ``policy``, ``train_jct_mean`` (s) and, if present,
            ``jct_lower_bound_mean`` (drawn as a dashed line).
        path: the PNG to write.
        title: appended to the figure's title.
        colors: policy colours (default :func:`policy_colors` in row order).
    """
    policies = list(dict.fromkeys(df["policy"]))
    colors = dict(colors or policy_colors(policies))
    stats = df.groupby("policy", sort=False)["train_jct_mean"].agg(["mean", "std", "count"]).loc[policies]
    means = stats["mean"].to_numpy(dtype=float) / 3600.0
    stds = np.where(stats["count"] > 1, stats["std"].fillna(0.0), 0.0) / 3600.0
    fig = _new_figure(max(5.0, 1.2 * len(policies) + 2.5), 4.8)
    ax = fig.add_subplot()
    x = np.arange(len(policies))
    ax.bar(
        x,
        means,
        yerr=stds if np.any(stds > 0) else None,
        capsize=5,
        color=[colors.get(p) for p in policies],
        edgecolor="black",
        linewidth=0.6,
        error_kw={"elinewidth": 1.2, "ecolor": "black"},
        zorder=2,
    )
    top = float(np.nanmax(means + stds)) if len(means) else 1.0
    for xi, m, s in zip(x, means, stds, strict=True):
        if np.isfinite(m):
            ax.text(float(xi), m + s + 0.015 * top, _hours_label(m), ha="center", va="bottom", fontsize=9)
    if "jct_lower_bound_mean" in df:
        bound = float(df["jct_lower_bound_mean"].mean()) / 3600.0
        if np.isfinite(bound):
            ax.axhline(
                bound,
                color="black",
                linestyle="--",
                linewidth=1.0,
                zorder=3,
                label=f"JCT lower bound ({_hours_label(bound)})",
            )
            ax.legend(loc="upper left", fontsize=9)
    ax.set_xticks(x, [display_name(p) for p in policies])
    ax.set_xlim(-0.6, len(policies) - 0.4)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)
    ax.set_ylabel("mean training JCT (hours)")
    runs = int(stats["count"].max()) if len(stats) else 0
    ax.set_title(
        "Average training JCT" + (f": {title}" if title else "") + f"\n(error bars: std over {runs} runs)"
        if runs > 1
        else "Average training JCT" + (f": {title}" if title else ""),
        fontsize=11,
    )
    ax.grid(True, axis="y", alpha=0.35, zorder=0)
    return save_png(fig, path)


def plot_timeline(
    timeline: pd.DataFrame | Sequence[Sequence[float]],
    path: str | Path,
    title: str = "",
    train_gpus: int | None = None,
    smooth_minutes: float = 10.0,
) -> Path:
    """GPUs by state over time (stacked areas) with the inference arrival rate overlaid.

    Each timeline row is sampled at a scheduling boundary, before the policy's decision, and
    counts what happened in the interval that ends there; it is drawn over that interval.

    Args:
        timeline: :attr:`EpisodeMetrics.timeline` rows ``(time, training, lent,
            inference-running, protect, sleep, idle, waiting, arrivals)`` or a frame with
            the columns of :data:`deepboot_harness.compare_grid.TIMELINE_COLUMNS`.
        path: the PNG to write.
        title: the run, shown as the figure title.
        train_gpus: GPUs of the training cluster in the two-cluster mode: the idle GPUs are then
            split between the clusters and a line separates them (None: one pool, e.g. in
            shared-pool mode).
        smooth_minutes: window of the moving average of the arrival rate.
    """
    if isinstance(timeline, pd.DataFrame):
        data = timeline.to_numpy(dtype=float)
    else:
        data = np.asarray([tuple(row) for row in timeline], dtype=float)
    fig = _new_figure(10.0, 5.2)
    ax = fig.add_subplot()
    if data.size == 0:
        ax.text(0.5, 0.5, "empty timeline", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"GPUs by state: {title}" if title else "GPUs by state", fontsize=11)
        return save_png(fig, path)
    n_states = len(GPU_STATES)
    seconds = data[:, 0]
    step = float(np.median(np.diff(seconds))) if len(seconds) > 1 else 60.0
    # Row i covers the interval (t_i - step, t_i]: prepend its start so every row gets a span.
    t = np.concatenate([[seconds[0] - step], seconds]) / 3600.0
    counts = {s: data[:, 1 + i] for i, s in enumerate(GPU_STATES)}
    layers: list[tuple[str, np.ndarray]]
    idle_train = None if train_gpus is None else train_gpus - counts["training"]
    if idle_train is not None and np.all(idle_train >= 0) and np.all(counts["idle"] - idle_train >= 0):
        layers = [
            ("training", counts["training"]),
            ("idle", idle_train),
            ("lent", counts["lent"]),
            ("inference-running", counts["inference-running"]),
            ("protect", counts["protect"]),
            ("sleep", counts["sleep"]),
            ("idle", counts["idle"] - idle_train),
        ]
        split = True
    else:
        layers = [(s, counts[s]) for s in GPU_STATES]
        split = False
    values = np.vstack([np.concatenate([[v[0]], v]) for _, v in layers])
    polys = ax.stackplot(
        t,
        values,
        colors=[STATE_COLOURS[s] for s, _ in layers],
        step="pre",
        linewidth=0,
        antialiased=False,
    )
    total = float(values.sum(axis=0).max())
    if split and train_gpus:
        ax.axhline(train_gpus, color="black", linestyle="-", linewidth=0.9)
        box = {"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 1.5}
        ax.text(t[0], train_gpus, "  inference cluster \u2191", va="bottom", ha="left", fontsize=8, bbox=box)
        ax.text(t[0], train_gpus, "  training cluster \u2193", va="top", ha="left", fontsize=8, bbox=box)
    ax.set_xlim(t[0], t[-1])
    ax.set_ylim(0, total)
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("GPUs")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, steps=[1, 2, 3, 4, 6, 10]))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    # Legend: one entry per state, top of the stack first (idle appears once).
    # States that never occur in this run (e.g. ``lent`` without lending) are left out.
    first: dict[str, PolyCollection] = {}
    for (state, v), poly in zip(layers, polys, strict=True):
        if np.any(v > 0):
            first.setdefault(state, poly)
    order = [s for s in reversed(GPU_STATES) if s in first]
    handles: list[Artist] = [first[s] for s in order]
    labels = [STATE_LABELS[s] for s in order]
    if data.shape[1] > n_states + 2 and len(seconds) > 1:
        arrivals = data[:, n_states + 2]
        dt_min = np.diff(np.concatenate([[seconds[0] - step], seconds])) / 60.0
        rate = arrivals / np.maximum(dt_min, 1e-9)
        window = max(1, int(round(smooth_minutes / max(step / 60.0, 1e-9))))
        if window > 1:
            rate = pd.Series(rate).rolling(window, min_periods=1, center=True).mean().to_numpy()
        ax2 = ax.twinx()
        (line,) = ax2.plot((seconds - dt_min * 30.0) / 3600.0, rate, color="black", linewidth=1.1)
        ax2.set_ylabel(f"inference arrivals per minute ({smooth_minutes:g}-min mean)")
        ax2.set_ylim(0, max(float(np.nanmax(rate)) * 1.1, 1e-6))
        handles.append(line)
        labels.append("inference arrivals / min")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.08, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"GPUs by state: {title}" if title else "GPUs by state", fontsize=11)
    return save_png(fig, path)


def plot_learning_curves(
    runs: Mapping[str, Sequence[tuple[float, float]]],
    path: str | Path,
    references: Mapping[str, float] | None = None,
    title: str = "Validation: mean training JCT",
    ratio_to: str | None = None,
) -> Path:
    """Validation mean JCT against training timesteps for each run, with reference policies as
    horizontal lines (e.g. ATS on the same workloads); with ``ratio_to``, the points and lines are
    mean JCT ratios to that policy."""
    fig = _new_figure()
    ax = fig.add_subplot()
    colors = policy_colors([*runs, *(references or {})])
    for label, points in runs.items():
        xs, ys = zip(*sorted(points), strict=True) if points else ((), ())
        ax.plot(xs, ys, marker="o", markersize=3, color=colors[label], label=label)
    for name, value in (references or {}).items():
        shown = f"{value:.3f}" if ratio_to else f"{value:,.0f} s"
        ax.axhline(value, linestyle="--", linewidth=1, color=colors[name], label=f"{name} ({shown})")
    ax.set_xlabel("training timesteps")
    ax.set_ylabel(f"mean training JCT / {ratio_to}'s" if ratio_to else "mean training JCT (s)")
    ax.set_title(f"Validation: mean JCT ratio to {ratio_to}" if ratio_to else title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, path)
