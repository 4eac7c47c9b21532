"""The policy x workload x seed grid of a comparison: what runs, and the frame it gives.

:func:`expand_workloads` turns workload arguments (splits, directories, CSV paths, shipped names)
into :class:`WorkloadRef`; :func:`run_comparison` checks the policies, seeds and workloads, runs
every (policy, workload, seed) through :mod:`deepboot_harness.compare_runs` and gathers a
:class:`Comparison`: one frame row per run (:data:`RUN_COLUMNS`, then the metrics), per-job JCTs
and the chosen run's timeline (:data:`TIMELINE_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from deepboot_env.config import dynamics_notes
from deepboot_env.pool import LOCAL, Backend
from deepboot_env.sim.interference import InterferenceModel
from deepboot_env.sim.metrics import GPU_STATES
from deepboot_env.sim.simulator import SimConfig
from deepboot_harness.compare_runs import RunOutcome, RunTask, load_workload_once, run_tasks
from deepboot_harness.dynamics import dynamics_name

RUN_COLUMNS: tuple[str, ...] = ("policy", "workload", "seed", "dynamics", "cluster", "restart", "protect_scale")
"""Columns naming a run, first in :func:`deepboot_harness.compare.compare`'s frame; the metric columns follow."""

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


def _row(task: RunTask, metrics: dict[str, object]) -> dict[str, object]:
    row: dict[str, object] = {
        "policy": task.policy,
        "workload": task.workload,
        "seed": task.seed,
        "dynamics": dynamics_name(task.config),
        "cluster": task.config.cluster.describe(),
        "restart": task.config.restart,
        "protect_scale": task.config.protect_scale,
    }
    interference = task.config.interference
    if isinstance(interference, InterferenceModel):  # the column exists only when interference is on
        row["interference"] = interference.describe()
    notes = dynamics_notes(task.config)  # a column per dynamics option off its default
    if "truth" in notes:  # the CSV cell names the trace set alone
        notes["truth"] = f"{task.config.truth} ({task.config.trace_set})"
    row.update(notes)
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
        frame: one row per run (see :func:`deepboot_harness.compare.compare`).
        jcts: per-job training JCTs (s) of every run, keyed by (policy, workload label, seed).
        timeline: the chosen run's timeline, columns :data:`TIMELINE_COLUMNS`.
        timeline_run: (policy, workload label, seed) of the chosen run.
        config: the simulation settings used.
        workloads: the workloads, in row order.
        timelines: the timeline of every policy on the chosen run's workload and seed, by policy in
            row order, when asked for (``timeline_per_policy``); else the chosen run's alone.
    """

    frame: pd.DataFrame
    jcts: dict[tuple[str, str, int], dict[str, float]]
    timeline: pd.DataFrame
    timeline_run: tuple[str, str, int]
    config: SimConfig
    workloads: list[WorkloadRef] = field(default_factory=list)
    timelines: dict[str, pd.DataFrame] = field(default_factory=dict)

    def jcts_by_policy(self) -> dict[str, list[float]]:
        """Per-job JCTs (s) pooled over every workload and seed, per policy in row order."""
        out: dict[str, list[float]] = {p: [] for p in self.frame["policy"].unique()}
        for (policy, _, _), jcts in self.jcts.items():
            out[policy].extend(jcts.values())
        return out

    def job_ratios(self, reference: str) -> dict[str, np.ndarray]:
        """Per policy but ``reference`` (row order), each job's JCT over its JCT under
        ``reference`` in the same workload and seed (jobs finished under both)."""
        out: dict[str, list[float]] = {p: [] for p in self.frame["policy"].unique() if p != reference}
        for (policy, workload, seed), jcts in self.jcts.items():
            ref = self.jcts.get((reference, workload, seed))
            if policy == reference or ref is None:
                continue
            out[policy].extend(jct / ref[job] for job, jct in jcts.items() if job in ref and ref[job] > 0)
        return {p: np.asarray(v, dtype=float) for p, v in out.items()}


def run_comparison(
    policies: Sequence[str],
    workloads: Sequence[str | Path],
    seeds: Sequence[int] = (0,),
    config: SimConfig | None = None,
    jobs: int = 1,
    progress: bool = True,
    timeline_policy: str | None = None,
    timeline_workload: str | None = None,
    timeline_per_policy: bool = False,
    saved: Callable[[], Mapping[tuple[str, str, int], RunOutcome]] | None = None,
    on_done: Callable[[RunTask, RunOutcome], None] | None = None,
    backend: Backend = LOCAL,
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
        timeline_per_policy: keep the timeline of every policy on that workload and seed too.
        saved: called once the inputs are checked, before any run: the outcomes of runs done
            before, by (policy, workload label, seed), which are not run again (unless the run's
            timeline is wanted and the saved outcome has none).
        on_done: called with each run that finishes here and its outcome.
        backend: where the runs run: ``jobs`` local processes, or Ray tasks
            (:class:`deepboot_env.pool.Backend`).

    Raises:
        ValueError: empty or unknown policies, seeds or workloads, a bad ``jobs`` or
            ``backend``, or a timeline choice that is not part of the comparison.
        deepboot_env.ray_pool.RunsFailed: on Ray, once the other runs are done, if some failed.
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
    backend.check()
    for name in policies:
        make_policy(name)  # raises ValueError naming the known policies
    refs = expand_workloads(workloads)
    loaded = {ref.source: load_workload_once(ref.source) for ref in refs}

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
    kept = {(p, chosen_ref.label, seeds[0]) for p in (policies if timeline_per_policy else [chosen_policy])}

    tasks = [
        RunTask(i, policy, ref.label, ref.source, seed, config, (policy, ref.label, seed) in kept)
        for i, (policy, ref, seed) in enumerate((p, r, s) for p in policies for r in refs for s in seeds)
    ]
    done_before = saved() if saved is not None else {}
    kept_outcomes = {
        t.index: replace(outcome, index=t.index)
        for t in tasks
        if (outcome := done_before.get((t.policy, t.workload, t.seed))) is not None
        and (outcome.timeline is not None or not t.want_timeline)
    }
    todo = [t for t in tasks if t.index not in kept_outcomes]
    ran = run_tasks(todo, loaded, int(jobs), progress, on_done=on_done, backend=backend)
    outcomes = {**kept_outcomes, **{t.index: o for t, o in zip(todo, ran, strict=True)}}

    frame = pd.DataFrame([_row(task, outcomes[task.index].metrics) for task in tasks])
    jcts = {(t.policy, t.workload, t.seed): outcomes[t.index].jcts for t in tasks}
    timelines = {
        t.policy: pd.DataFrame(outcomes[t.index].timeline, columns=list(TIMELINE_COLUMNS))
        for t in tasks
        if t.want_timeline
    }
    return Comparison(frame, jcts, timelines[chosen_policy], chosen, config, refs, timelines)
