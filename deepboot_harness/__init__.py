"""The harness: what a person runs on top of the library.

* :mod:`deepboot_harness.cli`: the ``deepboot`` command (simulate, compare, benchmark, train, generate, calibrate);
* :mod:`deepboot_harness.compare`: policies x workloads in parallel, ``results.csv``/``.md``
  (the grid of runs in :mod:`~deepboot_harness.compare_grid`, its runs (tasks, outcomes, the pool) in
  :mod:`~deepboot_harness.compare_runs`, the tables in :mod:`~deepboot_harness.compare_tables`);
* :mod:`deepboot_harness.benchmark`: policies on the test seeds of workload families, the leaderboard
  (:mod:`~deepboot_harness.leaderboard`);
* :mod:`deepboot_harness.plots`: JCT CDFs, average-JCT bars, GPU-state timelines, learning curves;
* :mod:`deepboot_harness.curves`: learning curves of training runs (``python -m deepboot_harness.curves``).

Layers, top to bottom: this harness; then :mod:`agents`, :mod:`baselines` and :mod:`traces`; then
:mod:`deepboot_env` (policy contract, env, evaluation); then :mod:`deepboot_env.sim`. A module imports
only from its own layer or below (``tests/test_layers.py``).
"""
