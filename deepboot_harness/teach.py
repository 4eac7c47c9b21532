"""``deepboot teach``: the hindsight teacher from the command line (:mod:`agents.trainers.teacher`).

    deepboot teach --families mixed heavy-inference --seeds 4 --out runs/teacher --jobs 2
    deepboot teach ... --out runs/teacher --resume            # after a stop: the scenarios left
    deepboot teach ... --backend ray --address auto           # a Ray cluster's CPUs
    deepboot teach --labels advantage --player runs/ppo_1/best_model.zip --out runs/teacher-2
                                                              # policy iteration: a model's own play
    deepboot teach --labels advantage --table runs/es_1/best_model.json --out runs/teacher-t
                                                              # the advantages over a held table's play

Each training scenario is searched (``hindsight``'s held per-job scores, ``--generations`` x
``--pairs``) and its decisions in the score-mode env are recorded with those scores as labels, one
file per scenario. The summary line gives the mean search ratio to the prior and the CPU seconds
per scenario (also in ``teacher.json``). SIGINT, SIGTERM and SIGHUP stop it in one line; every
scenario labelled is kept, and ``--resume`` labels the rest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deepboot_env.argparsing import whole
from deepboot_harness.run_log import grid_stopped

if TYPE_CHECKING:
    from agents.trainers.teacher import Labelled


def add_teach_parser(sub: Any, add_backend_arguments: Any) -> None:
    """``deepboot teach``'s sub-parser (``add_backend_arguments``: ``--jobs``, ``--backend``,
    ``--address``, as the grids take them)."""
    from agents.trainers.teacher import LABEL_KINDS, TeacherSpec
    from baselines.hindsight import DEFAULT_PRIOR, HindsightSettings
    from traces.families import FAMILIES

    teach = sub.add_parser(
        "teach", help="label training scenarios with the held scores a clairvoyant search finds (hindsight teacher)"
    )
    teach.add_argument(
        "--families", nargs="+", default=list(FAMILIES), metavar="F", help="workload families (default: all)"
    )
    teach.add_argument(
        "--seeds", type=whole(1, 10_000), default=4, help="train seeds per family: the first N (default 4)"
    )
    teach.add_argument(
        "--generations",
        type=whole(0, 10_000),
        default=HindsightSettings.generations,
        help="search generations (default 16)",
    )
    teach.add_argument(
        "--pairs", type=whole(1, 1_000), default=HindsightSettings.pairs, help="antithetic pairs (default 8)"
    )
    teach.add_argument(
        "--lr",
        type=float,
        default=HindsightSettings.learning_rate,
        help=f"the search's Adam step (default {HindsightSettings.learning_rate:g})",
    )
    teach.add_argument(
        "--labels",
        choices=LABEL_KINDS,
        default=TeacherSpec.labels,
        help="held: the scores a search holds per job over the scenario; advantage: each job's counterfactual "
        "advantage at probed decisions, from forked rollouts (default held)",
    )
    teach.add_argument(
        "--probes", type=whole(1, 10_000), default=TeacherSpec.probes, help="advantage: decisions probed (default 16)"
    )
    teach.add_argument(
        "--delta", type=float, default=TeacherSpec.delta, help="advantage: the score held up and down (default 0.5)"
    )
    teach.add_argument(
        "--gain", type=float, default=TeacherSpec.gain, help="advantage: label = gain x advantage (default 30)"
    )
    teach.add_argument(
        "--app-gain",
        type=float,
        default=TeacherSpec.app_gain,
        help="advantage: also add app-gain x the advantage of the job's application, all its jobs' scores "
        "held together (two more forks per application probed; default 0: none)",
    )
    teach.add_argument("--prior", default=DEFAULT_PRIOR, help=f"the prior the scores act on (default {DEFAULT_PRIOR})")
    teach.add_argument(
        "--player",
        metavar="MODEL",
        help="advantage: label a trained score model's own play over the prior (policy iteration: its states, its "
        "forks, labels = its action + gain x advantage); a model zip or run folder",
    )
    teach.add_argument(
        "--table",
        metavar="FILE",
        help="advantage: label a held application table's play (table:<FILE>, from --algo es --preset table-es): "
        "its states, forks offset from its rows, labels = its action + gain x advantage",
    )
    add_backend_arguments(teach)
    teach.add_argument("--out", required=True, metavar="DIR", help="the labels' folder (created)")
    teach.add_argument("--resume", action="store_true", help="label the scenarios --out does not hold yet")
    teach.add_argument("--quiet", action="store_true", help="print nothing but errors")
    teach.set_defaults(func=cmd_teach)


def cmd_teach(args: argparse.Namespace) -> int:
    """Run the teacher as ``args`` say; the exit status (0, or 128 + the signal that stopped it)."""
    from agents.models.app_table import AppTableModel
    from agents.trainers.teacher import TeacherSpec, load_player, player_digest, read_player, teach
    from baselines.hindsight import HindsightSettings
    from deepboot_env.pool import Backend

    settings = HindsightSettings(args.prior, args.generations, args.pairs, learning_rate=args.lr)
    player = read_player(Path(args.player)) if args.player else b""
    table = AppTableModel.load(Path(args.table)) if args.table else None
    if table is not None and table.prior != args.prior:
        raise ValueError(f"--table {args.table}: scores {table.prior}, not the prior {args.prior} (--prior)")
    spec = TeacherSpec(
        tuple(args.families),
        args.seeds,
        settings,
        labels=args.labels,
        probes=args.probes,
        delta=args.delta,
        gain=args.gain,
        app_gain=args.app_gain,
        player=player_digest(player) if player else "",
        table=table.values if table is not None else (),
    )
    if player:
        load_player(player, spec, args.player)  # a model that cannot play this env fails before any work
    backend = Backend(args.backend, args.address)
    backend.check()

    def said(labelled: Labelled) -> None:
        meta = labelled.meta
        found = (
            f"held scores {meta['search_ratio']:.4f} x the prior ({meta['episodes']} episodes"
            if "search_ratio" in meta
            else f"advantages from {meta['forks']} forks ({meta['probes']} probes"
        )
        print(
            f"{meta['family']} seed {meta['seed']}: {meta['decisions']} decisions labelled, {found}, "
            f"{meta['cpu_s']:.0f} CPU s)",
            file=sys.stderr,
            flush=True,
        )

    try:
        manifest = teach(
            spec, Path(args.out), args.jobs, backend, args.resume, not args.quiet, None if args.quiet else said, player
        )
    except KeyboardInterrupt as exc:  # a stop: every scenario labelled is kept
        return grid_stopped("teach", args.out, exc)
    if not args.quiet:
        print(summary(manifest), file=sys.stderr)
    return 0


def summary(manifest: dict[str, Any]) -> str:
    """One line: scenarios labelled, the mean search ratio to the prior, CPU seconds per scenario."""
    metas = list(manifest["scenarios"].values())
    if not metas:
        return "no scenario labelled"
    from agents.trainers.teacher import mean_search_ratio

    ratio = mean_search_ratio(metas)
    cpu = sum(m["cpu_s"] for m in metas) / len(metas)
    decisions = sum(m["decisions"] for m in metas)
    found = f"; held scores {ratio:.4f} x the prior on average" if ratio is not None else ""
    return f"{len(metas)} scenarios, {decisions:,} decisions labelled{found}; {cpu:.0f} CPU s per scenario"
