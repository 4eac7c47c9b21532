"""The shipped schedulers, each a :class:`deepboot_env.policy.BasePolicy` (the whole policy
contract, with its defaults; docs/policies.md §1).

Importing this package registers their names and the prefixes ``jitter:<sigma>`` and
``ia:<name>``; :func:`deepboot_env.policy.make_policy` imports it on its first call, through the
``deepboot_env.plugins`` entry point in ``pyproject.toml``, and each policy's module is imported
only when that policy is built. Most are heuristics. Two are clairvoyant upper references, not
deployable schedulers: ``oracle-lookahead`` and ``hesrpt-oracle`` read the true future. ``mpc``,
the non-clairvoyant counterpart of ``oracle-lookahead``, is a baseline that reads no future but
looks into the simulator it runs in (its ``bind_simulator`` hook) to fork it and play a forecast
(docs/policies.md §15-§17).
"""

from deepboot_env.policy import register_policy, register_prefix

register_policy("fifo", "baselines.fifo:FifoPolicy")
register_policy("tiresias", "baselines.tiresias:TiresiasPolicy")
register_policy("optimus", "baselines.optimus:OptimusPolicy")
register_policy("afs", "baselines.afs:AfsPolicy", lend=False)
register_policy("afs-lend", "baselines.afs:AfsPolicy", lend=True)
register_policy("aryl-deepboot", "baselines.aryl:ArylDeepBootPolicy")
register_policy("lyra", "baselines.lyra:LyraPolicy")
register_policy("ats", "baselines.ats:AtsPolicy", lend=True)
register_policy("ats-nolend", "baselines.ats:AtsPolicy", lend=False)
register_policy(
    "ats-deepboot",
    "baselines.ats:AtsPolicy",
    lend=True,
    linear_untrained=True,
    relist_restarts=True,
    label="ats-deepboot",
)
register_policy("ats-srpt", "baselines.ats:AtsPolicy", lend=True, srpt_power=0.25, label="ats-srpt")
register_policy(
    "ats-srpt-fcfs", "baselines.ats:AtsPolicy", lend=True, srpt_power=0.25, arrival_tilt=0.15, label="ats-srpt-fcfs"
)
# ats-srpt-fcfs whose knapsack values a job split across nodes at its multi-node speedup (§8.8)
register_policy(
    "ats-srpt-fcfs-place",
    "baselines.ats:AtsPolicy",
    lend=True,
    srpt_power=0.25,
    arrival_tilt=0.15,
    placement_aware=True,
    label="ats-srpt-fcfs-place",
)
# ats-srpt-fcfs-place whose reclaims count the restart they cause (§8.9)
register_policy(
    "ats-srpt-fcfs-place-rr",
    "baselines.ats:AtsPolicy",
    lend=True,
    srpt_power=0.25,
    arrival_tilt=0.15,
    placement_aware=True,
    reclaim_horizon=300.0,
    label="ats-srpt-fcfs-place-rr",
)
# ats-srpt that keeps warm pods while inference is busy: no SLEEP pod's GPU is lent (§8.10)
register_policy(
    "ats-srpt-warm", "baselines.ats:AtsPolicy", lend=True, srpt_power=0.25, keep_warm_at=0.9, label="ats-srpt-warm"
)
# v4's prior with warm pods kept while inference is busy (§8.10)
register_policy(
    "ats-srpt-fcfs-place-rr-warm",
    "baselines.ats:AtsPolicy",
    lend=True,
    srpt_power=0.25,
    arrival_tilt=0.15,
    placement_aware=True,
    reclaim_horizon=300.0,
    keep_warm_at=0.9,
    label="ats-srpt-fcfs-place-rr-warm",
)
# the control a learned priority must beat: ats-srpt with persistent random per-job jitter
register_policy("ats-srpt-jitter", "baselines.jitter:JitteredAtsPolicy", label="ats-srpt-jitter")
register_policy(
    "ats-srpt-fcfs-jitter", "baselines.jitter:JitteredAtsPolicy", arrival_tilt=0.15, label="ats-srpt-fcfs-jitter"
)
register_policy(
    "ats-srpt-fcfs-place-jitter",
    "baselines.jitter:JitteredAtsPolicy",
    arrival_tilt=0.15,
    placement_aware=True,
    label="ats-srpt-fcfs-place-jitter",
)
register_policy(
    "ats-srpt-fcfs-place-rr-jitter",
    "baselines.jitter:JitteredAtsPolicy",
    arrival_tilt=0.15,
    placement_aware=True,
    reclaim_horizon=300.0,
    label="ats-srpt-fcfs-place-rr-jitter",
)
register_prefix("jitter", "baselines.jitter:jittered", arg="sigma")
register_policy("pollux", "baselines.pollux:PolluxPolicy", lend=False)
register_policy("pollux-lend", "baselines.pollux:PolluxPolicy", lend=True)
register_policy("pollux-noavoid", "baselines.pollux:PolluxPolicy", lend=False, avoid_interference=False)
register_policy("ones", "baselines.ones:OnesPolicy", lend=False)
register_policy("ones-lend", "baselines.ones:OnesPolicy", lend=True)
register_policy("interference-aware", "baselines.interference_aware:InterferenceAwarePolicy", base="ats")
register_prefix("ia", "baselines.interference_aware:wrap", arg="name")
# a clairvoyant upper reference (it simulates the true future), not a deployable policy
register_policy("oracle-lookahead", "baselines.oracle_lookahead:OracleLookaheadPolicy")
# ATS's knapsack weighted by the true remaining time: clairvoyant too (docs/policies.md §17)
register_policy("hesrpt-oracle", "baselines.hesrpt_oracle:HesrptOraclePolicy")
# its deployable counterpart: the same lookahead on a forecast of the future (docs/policies.md §16)
register_policy("mpc", "baselines.mpc:MpcPolicy")
