"""Torch threads for the project's small networks: one, unless the user chose.

The policies here are MLPs of a few hundred units evaluated one observation at a time. Torch's
default (a thread per core) makes each forward pass pay OpenMP synchronisation for no parallel
work: on a 2-core machine plain ``evaluate_policy`` on one test-01 episode took 27.3 s on 2 threads
against 0.69 s in ``deepboot compare`` on 1, and a process forked after torch ran ops on several
threads deadlocks on its first parallel op (``deepboot compare --jobs N``). So every loader of the
project (:func:`agents.load_agent`, the ``ppo:<path>`` adapter, ``agents.saved.policy_adapter.load_model``)
calls :func:`use_torch_threads`, which sets one thread unless the user chose a count: the
``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` environment variable (torch reads them at start-up), or a
count passed to the loader.
"""

from __future__ import annotations

import os

USER_THREAD_VARIABLES: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Environment variables by which a user chooses torch's thread count."""


def threads_chosen_by_user() -> bool:
    """Whether the environment sets torch's thread count (:data:`USER_THREAD_VARIABLES`)."""
    return any(os.environ.get(name, "").strip() for name in USER_THREAD_VARIABLES)


def use_torch_threads(num_threads: int | None = None) -> None:
    """``torch.set_num_threads(num_threads)``; ``None``: 1 unless the environment chose a count
    (then torch is left as it is). Process-wide, as torch's setting is."""
    if num_threads is None and threads_chosen_by_user():
        return
    import torch  # lazy: torch is slow to import

    wanted = 1 if num_threads is None else int(num_threads)
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
