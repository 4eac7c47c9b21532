"""The project's command-line parser: every command (``deepboot``, ``train_policy.py``, the
``python -m`` tools and the benchmark scripts) builds its flags on :class:`ArgumentParser`.

Two conventions over plain :class:`argparse.ArgumentParser`:

* no prefix abbreviations (``allow_abbrev=False``): ``--job 2`` is refused instead of being read as
  ``--jobs 2``, ``--env`` never turns into ``--env-kwargs``;
* errors are one line, ``<prog>: error: <message> (see --help)``, exit status 2.

Subcommand parsers made by ``add_subparsers().add_parser`` are of the same class, so they follow
both conventions too. :func:`whole` and :func:`number` are the ``type=`` of numeric flags: a value
out of its range, not finite or not a number is refused in the same one line.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` without prefix abbreviations and with one-line errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message> (see --help)`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def whole(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type=``: a whole number from ``low`` to ``high`` (None: unbounded)."""
    return _ranged(int, low, high)


def number(low: float | None = None, high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type=``: a finite number from ``low`` to ``high`` (None: unbounded)."""
    return _ranged(float, low, high)


def _ranged(kind: type, low: float | None, high: float | None) -> Callable[[str], Any]:
    what = "a whole number" if kind is int else "a number"
    low_text, high_text = (None if v is None else f"{v:,}" if kind is int else f"{v:g}" for v in (low, high))
    if low_text is not None and high_text is not None:
        span = f" from {low_text} to {high_text}"
    else:
        span = f" >= {low_text}" if low_text is not None else f" <= {high_text}" if high_text is not None else ""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or (kind is float and not math.isfinite(value)) or len(text) > 40:
            raise argparse.ArgumentTypeError(f"expected {what}{span}, got {text[:40]!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {what}{span}, got {text}")
        return value

    parse.__name__ = what
    return parse
