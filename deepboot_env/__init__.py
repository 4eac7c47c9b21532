"""deepboot-env: DeepBoot/Pollux GPU-cluster scheduling simulator and Gymnasium environment.

Importing the package registers the Gymnasium ids ``DeepBoot-v0`` (jobs progress at the fitted
goodput model; the shipped checkpoint's) and ``DeepBoot-v1`` (at the step times measured for their
placement shape, as in the original simulators; ``dynamics="v1"``, docs/environment.md) when
gymnasium is installed; the simulation core (:mod:`deepboot_env.sim`) never imports gymnasium.
"""

__version__ = "0.1.0"


def _register() -> None:
    try:
        import gymnasium
    except ImportError:  # the core works without gymnasium
        return
    for version in ("v0", "v1"):
        if f"DeepBoot-{version}" not in gymnasium.registry:
            gymnasium.register(
                id=f"DeepBoot-{version}", entry_point="deepboot_env.env:DeepBootEnv", kwargs={"dynamics": version}
            )


_register()
