"""Write the workloads shipped in ``traces/workloads/{train,val,test,smoke}/`` and their README.

    python -m traces.make_shipped            # (re)write all CSVs and traces/workloads/README.md
    python -m traces.make_shipped --check    # regenerate in memory and compare with the files

Every workload = 160 Philly-derived training jobs (docs/workloads.md §4 semantics, load 1.0, arrivals in an
8-h window starting at 02:00 Philly time) plus periodic inference over a 24-h horizon with a 24-h
period, sized for the default 8 nodes x 4 GPUs = 32-GPU inference cluster:

* offered inference load (``traces.generate`` definition: rate x (mean service + full cold
  start), before warm-pod PROTECT holding) averages ``INFERENCE_MEAN_GPUS`` = 10 GPUs with
  relative amplitude ``INFERENCE_AMPLITUDE`` = 0.85: peak ~18.5 GPUs offered at t = 14 h, trough
  ~1.5 GPUs at t = 2 h (``INFERENCE_PHASE_S`` = 8 h). Measured in the simulator (fifo, no
  lending, 8x4+8x4), the GPUs held by RUNNING/PROTECT pods reach 26-29 of 32 at the 99th
  percentile of boundaries at the peak (the protect holding adds ~50 % to the offered load),
  with cold-start-only latency (p99 = 8 s), and fall to 0 in the trough; 14 GPUs overfilled
  the cluster (requests queued for up to 107 s). So the training window [0, 8 h) starts in
  the night trough (idle inference GPUs to lend) and ends on the rising morning slope (reclaims);
  long jobs meet the afternoon peak.
* 6 app instances (``infer-<model>-1``, one per model), offered load split equally;
  service times uniform integers per model (``traces.generate.DEFAULT_SERVICE_TIME_S``,
  30 s - 8 min), giving about 4,600-4,900 requests (~270 kB) per workload.

Seeds (one ``PCG64`` stream per workload; training drawn first, then inference):
train-01..08 = 101..108, val-01..03 = 201..203, test-01..04 = 301..304. ``smoke/tiny`` (seed 1) is
the tiny workload of the ``smoke`` training preset: 10 jobs, 4 h of light inference.

After changing the constants below, re-run this script (it also rewrites
``traces/workloads/README.md``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from deepboot_env.argparsing import ArgumentParser
from deepboot_env.atomic import write_text
from deepboot_env.sim.apps import APP_NAMES, COLD_START_DELAY_S
from deepboot_env.sim.workload import Workload
from traces.generate import DEFAULT_SERVICE_TIME_S, generate_workload, write_workload_csv
from traces.loaders import WORKLOADS_DIR, load_workload

# ---- training ---------------------------------------------------------------------------------
NUM_JOBS = 160
LOAD = 1.0
START_HOUR = 2.0
WINDOW_HOURS = 8.0

# ---- inference (re-tune after measuring occupancy in the simulator) -----------------------------
INFERENCE_MEAN_GPUS = 10.0
"""Mean offered inference load, GPUs (of the 32-GPU default inference cluster)."""
INFERENCE_AMPLITUDE = 0.85
"""Relative day/night amplitude: peak = mean x 1.85, trough = mean x 0.15."""
INFERENCE_PERIOD_S = 86400.0
INFERENCE_PHASE_S = 8 * 3600.0
"""Rate rises through its mean at 8 h: trough at 2 h, peak at 14 h."""
INFERENCE_HORIZON_S = 86400.0
INSTANCES_PER_APP = 1
SERVICE_TIME_S: dict[str, tuple[int, int]] = dict(DEFAULT_SERVICE_TIME_S)
COLD_START_FRACTION = 1.0

# ---- splits -----------------------------------------------------------------------------------
SPLIT_SEEDS: dict[str, tuple[int, ...]] = {
    "train": tuple(range(101, 109)),
    "val": (201, 202, 203),
    "test": (301, 302, 303, 304),
}


def train_kwargs() -> dict[str, object]:
    """Arguments of :func:`traces.generate.generate_training` for the shipped workloads."""
    return {"num_jobs": NUM_JOBS, "start_hour": START_HOUR, "window_hours": WINDOW_HOURS, "load": LOAD}


def inference_kwargs() -> dict[str, object]:
    """Arguments of :func:`traces.generate.generate_periodic_inference` for the shipped workloads."""
    return {
        "horizon_s": INFERENCE_HORIZON_S,
        "instances_per_app": INSTANCES_PER_APP,
        "mean_gpus": INFERENCE_MEAN_GPUS,
        "amplitude": INFERENCE_AMPLITUDE,
        "period_s": INFERENCE_PERIOD_S,
        "phase_s": INFERENCE_PHASE_S,
        "duration_model": SERVICE_TIME_S,
        "cold_start_fraction": COLD_START_FRACTION,
    }


# ---- the tiny workload of the `smoke` training preset (smoke/tiny) ------------------------------
TINY_SEED = 1
TINY_JOBS = 10
TINY_HORIZON_S = 4 * 3600.0
TINY_INFERENCE_MEAN_GPUS = 3.0


def shipped_specs() -> list[tuple[str, str, int]]:
    """(folder, name, seed) of every shipped workload: the splits', then ``smoke/tiny``."""
    splits = [
        (split, f"{split}-{i:02d}", seed) for split, seeds in SPLIT_SEEDS.items() for i, seed in enumerate(seeds, 1)
    ]
    return [*splits, ("smoke", "tiny", TINY_SEED)]


def build(name: str, seed: int) -> Workload:
    """The shipped workload ``name`` generated with ``seed``."""
    if name == "tiny":  # a smoke training run in seconds: few jobs, a few hours of light inference
        inference = {"horizon_s": TINY_HORIZON_S, "mean_gpus": TINY_INFERENCE_MEAN_GPUS}
        return generate_workload(name, seed, train={"num_jobs": TINY_JOBS}, inference=inference)
    return generate_workload(name, seed, train=train_kwargs(), inference=inference_kwargs())


def hourly_offered_gpus(wl: Workload, horizon_s: float = INFERENCE_HORIZON_S) -> np.ndarray:
    """Offered inference load per hour (GPUs): sum of (duration + cold start) of arrivals / 3600."""
    hours = int(np.ceil(horizon_s / 3600))
    out = np.zeros(hours)
    for r in wl.requests:
        h = min(int(r.arrival // 3600), hours - 1)
        out[h] += r.duration + COLD_START_FRACTION * COLD_START_DELAY_S[r.app]
    return out / 3600.0


def _readme(rows: list[dict[str, object]]) -> str:
    svc = ", ".join(f"{m} {lo}-{hi}" for m, (lo, hi) in SERVICE_TIME_S.items())
    lines = [
        "# Shipped workloads",
        "",
        "Generated by `python -m traces.make_shipped` (do not edit by hand; change the constants at the top",
        "of `traces/make_shipped.py` and re-run). Format: DeepBoot CSV",
        "(`name,time,application,num_replicas,batch_size,duration,num_task`; training rows have",
        "`duration = -1.0`, `num_task = -1`). Load with `traces.loaders.load_workload('test/test-01')`",
        "or `load_workload('test-01')`, or `deepboot simulate --workload test-01`.",
        "",
        "## Parameters",
        "",
        f"* Training: {NUM_JOBS} jobs x load {LOAD:g}, arrivals in an {WINDOW_HOURS:g}-h window starting at "
        f"{START_HOUR:g}:00 Philly time, docs/workloads.md §4 semantics from `traces/data/philly_stats.json`",
        "  (app from GPU-time bucket, (num_replicas, batch_size) from the TunedJobs table).",
        f"* Inference: {INSTANCES_PER_APP} instance(s) per model, non-homogeneous Poisson, rate ~ 1 + "
        f"{INFERENCE_AMPLITUDE:g} sin(2 pi (t - {INFERENCE_PHASE_S / 3600:g} h) / {INFERENCE_PERIOD_S / 3600:g} h), "
        f"horizon {INFERENCE_HORIZON_S / 3600:g} h;",
        f"  mean offered load {INFERENCE_MEAN_GPUS:g} GPUs "
        f"(peak {INFERENCE_MEAN_GPUS * (1 + INFERENCE_AMPLITUDE):.1f}, "
        f"trough {INFERENCE_MEAN_GPUS * (1 - INFERENCE_AMPLITUDE):.1f}) for a 32-GPU (8 x 4) inference cluster;",
        "  offered load = rate x (mean service time + cold-start delay), before warm-pod PROTECT holding.",
        f"* Service times, uniform integer seconds per model: {svc}.",
        "* Seeds: " + "; ".join(f"{s} {', '.join(str(x) for x in seeds)}" for s, seeds in SPLIT_SEEDS.items()) + ".",
        f"* `smoke/tiny` (seed {TINY_SEED}) is the exception: {TINY_JOBS} jobs and {TINY_HORIZON_S / 3600:g} h of "
        f"inference at a mean {TINY_INFERENCE_MEAN_GPUS:g} GPUs, the",
        "  workload of the `smoke` training preset (`--preset smoke --workload tiny --eval-workload tiny`).",
        "",
        "## Files",
        "",
        "| workload | seed | jobs | cifar10 | ncf | ds2 | bert | yolov3 | imagenet | Σ GPUs req. "
        "| train arrivals (s) | requests | offered GPUs min/mean/max per hour | KB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        apps = r["apps"]
        assert isinstance(apps, dict)  # application -> job count, see main()
        lines.append(
            f"| {r['name']} | {r['seed']} | {r['jobs']} | {apps.get('cifar10', 0)} | {apps.get('ncf', 0)} | "
            f"{apps.get('deepspeech2', 0)} | {apps.get('bert', 0)} | {apps.get('yolov3', 0)} | "
            f"{apps.get('imagenet', 0)} | {r['gpus']} | {r['first']}-{r['last']} | {r['requests']} | "
            f"{r['off_min']:.1f} / {r['off_mean']:.1f} / {r['off_max']:.1f} | {r['kb']:.0f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring); returns the exit status."""
    parser = ArgumentParser(prog="python -m traces.make_shipped", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(WORKLOADS_DIR), help="folder to write (default: traces/workloads)")
    parser.add_argument("--check", action="store_true", help="compare with the existing files instead of writing")
    args = parser.parse_args(argv)
    out = Path(args.out)
    rows, bad = [], []
    for split, name, seed in shipped_specs():
        wl = build(name, seed)
        path = out / split / f"{name}.csv"
        if args.check:
            if not path.is_file():
                bad.append(f"{path}: missing")
                continue
            old = load_workload(path)
            if old.jobs != wl.jobs or old.requests != wl.requests:
                bad.append(f"{path}: differs from what the generator gives now")
            continue
        write_workload_csv(wl, path)
        off = hourly_offered_gpus(wl, TINY_HORIZON_S if name == "tiny" else INFERENCE_HORIZON_S)
        apps = {a: sum(j.app == a for j in wl.jobs) for a in APP_NAMES}
        rows.append(
            {
                "name": f"{split}/{name}",
                "seed": seed,
                "jobs": len(wl.jobs),
                "apps": apps,
                "gpus": sum(j.num_replicas for j in wl.jobs),
                "first": int(wl.jobs[0].arrival),
                "last": int(wl.jobs[-1].arrival),
                "requests": len(wl.requests),
                "off_min": off.min(),
                "off_mean": off.mean(),
                "off_max": off.max(),
                "kb": os.path.getsize(path) / 1024,
            }
        )
        print(f"wrote {path} ({len(wl.jobs)} jobs, {len(wl.requests)} requests, {os.path.getsize(path)} bytes)")
    if args.check:
        for line in bad:
            print(line)
        print("shipped workloads are up to date" if not bad else f"{len(bad)} workload(s) out of date")
        return 1 if bad else 0
    write_text(out / "README.md", _readme(rows))
    print(f"wrote {out / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
