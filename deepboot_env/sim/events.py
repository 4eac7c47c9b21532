"""Event queue keyed (time, priority, sequence).

Events at the same second are processed in a fixed priority order so runs are deterministic:
requests finish, then pods fall asleep, then training jobs complete, then new requests arrive;
scheduling boundaries are not queued (the simulator computes them) and come after every event of
their second.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import IntEnum

from deepboot_env.sim.fork import clone_object


class EventKind(IntEnum):
    """Event kinds; the value is the priority among events of the same second."""

    REQUEST_DONE = 0
    POD_SLEEP = 1
    TRAIN_DONE = 2
    REQUEST_ARRIVAL = 3


@dataclass(order=True)
class Event:
    """One scheduled event.

    Attributes:
        time: when it happens (seconds).
        kind: what happens (also the tie-break priority).
        seq: insertion counter (final tie-break).
        target: index of the pod, job or request concerned.
        version: the target's version when scheduled; a mismatch means the event is stale.
    """

    time: float
    kind: EventKind
    seq: int
    target: int = field(compare=False)
    version: int = field(compare=False, default=0)


class EventQueue:
    """A binary heap of plain tuples (fast comparisons), handed out as :class:`Event`."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0

    def clone(self) -> EventQueue:
        """An independent copy (:mod:`deepboot_env.sim.fork`): the heap's list is copied, its
        tuples shared."""
        new = clone_object(self, frozenset({"_heap", "_seq"}))
        new._heap = self._heap.copy()
        return new

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, kind: EventKind | int, target: int, version: int = 0) -> None:
        """Schedule an event (``kind`` an :class:`EventKind` or its value)."""
        self._seq = seq = self._seq + 1
        heapq.heappush(self._heap, (time, int(kind), seq, target, version))

    def reserve(self) -> int:
        """The sequence number the next :meth:`push` would take, taken now: an event pushed later
        with :meth:`push_reserved` sorts as if it had been pushed at this call."""
        self._seq += 1
        return self._seq

    def push_reserved(self, time: float, kind: EventKind | int, seq: int, target: int, version: int = 0) -> None:
        """Schedule an event with a sequence number from :meth:`reserve`."""
        heapq.heappush(self._heap, (time, int(kind), seq, target, version))

    def peek_time(self) -> float | None:
        """Time of the earliest event, or None if empty."""
        return self._heap[0][0] if self._heap else None

    def peek(self) -> Event:
        """The earliest event, left in the queue."""
        t, kind, seq, target, version = self._heap[0]
        return Event(t, EventKind(kind), seq, target, version)

    def pop(self) -> Event:
        """Remove and return the earliest event."""
        t, kind, seq, target, version = heapq.heappop(self._heap)
        return Event(t, EventKind(kind), seq, target, version)

    @property
    def heap(self) -> list[tuple[float, int, int, int, int]]:
        """The heap itself: ``(time, kind, seq, target, version)`` tuples, earliest first (the
        simulator's inner loop pops them with :func:`heapq.heappop`, without :class:`Event`
        objects)."""
        return self._heap
