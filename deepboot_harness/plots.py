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
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from deepboot_env.atomic import atomic_write
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


MODEL_PREFIXES: tuple[str, ...] = ("ppo", "priority")
"""Policy prefixes whose argument is a model file or run folder (labelled by :func:`display_name`)."""

RUN_MODEL_STEMS: tuple[str, ...] = ("best_model", "final_model")
"""File names every training run uses for its models: a label names their run folder instead."""


def display_name(policy: str) -> str:
    """A policy's label in plots. A model (``ppo:<path>``, ``priority:<path>``) is named by its run
    folder, since every run's selected model is ``best_model.*``: ``ppo:runs/foo/best_model.zip``
    and ``ppo:runs/foo`` -> ``ppo:foo``, ``.../foo/final_model.zip`` -> ``ppo:foo/final_model``,
    any other file -> ``ppo:<file stem>``; a shipped short name stays as it is. Two models can
    still meet under one label: :func:`display_names` tells them apart."""
    prefix, sep, arg = policy.partition(":")
    if not sep or prefix not in MODEL_PREFIXES or not arg:
        return policy
    path = Path(arg)
    if path.suffix == "" and path.name == arg and not path.is_dir():
        return policy  # a short name (a shipped model)
    if path.is_dir() or path.stem == RUN_MODEL_STEMS[0]:
        run = path if path.is_dir() else path.parent
        return f"{prefix}:{run.resolve().name}"
    if path.stem in RUN_MODEL_STEMS:
        return f"{prefix}:{path.parent.resolve().name}/{path.stem}"
    return f"{prefix}:{path.stem}"


def display_names(policies: Sequence[str], labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each policy's plot label, never the same for two policies: ``labels`` (``--label``) where
    given, else :func:`display_name`; a shortened name that another policy also gets is written
    out in full instead (``ppo:runs/a/best_model.zip`` and ``ppo:runs/b/a/best_model.zip`` both
    shorten to ``ppo:a``).

    Raises:
        ValueError: two policies given the same label, or a label for a policy not compared.
    """
    given = dict(labels or {})
    unknown = sorted(set(given) - set(policies))
    if unknown:
        raise ValueError(f"--label: {', '.join(unknown)} is not among the policies")
    out = {p: given.get(p) or display_name(p) for p in policies}
    for label in _shared(out):
        out.update({p: p for p, v in out.items() if v == label and p not in given})
    for label in _shared(out):
        sharing = ", ".join(p for p, v in out.items() if v == label)
        raise ValueError(f"--label: {sharing} would all be labelled {label!r}; labels must differ")
    return out


def _shared(labels: Mapping[str, str]) -> list[str]:
    """The labels more than one policy has."""
    seen: dict[str, int] = {}
    for label in labels.values():
        seen[label] = seen.get(label, 0) + 1
    return [label for label, count in seen.items() if count > 1]


def _new_figure(width: float = 8.0, height: float = 4.8) -> Figure:
    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | Path, tight: bool = False) -> Path:
    """Write ``fig`` as a PNG at ``path`` (creating its folder); ``tight`` crops to the drawn
    content, legends placed outside the axes included."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, binary=True) as fh:
        fig.savefig(fh, format="png", dpi=_DPI, bbox_inches="tight" if tight else None)
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
    job_ratios: Mapping[str, np.ndarray] | None = None,
    reference: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Empirical CDF of training JCT per policy (log-scaled hours); with ``job_ratios``, a second
    panel with the CDF of each job's JCT over its JCT under ``reference`` (paired by job, so
    curves that coincide in the first panel come apart where the policies treat jobs differently).

    Args:
        jcts_by_policy: per-job JCTs in seconds, per policy (pooled over runs).
        path: the PNG to write.
        title: appended to the figure's title.
        colors: policy colours (default :func:`policy_colors` in the mapping's order).
        job_ratios: per policy, the per-job JCT ratios to ``reference`` (see
            :meth:`deepboot_harness.compare_grid.Comparison.job_ratios`).
        reference: the policy of ratio 1.
        labels: policy labels (default :func:`display_names`).
    """
    colors = dict(colors or policy_colors(list(jcts_by_policy)))
    shown = [*jcts_by_policy, *(job_ratios or {}), *([reference] if reference else [])]
    names = dict(labels or display_names(list(dict.fromkeys(shown))))
    paired = bool(job_ratios) and reference is not None
    fig = _new_figure(14.0 if paired else 8.0, 5.2 if paired else 4.8)
    ax = fig.add_subplot(1, 2 if paired else 1, 1)
    drawn: dict[str, np.ndarray] = {}
    for policy, jcts in jcts_by_policy.items():
        raw = np.asarray(jcts, dtype=float)
        values = np.sort(raw[np.isfinite(raw)]) / 3600.0
        if not len(values):
            continue
        # A curve identical to an earlier one would hide it: dash it and say so.
        twin = next((p for p, v in drawn.items() if len(v) == len(values) and np.array_equal(v, values)), None)
        drawn[policy] = values
        label = f"{names[policy]} (mean {_hours_label(values.mean())}, n={len(values)})"
        _cdf(ax, values, colors.get(policy), label if twin is None else f"{label}, same as {twin}", twin is not None)
    ax.set_xlabel("training job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs completed")
    ax.set_title("Training JCT CDF" + (f": {title}" if title else ""), fontsize=11)
    ax.legend(loc="lower right", fontsize=8, frameon=True)
    if paired:
        assert job_ratios is not None
        right = fig.add_subplot(1, 2, 2)
        for policy, ratios in job_ratios.items():
            values = np.sort(ratios[np.isfinite(ratios) & (ratios > 0)])
            if values.size:
                faster = float(np.mean(values < 1.0))
                label = f"{names[policy]} (median {np.median(values):.2f}, {faster:.0%} of jobs faster)"
                _cdf(right, values, colors.get(policy), label, False)
        right.axvline(1.0, color="black", linestyle="--", linewidth=1.0)
        ref = names.get(reference or "", reference or "")
        beyond = [names[p] for p, r in job_ratios.items() if r.size and np.nanmedian(r) > CLIP_ABOVE]
        note = ""
        if beyond:  # their medians are in the legend; the axis stays on the policies near 1
            low = min(float(np.nanmin(r[r > 0])) for r in job_ratios.values() if np.any(r > 0))
            right.set_xlim(min(low, 1.0) / 1.1, CLIP_ABOVE)
            right.set_xticks([t for t in (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4) if t >= min(low, 1.0) / 1.1])
            right.xaxis.set_minor_formatter(NullFormatter())
            note = f"; clipped at {CLIP_ABOVE:g}: {', '.join(beyond)} mostly beyond"
        right.set_xlabel(f"job's JCT / its JCT under {ref} (log scale; left of 1: faster{note})")
        right.set_ylabel("fraction of jobs")
        right.set_title(f"Per job, paired with {ref} (same job, workload and seed)", fontsize=11)
        right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    return save_png(fig, path)


def _cdf(ax: Axes, values: np.ndarray, color: str | None, label: str, dashed: bool) -> None:
    """The empirical CDF of sorted ``values`` as a step line on a log x axis."""
    frac = np.arange(1, len(values) + 1) / len(values)
    ax.step(
        np.concatenate([[values[0]], values]),
        np.concatenate([[0.0], frac]),
        where="post",
        color=color,
        linewidth=1.8,
        linestyle=(0, (4, 3)) if dashed else "-",
        label=label,
    )
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="x", alpha=0.12)


CLIP_ABOVE = 4.0
""":func:`plot_avg_jct_bars` clips its axis at this multiple of the lowest mean when a bar passes it."""


def plot_avg_jct_bars(
    df: pd.DataFrame,
    path: str | Path,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Mean training JCT per policy (hours) with its 95 % bootstrap interval over runs.

    A bar beyond :data:`CLIP_ABOVE` times the lowest mean would flatten the others: the axis is
    then clipped there, the clipped bars are hatched at the top and carry their value, and the
    title says so.

    Args:
        df: one row per run with columns ``policy``, ``train_jct_mean`` (s) and, if present,
            ``jct_lower_bound_mean`` (drawn as a dashed line).
        path: the PNG to write.
        title: appended to the figure's title.
        colors: policy colours (default :func:`policy_colors` in row order).
        labels: policy labels (default :func:`display_names`).
    """
    from deepboot_harness.paired_stats import bootstrap, mean

    policies = list(dict.fromkeys(df["policy"]))
    names = dict(labels or display_names(policies))
    colors = dict(colors or policy_colors(policies))
    estimates = [
        bootstrap(df[df["policy"] == p]["train_jct_mean"].to_numpy(dtype=float) / 3600.0, mean) for p in policies
    ]
    means = np.array([e.value for e in estimates])
    lo = np.array([e.lo if np.isfinite(e.lo) else e.value for e in estimates])
    hi = np.array([e.hi if np.isfinite(e.hi) else e.value for e in estimates])
    finite = means[np.isfinite(means)]
    clip = float(finite.min()) * CLIP_ABOVE if finite.size and finite.min() > 0 else np.inf
    clipped = [i for i, m in enumerate(means) if np.isfinite(m) and hi[i] > clip]
    top = clip if clipped else float(np.nanmax(hi)) if finite.size else 1.0
    fig = _new_figure(max(5.0, 1.2 * len(policies) + 2.5), 4.8)
    ax = fig.add_subplot()
    x = np.arange(len(policies))
    shown = np.minimum(means, top)
    bars = ax.bar(
        x,
        shown,
        color=[colors.get(p) for p in policies],
        edgecolor="black",
        linewidth=0.6,
        zorder=2,
    )
    within = [i for i in range(len(policies)) if i not in clipped and np.isfinite(means[i]) and hi[i] > lo[i]]
    if within:
        ax.errorbar(
            x[within],
            means[within],
            yerr=[means[within] - lo[within], hi[within] - means[within]],
            fmt="none",
            ecolor="black",
            elinewidth=1.2,
            capsize=5,
            zorder=3,
        )
    for i in clipped:
        bars[i].set_hatch("//")
        ax.text(
            float(x[i]),
            top * 0.97,
            f"{_hours_label(means[i])}\n(clipped)",
            ha="center",
            va="top",
            fontsize=8,
            bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 1.5},
            zorder=4,
        )
    for i in range(len(policies)):
        if i not in clipped and np.isfinite(means[i]):
            ax.text(float(x[i]), hi[i] + 0.015 * top, _hours_label(means[i]), ha="center", va="bottom", fontsize=9)
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
    ax.set_xticks(x, [names[p] for p in policies])
    ax.set_xlim(-0.6, len(policies) - 0.4)
    ax.set_ylim(0, top * (1.0 if clipped else 1.12) if top > 0 else 1.0)
    ax.set_ylabel("mean training JCT (hours)")
    runs = int(df.groupby("policy")["train_jct_mean"].count().max()) if len(df) else 0
    notes = [f"error bars: 95 % bootstrap CI of the mean over {runs} runs"] if runs > 1 else []
    if clipped:
        beyond = ", ".join(names[policies[i]] for i in clipped)
        notes.append(f"axis clipped at {CLIP_ABOVE:g}x the lowest mean: {beyond} beyond")
    ax.set_title(
        "Average training JCT" + (f": {title}" if title else "") + "".join(f"\n({n})" for n in notes),
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
    end_hours: float | None = None,
) -> Path:
    """GPUs by state over time (stacked areas) with the inference arrival rate overlaid.

    Each timeline row is sampled at a scheduling boundary, before the policy's decision, and
    counts what happened in the interval that ends there; it is drawn over that interval. Every
    band keeps its place for the whole run: with two clusters, the training cluster (training,
    then its idle GPUs) lies below the line at ``train_gpus`` and the inference cluster (lent,
    running, protect, sleep, idle) above it; in one pool, training and lent GPUs stack from the
    bottom, inference states from the top and idle GPUs between.

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
        end_hours: draw the time axis at least this far (the same axis for several runs).
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
    split = train_gpus is not None and _splits(counts, train_gpus)
    if split:
        assert train_gpus is not None
        idle_train = np.clip(train_gpus - counts["training"], 0.0, counts["idle"])
        layers = [
            ("training", counts["training"]),
            ("idle", idle_train),
            ("lent", counts["lent"]),
            ("inference-running", counts["inference-running"]),
            ("protect", counts["protect"]),
            ("sleep", counts["sleep"]),
            ("idle", counts["idle"] - idle_train),
        ]
    else:  # one pool: training from the bottom, inference from the top, idle between
        layers = [(s, counts[s]) for s in ("training", "lent", "idle", "sleep", "protect", "inference-running")]
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
    ax.set_xlim(t[0], max(t[-1], end_hours or 0.0))
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
    order = [s for s in dict.fromkeys(state for state, _ in reversed(layers)) if s in first]
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
        rate_name = f"inference arrivals per minute ({smooth_minutes:g}-min mean)"
        ax2.set_ylabel(rate_name)
        ax2.set_ylim(0, max(float(np.nanmax(rate)) * 1.1, 1e-6))
        handles.append(line)
        labels.append(rate_name)
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.08, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"GPUs by state: {title}" if title else "GPUs by state", fontsize=11)
    return save_png(fig, path)


def _splits(counts: Mapping[str, np.ndarray], train_gpus: int, tol: float = 1e-6) -> bool:
    """Whether the idle GPUs can be split between the clusters at every row: the training
    cluster's non-training GPUs are idle (up to float noise of the time averages)."""
    idle_train = train_gpus - counts["training"]
    return bool(np.all(idle_train >= -tol) and np.all(counts["idle"] - idle_train >= -tol))


def plot_learning_curves(
    runs: Mapping[str, Sequence[tuple[float, float]]],
    path: str | Path,
    references: Mapping[str, float] | None = None,
    title: str = "Validation: mean training JCT",
    ratio_to: str | None = None,
    xlabel: str = "training timesteps",
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
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"mean training JCT / {ratio_to}'s" if ratio_to else "mean training JCT (s)")
    ax.set_title(f"Validation: mean JCT ratio to {ratio_to}" if ratio_to else title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_png(fig, path)
