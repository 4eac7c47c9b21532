"""The run lifecycle shared by the trainers: the run folder, its settings, validation and stops.

* :mod:`~agents.runs.run_config`: a training run's settings (presets < conf file < flags);
  :mod:`~agents.runs.run_folder`: the run folder and its ``config.yml``.
* :mod:`~agents.runs.callbacks`: training metrics, validation episodes (``evaluations.csv``,
  ``best_model.zip``), checkpoints, progress and stops;
  :mod:`~agents.runs.selection`: the best-model rule.
* :mod:`~agents.runs.interrupt`: a stop at the next safe point, with the resume command.

Above the models and saved models; below the trainers, which run on it.
"""
