"""Gym-free simulation core: clusters, jobs, goodput, inference pods, restarts, events, metrics.

The engine is :class:`~deepboot_env.sim.simulator.Simulator` (clock, events, boundaries),
configured by :class:`~deepboot_env.sim.config.SimConfig`; around it: :mod:`~deepboot_env.sim.training`
(the training jobs: admission, placements, restarts, completions, interference, in
:class:`~deepboot_env.sim.training.TrainingJobs`), :mod:`~deepboot_env.sim.inference` (pods and the
:class:`~deepboot_env.sim.inference.InferencePool`), :mod:`~deepboot_env.sim.completions` (lazy
TRAIN_DONE events, owned by the training side), :mod:`~deepboot_env.sim.accounting`
(GPU-seconds, the timeline), :mod:`~deepboot_env.sim.state_builder` (the state policies see, defined in
:mod:`~deepboot_env.sim.state`) and :mod:`~deepboot_env.sim.metrics` (episode metrics);
:mod:`~deepboot_env.sim.fork` copies a mid-episode simulator (snapshots, restores, forks);
:mod:`~deepboot_env.sim.hooks` declares what the simulator calls on a policy, with defaults. Jobs
progress at the rates of :mod:`~deepboot_env.sim.goodput` (the fitted model, cached per application
in :mod:`~deepboot_env.sim.rates`) or, with
``truth="measured"``, of :mod:`~deepboot_env.sim.measured` (measured step times).

Nothing in this package imports gymnasium or stable-baselines3.
"""
