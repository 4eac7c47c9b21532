"""Snapshots, restores and forks of a mid-episode simulator (docs/simulator.md §8).

:meth:`Simulator.snapshot <deepboot_env.sim.simulator.Simulator.snapshot>`,
:meth:`~deepboot_env.sim.simulator.Simulator.restore` and
:meth:`~deepboot_env.sim.simulator.Simulator.fork` are built on one operation, :func:`clone_into`:
copy the episode state of one simulator into another object, bit for bit, copying only what the
episode changes and sharing what it never does:

* **shared, never copied** (constant during an episode, or pure caches whose values do not depend
  on who fills them): the :class:`~deepboot_env.sim.workload.Workload` and its job and request
  specs, the :class:`~deepboot_env.sim.config.SimConfig`, the application profiles, the rate
  tables and measured rates, the frozen placement arrays, the restart plans, the sorted arrival
  stream, and the policy (see below);
* **shared, immutable once made**: the inference request records (a record is replaced, never
  changed, when its request starts), timeline rows and other tuples, a job's phases, rate column
  and GPU list (each replaced, never changed in place, at a change of the job);
* **copied**: every container the episode changes in place (the ledger's counts, the event heap,
  the pods, the waiting queue, the lists of records and timeline rows, the job objects, the active
  jobs, the deferred completions, the state builder's per-job cache...), one level deep.

Each component knows which of its attributes are which (its ``clone`` method, next to the code
that changes them); :func:`clone_object` refuses to clone an object that has an attribute its
class did not classify (:class:`ForkError`), so a new attribute cannot be shared by mistake.

The policy is **not** part of a snapshot: the simulator's ``policy`` reference (the object whose
reclaim hooks it calls) is kept as it is, shared by the original, its snapshots and its forks.
A caller that needs a policy's own state (an RNG, a population) copied too copies the policy
itself (``copy.deepcopy(policy)``) and drives the fork with the copy.

A snapshot is immutable by contract: it holds a detached copy that is never run, and
:meth:`~deepboot_env.sim.simulator.Simulator.restore` copies it again, so the same snapshot can be
restored any number of times, into the simulator it came from or into any other one.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from deepboot_env.sim.simulator import Simulator

__all__ = ["ForkError", "SimSnapshot", "checked_state", "clone_into", "clone_object", "shallow_copy"]

T = TypeVar("T")


class ForkError(TypeError):
    """An object cannot be cloned: it has an attribute its class does not classify."""


def clone_object(obj: T, fields: frozenset[str]) -> T:
    """A new object of ``obj``'s class with the same attribute values (the values themselves are
    not copied: the caller replaces those it must copy).

    Args:
        obj: the object (with a ``__dict__``).
        fields: every attribute its class classifies (shared or copied by its ``clone``).

    Raises:
        ForkError: if ``obj`` has an attribute outside ``fields`` (a subclass's, or one added
            since), naming it: it must be classified before objects of the class can be cloned.
    """
    new = object.__new__(type(obj))
    new.__dict__.update(checked_state(obj, fields))
    return new


def shallow_copy(obj: T) -> T:
    """A new object of ``obj``'s class with the same attribute values (for plain records whose
    attributes are all numbers, strings or other immutable values, such as a pod)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


def checked_state(obj: object, fields: frozenset[str]) -> dict[str, object]:
    """A shallow copy of ``obj.__dict__``, after checking that every attribute is one of ``fields``
    (see :func:`clone_object`).

    Raises:
        ForkError: naming the attributes outside ``fields``.
    """
    state = obj.__dict__
    if not state.keys() <= fields:
        extra = sorted(state.keys() - fields)
        raise ForkError(
            f"cannot clone {type(obj).__name__}: attribute(s) {', '.join(map(repr, extra))} not classified for "
            "snapshots (add them to the class's clone: shared if never changed in place, else copied)"
        )
    return state.copy()


class SimSnapshot:
    """The episode state of a simulator at one moment: opaque and immutable by contract.

    Made by :meth:`Simulator.snapshot <deepboot_env.sim.simulator.Simulator.snapshot>`, used by
    :meth:`~deepboot_env.sim.simulator.Simulator.restore`. It holds a detached copy of the
    simulator that is never run; the workload, settings, rate tables and policy are shared with
    the simulator it came from (see the module docstring). Picklable, to pass to another process
    of the same run; never unpickle one from a file (unpickling runs code).

    Attributes:
        time: the simulated time of the snapshot.
        done: whether the episode had ended.
    """

    __slots__ = ("_state",)

    def __init__(self, state: Simulator) -> None:
        self._state = state

    @property
    def time(self) -> float:
        """The simulated time of the snapshot."""
        return self._state.now

    @property
    def done(self) -> bool:
        """Whether the episode had ended."""
        return self._state.done

    def __repr__(self) -> str:
        return f"SimSnapshot(workload={self._state.workload.name!r}, time={self.time:g}, done={self.done})"

    def __getstate__(self) -> dict[str, object]:
        return {"_state": self._state}

    def __setstate__(self, state: dict[str, object]) -> None:
        self._state = state["_state"]  # type: ignore[assignment]


_SIM_SHARED = frozenset(
    {
        "workload",
        "config",
        "policy",
        "profiles",
        "adaptive",
        "_arrival_order",
        "_arrival_times",
        "now",
        "_next_request",
        "_arrived_before",
        "num_events",
        "truncated",
        "done",
        "_wall_start",
        "_boundary",
    }
)
"""Attributes of a :class:`~deepboot_env.sim.simulator.Simulator` that never change in place
(numbers, flags, the episode's constants and the arrival stream, sorted once per reset)."""

_SIM_COPIED = frozenset(
    {"ledger", "events", "_pool", "_books", "_training", "jobs", "_active", "_state_builder", "_recent"}
)
"""Attributes of a :class:`~deepboot_env.sim.simulator.Simulator` that :func:`clone_into` copies."""

_SIM_FIELDS = _SIM_SHARED | _SIM_COPIED


def clone_into(src: Simulator, dst: Simulator) -> None:
    """Make ``dst`` a copy of ``src``'s episode state that continues exactly as ``src`` would
    (same events, same results), independently of it: what one of them changes later the other
    never sees. ``dst`` may be a bare ``object.__new__(Simulator)``; whatever it held before is
    dropped. The inference pool of ``dst`` reclaims from ``dst``.

    Raises:
        ForkError: if ``src`` or one of its components has an unclassified attribute.
    """
    state = checked_state(src, _SIM_FIELDS)
    ledger = src.ledger.clone()
    events = src.events.clone()
    pool = src._pool.clone(ledger, events, dst)
    books = src._books.clone(ledger, pool)
    training = src._training.clone(ledger, events, pool, books)
    state["ledger"] = ledger
    state["events"] = events
    state["_pool"] = pool
    state["_books"] = books
    state["_training"] = training
    state["jobs"] = training.jobs
    state["_active"] = training.active
    state["_state_builder"] = src._state_builder.clone(training.jobs, ledger)
    state["_recent"] = deque(src._recent, maxlen=src._recent.maxlen)
    target = dst.__dict__
    target.clear()
    target.update(state)
