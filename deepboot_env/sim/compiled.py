"""numba compilation with the machine code cached on disk where it can be (the one way the project
compiles a kernel: the simulator's loops and ATS's decision), and whether it is cached."""

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


def cached_on_disk(function: object) -> bool:
    """Whether a function of :func:`compiled` has machine code in its disk cache for its source as
    it is now (numba's index, whose stamp is the source file's), so that its first call loads
    instead of compiling. False where it is not compiled by numba, caches nowhere, or numba's
    cache is not laid out as this reads it (its index is numba's own)."""
    try:
        index = function._cache._cache_file._load_index()  # type: ignore[attr-defined]
    except Exception:  # a probe: whatever fails reads as not cached (numba then compiles)
        return False
    return bool(index)
