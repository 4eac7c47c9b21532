"""The trainers: PPO and its group variant, evolution strategies, behaviour cloning, and the run of each.

* :mod:`~agents.trainers.training_run`: one training run (:func:`~agents.trainers.training_run.train`)
  as a sequence of steps, for every algorithm;
  :mod:`~agents.trainers.ppo`: vectorised envs and PPO / MaskablePPO models with this env's defaults;
  :mod:`~agents.trainers.ray_vec_env`: envs as Ray actors.
* :mod:`~agents.trainers.evolution`: the learned priority by evolution strategies (``--algo es``).
* :mod:`~agents.trainers.imitation`: behaviour cloning of a heuristic (the warm start).
* :mod:`~agents.trainers.teacher`: the hindsight teacher's labels (``deepboot teach``);
  :mod:`~agents.trainers.learner`: the state-reading learner's regression of them (the hindsight start).
* :mod:`~agents.trainers.sweep`: hyperparameter sweeps on Ray Tune.

The top room of :mod:`agents`: it runs on :mod:`agents.runs`, :mod:`agents.saved` and
:mod:`agents.models`, and nothing there imports it.
"""
