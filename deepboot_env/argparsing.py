"""The project's command-line parser: every command (``deepboot``, ``train_policy.py``, the
``python -m`` tools and the benchmark scripts) builds its flags on :class:`ArgumentParser`.

Two conventions over plain :class:`argparse.ArgumentParser`:

* no prefix abbreviations (``allow_abbrev=False``): ``--job 2`` is refused instead of being read as
  ``--jobs 2``, ``--env`` never turns into ``--env-kwargs``;
* errors are one line, ``<prog>: error: <message> (see --help)``, exit status 2.

Subcommand parsers made by ``add_subparsers().add_parser`` are of the same class, so they follow
both conventions too.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` without prefix abbreviations and with one-line errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message> (see --help)`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
