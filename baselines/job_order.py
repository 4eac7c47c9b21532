"""The job order DeepBoot's and Pollux's schedulers share: least attained service first."""

from __future__ import annotations

from deepboot_env.policy import JobView


def job_priority_key(job: JobView) -> tuple[float, float, int]:
    """DeepBoot/Pollux job order: least attained service, then earliest arrival, then id."""
    return (job.attained_service, job.arrival, job.id)
