"""Saved models: reading a checkpoint safely, loading it as a policy, exporting and shipping it.

* :mod:`~agents.saved.checkpoint`: a model zip read once and bounded
  (:class:`~agents.saved.checkpoint.SavedModel`), nothing unpickled unless trusted; atomic saves.
* :mod:`~agents.saved.policy_adapter`: a saved model as a :class:`~deepboot_env.policy.Policy`
  (``ppo:<path>``) and :func:`~agents.saved.policy_adapter.load_agent`.
* :mod:`~agents.saved.shipped`: the models in the wheel by short name.
* :mod:`~agents.saved.export`: a model re-saved under another prior or as a table;
  :mod:`~agents.saved.score_sizes`: the sizes of a score model's table.

Above :mod:`agents.models`; below the runs and the trainers.
"""
