"""The job order DeepBoot's and Pollux's schedulers share: least attained service first.

:data:`job_priority_key` is the sort key ``(attained_service, arrival, id)`` of a job: least
attained service, then earliest arrival, then id. It is an :func:`operator.attrgetter`, not a
Python function: ATS sorts every state's jobs by it at every decision, and the getter builds the
same tuples without a Python call per job.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from deepboot_env.policy import JobView

job_priority_key: Callable[[JobView], tuple[float, float, int]] = operator.attrgetter(
    "attained_service", "arrival", "id"
)
"""DeepBoot/Pollux job order: least attained service, then earliest arrival, then id."""
