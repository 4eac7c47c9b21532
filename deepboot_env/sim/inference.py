"""Inference requests and the warm-pod lifecycle (deepboot-model.md §2).

Every request needs one GPU for its duration. A *pod* is a warm container bound to one app
instance (``infer-bert-1``) and one GPU:

* created RUNNING when a cold request gets a GPU (it pays the model's start-up delay);
* when its request finishes it turns PROTECT for ``T_p(c)`` seconds, where c counts consecutive
  warm hits: ``T_p(c) = floor(min(30 P + 15 P c, 120 P))`` with protect scale P
  (30, 45, ..., 120 s for P = 1). A pod finishing at t_c is PROTECT during [t_c, t_c + T_p] and
  SLEEP from t_c + T_p + 1 (the original per-tick countdown);
* SLEEP pods keep their GPU until the GPU is wanted: a cold request of any app evicts one, and
  lending at a boundary evicts the SLEEP pods whose GPUs training takes.

A request of instance A is a *warm hit* if a pod of A is SLEEP or PROTECT (the one with most
consecutive hits is taken): it starts at once with no start-up delay; the pod's hit counter
grows if it was PROTECT and restarts from 0 if it was SLEEP. RUNNING and PROTECT pods are never
pre-empted. A request that finds no pod and no GPU waits in FIFO order; nothing is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

RUNNING = "running"
PROTECT = "protect"
SLEEP = "sleep"


@cache
def protect_time(hits: int, scale: float = 1.0) -> int:
    """Seconds a pod stays PROTECT after serving, given its consecutive warm ``hits`` (cached:
    it is asked at every request completion, for a few distinct values)."""
    return int(math.floor(min(30.0 * scale + 15.0 * scale * hits, 120.0 * scale)))


@dataclass
class Pod:
    """A warm inference container on one GPU.

    Attributes:
        pid: pod id (creation order).
        instance: app instance key it serves.
        app: the served model.
        node: node of its GPU.
        status: RUNNING, PROTECT or SLEEP.
        hits: consecutive warm hits (cache_times in the original).
        busy_until: completion time of the request it runs (RUNNING only).
        sleep_at: time it turns SLEEP (PROTECT only).
        version: bumped at each state change (invalidates stale events).
        since: time of the last state change.
    """

    pid: int
    instance: str
    app: str
    node: int
    status: str
    hits: int = 0
    busy_until: float = math.inf
    sleep_at: float = math.inf
    version: int = 0
    since: float = 0.0


@dataclass
class RequestRecord:
    """What happened to one inference request.

    Attributes:
        index: position in the workload.
        arrival: arrival time.
        start: time its service began after any cold start (None while waiting).
        finish: completion time (None until done).
        cold: whether it paid a cold start.
        pod: pod that served it.
    """

    index: int
    arrival: float
    start: float | None = None
    finish: float | None = None
    cold: bool = False
    pod: int | None = None
