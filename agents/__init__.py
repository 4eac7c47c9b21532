"""Learned agents for DeepBoot-v1 (and v0): PPO / MaskablePPO construction, callbacks, policy adapter.

* :mod:`agents.trainers.ppo`: :func:`~agents.trainers.ppo.make_vec_env_for`,
  :func:`~agents.trainers.ppo.build_model`, device resolution.
* :mod:`agents.hyperparameters`: defaults, ``k:v`` parsing and checks of the hyperparameters;
  :mod:`agents.errors`: :class:`~agents.errors.ConfigError`, the error of every bad setting.
* :mod:`agents.runs.callbacks`: :class:`~agents.runs.callbacks.SchedMetricsCallback` (``sched/*`` and
  ``reward/*`` TensorBoard scalars) and :class:`~agents.runs.callbacks.WorkloadEvalCallback`
  (validation episodes, ``evaluations.csv``, ``best_model.zip``).
* :mod:`agents.saved.policy_adapter`: a saved model as a :class:`~deepboot_env.policy.Policy`
  (``make_policy("ppo:<path>")``); :func:`load_agent`: a saved model with a factory of its env.
* :mod:`agents.runs.run_config`: a training run's settings (:class:`~agents.runs.run_config.TrainSettings`;
  presets of ``agents/conf/deepboot.yml`` < flags).
* :mod:`agents.trainers.training_run`: one training run (:func:`~agents.trainers.training_run.train`) as a
  sequence of steps; :mod:`agents.runs.run_folder`: the run folder and its ``config.yml``.
* :mod:`agents.models.priority`: a learned per-job priority inside ATS's knapsack
  (``make_policy("priority:<path>")``), trained by evolution strategies (:mod:`agents.trainers.evolution`,
  ``train_policy.py --algo es``).
* :mod:`agents.models.app_table`: a held application table (``make_policy("table:<path>")``), trained
  from zeros by evolution strategies (``--preset table-es``).
* :mod:`agents.saved.shipped`: the shipped models by short name (``ppo:deepboot-v0``,
  ``priority:deepboot-priority-v1``, ``table:deepboot-table-v1``), from any folder.

Training from the command line: ``deepboot train --help`` (``python train_policy.py --help`` in a
clone). Importing this package is cheap (it registers the ``ppo:<path>``, ``priority:<path>`` and
``table:<path>`` policy prefixes); the submodules import stable-baselines3 / torch when used. Within the package
the imports form no cycle, and an import inside a function says why (``# lazy: ...``;
``tests/test_layers.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deepboot_env.policy import register_prefix

register_prefix("ppo", "agents.saved.policy_adapter:load_agent_policy", arg="path")
register_prefix("priority", "agents.saved.shipped:load_priority_policy", arg="path")
register_prefix("table", "agents.saved.shipped:load_table_policy", arg="path")


def load_agent(
    path: str | Path, *, device: str = "cpu", trust: bool = False, num_threads: int | None = None
) -> tuple[Any, Any]:
    """A saved PPO / MaskablePPO model and a factory of the env it needs::

        model, make_env = agents.load_agent("deepboot-v0")  # a shipped name, or a path
        env = make_env(workload="val")

    Nothing in the file is unpickled unless ``trust=True``. Torch is set to one thread unless the
    user chose a count (``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``, or ``num_threads``): these
    small networks run several times faster on one (:mod:`agents.threads`). See
    :func:`agents.saved.policy_adapter.load_agent` (stable-baselines3 is imported when called).
    """
    from agents.saved.policy_adapter import load_agent as load  # lazy: importing agents stays cheap

    return load(path, device=device, trust=trust, num_threads=num_threads)
