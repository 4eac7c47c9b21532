"""Bounds on what a file or value a user names may hold, and the readers that keep to them.

Every loader of a user's file reads it through these helpers, so that a small crafted file can
neither exhaust memory nor escape as a traceback (docs/usage.md §7.1):

* :func:`open_regular`: the one way a user's file is opened: a FIFO, a device, a socket or a
  folder is refused at once (:class:`NotRegularFile`), never waited on;
* :func:`read_bounded` / :func:`read_stream`: at most ``limit`` bytes of a file or stream
  (zip entries included), read in chunks;
* :func:`parse_json` / :func:`parse_yaml`: the document with its nesting, integer size and (for
  YAML, whose aliases share one value between many places) number of values once aliases are
  expanded checked;
* :func:`shown`, :func:`plain`, :func:`names`: a value, a text or a list of names for an error
  message, cut to :data:`MAX_SHOWN_CHARS` with its length, control characters escaped;
* :func:`safe_cell` / :func:`safe_frame`: CSV output cells that a spreadsheet would read as a
  formula (``=``, ``+``, ``-``, ``@``, tab, carriage return first) prefixed with ``'``, as OWASP
  advises for CSV injection.

Each reader takes the error class of its caller (``error``), so that the caller's one-line error
type (:class:`~agents.errors.ConfigError`, :class:`~traces.loaders.TraceError`, ...) is what
escapes. The simulation's own bounds (:data:`MIN_INTERVAL_S`) live in :mod:`deepboot_env.sim` and
are re-exported here.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from deepboot_env.sim.cluster import MAX_NODES
from deepboot_env.sim.config import MIN_INTERVAL_S
from deepboot_env.sim.files import NotRegularFile, open_regular, read_file, read_stream

__all__ = [
    "BYTES_PER_WORKLOAD_ROW",
    "JCT_SCALE_RANGE",
    "MAX_CONFIG_BYTES",
    "MAX_CSV_COLUMNS",
    "MAX_ES_STATE_BYTES",
    "MAX_INT_DIGITS",
    "MAX_JOB_SLOTS",
    "MAX_JSON_BYTES",
    "MAX_LEND_LEVELS",
    "MAX_LINE_CHARS",
    "MAX_NAME_CHARS",
    "MAX_NESTING",
    "MAX_NODES",
    "MAX_POLICY_PARAMETERS",
    "MAX_ROLLOUT",
    "MAX_SHOWN_CHARS",
    "MAX_TIME_S",
    "MAX_VALUES",
    "MAX_WORKLOAD_ROWS",
    "MAX_ZIP_DATA_BYTES",
    "MAX_ZIP_MEMBERS",
    "MAX_ZIP_TOTAL_BYTES",
    "MIN_DURATION_S",
    "MIN_INTERVAL_S",
    "NotRegularFile",
    "names",
    "open_regular",
    "parse_json",
    "parse_yaml",
    "plain",
    "read_bounded",
    "read_stream",
    "safe_cell",
    "safe_frame",
    "shown",
]

MAX_SHOWN_CHARS = 80
"""Characters of a bad value an error message shows (then ``...`` and the value's length)."""
MAX_CONFIG_BYTES = 1 << 20
"""Largest YAML configuration (``--conf-file``, a run's ``config.yml``): 1 MiB."""
MAX_JSON_BYTES = 1 << 20
"""Largest priority model (``priority:<path>``) and checkpoint metadata JSON: 1 MiB."""
MAX_ES_STATE_BYTES = 64 << 20
"""Largest ES ``state.json`` (its ATS cache grows with the scenarios run): 64 MiB."""
MAX_ZIP_DATA_BYTES = 64 << 20
"""Largest ``data`` entry of a model zip, declared and actually unpacked: 64 MiB."""
MAX_ZIP_TOTAL_BYTES = 128 << 20
"""Most bytes all the entries of a model zip may unpack to together, as declared (a zip entry is
never read past its declared size): 128 MiB, room for a network of
:data:`MAX_POLICY_PARAMETERS` with its optimiser's two moments (the shipped models unpack to
under 2.4 MB). Loading reads each weights entry whole and builds its tensors, so the bound on the
sum is what bounds a loader's memory."""
MAX_ZIP_MEMBERS = 16
"""Most entries of a model zip (SB3 writes 6, an export 7), counted from the archive's end record
before its directory is read: a zip of 300,000 entries took 13 s to list."""
MAX_POLICY_PARAMETERS = 8_000_000
"""Most parameters of a policy network, counted from its ``policy_kwargs`` before it is built
(32 MB of float32 weights, 96 MB with Adam's moments; the shipped score models have 73,000)."""
MAX_NESTING = 64
"""Deepest nesting of lists and mappings in a JSON or YAML document."""
MAX_VALUES = 100_000
"""Most values in a JSON or YAML document, counting a YAML alias's value at every place it is used."""
MAX_INT_DIGITS = 40
"""Most digits of an integer in a JSON document (a 128-bit random generator state has 39)."""
MAX_CSV_COLUMNS = 64
"""Most columns of a workload CSV (header or row)."""
MAX_LINE_CHARS = 65_536
"""Longest line of a workload CSV (read no further)."""
MAX_TIME_S = 1e12
"""Latest arrival time and longest inference duration in a workload CSV (s, about 31,700 years):
far beyond any simulation's ``max_time``, and small enough that times keep sub-millisecond
precision as floats."""
MIN_DURATION_S = 1e-3
"""Shortest inference duration in a workload CSV (s): a denormal one never advances the clock."""
MAX_NAME_CHARS = 256
"""Longest job or request name in a workload CSV."""
MAX_WORKLOAD_ROWS = 600_000
"""Most rows of a workload CSV: beyond, a workload takes gigabytes and hours to simulate. The
whole Philly replay (docs/workloads.md §9: 74,428 jobs and 513,079 requests, 587,507 rows) is
within, and a file just past it is refused within 320 MB."""
BYTES_PER_WORKLOAD_ROW = 5_000
"""Memory a simulated workload row takes, about (a 1M-row workload took 5 GB): the estimate the
row limit's error gives."""
MAX_ROLLOUT = 1 << 20
"""Largest ``n_steps`` (per env) and ``batch_size`` of PPO: a larger rollout exhausts memory."""
MAX_JOB_SLOTS = 4096
"""Most job slots (``max_jobs``) of the env's observation and action."""
MAX_LEND_LEVELS = 64
"""Most lending levels (``lend_levels``): the action mask holds one entry per level."""
JCT_SCALE_RANGE = (1e-6, 1e12)
"""The range of ``jct_scale`` (its reward divides by it: a denormal one gives rewards of -inf)."""


# ---------------------------------------------------------------------------------------------
# error messages

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, MAX_SHOWN_CHARS, MAX_SHOWN_CHARS, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8


def shown(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, never longer than about ``limit`` characters: a
    longer text or container is cut and followed by its length (``'aaaa...' (5,000,000 chars)``).
    Bounded in time and memory for any value, shared (YAML alias) and cyclic ones included."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    if isinstance(value, str | bytes):
        if len(value) <= limit:
            return repr(value)
        unit = "chars" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}... ({len(value):,} {unit})"
    text = _REPR.repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    if isinstance(value, list | tuple | dict | set | frozenset) and len(value) > _REPR.maxlist:
        text += f" ({len(value):,} items)"
    return text


def plain(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` as it is for an error message when short and printable, else :func:`shown` (quoted,
    escaped, cut)."""
    return text if len(text) <= limit and text.isprintable() else shown(text, limit)


def names(items: list[Any], most: int = 10) -> str:
    """``items`` joined by commas for an error message: each cut as :func:`shown` cuts a text,
    at most ``most`` of them, then how many more there are."""
    shown_items = [plain(str(item)) for item in list(items)[:most]]
    more = f" and {len(items) - most:,} more" if len(items) > most else ""
    return ", ".join(shown_items) + more


# ---------------------------------------------------------------------------------------------
# reading files

ErrorFactory = Callable[[str], Exception]
"""The error a reader raises: a class (or function) taking the one-line message."""


def read_bounded(path: str | Path, limit: int, what: str, error: ErrorFactory = ValueError) -> bytes:
    """At most ``limit`` bytes of the file at ``path`` (never more read).

    Raises:
        error: ``"<path>: <what> is larger than <limit> bytes"``.
        OSError: the file cannot be opened or read, or is not a regular file
            (:class:`NotRegularFile`: callers name it in their own words).
    """
    return read_file(path, what, limit, error)


class _TooBig(Exception):
    """Internal: a JSON integer beyond :data:`MAX_INT_DIGITS`, or a key given twice."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _TooBig(f"an integer of {len(text.lstrip('-')):,} digits (the limit is {MAX_INT_DIGITS})")
    return int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _TooBig(f"key {shown(key)} is given twice in one object")
            seen.add(key)
    return out


def parse_json(
    data: bytes | str, source: str, error: ErrorFactory = ValueError, max_values: int = MAX_VALUES, what: str = "JSON"
) -> Any:
    """The JSON document in ``data``, checked against :data:`MAX_NESTING`, :data:`MAX_INT_DIGITS`
    and ``max_values``, with no key twice in an object (``json`` would keep the last silently: an
    ES state naming ``generation`` twice); ``what`` names the document in the error for text that
    is not JSON.

    Raises:
        error: ``"<source>: not JSON (...)"`` or the limit exceeded, in one line.
    """
    try:
        value = json.loads(data, parse_int=_bounded_int, object_pairs_hook=_unique_keys)
    except _TooBig as exc:
        raise error(f"{source}: {exc}") from None
    except RecursionError:
        raise error(f"{source}: nested deeper than the limit of {MAX_NESTING} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{source}: not {what} ({str(exc)[:MAX_SHOWN_CHARS]})") from None
    _check_size(value, source, error, max_values)
    return value


def read_json_file(path: Path, what: str, file_format: str, error: ErrorFactory = ValueError) -> dict[str, Any]:
    """The JSON object of the ``what`` file at ``path`` (a model file: a priority, a held table),
    read bounded (:data:`MAX_JSON_BYTES`) and parsed by :func:`parse_json`, whose ``format``
    field is ``file_format``; its other fields are the caller's to check.

    Raises:
        error: one line naming the file: missing or unreadable, too large, not JSON, not an
            object, or another format.
    """
    try:
        data = read_bounded(path, MAX_JSON_BYTES, f"a {what}", error)
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except OSError as exc:
        raise error(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    doc = parse_json(data, str(path), error, what=f"a JSON {what}")
    if not isinstance(doc, dict):
        raise error(f"{path}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") != file_format:
        raise error(f"{path}: field 'format' must be {file_format!r}, got {shown(doc.get('format'))}")
    return doc


def parse_yaml(text: str, source: str, error: ErrorFactory = ValueError, max_values: int = MAX_VALUES) -> Any:
    """The YAML document in ``text`` (safe loader: plain data, no tags that build objects),
    checked against :data:`MAX_NESTING` and ``max_values`` with every alias expanded (so that a
    "billion laughs" file is refused without being expanded).

    Raises:
        error: ``"<source>: not YAML (...)"`` or the limit exceeded, in one line.
    """
    import yaml

    try:
        value = yaml.safe_load(text)
    except RecursionError:
        raise error(f"{source}: nested deeper than the limit of {MAX_NESTING} levels") from None
    except (yaml.YAMLError, ValueError, OverflowError) as exc:  # ValueError: an integer of over 4,300 digits
        raise error(f"{source}: not YAML ({str(exc).splitlines()[0][:MAX_SHOWN_CHARS]})") from None
    _check_size(value, source, error, max_values)
    return value


def _check_size(value: Any, source: str, error: ErrorFactory, max_values: int) -> None:
    """Refuse a document nested deeper than :data:`MAX_NESTING` (a cycle included) or holding more
    than ``max_values`` values once shared values are counted at each place they appear."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> (values, height), each container measured once

    def measure(item: Any, depth: int) -> tuple[int, int]:
        if not isinstance(item, list | tuple | dict | set):
            return 1, 0
        if depth > MAX_NESTING:
            raise error(f"{source}: nested deeper than the limit of {MAX_NESTING} levels (or refers to itself)")
        known = sizes.get(id(item))
        if known is None:
            children = [*item.keys(), *item.values()] if isinstance(item, Mapping) else list(item)
            count, height = 1, 0
            for child in children:
                n, h = measure(child, depth + 1)
                count, height = count + n, max(height, h + 1)
                if count > max_values:
                    raise error(f"{source}: more than the limit of {max_values:,} values (aliases counted at each use)")
            known = sizes[id(item)] = (count, height)
        if depth + known[1] > MAX_NESTING:
            raise error(f"{source}: nested deeper than the limit of {MAX_NESTING} levels")
        return known

    measure(value, 0)


# ---------------------------------------------------------------------------------------------
# CSV outputs

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection)."""


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV output cell: a text starting like a formula gets a leading ``'``;
    anything else (numbers included) is returned as it is."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def safe_frame(frame: Any) -> Any:
    """A copy of the pandas DataFrame ``frame`` with :func:`safe_cell` applied to its text columns."""
    out = frame.copy()
    for column in out.columns:
        if getattr(out[column].dtype, "kind", "O") not in "biufcmM":  # text: object or string dtypes
            out[column] = out[column].map(safe_cell)
    return out
