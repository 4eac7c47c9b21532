"""The network models: the policies, their action distributions and the algorithm classes that hold them.

* :mod:`~agents.models.set_policy`: the set policy (per-job encoder, pooled cluster context,
  score and width heads); :mod:`~agents.models.described_policy`: the self-describing
  multi-input MLP; both keep the env arguments they were built for.
* :mod:`~agents.models.distributions`: the one-tensor action distribution;
  :mod:`~agents.models.width_table`: the application table of widths;
  :mod:`~agents.models.env_shape`: the env arguments a model's spaces imply.
* :mod:`~agents.models.priority`: a learned per-job priority inside ATS's knapsack.
* :mod:`~agents.models.group_ppo`: PPO with group-relative advantages;
  :mod:`~agents.models.algorithms`: algorithm and policy classes by name, devices, network sizes.

The lowest room of :mod:`agents`: it imports none of the others (saved models, runs, trainers).
"""
