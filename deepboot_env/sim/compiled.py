"""numba compilation with the machine code cached on disk where it can be (the one way the project
compiles a kernel: the simulator's inference drain and ATS's knapsack)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

F = TypeVar("F", bound=Callable[..., object])


def compiled(function: F) -> F:
    """``function`` compiled by numba in nopython mode; the machine code is cached next to its
    module, or in numba's user-wide cache where the package is read-only, and compiled in every
    process where neither can be written (numba refuses ``cache=True`` there: "no locator
    available"). numba is imported here, so that a module imports it only when it compiles."""
    import numba

    try:
        return cast(F, numba.njit(cache=True)(function))
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return cast(F, numba.njit(cache=False)(function))
