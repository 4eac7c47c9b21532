"""Workload traces: loaders (Pollux, DeepBoot, Philly formats), generators and calibration.

Importing this package registers :func:`traces.loaders.load_workload_source` as the env's loader of
named workloads and :func:`traces.families.family_sampler` as the resolver of workload families
(the ``deepboot_env.plugins`` entry point makes deepboot_env import it when a name must be resolved).
"""

from deepboot_env.workload_sources import register_family_resolver, register_workload_loader

register_workload_loader("traces.loaders:load_workload_source")
register_family_resolver("traces.families:family_sampler")
