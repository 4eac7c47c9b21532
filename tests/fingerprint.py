"""Behavioural fingerprint of the simulator, the env and every baseline: digests of whole episodes.

A refactor that claims to change nothing must leave every digest unchanged. Each case runs a small
generated workload to its end (or a fixed number of env steps) and hashes everything observable:
per-step observations, masks, rewards and infos for the env; the full metrics (per-job JCTs and the
GPU-state timeline included) for the evaluation loop.

    python tests/fingerprint.py            # print the digests and compare with tests/data/fingerprint.json
    python tests/fingerprint.py --write    # record them (only when a change is MEANT to alter behaviour)
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).parent / "data" / "fingerprint.json"

ENV_STEPS = 400


def _workload(seed: int = 11, jobs: int = 14):
    from traces.generate import generate_workload

    return generate_workload(
        f"fingerprint-{seed}", seed, train={"num_jobs": jobs}, inference={"horizon_s": 6 * 3600.0, "mean_gpus": 4.0}
    )


def _canonical(value: object) -> object:
    """JSON-able form in which every float keeps its exact value (repr)."""
    if isinstance(value, float | np.floating):
        return repr(float(value))
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, np.ndarray):
        return [value.dtype.str, list(value.shape), hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()]
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    return value


def _digest(parts: list[object]) -> str:
    return hashlib.sha256(json.dumps(_canonical(parts), sort_keys=True).encode()).hexdigest()[:24]


def _masked_random(mask: np.ndarray, nvec: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniform valid choice per action dimension (argmax of masked uniforms)."""
    out, start = [], 0
    for n in nvec.tolist():
        allowed = mask[start : start + n]
        out.append(int(np.argmax(rng.random(n) * allowed)))
        start += n
    return np.array(out, dtype=np.int64)


def env_case(**kwargs: object) -> Callable[[], str]:
    """Digest of ENV_STEPS masked-random steps (episodes reset with the next seed when they end), on
    DeepBoot-v0's dynamics unless ``kwargs`` say otherwise (recorded so; the env's default is v1)."""
    kwargs = {"dynamics": "v0", **kwargs}

    def run() -> str:
        from deepboot_env.env import DeepBootEnv

        env = DeepBootEnv(workload=_workload(), max_jobs=8, **kwargs)
        rng = np.random.default_rng(5)
        seed = 3
        obs, info = env.reset(seed=seed)
        parts: list[object] = [obs, info]
        nvec = env.action_space.nvec
        for _ in range(ENV_STEPS):
            mask = env.action_masks()
            action = _masked_random(mask, nvec, rng)
            obs, reward, terminated, truncated, info = env.step(action)
            info.get("episode_metrics", {}).pop("wall_seconds", None)
            parts.append([mask, action, obs, reward, terminated, truncated, info])
            if terminated or truncated:
                seed += 1
                obs, info = env.reset(seed=seed)
                parts.append([obs, info])
        return _digest(parts)

    return run


def episode_case(policy: str, interference: float | None = None, **config: object) -> Callable[[], str]:
    """Digest of the full metrics of one evaluation-loop episode."""

    def run() -> str:
        from deepboot_env.evaluation import run_episode
        from deepboot_env.sim.cluster import ClusterConfig
        from deepboot_env.sim.simulator import SimConfig

        shared = config.pop("shared_pool", None)
        cluster = ClusterConfig.parse_shared(shared) if shared else ClusterConfig.parse("4x4+4x4")
        sim_config = SimConfig(cluster=cluster, interference=interference, **config)  # type: ignore[arg-type]
        metrics = run_episode(policy, _workload(seed=17, jobs=16), sim_config, seed=1)
        return _digest([metrics.deterministic_dict(), metrics.timeline])

    return run


CASES: dict[str, Callable[[], str]] = {
    "env/target/afe": env_case(),
    "env/target/full": env_case(restart="full"),
    "env/target/stopfree": env_case(restart="stopfree"),
    "env/target/pollux": env_case(restart="pollux"),
    "env/target/shared-full": env_case(shared_pool="8x4", restart="full"),
    "env/target/lend-3": env_case(lend_levels=3, protect_scale=0.5),
    "env/residual/afe": env_case(action_mode="residual"),
    "env/residual/shared-stopfree": env_case(action_mode="residual", shared_pool="8x4", restart="stopfree"),
    **{
        f"episode/{p}": episode_case(p)
        for p in (
            "fifo",
            "tiresias",
            "optimus",
            "afs",
            "afs-lend",
            "ats",
            "ats-nolend",
            "ones-lend",
            "pollux-lend",
            "interference-aware",
        )
    },
    "episode/ats/full": episode_case("ats", restart="full"),
    "episode/ats/stopfree": episode_case("ats", restart="stopfree"),
    "episode/ats/shared": episode_case("ats", shared_pool="8x4", restart="full"),
    "episode/pollux/shared": episode_case("pollux", shared_pool="8x4", restart="pollux"),
    "episode/ones/interference": episode_case("ones", interference=0.25),
    "episode/ia:ats/interference": episode_case("ia:ats", interference=0.25),
    "episode/pollux-noavoid/interference": episode_case("pollux-noavoid", interference=0.25, restart="pollux"),
    "episode/ppo-shipped": episode_case("ppo:agents/pretrained/deepboot-v0.zip"),
}


def compute(names: list[str] | None = None) -> dict[str, str]:
    """Digests of the named cases (all by default)."""
    return {name: CASES[name]() for name in (names or list(CASES))}


def main(argv: list[str]) -> int:
    """Print the digests, compare with the golden file, or record it with ``--write``."""
    digests = compute()
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    for name, digest in digests.items():
        mark = "ok" if golden.get(name) == digest else "CHANGED"
        print(f"{mark:8} {name:40} {digest}")
    if "--write" in argv:
        GOLDEN.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
        return 0
    return 0 if digests == golden else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
