"""Gym-free simulation core: clusters, jobs, goodput, inference pods, restarts, events, metrics.

Nothing in this package imports gymnasium or stable-baselines3.
"""
