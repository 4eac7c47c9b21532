"""The six measured applications and their calibrated models.

Each application is described by an :class:`AppProfile`: batch-size bounds, the number of
epochs to finish, the fitted Pollux throughput parameters, the cumulative progress that ends
each epoch and the gradient statistics per epoch and traced batch size. The profiles are
computed from the raw Pollux/DeepBoot traces by ``deepboot calibrate --apps DIR``
(:mod:`traces.calibrate`) and shipped as ``deepboot_env/sim/data/apps.json``, so a user needs
no raw data.

Restart and cold-start constants are the DeepBoot simulator's (docs/inference.md §2, docs/restarts.md §2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from deepboot_env.sim.files import read_table

APP_NAMES: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
"""Application names, in the fixed order used by one-hot encodings."""

FULL_RESTART_DELAY_S: dict[str, float] = {
    "bert": 103.0,
    "cifar10": 24.0,
    "ncf": 25.0,
    "deepspeech2": 18.0,
    "yolov3": 26.0,
    "imagenet": 35.0,
}
"""Seconds a training job makes no progress after a full (re)start (DeepBoot FIRST_DELAY)."""

FAST_RESTART_DELAY_S: dict[str, float] = {
    "bert": 5.0,
    "cifar10": 3.0,
    "ncf": 2.0,
    "deepspeech2": 1.0,
    "yolov3": 3.0,
    "imagenet": 3.0,
}
"""Seconds of an auto-fast-elastic rescale of already-running workers (DeepBoot NEXT_DELAY)."""

COLD_START_DELAY_S: dict[str, float] = {
    "bert": 8.0,
    "cifar10": 6.0,
    "imagenet": 6.0,
    "yolov3": 6.0,
    "deepspeech2": 4.0,
    "ncf": 4.0,
}
"""Start-up delay of a cold inference pod, per served model (docs/inference.md §2)."""

DEFAULT_PROFILE_PATH = "data/apps.json"


class UnknownApplicationError(KeyError):
    """Raised for an application name that is not one of :data:`APP_NAMES`."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


@dataclass(frozen=True, eq=False)
class AppProfile:
    """Calibrated model of one application (all sizes are numbers of examples).

    Attributes:
        name: application name.
        init_batch_size: M0, the smallest (reference) total batch size.
        max_batch_size: Mmax, the largest total batch size.
        min_local_bsz: smallest per-GPU micro-batch.
        max_local_bsz: largest per-GPU micro-batch.
        max_epochs: epochs to finish.
        throughput_params: the 7 Pollux parameters (alpha_c, beta_c, alpha_n, beta_n,
            alpha_r, beta_r, gamma) of the per-iteration time model, seconds.
        epoch_progress: shape (max_epochs,), cumulative progress (M0-equivalent iterations)
            at the end of each epoch; the last entry is the progress to finish.
        traced_batch_sizes: shape (B,), ascending total batch sizes with gradient statistics.
        grad_sqr: shape (max_epochs, B), squared gradient norm per epoch and batch size.
        grad_var: shape (max_epochs, B), gradient variance per epoch and batch size.
        fixed_batch_size: adaptive schedulers keep this total batch (ncf: 32,768) or None.
        max_replicas_cap: adaptive schedulers never give more GPUs (ncf: 1) or None.
    """

    name: str
    init_batch_size: int
    max_batch_size: int
    min_local_bsz: int
    max_local_bsz: int
    max_epochs: int
    throughput_params: np.ndarray
    epoch_progress: np.ndarray
    traced_batch_sizes: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray
    fixed_batch_size: int | None = None
    max_replicas_cap: int | None = None

    @property
    def target_progress(self) -> float:
        """Progress at which the job completes."""
        return float(self.epoch_progress[-1])

    @property
    def full_restart_delay(self) -> float:
        """Seconds of a full (re)start."""
        return FULL_RESTART_DELAY_S[self.name]

    @property
    def fast_restart_delay(self) -> float:
        """Seconds of a fast-elastic rescale."""
        return FAST_RESTART_DELAY_S[self.name]

    def grad_stats(self, epoch: int, total_batch: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Gradient statistics at ``epoch`` interpolated linearly in total batch size.

        Batch sizes outside the traced range are clamped to it.
        """
        e = min(max(int(epoch), 0), self.max_epochs - 1)
        x = np.clip(np.asarray(total_batch, dtype=float), self.traced_batch_sizes[0], self.traced_batch_sizes[-1])
        sqr = np.interp(x, self.traced_batch_sizes, self.grad_sqr[e])
        var = np.interp(x, self.traced_batch_sizes, self.grad_var[e])
        return sqr, var

    def observed_stats(self, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) a job sees at ``epoch``, normalised to M0 (smallest traced batch)."""
        e = min(max(int(epoch), 0), self.max_epochs - 1)
        return float(self.grad_sqr[e, 0]), float(self.grad_var[e, 0])

    def max_useful_replicas(self) -> int:
        """GPUs beyond which the job cannot use more: Mmax // min local batch (Pollux cap 64)."""
        cap = min(64, self.max_batch_size // self.min_local_bsz)
        if self.max_replicas_cap is not None:
            cap = min(cap, self.max_replicas_cap)
        return max(cap, 1)

    def to_json(self) -> dict[str, object]:
        """The JSON object stored in ``apps.json``."""
        return {
            "init_batch_size": self.init_batch_size,
            "max_batch_size": self.max_batch_size,
            "min_local_bsz": self.min_local_bsz,
            "max_local_bsz": self.max_local_bsz,
            "max_epochs": self.max_epochs,
            "throughput_params": [float(v) for v in self.throughput_params],
            "epoch_progress": [float(v) for v in self.epoch_progress],
            "traced_batch_sizes": [int(v) for v in self.traced_batch_sizes],
            "grad_sqr": [[float(v) for v in row] for row in self.grad_sqr],
            "grad_var": [[float(v) for v in row] for row in self.grad_var],
            "fixed_batch_size": self.fixed_batch_size,
            "max_replicas_cap": self.max_replicas_cap,
        }

    @classmethod
    def from_json(cls, name: str, obj: Mapping[str, Any]) -> AppProfile:
        """Build a profile from its ``apps.json`` object, checking shapes."""
        try:
            prof = cls(
                name=name,
                init_batch_size=int(obj["init_batch_size"]),
                max_batch_size=int(obj["max_batch_size"]),
                min_local_bsz=int(obj["min_local_bsz"]),
                max_local_bsz=int(obj["max_local_bsz"]),
                max_epochs=int(obj["max_epochs"]),
                throughput_params=np.asarray(obj["throughput_params"], dtype=float),
                epoch_progress=np.asarray(obj["epoch_progress"], dtype=float),
                traced_batch_sizes=np.asarray(obj["traced_batch_sizes"], dtype=float),
                grad_sqr=np.asarray(obj["grad_sqr"], dtype=float),
                grad_var=np.asarray(obj["grad_var"], dtype=float),
                fixed_batch_size=None if obj.get("fixed_batch_size") is None else int(obj["fixed_batch_size"]),
                max_replicas_cap=None if obj.get("max_replicas_cap") is None else int(obj["max_replicas_cap"]),
            )
        except KeyError as exc:
            raise ValueError(f"application profile {name!r}: missing field {exc.args[0]!r}") from None
        nb = len(prof.traced_batch_sizes)
        if prof.throughput_params.shape != (7,):
            raise ValueError(f"application profile {name!r}: throughput_params must have 7 values")
        if prof.epoch_progress.shape != (prof.max_epochs,):
            raise ValueError(f"application profile {name!r}: epoch_progress must have max_epochs values")
        if prof.grad_sqr.shape != (prof.max_epochs, nb) or prof.grad_var.shape != (prof.max_epochs, nb):
            raise ValueError(f"application profile {name!r}: grad stats must be (max_epochs, batch sizes)")
        return prof


def load_profiles(path: str | Path | None = None) -> dict[str, AppProfile]:
    """Load application profiles from ``path`` or the shipped ``apps.json``."""
    if path is None:
        data = json.loads(resources.files("deepboot_env.sim").joinpath(DEFAULT_PROFILE_PATH).read_text())
        origin = "deepboot_env/sim/" + DEFAULT_PROFILE_PATH
    else:
        data = read_table(path, "an application profile table")
        origin = str(path)
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: an application profile table must be a JSON object")
    apps = data.get("apps", {})
    missing = [a for a in APP_NAMES if a not in apps]
    if missing:
        raise ValueError(f"{origin}: missing application profiles {missing}")
    return {name: AppProfile.from_json(name, apps[name]) for name in APP_NAMES}


@lru_cache(maxsize=1)
def default_profiles() -> dict[str, AppProfile]:
    """The shipped profiles (loaded once)."""
    return load_profiles()


def get_app(name: str) -> AppProfile:
    """The shipped profile of application ``name``.

    Raises:
        UnknownApplicationError: if ``name`` is not a known application.
    """
    profiles = default_profiles()
    if name not in profiles:
        raise UnknownApplicationError(f"unknown application {name!r}; expected one of {', '.join(APP_NAMES)}")
    return profiles[name]


def inference_model_of(instance: str) -> str:
    """The model served by an inference app instance key such as ``infer-bert-1``.

    Raises:
        UnknownApplicationError: if the key does not name a known model.
    """
    parts = instance.split("-")
    model = parts[1] if len(parts) >= 2 and parts[0] == "infer" else instance
    if model not in APP_NAMES:
        raise UnknownApplicationError(
            f"inference instance {instance!r} does not name a known model "
            f"(expected 'infer-<model>-<k>' with model in {', '.join(APP_NAMES)})"
        )
    return model
