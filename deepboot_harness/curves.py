"""Learning-curve PNG from ``train_policy.py`` run folders (their ``evaluations.csv``)::

    python -m deepboot_harness.curves runs/maskable_ppo_2 runs/maskable_ppo_1 \
        --labels "ATS clone + PPO" "PPO from scratch" \
        --reference ats=2476.6 ats-nolend=4547.2 --out docs/learning-curve.png

Each point is the mean validation training JCT of one evaluation (all workloads of that
evaluation); ``--reference name=value`` draws a policy's score on the same workloads. A run given
as ``folder1,folder2,...`` is one curve made of a run and the runs resumed from it (``--resume``
keeps counting timesteps, so their evaluations follow each other). With ``--ratio`` each point is
instead the mean per-episode ratio to the run's evaluation reference (``jct_ratio``, what the run
selects its model by; ``train_policy.py --eval-reference``), and ``--reference name=value`` lines
are ratios too (``ones-lend=0.90``); the reference itself is the line at 1.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.limits import open_regular


def evaluation_curve(run: str | Path, column: str = "train_jct_mean") -> list[tuple[float, float]]:
    """``(timesteps, mean of column)`` per evaluation of a run folder (or its evaluations.csv);
    empty cells are skipped.

    Raises:
        FileNotFoundError: no evaluations.csv there.
        ValueError: the file has no such column.
    """
    path = Path(run)
    if path.is_dir():
        path = path / "evaluations.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no evaluations.csv (was the run trained with --eval-freq > 0?)")
    by_step: dict[float, list[float]] = defaultdict(list)
    with open_regular(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if column not in (reader.fieldnames or ()):
            raise ValueError(f"{path}: no {column} column (--ratio needs a run evaluated with a reference)")
        for row in reader:
            if row[column] not in ("", None):
                by_step[float(row["timesteps"])].append(float(row[column]))
    return [(step, sum(v) / len(v)) for step, v in sorted(by_step.items())]


def chained_curve(runs: str, column: str = "train_jct_mean") -> list[tuple[float, float]]:
    """The curves of comma-separated run folders (a run and its resumptions), one after another;
    an evaluation repeated at a resumption's first step is kept once."""
    points: dict[float, float] = {}
    for run in runs.split(","):
        points.update(evaluation_curve(run, column))
    return sorted(points.items())


CURVE_FILE = "curve.png"
"""The picture a training run leaves in its folder (:func:`write_run_curve`)."""


def run_curves(run_dir: Path, reference: str) -> dict[str, list[tuple[float, float]]]:
    """A run's validation ratios per evaluation: to its evaluation ``reference`` (``jct_ratio``)
    and, where it has one, to its prior (``prior_ratio``: a score or residual model's base
    policy, an ES run's start), each labelled; {} without evaluations or ratios."""
    curves = {}
    for label, column in (
        (f"{run_dir.name} / {reference}", "jct_ratio"),
        (f"{run_dir.name} / its prior", "prior_ratio"),
    ):
        try:
            points = evaluation_curve(run_dir, column)
        except (FileNotFoundError, ValueError):  # no evaluations, or a file from before the prior's column
            continue
        if points:
            curves[label] = points
    return curves


def write_run_curve(run_dir: Path, reference: str | None, x_label: str = "training timesteps") -> Path | None:
    """``curve.png`` in ``run_dir``: the run's validation ratio to its evaluation ``reference`` and
    to its prior (:func:`run_curves`) against the training steps, both baselines the line at 1, so
    that a run that beats them shows without TensorBoard. None where the run has no ratio to draw
    (no evaluation, or no reference)."""
    from deepboot_harness.plots import plot_learning_curves

    curves = run_curves(run_dir, reference) if reference is not None else {}
    if not curves:
        return None
    baseline = reference if len(curves) == 1 else "the baseline"
    return plot_learning_curves(
        curves,
        run_dir / CURVE_FILE,
        {f"{reference} or the prior" if len(curves) > 1 else str(reference): 1.0},
        ratio_to=baseline,
        xlabel=x_label,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    from deepboot_harness.plots import plot_learning_curves

    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run folders (a,b,c: a run and its resumptions as one curve)")
    parser.add_argument("--labels", nargs="+", default=None, help="legend labels (default: folder names)")
    parser.add_argument("--reference", nargs="*", default=[], metavar="NAME=JCT", help="horizontal reference lines")
    parser.add_argument(
        "--ratio", metavar="NAME", default=None, help="plot the mean JCT ratio to the runs' reference NAME"
    )
    parser.add_argument(
        "--x-label", default="training timesteps", help="x axis (an ES run's timesteps are training episodes)"
    )
    parser.add_argument("--out", required=True, help="PNG path")
    args = parser.parse_args(argv)
    labels = args.labels or [Path(r).name for r in args.runs]
    if len(labels) != len(args.runs):
        parser.error("--labels needs one label per run")
    refs = {}
    for item in args.reference:
        name, _, value = item.partition("=")
        try:
            refs[name] = float(value)
        except ValueError:
            parser.error(f"--reference {item!r}: expected NAME=JCT")
    column = "jct_ratio" if args.ratio else "train_jct_mean"
    try:
        runs = {label: chained_curve(run, column) for label, run in zip(labels, args.runs, strict=True)}
    except (FileNotFoundError, ValueError) as exc:
        parser.error(str(exc))
    if args.ratio:
        refs = {args.ratio: 1.0, **refs}
        print(plot_learning_curves(runs, args.out, refs, ratio_to=args.ratio, xlabel=args.x_label))
    else:
        print(plot_learning_curves(runs, args.out, refs, xlabel=args.x_label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
