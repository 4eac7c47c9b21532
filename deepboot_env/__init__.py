"""deepboot-env: DeepBoot/Pollux GPU-cluster scheduling simulator and Gymnasium environment.

Importing the package registers the Gymnasium id ``DeepBoot-v0`` when gymnasium is installed;
the simulation core (:mod:`deepboot_env.sim`) never imports gymnasium.
"""

__version__ = "0.1.0"


def _register() -> None:
    try:
        import gymnasium
    except ImportError:  # the core works without gymnasium
        return
    if "DeepBoot-v0" not in gymnasium.registry:
        gymnasium.register(id="DeepBoot-v0", entry_point="deepboot_env.env:DeepBootEnv")


_register()
