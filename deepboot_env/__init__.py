"""deepboot-env: DeepBoot/Pollux GPU-cluster scheduling simulator and Gymnasium environment."""

__version__ = "0.1.0"
