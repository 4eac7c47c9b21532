"""``python -m deepboot_harness``: the ``deepboot`` command, started as the console script is
(:func:`deepboot_harness.launch.deepboot`: a stop is clean from the first line)."""

from deepboot_harness.launch import deepboot

raise SystemExit(deepboot())
