"""Workload traces: loaders (Pollux, DeepBoot, Philly formats), generators and calibration."""
