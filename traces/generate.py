"""Workload generators: Philly-derived training jobs and periodic (day/night) inference load.

Training jobs (:func:`generate_training`) follow the Pollux generator (docs/workloads.md §4)
driven by the shipped Philly statistics (:mod:`traces.philly`) instead of the raw trace:

1. Pool = filtered Philly jobs (duration >= 60 s, gpu_time < 1000 GPU-h) whose time of day is
   in ``[start_hour, start_hour + window_hours)`` (wrapping past midnight), binned by
   (minute of the window, GPU-time bucket).
2. Draw ``round(num_jobs * load)`` jobs from the pool without replacement (multivariate
   hypergeometric over the bins; with replacement if more jobs than the pool are asked for).
3. Arrival (integer s) = minute offset in the window x 60 + a uniform second of that minute.
4. Application from the GPU-time bucket: < 1 GPU-h -> cifar10 or ncf (1/2 each); 1-10 ->
   deepspeech2, of which 1/2 become bert; 10-100 -> yolov3; >= 100 -> imagenet.
5. (num_replicas, batch_size) uniformly from the application's TunedJobs list (docs/workloads.md §4.2).
6. Sorted by arrival; names ``<app>-<index>``.

It reproduces Pollux's statistics (app mix, time-of-day profile, configurations), not its
exact files (Pollux drew with Python's ``random`` from the raw rows).

Inference requests (:func:`generate_periodic_inference`) are non-homogeneous Poisson arrivals
per app instance with rate proportional to ``1 + amplitude * sin(2 pi (t - phase) / period)``.

**Offered load** (the meaning of ``mean_gpus``): the time-average over a period of
``sum_j lambda_j(t) * (E[S_j] + cold_start_fraction * d_j)`` in GPUs, where ``lambda_j`` is the
request rate of instance ``j``, ``S_j`` its service time and ``d_j`` the cold-start delay of
its model (:data:`deepboot_env.sim.apps.COLD_START_DELAY_S`). With the default
``cold_start_fraction = 1`` every request is charged its full cold start (an upper bound on
busy time; warm hits pay none). Warm-pod PROTECT holding and queueing are *not* included, so
the GPUs actually held by inference in the simulator exceed the offered load. The load is
split equally over the instances; peak offered load = ``mean_gpus * (1 + amplitude)``, trough
``mean_gpus * (1 - amplitude)``.

**Service times** (:data:`DEFAULT_SERVICE_TIME_S`): uniform integers in a bounded range per
model, 30 s to 8 min (means 105-300 s), longer for heavier models (bert 120-480 s,
deepspeech2 90-420 s), medium for vision (imagenet, yolov3 60-360 s) and shorter for light ones
(cifar10 30-240 s, ncf 30-180 s). DeepBoot's own files use uniform integers 1-9 s
(docs/workloads.md §7), which would need hundreds of thousands of requests per day to load a
32-GPU inference cluster; scaling the durations to minutes keeps the same shape (bounded,
uniform, per-request independent) with a few thousand requests per day, while the cold-start
delays (4-8 s) and the protect times (30-120 s) remain relevant on that scale.

All randomness comes from one ``np.random.Generator(np.random.PCG64(seed))``; the same
arguments give identical workloads (and identical CSV bytes).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deepboot_env.atomic import atomic_write
from deepboot_env.limits import MAX_WORKLOAD_ROWS, shown
from deepboot_env.sim.apps import APP_NAMES, COLD_START_DELAY_S
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload
from traces.loaders import DEEPBOOT_OUTPUT_COLUMNS
from traces.philly import PhillyStats, default_philly_stats

TUNED_JOBS: dict[str, tuple[tuple[int, int], ...]] = {
    "bert": ((6, 384), (8, 384), (12, 384), (16, 384)),
    "cifar10": ((6, 2048), (8, 2048), (12, 4096), (16, 4096)),
    "deepspeech2": ((6, 320), (8, 320), (12, 640)),
    "imagenet": ((24, 3200), (32, 6400), (48, 6400)),
    "ncf": ((1, 32768),),
    "yolov3": ((4, 64),),
}
"""(num_replicas, batch_size) options per application: Pollux TunedJobs (docs/workloads.md §4.2)."""

DEFAULT_SERVICE_TIME_S: dict[str, tuple[int, int]] = {
    "bert": (120, 480),
    "cifar10": (30, 240),
    "deepspeech2": (90, 420),
    "imagenet": (60, 360),
    "ncf": (30, 180),
    "yolov3": (60, 360),
}
"""Inference service time per model: uniform integer seconds in [low, high] (inclusive)."""

DAY_S = 86400.0

# Defaults of the command line (kept equal to traces/make_shipped.py when it was written).
DEFAULT_INFERENCE_MEAN_GPUS = 10.0
DEFAULT_INFERENCE_AMPLITUDE = 0.85
DEFAULT_PERIOD_HOURS = 24.0
DEFAULT_PHASE_HOURS = 8.0
"""CLI default phase: with a 24-h period the trough falls 2 h and the peak 14 h after t = 0."""
DEFAULT_HORIZON_HOURS = 24.0

SeedLike = int | np.random.Generator


def make_rng(seed: SeedLike) -> np.random.Generator:
    """``np.random.Generator(np.random.PCG64(seed))``, or ``seed`` itself if it is a Generator."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.Generator(np.random.PCG64(int(seed)))


# ----------------------------------------------------------------------------------------------
# training


def generate_training(
    num_jobs: int = 160,
    start_hour: float = 2,
    window_hours: float = 8,
    load: float = 1.0,
    seed: SeedLike = 0,
    stats: PhillyStats | None = None,
    max_replicas: int | None = None,
) -> list[TrainingJobSpec]:
    """Pollux-style training jobs sampled from the Philly time-of-day statistics.

    Args:
        num_jobs: jobs at load 1.0 (Pollux: 160 in 8 h).
        start_hour: time of day (Philly wall clock) at which the window starts, whole minutes.
        window_hours: window length (0, 24] hours; arrivals fall in ``[0, window_hours * 3600)``.
        load: relative job load; ``round(num_jobs * load)`` jobs in the same window.
        seed: integer seed (or a Generator to draw from).
        stats: Philly statistics; defaults to the shipped ``traces/data/philly_stats.json``.
        max_replicas: keep only the (num_replicas, batch_size) options of at most this many GPUs
            (a cluster smaller than 48 GPUs cannot gang-schedule imagenet's largest option);
            None keeps them all.

    Returns:
        Jobs sorted by arrival (integer seconds), named ``<app>-<index>``.
    """
    if num_jobs < 0 or not np.isfinite(load) or load < 0:
        raise ValueError(f"num_jobs and load must be >= 0, got num_jobs={num_jobs}, load={load}")
    tuned = TUNED_JOBS
    if max_replicas is not None:
        tuned = {app: tuple(o for o in options if o[0] <= max_replicas) for app, options in TUNED_JOBS.items()}
        short = [app for app, options in tuned.items() if not options]
        if short:
            raise ValueError(f"max_replicas={max_replicas} leaves no (num_replicas, batch_size) option for {short}")
    rng = make_rng(seed)
    stats = stats or default_philly_stats()
    n = int(round(num_jobs * load))
    if n > MAX_WORKLOAD_ROWS:
        count = f"{n:,}" if n < 10**15 else shown(n)
        raise ValueError(f"{count} training jobs, more than the limit of {MAX_WORKLOAD_ROWS:,} rows of a workload")
    if n == 0:
        return []
    wc = stats.window_counts(start_hour, window_hours)  # (W, 4)
    n_buckets = wc.shape[1]
    flat = wc.ravel()
    pool = int(flat.sum())
    if pool == 0:
        raise ValueError(f"the Philly statistics hold no job in the window start={start_hour} h, +{window_hours} h")
    if n <= pool:
        per_cell = rng.multivariate_hypergeometric(flat, n)
    else:
        per_cell = rng.multinomial(n, flat / pool)
    cells = np.repeat(np.arange(flat.size), per_cell)
    minute, bucket = cells // n_buckets, cells % n_buckets
    times = minute * 60 + rng.integers(0, 60, size=n)
    return job_specs(times, bucket, rng, tuned)


def job_specs(
    times: np.ndarray,
    bucket: np.ndarray,
    rng: np.random.Generator,
    tuned: Mapping[str, tuple[tuple[int, int], ...]] = TUNED_JOBS,
) -> list[TrainingJobSpec]:
    """Training jobs from arrival times and GPU-time buckets: steps 4-6 of the module docstring.

    The application follows the bucket (``< 1`` GPU-h: cifar10 or ncf, one half each; ``1-10``:
    deepspeech2 or bert; ``10-100``: yolov3; ``>= 100``: imagenet) and ``(num_replicas,
    batch_size)`` is drawn uniformly from ``tuned[app]``; two uniform draws per job (the coin,
    then the pick) from ``rng``. Jobs are sorted by arrival (stable) and named ``<app>-<index>``.

    Args:
        times: arrival times (s), one per job, in any order.
        bucket: GPU-time bucket 0..3 of each job (:func:`traces.philly.gpu_time_bucket`).
        rng: the generator the coin and the pick are drawn from.
        tuned: (num_replicas, batch_size) options per application.
    """
    n = len(times)
    coin = rng.random(n)
    pick = rng.random(n)
    apps = np.empty(n, dtype=object)
    apps[bucket == 0] = np.where(coin[bucket == 0] < 0.5, "cifar10", "ncf")
    apps[bucket == 1] = np.where(coin[bucket == 1] < 0.5, "deepspeech2", "bert")
    apps[bucket == 2] = "yolov3"
    apps[bucket == 3] = "imagenet"
    order = np.argsort(times, kind="stable")
    jobs = []
    for idx, k in enumerate(order.tolist()):
        app = str(apps[k])
        options = tuned[app]
        reps, bsz = options[min(int(pick[k] * len(options)), len(options) - 1)]
        jobs.append(
            TrainingJobSpec(name=f"{app}-{idx}", arrival=float(times[k]), app=app, num_replicas=reps, batch_size=bsz)
        )
    return jobs


# ----------------------------------------------------------------------------------------------
# inference


def inference_instances(instances_per_app: int | Mapping[str, int] = 1) -> list[tuple[str, str]]:
    """(instance key, model) pairs ``("infer-<model>-<k>", model)``, k = 1.., models in APP_NAMES order."""
    if isinstance(instances_per_app, Mapping):
        unknown = [m for m in instances_per_app if m not in APP_NAMES]
        if unknown:
            raise ValueError(f"instances_per_app names unknown model(s) {unknown}; expected {', '.join(APP_NAMES)}")
        counts = {m: int(instances_per_app.get(m, 0)) for m in APP_NAMES}
    else:
        counts = dict.fromkeys(APP_NAMES, int(instances_per_app))
    if any(c < 0 for c in counts.values()):
        raise ValueError(f"instances_per_app must be >= 0, got {instances_per_app!r}")
    return [(f"infer-{m}-{k}", m) for m in APP_NAMES for k in range(1, counts[m] + 1)]


def mean_busy_time_s(
    model: str, duration_model: Mapping[str, tuple[int, int]] | None = None, cold_start_fraction: float = 1.0
) -> float:
    """Mean GPU-seconds one request of ``model`` is charged in the offered load."""
    lo, hi = (duration_model or DEFAULT_SERVICE_TIME_S)[model]
    return (lo + hi) / 2.0 + cold_start_fraction * COLD_START_DELAY_S[model]


def rate_profile(t: np.ndarray | float, amplitude: float, period_s: float = DAY_S, phase_s: float = 0.0) -> np.ndarray:
    """Relative arrival rate ``1 + amplitude * sin(2 pi (t - phase) / period)`` (mean 1 over a period)."""
    return 1.0 + amplitude * np.sin(2.0 * np.pi * (np.asarray(t, dtype=float) - phase_s) / period_s)


def generate_periodic_inference(
    horizon_s: float = DAY_S,
    instances_per_app: int | Mapping[str, int] = 1,
    mean_gpus: float = DEFAULT_INFERENCE_MEAN_GPUS,
    amplitude: float = DEFAULT_INFERENCE_AMPLITUDE,
    period_s: float = DAY_S,
    phase_s: float = 0.0,
    seed: SeedLike = 0,
    duration_model: Mapping[str, tuple[int, int]] | None = None,
    cold_start_fraction: float = 1.0,
    bursts: int = 0,
    burst_s: float = 600.0,
    burst_factor: float = 3.0,
) -> list[InferenceRequestSpec]:
    """Periodic (day/night) inference requests: non-homogeneous Poisson arrivals per instance.

    Args:
        horizon_s: arrivals fall in ``[0, horizon_s)``.
        instances_per_app: app instances per model (an int for all six, or a dict model -> count).
        mean_gpus: mean offered load in GPUs over a period, split equally over the instances
            (see the module docstring for the definition).
        amplitude: relative amplitude in [0, 1] of the sinusoidal rate.
        period_s: period of the rate, seconds.
        phase_s: the rate is ``1 + amplitude * sin(2 pi (t - phase_s) / period_s)`` times its
            mean: it rises through the mean at ``phase_s``, peaks at ``phase_s + period/4`` and
            is lowest at ``phase_s + 3 period/4``.
        seed: integer seed (or a Generator to draw from).
        duration_model: model -> (low, high) uniform integer service seconds; defaults to
            :data:`DEFAULT_SERVICE_TIME_S` (missing models fall back to it).
        cold_start_fraction: share of the cold-start delay charged per request in the offered
            load (1 = every request cold).
        bursts: number of load bursts over the horizon (0 = none). Each burst starts at a
            uniform time in ``[0, horizon_s - burst_s)`` (drawn after the periodic arrivals, so
            ``bursts = 0`` leaves them unchanged) and adds, for ``burst_s`` seconds, Poisson
            arrivals at ``(burst_factor - 1)`` times every instance's mean rate: the offered
            load rises by ``(burst_factor - 1) * mean_gpus`` during the burst.
        burst_s: length of a burst, seconds.
        burst_factor: the rate during a burst over the mean rate (> 1 adds load).

    Returns:
        Requests sorted by (integer) arrival, instance keys ``infer-<model>-<k>``, names
        ``inference-<model>-<i>`` with ``i`` the request's index in arrival order.
    """
    if not 0.0 <= amplitude <= 1.0:
        raise ValueError(f"amplitude must be in [0, 1], got {amplitude}")
    if not (np.isfinite(horizon_s) and horizon_s > 0):
        raise ValueError(f"horizon_s must be > 0, got {horizon_s}")
    if not (np.isfinite(period_s) and period_s > 0):
        raise ValueError(f"period_s must be > 0, got {period_s}")
    if not (np.isfinite(mean_gpus) and mean_gpus >= 0):
        raise ValueError(f"mean_gpus must be >= 0, got {mean_gpus}")
    if not 0.0 <= cold_start_fraction <= 1.0:
        raise ValueError(f"cold_start_fraction must be in [0, 1], got {cold_start_fraction}")
    if bursts < 0 or (bursts and not (0 < burst_s < horizon_s and np.isfinite(burst_factor) and burst_factor >= 1)):
        raise ValueError(
            f"bursts must be >= 0, with 0 < burst_s < horizon_s and burst_factor >= 1; got bursts={bursts}, "
            f"burst_s={burst_s}, burst_factor={burst_factor}"
        )
    services = dict(DEFAULT_SERVICE_TIME_S)
    services.update(duration_model or {})
    for m, (lo, hi) in services.items():
        if not (int(lo) == lo and int(hi) == hi and 1 <= lo <= hi):
            raise ValueError(f"duration_model[{m!r}] must be integers 1 <= low <= high, got {(lo, hi)}")
    rng = make_rng(seed)
    instances = inference_instances(instances_per_app)
    if not instances or mean_gpus == 0:
        return []
    per_instance_gpus = mean_gpus / len(instances)
    expected = sum(
        per_instance_gpus / mean_busy_time_s(model, services, cold_start_fraction) * horizon_s for _, model in instances
    )
    if not expected <= MAX_WORKLOAD_ROWS:
        raise ValueError(
            f"about {expected:,.0f} inference requests, more than the limit of {MAX_WORKLOAD_ROWS:,} rows of a "
            "workload (docs/usage.md §7.1): shorten the horizon or lower the mean GPUs"
        )
    times_l, inst_l, dur_l = [], [], []
    for j, (_key, model) in enumerate(instances):
        mean_rate = per_instance_gpus / mean_busy_time_s(model, services, cold_start_fraction)
        max_rate = mean_rate * (1.0 + amplitude)
        n = rng.poisson(max_rate * horizon_s)
        t = np.sort(rng.uniform(0.0, horizon_s, size=n))
        keep = rng.random(n) * (1.0 + amplitude) < rate_profile(t, amplitude, period_s, phase_s)
        t = np.floor(t[keep])
        lo, hi = services[model]
        times_l.append(t)
        inst_l.append(np.full(t.size, j))
        dur_l.append(rng.integers(int(lo), int(hi) + 1, size=t.size).astype(float))
    starts = rng.uniform(0.0, horizon_s - burst_s, size=bursts) if bursts else ()
    for start in starts:
        for j, (_key, model) in enumerate(instances):
            extra_rate = (
                (burst_factor - 1.0) * per_instance_gpus / mean_busy_time_s(model, services, cold_start_fraction)
            )
            n = rng.poisson(extra_rate * burst_s)
            lo, hi = services[model]
            times_l.append(np.floor(start + rng.uniform(0.0, burst_s, size=n)))
            inst_l.append(np.full(n, j))
            dur_l.append(rng.integers(int(lo), int(hi) + 1, size=n).astype(float))
    times = np.concatenate(times_l)
    inst = np.concatenate(inst_l)
    durs = np.concatenate(dur_l)
    order = np.lexsort((inst, times))  # by time, then instance; within an instance draw order
    return [
        InferenceRequestSpec(
            name=f"inference-{instances[j][1]}-{i}",
            arrival=t,
            instance=instances[j][0],
            app=instances[j][1],
            duration=d,
        )
        for i, (j, t, d) in enumerate(
            zip(inst[order].tolist(), times[order].tolist(), durs[order].tolist(), strict=True)
        )
    ]


# ----------------------------------------------------------------------------------------------
# workloads


def generate_workload(
    name: str,
    seed: int = 0,
    train: Mapping[str, object] | None = None,
    inference: Mapping[str, object] | None = None,
    stats: PhillyStats | None = None,
) -> Workload:
    """Training jobs plus (optionally) periodic inference, from one random generator.

    Training is drawn first, so the jobs equal ``generate_training(**train, seed=seed)``.

    Args:
        name: workload name.
        seed: seed of the single ``PCG64`` generator.
        train: keyword arguments of :func:`generate_training` (``None`` = its defaults).
        inference: keyword arguments of :func:`generate_periodic_inference` (``{}`` = its
            defaults with a 24-h horizon, which covers any training window); ``None`` = no
            inference requests.
        stats: Philly statistics (default: shipped).
    """
    rng = make_rng(seed)
    # keyword arguments, checked against the generators' signatures when they are called
    train_kw: dict[str, Any] = dict(train or {})
    jobs = generate_training(**train_kw, seed=rng, stats=stats)
    requests: list[InferenceRequestSpec] = []
    inf_kw: dict[str, Any] | None = None if inference is None else dict(inference)
    if inf_kw is not None:
        inf_kw.setdefault("horizon_s", DAY_S)
        requests = generate_periodic_inference(**inf_kw, seed=rng)
    desc = {"seed": seed, "train": train_kw, "inference": inf_kw}
    source = "traces.generate " + json.dumps(desc, sort_keys=True, default=str)
    return Workload(name=name, jobs=tuple(jobs), requests=tuple(requests), source=source)


def _fmt_number(x: float) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def workload_csv_rows(workload: Workload) -> list[list[str]]:
    """Rows (without header) of the DeepBoot-format CSV: merged by time, training first on ties."""
    rows: list[tuple[float, int, int, list[str]]] = []
    for i, j in enumerate(workload.jobs):
        fields = [j.name, _fmt_number(j.arrival), j.app, str(j.num_replicas), str(j.batch_size), "-1.0", "-1"]
        rows.append((j.arrival, 0, i, fields))
    for i, r in enumerate(workload.requests):
        fields = [r.name, _fmt_number(r.arrival), r.instance, "1", "1", repr(float(r.duration)), "-1"]
        rows.append((r.arrival, 1, i, fields))
    rows.sort(key=lambda v: v[:3])
    return [v[3] for v in rows]


def write_workload_csv(workload: Workload, path: str | Path) -> Path:
    """Write ``workload`` in the DeepBoot format (reloads exactly with :func:`traces.loaders.load_workload`).

    Columns ``name,time,application,num_replicas,batch_size,duration,num_task``; training rows
    carry ``duration = -1.0`` and ``num_task = -1``; inference rows ``num_replicas = batch_size
    = 1``, ``num_task = -1`` and ``application`` = the instance key.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as fh:  # a stop or a full disk leaves the previous file
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(DEEPBOOT_OUTPUT_COLUMNS)
        w.writerows(workload_csv_rows(workload))
    return path


# ----------------------------------------------------------------------------------------------
# command line


PEAK_WINDOW_S = 600.0
"""Window over which :func:`peak_offered_gpus` averages the offered load."""


def peak_offered_gpus(requests: Sequence[InferenceRequestSpec], window_s: float = PEAK_WINDOW_S) -> float:
    """The offered inference load of the busiest window: GPU-seconds of service of the requests
    arriving in it (duration plus the full cold start, the module docstring's offered load),
    over its length."""
    if not requests:
        return 0.0
    arrivals = np.array([r.arrival for r in requests])
    work = np.array([r.duration + COLD_START_DELAY_S[r.app] for r in requests])
    bins = np.floor(arrivals / window_s).astype(np.int64)
    return float(np.bincount(bins - bins.min(), weights=work).max() / window_s)
