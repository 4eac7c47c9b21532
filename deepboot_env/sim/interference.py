"""Co-location interference between training jobs (off by default).

Training jobs that share a node slow each other down. The simulator turns an
:class:`InterferenceModel` into one *speed factor* per job (1 = undisturbed) from the current
placement of every job and multiplies the job's progress rate by it; the factors are recomputed
whenever any placement changes (a scheduling decision, a reclaim by inference, a completion).
Nothing here depends on Gymnasium; NumPy only.

Two kinds of model:

``flat`` (``deepboot simulate --interference F``)
    The Pollux simulator's rule (docs/interference.md §1): a job is
    *distributed* if it holds GPUs on more than one node; a node is *interfering* if at least two
    distributed jobs hold GPUs on it; a distributed job with any GPU on an interfering node runs at
    ``1 - F`` of its speed (F = 0.25 is a 25 % slowdown). Single-node jobs are never affected and
    never cause interference. The only difference to the original: the original decided the factor
    once per scheduling interval, here it changes the moment a placement changes (e.g. when a
    co-located job completes mid-interval).

``matrix`` (``--interference-matrix FILE`` or ``--interference-matrix default``)
    A per-application-pair model with two channels. For a *victim* job of application a sharing a
    node with an *aggressor* job of application b:

    * ``host[a, b]``: PCIe / host CPU / memory-bandwidth contention, for any two co-located jobs;
    * ``network[a, b]``: contention for the node's network link, added only when both jobs are
      distributed (only distributed jobs send gradients over the network).

    On each node the victim's speed is the product of ``1 - host[a, b] - network[a, b]`` over the
    other jobs on that node, and a (synchronous data-parallel) job runs at the speed of its slowest
    node: its factor is the minimum over the nodes it occupies. Each pair's slowdown must be < 1.

Default matrix (``--interference-matrix default``), rank one per channel, i.e. victim
sensitivity x aggressor intensity (the low-rank structure collaborative filtering exploits):

* network: ``network[a, b] = 0.7 * c_a * c_b`` where ``c`` is the share of a 2-node, 8-GPU
  iteration spent in gradient synchronisation under the calibrated throughput model
  (``network_time / (compute_time + network_time)`` at the goodput-optimal local batch):
  bert 0.61, cifar10 0.69, deepspeech2 0.54, imagenet 0.48, ncf 0.69, yolov3 0.77. A job that
  communicates a larger share of its iteration both suffers more from a shared link and keeps it
  busier; 0.7 puts a typical pair (c = 0.6) at the 25 % slowdown of Pollux's interference
  experiments.
* host: ``host[a, b] = 0.1 * h_a * h_b`` with input-pipeline levels h: imagenet 1.0 and yolov3
  1.0 (JPEG decoding and augmentation of large images, heavy host-to-device copies), cifar10 0.6
  and deepspeech2 0.6 (small images at thousands of samples/s; spectrograms), ncf 0.3 and bert 0.3
  (index / token tensors). Two image jobs on one node lose 10 %, two NLP jobs under 1 %, in the
  range reported for PCIe/host contention of co-located DL jobs.

Resulting slowdown of the victim (row) per co-located aggressor (column), both distributed
(network + host):

=============  =====  =======  ===========  ========  =====  ======
victim         bert   cifar10  deepspeech2  imagenet  ncf    yolov3
=============  =====  =======  ===========  ========  =====  ======
bert           0.269  0.313    0.249        0.235     0.304  0.359
cifar10        0.313  0.369    0.297        0.292     0.351  0.432
deepspeech2    0.249  0.297    0.240        0.241     0.279  0.351
imagenet       0.235  0.292    0.241        0.261     0.262  0.359
ncf            0.304  0.351    0.279        0.262     0.342  0.402
yolov3         0.359  0.432    0.351        0.359     0.402  0.515
=============  =====  =======  ===========  ========  =====  ======

When one of the two is on a single node only the host term applies (at most 0.1).

Matrix files (CSV or JSON) give rows with the fields ``app`` (victim), ``neighbor``
(aggressor), ``network`` and ``host`` (slowdowns in [0, 1); a missing channel is 0). ``*`` in
``app`` or ``neighbor`` matches every application; rows apply from the least to the most
specific (``*,*`` < ``a,*`` / ``*,b`` < ``a,b``, file order among equals), and pairs no row
covers do not interfere. A CSV has a header line naming the columns; a JSON file holds a list of
row objects or ``{"pairs": [...]}``. Example (the flat Pollux slowdown as a matrix, except that
two interfering neighbours now compound)::

    app,neighbor,network,host
    *,*,0.25,0
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np

from deepboot_env.sim.apps import APP_NAMES
from deepboot_env.sim.files import read_file

MAX_MATRIX_BYTES = 1 << 20
"""Largest interference matrix file read (a full matrix of the six applications is about 2 KB)."""

INTERFERENCE_KINDS: tuple[str, ...] = ("flat", "matrix")
MATRIX_FIELDS: tuple[str, ...] = ("app", "neighbor", "network", "host")
WILDCARD = "*"

DEFAULT_NETWORK_SCALE = 0.7
DEFAULT_COMM_SHARE: dict[str, float] = {
    "bert": 0.61,
    "cifar10": 0.69,
    "deepspeech2": 0.54,
    "imagenet": 0.48,
    "ncf": 0.69,
    "yolov3": 0.77,
}
"""Share of a 2-node, 8-GPU iteration spent synchronising (calibrated throughput model)."""
DEFAULT_HOST_SCALE = 0.1
DEFAULT_HOST_LEVEL: dict[str, float] = {
    "bert": 0.3,
    "cifar10": 0.6,
    "deepspeech2": 0.6,
    "imagenet": 1.0,
    "ncf": 0.3,
    "yolov3": 1.0,
}
"""Input-pipeline (PCIe / host) intensity and sensitivity level per application."""


class InterferenceError(ValueError):
    """Bad interference settings or matrix file; the message names the file, row and field."""


def _matrix(values: Iterable[Iterable[float]]) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in values)


@dataclass(frozen=True)
class InterferenceModel:
    """How co-located training jobs slow each other (see the module docstring).

    Attributes:
        kind: ``flat`` (Pollux's rule) or ``matrix`` (per application pair).
        slowdown: F of the flat rule, in [0, 1).
        network: ``matrix`` only: slowdown [victim, aggressor] through the network link, both
            distributed, applications in :data:`~deepboot_env.sim.apps.APP_NAMES` order.
        host: ``matrix`` only: slowdown [victim, aggressor] through PCIe/host, any co-location.
        source: where the matrix came from (``default`` or a file path), for reports.
    """

    kind: str = "flat"
    slowdown: float = 0.0
    network: tuple[tuple[float, ...], ...] = ()
    host: tuple[tuple[float, ...], ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in INTERFERENCE_KINDS:
            raise InterferenceError(f"interference kind {self.kind!r}: expected one of {', '.join(INTERFERENCE_KINDS)}")
        if self.kind == "flat":
            f = self.slowdown
            if not (isinstance(f, (int, float)) and math.isfinite(f) and 0.0 <= f < 1.0):
                raise InterferenceError(f"interference slowdown must be a number in [0, 1), got {f!r}")
            return
        a = len(APP_NAMES)
        for name in ("network", "host"):
            arr = np.asarray(getattr(self, name), dtype=float)
            if arr.shape != (a, a):
                raise InterferenceError(f"interference {name} matrix must be {a}x{a} (apps {', '.join(APP_NAMES)})")
            if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr >= 1):
                raise InterferenceError(f"interference {name} matrix: every slowdown must be in [0, 1)")
        if np.any(self.network_array + self.host_array >= 1):
            raise InterferenceError("interference matrix: network + host slowdown of a pair must be < 1")

    # ---------------------------------------------------------------- builders
    @classmethod
    def flat(cls, slowdown: float) -> InterferenceModel:
        """Pollux's rule with slowdown F (0.25 = distributed jobs on interfering nodes run at 75 %)."""
        return cls(kind="flat", slowdown=float(slowdown), source=f"flat {float(slowdown):g}")

    @classmethod
    def default_matrix(cls) -> InterferenceModel:
        """The documented default per-pair matrix."""
        c = np.array([DEFAULT_COMM_SHARE[a] for a in APP_NAMES])
        h = np.array([DEFAULT_HOST_LEVEL[a] for a in APP_NAMES])
        return cls(
            kind="matrix",
            network=_matrix(DEFAULT_NETWORK_SCALE * np.outer(c, c)),
            host=_matrix(DEFAULT_HOST_SCALE * np.outer(h, h)),
            source="default",
        )

    @classmethod
    def from_rows(
        cls, rows: Sequence[Mapping[str, object]], where: str = "matrix", labels: Sequence[str] | None = None
    ):
        """Build a matrix model from row mappings (fields :data:`MATRIX_FIELDS`).

        Args:
            rows: the rows.
            where: file name used in error messages.
            labels: per row, how errors name it (default ``row i``, 1-based).

        Raises:
            InterferenceError: naming ``where``, the row and the field.
        """
        if not rows:
            raise InterferenceError(f"{where}: no rows; expected fields {', '.join(MATRIX_FIELDS)}")
        index = {a: i for i, a in enumerate(APP_NAMES)}
        a = len(APP_NAMES)
        parsed = []
        seen: dict[tuple[str, str], str] = {}
        for i, row in enumerate(rows):
            label = labels[i] if labels is not None else f"row {i + 1}"
            if not isinstance(row, Mapping):
                raise InterferenceError(f"{where}: {label}: expected an object with fields {', '.join(MATRIX_FIELDS)}")
            unknown = sorted(str(k) for k in row if k not in MATRIX_FIELDS)
            if unknown:
                raise InterferenceError(
                    f"{where}: {label}: unknown field {unknown[0]!r}; expected {', '.join(MATRIX_FIELDS)}"
                )
            apps = [_row_app(row, field, f"{where}: {label}", index) for field in ("app", "neighbor")]
            values = [_row_slowdown(row, field, f"{where}: {label}") for field in ("network", "host")]
            if values[0] + values[1] >= 1.0:
                raise InterferenceError(
                    f"{where}: {label}: network + host slowdown {values[0] + values[1]:g} is not < 1"
                )
            key = (apps[0], apps[1])
            if key in seen:
                raise InterferenceError(f"{where}: {label}: pair {key[0]},{key[1]} repeats {seen[key]}")
            seen[key] = label
            specificity = (apps[0] != WILDCARD) + (apps[1] != WILDCARD)
            parsed.append((specificity, i, apps, values))
        net = np.zeros((a, a))
        host = np.zeros((a, a))
        for _, _, (victim, aggressor), (n_val, h_val) in sorted(parsed, key=lambda p: (p[0], p[1])):
            rows_sel = slice(None) if victim == WILDCARD else index[victim]
            cols_sel = slice(None) if aggressor == WILDCARD else index[aggressor]
            net[rows_sel, cols_sel] = n_val
            host[rows_sel, cols_sel] = h_val
        return cls(kind="matrix", network=_matrix(net), host=_matrix(host), source=where)

    @classmethod
    def from_file(cls, path: str | Path) -> InterferenceModel:
        """Read a CSV or JSON matrix file (``default`` gives :meth:`default_matrix`).

        Raises:
            InterferenceError: for a missing/unreadable file or a bad row, naming file, row, field.
        """
        if str(path) == "default":
            return cls.default_matrix()
        p = Path(path)
        try:
            text = read_file(p, "an interference matrix", MAX_MATRIX_BYTES).decode("utf-8")
        except FileNotFoundError:
            raise InterferenceError(f"interference matrix {str(p)!r}: no such file") from None
        except OSError as exc:
            raise InterferenceError(f"interference matrix {str(p)!r}: cannot read it ({exc.strerror or exc})") from None
        except ValueError as exc:  # too large, or not UTF-8
            why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else str(exc)
            raise InterferenceError(f"interference matrix {str(p)!r}: {why[:200]}") from None
        where = str(p)
        if p.suffix.lower() == ".json":
            try:
                data = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise InterferenceError(f"{where}: invalid JSON: {str(exc)[:80] or 'nested too deeply'}") from None
            if isinstance(data, dict):
                if "pairs" not in data:
                    raise InterferenceError(f"{where}: expected a list of rows or an object with a 'pairs' list")
                data = data["pairs"]
            if not isinstance(data, list):
                raise InterferenceError(f"{where}: 'pairs' must be a list of row objects")
            return cls.from_rows(data, where, [f"pair {i + 1}" for i in range(len(data))])
        if p.suffix.lower() != ".csv":
            raise InterferenceError(f"interference matrix {where!r}: expected a .csv or .json file")
        lines = text.splitlines()
        reader = csv.DictReader(lines)
        header = [h.strip() for h in (reader.fieldnames or [])]
        if not header:
            raise InterferenceError(f"{where}: empty file; expected a header line {','.join(MATRIX_FIELDS)}")
        for required in ("app", "neighbor"):
            if required not in header:
                raise InterferenceError(
                    f"{where}: header has no {required!r} column; expected {','.join(MATRIX_FIELDS)}"
                )
        unknown = [h for h in header if h not in MATRIX_FIELDS]
        if unknown:
            raise InterferenceError(
                f"{where}: header: unknown column {unknown[0]!r}; expected {','.join(MATRIX_FIELDS)}"
            )
        reader.fieldnames = header
        rows, labels = [], []
        for raw in reader:
            line = reader.line_num
            if None in raw:
                raise InterferenceError(f"{where}: line {line}: more fields than the header's {len(header)}")
            if all((v is None or not str(v).strip()) for v in raw.values()):
                continue
            rows.append({k: v for k, v in raw.items() if v is not None})
            labels.append(f"line {line}")
        return cls.from_rows(rows, where, labels)

    # ---------------------------------------------------------------- queries
    @cached_property
    def network_array(self) -> np.ndarray:
        """Network slowdowns as an array with one extra zero row/column for unknown apps."""
        return self._padded(self.network)

    @cached_property
    def host_array(self) -> np.ndarray:
        """Host slowdowns as an array with one extra zero row/column for unknown apps."""
        return self._padded(self.host)

    @staticmethod
    def _padded(values: tuple[tuple[float, ...], ...]) -> np.ndarray:
        a = len(APP_NAMES)
        out = np.zeros((a + 1, a + 1))
        if values:
            out[:a, :a] = np.asarray(values, dtype=float)
        out.flags.writeable = False
        return out

    @property
    def active(self) -> bool:
        """Whether the model can slow any job down."""
        if self.kind == "flat":
            return self.slowdown > 0
        return bool(np.any(self.network_array > 0) or np.any(self.host_array > 0))

    def describe(self) -> str:
        """Short human-readable description."""
        if self.kind == "flat":
            return f"flat {self.slowdown:g}"
        return f"matrix {self.source or '(custom)'}"

    def pair_slowdown(self, victim: str, aggressor: str, both_distributed: bool) -> float:
        """Slowdown one co-located ``aggressor`` job causes a ``victim`` job (matrix rule; for the
        flat rule: F when both are distributed, else 0)."""
        if self.kind == "flat":
            return self.slowdown if both_distributed else 0.0
        i, j = _app_index(victim), _app_index(aggressor)
        return float(self.host_array[i, j] + (self.network_array[i, j] if both_distributed else 0.0))

    def speed_factors(self, allocs: np.ndarray, apps: Sequence[str]) -> np.ndarray:
        """Speed factor (1 = undisturbed) of every job.

        Args:
            allocs: (J, N) GPUs per node of J jobs.
            apps: application of each job.
        """
        alloc = np.asarray(allocs)
        j = len(apps)
        out = np.ones(j)
        if j < 2 or not self.active:
            return out
        present = alloc > 0
        distributed = present.sum(axis=1) > 1
        if self.kind == "flat":
            per_node = present[distributed].sum(axis=0)
            hit = distributed & np.any(present & (per_node >= 2)[None, :], axis=1)
            out[hit] = 1.0 - self.slowdown
            return out
        idx = np.array([_app_index(a) for a in apps])
        pair = self.host_array[np.ix_(idx, idx)] + self.network_array[np.ix_(idx, idx)] * np.outer(
            distributed, distributed
        )
        log_keep = np.log1p(-pair)
        np.fill_diagonal(log_keep, 0.0)
        per_node = log_keep @ present.astype(float)  # (J, N): log speed on each node
        worst = np.where(present, per_node, 0.0).min(axis=1)
        busy = present.any(axis=1)
        out[busy] = np.exp(worst[busy])
        return out


def _app_index(app: str) -> int:
    try:
        return APP_NAMES.index(app)
    except ValueError:
        return len(APP_NAMES)


def as_model(value: float | InterferenceModel | None) -> InterferenceModel | None:
    """Normalise a SimConfig ``interference`` value: a number is the flat rule (0 -> None), a model
    without any effect -> None."""
    if value is None:
        return None
    if isinstance(value, InterferenceModel):
        return value if value.active else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InterferenceError(f"interference must be a number in [0, 1) or an InterferenceModel, got {value!r}")
    model = InterferenceModel.flat(float(value))
    return model if model.active else None


def _row_app(row: Mapping[str, object], field: str, where: str, index: Mapping[str, int]) -> str:
    """The application a matrix row names in ``field`` (``app`` or ``neighbor``): a known one or
    :data:`WILDCARD`; ``where`` (file and row) starts the error messages."""
    value = row.get(field)
    text = "" if value is None else str(value).strip()
    if not text:
        raise InterferenceError(f"{where}: field {field!r} is missing")
    if text != WILDCARD and text not in index:
        raise InterferenceError(
            f"{where}: field {field!r}: unknown application {text!r}; expected one of {', '.join(APP_NAMES)} or '*'"
        )
    return text


def _row_slowdown(row: Mapping[str, object], field: str, where: str) -> float:
    """The slowdown a matrix row gives in ``field`` (``network`` or ``host``): a number in
    [0, 1), 0 where absent or blank; ``where`` (file and row) starts the error messages."""
    value = row.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        return 0.0
    if isinstance(value, bool):
        raise InterferenceError(f"{where}: field {field!r}: expected a number, got {value!r}")
    try:  # float() decides what converts; anything else raises TypeError, reported below
        number = float(cast(Any, value))
    except (TypeError, ValueError):
        raise InterferenceError(f"{where}: field {field!r}: expected a number, got {value!r}") from None
    if not (math.isfinite(number) and 0.0 <= number < 1.0):
        raise InterferenceError(f"{where}: field {field!r}: slowdown {value!r} is not in [0, 1)")
    return number
