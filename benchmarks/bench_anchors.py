"""Benchmark: every fidelity anchor against the original simulators (docs/results.md §1).

Runs each anchor of :data:`deepboot_harness.anchors.ANCHORS` (the reference data in
``../shared/data``) and prints the markdown table of docs/results.md §1 with the mean signed
error. The four Pollux-policy anchors on workloads 1-4 and Pollux on pure_train take ~10-20 s of CPU
each; ``--fast`` skips them (those are what ``tests/harness/test_anchors.py`` runs in CI). Usage::

    python benchmarks/bench_anchors.py [--fast] [--only KEY [KEY ...]] [--set option=value ...]

``--set`` overrides a simulation option of every anchor (an ablation), e.g. ``--set truth=fitted``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deepboot_env.argparsing import ArgumentParser
from deepboot_harness.anchors import ANCHORS, anchor_by_key, anchor_table, run_anchor

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _override(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set needs option=value, got {text!r}")
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, value


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="reference data folder (../shared/data)")
    parser.add_argument("--fast", action="store_true", help="skip the slow (Pollux-policy) anchors")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="run only these anchors")
    parser.add_argument("--set", dest="overrides", action="append", type=_override, default=[], metavar="OPT=V")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"reference data {args.data} not found; pass --data", file=sys.stderr)
        return 2
    try:
        if args.only:
            anchors = [anchor_by_key(k) for k in args.only]
        else:
            anchors = [a for a in ANCHORS if not (args.fast and a.slow)]
    except KeyError as err:
        print(err.args[0], file=sys.stderr)
        return 2
    results = []
    for anchor in anchors:
        result = run_anchor(anchor, args.data, dict(args.overrides))
        print(
            f"{anchor.key:20s} {result.value:10.1f}  ref {anchor.reference:10.1f}  {100 * result.error:+6.1f} %  "
            f"{result.cpu_seconds:6.1f} s CPU",
            flush=True,
        )
        results.append(result)
    print()
    print(anchor_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
