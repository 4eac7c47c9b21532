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

This module holds the entry point and the writing of the outputs (:func:`write_results`, which
also draws the plots); the grid of runs is in :mod:`deepboot_harness.compare_grid` (workers and
progress bar in :mod:`deepboot_harness.compare_workers`), the tables in
:mod:`deepboot_harness.compare_tables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from deepboot_env.sim.simulator import SimConfig
from deepboot_harness.compare_grid import Comparison, run_comparison
from deepboot_harness.compare_tables import results_markdown

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
        Columns :data:`~deepboot_harness.compare_grid.RUN_COLUMNS` (then ``interference`` when
        the config has co-location interference), then every scalar key of
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
