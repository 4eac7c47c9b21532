"""Compare policies over workloads and seeds: one table row per run, a markdown report and plots.

:func:`compare` runs every (policy, workload, seed) through
:func:`deepboot_env.evaluation.run_episode`, in worker processes when ``jobs > 1``, and returns a
:class:`pandas.DataFrame` with one row per run. With ``out_dir`` it also writes

- ``results.csv``: the frame (every scalar metric; GPU-seconds per state as ``gpu_s_<state>``),
- ``results.md``: mean +/- standard deviation per policy, ratio of the mean JCT to the best
  policy's and to the JCT lower bound, the paired JCT ratios to a reference policy (``ats`` by
  default) with bootstrap intervals, and the mean JCT per workload,
- ``jcts.csv`` (per-job JCTs of every run) and ``timeline.csv`` (the chosen run's timeline),
- ``jct_cdf.png``, ``avg_jct.png``, ``jct_ratio.png`` (with a reference) and ``timeline.png``,
  plus ``timeline-<policy>.png`` per policy when the comparison kept every policy's timeline
  (see :mod:`deepboot_harness.plots` and :mod:`deepboot_harness.ratio_plots`).

Rows are ordered policy, then workload, then seed, whatever order the runs finish in; apart from
``wall_seconds`` the frame is the same for any ``jobs``.

This module holds the entry point and the writing of the outputs (:func:`write_results`, which
also draws the plots); the grid of runs is in :mod:`deepboot_harness.compare_grid` (its runs, their
pool and progress bar in :mod:`deepboot_harness.compare_runs`), the tables in
:mod:`deepboot_harness.compare_tables`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from deepboot_env import REFERENCE_POLICY
from deepboot_env.atomic import write_csv, write_text
from deepboot_env.sim.simulator import SimConfig
from deepboot_harness.compare_grid import Comparison, run_comparison
from deepboot_harness.compare_tables import ratio_column, results_markdown
from deepboot_harness.dynamics import dynamics_title

# ----------------------------------------------------------------------------------------------
# writers


def resolve_reference(policies: Sequence[str], reference: str | None = None) -> str | None:
    """The policy the paired ratios are taken against: ``reference``, else :data:`~deepboot_env.REFERENCE_POLICY`
    when compared, else None (no ratios).

    Raises:
        ValueError: if ``reference`` is not among ``policies``.
    """
    names = [str(p) for p in policies]
    if reference is None:
        return REFERENCE_POLICY if REFERENCE_POLICY in names else None
    if reference not in names:
        raise ValueError(f"reference policy {reference!r} is not among the policies: {', '.join(names)}")
    return reference


def write_results(
    comparison: Comparison,
    out_dir: str | Path,
    reference: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Write the CSV / markdown / PNG outputs into ``out_dir`` (created); returns them by name.

    ``reference`` names the policy of the paired ratios (see :func:`resolve_reference`);
    ``labels`` names policies in the plots (``--label``; the others by
    :func:`deepboot_harness.plots.display_names`: a model by its run folder, never two alike).
    """
    from deepboot_harness import plots
    from deepboot_harness.ratio_plots import plot_paired_ratios

    frame = comparison.frame
    reference = resolve_reference(list(frame["policy"].unique()), reference)
    names = plots.display_names(list(frame["policy"].unique()), labels)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        name: out / name
        for name in ("results.csv", "results.md", "jcts.csv", "timeline.csv", "jct_cdf.png", "avg_jct.png")
    }
    write_csv(frame, paths["results.csv"])
    write_text(paths["results.md"], results_markdown(comparison, reference))
    jct_rows = [
        (policy, workload, seed, job, jct)
        for (policy, workload, seed), jcts in comparison.jcts.items()
        for job, jct in jcts.items()
    ]
    write_csv(pd.DataFrame(jct_rows, columns=["policy", "workload", "seed", "job", "jct"]), paths["jcts.csv"])
    write_csv(comparison.timeline, paths["timeline.csv"])

    title = _plot_title(comparison)
    colors = plots.policy_colors(list(frame["policy"].unique()))
    plots.plot_jct_cdf(
        comparison.jcts_by_policy(),
        paths["jct_cdf.png"],
        title=title,
        colors=colors,
        job_ratios=comparison.job_ratios(reference) if reference is not None else None,
        reference=reference,
        labels=names,
    )
    plots.plot_avg_jct_bars(frame, paths["avg_jct.png"], title=title, colors=colors, labels=names)
    if reference is not None and frame["policy"].nunique() > 1:
        data = frame[["policy", "workload", "seed"]].assign(jct_ratio=ratio_column(frame, reference))
        paths["jct_ratio.png"] = plot_paired_ratios(
            data, out / "jct_ratio.png", reference, "workload", False, names, colors, subtitle=f"\n{title}"
        )
    paths.update(_write_timelines(comparison, out, names))
    return paths


def _write_timelines(comparison: Comparison, out: Path, names: Mapping[str, str]) -> dict[str, Path]:
    """``timeline.png`` (the chosen run) and, when several were kept, ``timeline-<policy>.png``
    per policy on one time axis."""
    from deepboot_harness import plots

    cfg = comparison.config
    _, workload, seed = comparison.timeline_run
    train_gpus = None if cfg.cluster.shared_pool else cfg.cluster.train_nodes * cfg.cluster.gpus_per_node
    where = f"{workload} (seed {seed}, {dynamics_title(cfg)}, {cfg.cluster.describe()}, restart {cfg.restart})"
    end = max(float(t["time"].max()) for t in comparison.timelines.values()) / 3600.0 if comparison.timelines else None
    runs = {"timeline.png": (comparison.timeline_run[0], comparison.timeline)}
    if len(comparison.timelines) > 1:
        runs.update({f"timeline-{_file_label(names[p])}.png": (p, t) for p, t in comparison.timelines.items()})
    return {
        name: plots.plot_timeline(
            timeline,
            out / name,
            title=f"{names[policy]} on {where}",
            train_gpus=train_gpus,
            end_hours=end if len(runs) > 1 else None,
        )
        for name, (policy, timeline) in runs.items()
    }


def _file_label(label: str) -> str:
    """A policy's plot label as part of a file name (``ppo:foo`` -> ``ppo-foo``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label)


def _plot_title(comparison: Comparison) -> str:
    frame, cfg = comparison.frame, comparison.config
    n_w, n_s = frame["workload"].nunique(), frame["seed"].nunique()
    what = str(frame["workload"].iloc[0]) if n_w == 1 else f"{n_w} workloads"
    seeds = f"{n_s} seed{'s' if n_s > 1 else ''}"
    return f"{what} × {seeds} ({dynamics_title(cfg)}, {cfg.cluster.describe()}, restart {cfg.restart})"


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
    timeline_per_policy: bool = False,
    reference: str | None = None,
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
        timeline_per_policy: also draw ``timeline-<policy>.png`` for every policy on that
            workload and seed.
        reference: the policy of the paired JCT ratios (default ``ats`` when compared).

    Returns:
        Columns :data:`~deepboot_harness.compare_grid.RUN_COLUMNS` (then ``interference`` when
        the config has co-location interference), then every scalar key of
        :meth:`EpisodeMetrics.to_dict` (``include_jcts=False``) with ``gpu_seconds_by_state``
        flattened into ``gpu_s_<state>``; rows ordered by policy, workload, seed as given.
    """
    if out_dir is not None:
        resolve_reference(policies, reference)  # refuse a bad reference before running
    comparison = run_comparison(
        policies,
        workloads,
        seeds,
        config,
        jobs=jobs,
        progress=progress,
        timeline_policy=timeline_policy,
        timeline_workload=timeline_workload,
        timeline_per_policy=timeline_per_policy,
    )
    if out_dir is not None:
        write_results(comparison, out_dir, reference)
    return comparison.frame
