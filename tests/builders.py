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


FIT_RTOL = 1e-2
"""Tolerance on predicted step times when a refit is compared with the shipped profiles: the
seven throughput parameters are not all identifiable (scipy releases reach slightly different
optima of the same fit, e.g. 1.17 vs earlier), the times they predict agree within 0.4 %."""


def assert_same_calibration(computed: dict, shipped: dict, apps_dir) -> None:
    """``computed`` profiles (a refit of the traces in ``apps_dir``) equal ``shipped``: every
    derived constant exactly, the measured curves to float precision, the throughput model by the
    step times it predicts at every fitted observation (within :data:`FIT_RTOL`)."""
    import numpy as np

    from traces import calibrate as cal

    assert sorted(computed) == sorted(shipped)
    for name, prof in shipped.items():
        new = computed[name]
        for field in ("init_batch_size", "max_batch_size", "min_local_bsz", "max_local_bsz", "max_epochs"):
            assert getattr(new, field) == getattr(prof, field), (name, field)
        np.testing.assert_allclose(new.epoch_progress, prof.epoch_progress, rtol=1e-5, err_msg=name)
        table = cal.fit_observations(cal.read_app_traces(apps_dir / name))
        shape = (table.nodes, table.replicas, table.local_bsz)
        times = [cal.sync_step_time(p.throughput_params, *shape) for p in (new, prof)]
        np.testing.assert_allclose(times[0], times[1], rtol=FIT_RTOL, err_msg=name)
