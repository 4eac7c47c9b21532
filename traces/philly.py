"""Philly time-of-day statistics: what the Pollux workload generator needs, in a few kilobytes.

Pollux's generator (docs/workloads.md §4) samples jobs from the Microsoft Philly trace
(``philly.csv``): it keeps jobs with ``duration >= 60 s`` and ``gpu_time < 1000 GPU-h``, keeps
those whose time of day falls in ``[start, start + window)``, and uses only two things of each
sampled job: its time of day (hour, minute, second -> arrival) and its GPU time (-> application).
The joint histogram of (minute of day, GPU-time bucket) over the filtered trace therefore holds
everything needed to regenerate Pollux-style workloads for any start hour and window length, up
to the second within a minute (drawn uniformly by :mod:`traces.generate`).

This module computes that histogram from the raw trace and stores it as
``traces/data/philly_stats.json`` (with provenance), so users need no raw data::

    python -m traces.philly --philly ../shared/data/philly/philly.csv

Times of day are the trace's wall-clock timestamps (as written in the CSV, no time zone).
GPU-time buckets (GPU-hours): ``[0, 1)``, ``[1, 10)``, ``[10, 100)``, ``[100, 1000)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.atomic import write_text
from deepboot_env.limits import MAX_JSON_BYTES, parse_json, read_bounded
from traces.loaders import PhillyTrace, TraceError, load_philly

MINUTES_PER_DAY = 1440
MIN_DURATION_S = 60.0
"""Pollux filter: keep jobs that ran at least this long (inclusive)."""
MAX_GPU_TIME_S = 1000.0 * 3600.0
"""Pollux filter: keep jobs with strictly less GPU time than this."""
BUCKET_EDGES_S = (3600.0, 10 * 3600.0, 100 * 3600.0)
"""Upper (exclusive) edges of the first three GPU-time buckets, seconds."""
BUCKET_LABELS = ("<1", "1-10", "10-100", ">=100")
"""GPU-hour ranges of the four buckets."""
STATS_FORMAT = "deepboot-env/philly-stats/v1"
DEFAULT_STATS_PATH = "data/philly_stats.json"


def gpu_time_bucket(gpu_time_s: np.ndarray | float) -> np.ndarray:
    """Bucket index 0..3 of GPU times in seconds (<1, 1-10, 10-100, >=100 GPU-h)."""
    return np.searchsorted(np.asarray(BUCKET_EDGES_S), np.asarray(gpu_time_s, dtype=float), side="right")


@dataclass(frozen=True, eq=False)
class PhillyStats:
    """Histogram of filtered Philly jobs per (minute of day, GPU-time bucket).

    Attributes:
        counts: shape (1440, 4) int64; ``counts[m, b]`` = jobs submitted in minute ``m`` of the
            day (00:00 = 0) whose GPU time is in bucket ``b``.
        provenance: where and how the counts were computed (source, filters, totals).
    """

    counts: np.ndarray
    provenance: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts)
        if counts.shape != (MINUTES_PER_DAY, len(BUCKET_LABELS)):
            raise ValueError(f"Philly statistics must have shape (1440, 4), got {counts.shape}")
        if np.any(counts < 0):
            raise ValueError("Philly statistics contain negative counts")
        object.__setattr__(self, "counts", counts.astype(np.int64))

    @property
    def total(self) -> int:
        """Number of jobs after the filters of docs/workloads.md §3 (all times of day)."""
        return int(self.counts.sum())

    def window_counts(self, start_hour: float = 2, window_hours: float = 8) -> np.ndarray:
        """Counts for the window ``[start, start + window)`` (wrapping past midnight).

        Returns:
            shape (window_minutes, 4): row ``k`` is the minute ``k`` minutes after the window
            start, i.e. arrival seconds ``[60 k, 60 k + 60)`` of a generated workload.
        """
        start_min, window_min = window_minutes(start_hour, window_hours)
        idx = (start_min + np.arange(window_min)) % MINUTES_PER_DAY
        return self.counts[idx]

    def hourly_pool_counts(self, start_hour: float = 2, window_hours: float = 8) -> np.ndarray:
        """Pool size per hour of the window (docs/workloads.md §3)."""
        wc = self.window_counts(start_hour, window_hours).sum(axis=1)
        n_hours = int(np.ceil(len(wc) / 60))
        return np.array([int(wc[60 * h : 60 * (h + 1)].sum()) for h in range(n_hours)])

    def bucket_fractions(self, start_hour: float = 2, window_hours: float = 8) -> np.ndarray:
        """Fraction of the window's pool in each GPU-time bucket."""
        per_bucket = self.window_counts(start_hour, window_hours).sum(axis=0)
        return per_bucket / max(int(per_bucket.sum()), 1)

    def to_json(self) -> dict[str, object]:
        """The JSON object stored in ``philly_stats.json``."""
        return {
            "format": STATS_FORMAT,
            "provenance": self.provenance,
            "minutes_per_day": MINUTES_PER_DAY,
            "gpu_time_buckets_gpu_hours": list(BUCKET_LABELS),
            "total": self.total,
            "counts": [[int(v) for v in row] for row in self.counts],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], origin: str = "philly_stats.json") -> PhillyStats:
        """Build from the stored JSON object, checking format and totals."""
        if obj.get("format") != STATS_FORMAT:
            raise ValueError(f"{origin}: not a {STATS_FORMAT} file (format={obj.get('format')!r})")
        try:
            stats = cls(counts=np.asarray(obj["counts"], dtype=np.int64), provenance=dict(obj.get("provenance", {})))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{origin}: invalid Philly statistics: {exc}") from None
        if "total" in obj and int(obj["total"]) != stats.total:
            raise ValueError(f"{origin}: total {obj['total']} does not match the counts ({stats.total})")
        return stats


def window_minutes(start_hour: float, window_hours: float) -> tuple[int, int]:
    """Validate a window and convert it to (start minute of day, length in minutes).

    Both must be whole minutes; ``0 <= start_hour < 24`` and ``0 < window_hours <= 24``.
    """
    start_min = float(start_hour) * 60.0
    window_min = float(window_hours) * 60.0
    if not (np.isfinite(start_min) and 0 <= start_min < MINUTES_PER_DAY and abs(start_min - round(start_min)) < 1e-6):
        raise ValueError(f"start_hour must be in [0, 24) and a whole number of minutes, got {start_hour!r}")
    if not (
        np.isfinite(window_min) and 0 < window_min <= MINUTES_PER_DAY and abs(window_min - round(window_min)) < 1e-6
    ):
        raise ValueError(f"window_hours must be in (0, 24] and a whole number of minutes, got {window_hours!r}")
    return int(round(start_min)), int(round(window_min))


def filter_mask(trace: PhillyTrace) -> np.ndarray:
    """Pollux filters (docs/workloads.md §3): duration >= 60 s and gpu_time < 1000 GPU-h."""
    return (trace.duration >= MIN_DURATION_S) & (trace.gpu_time < MAX_GPU_TIME_S)


def compute_philly_stats(trace: PhillyTrace) -> PhillyStats:
    """Histogram the filtered trace by (minute of day, GPU-time bucket)."""
    mask = filter_mask(trace)
    minute = (trace.timestamp[mask] % 86400) // 60
    bucket = gpu_time_bucket(trace.gpu_time[mask])
    counts = np.zeros((MINUTES_PER_DAY, len(BUCKET_LABELS)), dtype=np.int64)
    np.add.at(counts, (minute, bucket), 1)
    n_dur = int(np.sum(trace.duration >= MIN_DURATION_S))
    provenance: dict[str, object] = {
        "source": _display_path(trace.source),
        "source_sha256": _sha256(trace.source),
        "rows_read": int(len(trace)),
        "filters": {
            "min_duration_s": MIN_DURATION_S,
            "max_gpu_time_s_exclusive": MAX_GPU_TIME_S,
        },
        "rows_after_duration_filter": n_dur,
        "rows_after_all_filters": int(mask.sum()),
        "time_of_day": "wall clock of the trace timestamps; minute of day 0..1439",
        "computed_by": "python -m traces.philly",
    }
    return PhillyStats(counts=counts, provenance=provenance)


def load_philly_stats(path: str | Path | None = None) -> PhillyStats:
    """Load statistics from ``path`` or the shipped ``traces/data/philly_stats.json``."""
    if path is None:
        text = resources.files("traces").joinpath(DEFAULT_STATS_PATH).read_text()
        origin = "traces/" + DEFAULT_STATS_PATH
    else:
        origin = str(path)
        return PhillyStats.from_json(
            parse_json(read_bounded(path, MAX_JSON_BYTES, "Philly statistics"), origin), origin
        )
    return PhillyStats.from_json(json.loads(text), origin)


_default_cache: PhillyStats | None = None


def default_philly_stats() -> PhillyStats:
    """The shipped statistics (loaded once)."""
    global _default_cache
    if _default_cache is None:
        _default_cache = load_philly_stats()
    return _default_cache


def save_philly_stats(stats: PhillyStats, path: str | Path) -> None:
    """Write statistics as JSON, one line per minute of the day (diff-friendly, ~25 kB)."""
    obj = stats.to_json()
    counts = obj.pop("counts")
    assert isinstance(counts, list)  # to_json stores the rows as lists of ints
    head = json.dumps(obj, indent=2)[:-2]  # drop the closing "\n}"
    rows = ",\n".join("    " + json.dumps(r) for r in counts)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text(path, f'{head},\n  "counts": [\n{rows}\n  ]\n}}\n')


def default_stats_file() -> Path:
    """Path of the shipped statistics inside the source tree."""
    return Path(__file__).resolve().parent / DEFAULT_STATS_PATH


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _display_path(path: str) -> str:
    """The path relative to the project root where possible (no user-specific prefixes)."""
    p = Path(path).resolve()
    root = Path(__file__).resolve().parents[1]
    try:
        return os.path.relpath(p, root)
    except ValueError:
        return str(p)


def main(argv: list[str] | None = None) -> int:
    """``python -m traces.philly --philly PATH [--out FILE]``: recompute the statistics."""
    parser = ArgumentParser(prog="python -m traces.philly", description=__doc__.splitlines()[0])
    parser.add_argument("--philly", required=True, help="raw philly.csv (timestamp,duration,num_gpus,gpu_time,cluster)")
    parser.add_argument("--out", default=str(default_stats_file()), help="output JSON (default: the shipped file)")
    parser.add_argument("--start-hour", type=float, default=2.0, help="window start for the printed check")
    parser.add_argument("--window-hours", type=float, default=8.0, help="window length for the printed check")
    args = parser.parse_args(argv)
    try:
        trace = load_philly(args.philly)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stats = compute_philly_stats(trace)
    save_philly_stats(stats, args.out)
    pool = stats.window_counts(args.start_hour, args.window_hours).sum()
    fr = stats.bucket_fractions(args.start_hour, args.window_hours)
    print(f"read {len(trace)} jobs, {stats.total} after filters -> {args.out}")
    print(f"window [{args.start_hour:g} h, +{args.window_hours:g} h): pool {pool}")
    print("  per hour: " + ", ".join(str(v) for v in stats.hourly_pool_counts(args.start_hour, args.window_hours)))
    print("  buckets (GPU-h " + "/".join(BUCKET_LABELS) + "): " + " / ".join(f"{100 * v:.2f} %" for v in fr))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
