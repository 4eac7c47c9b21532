"""Builders shared by test modules (``from builders import ...``: pytest puts ``tests/`` on the path)."""

from __future__ import annotations

from deepboot_env.sim.workload import InferenceRequestSpec


def lending_requests(n: int = 12) -> tuple[InferenceRequestSpec, ...]:
    """``n`` 200-s inference requests every 40 s from t = 300 s, cycling over four apps'
    instances: enough load on a 1x4 inference cluster to force reclaims of lent GPUs."""
    apps = ["ncf", "bert", "cifar10", "yolov3"]
    return tuple(
        InferenceRequestSpec(
            name=f"r{i}", arrival=300.0 + 40.0 * i, instance=f"infer-{apps[i % 4]}-1", app=apps[i % 4], duration=200.0
        )
        for i in range(n)
    )
