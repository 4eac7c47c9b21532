"""The shipped schedulers, each a :class:`deepboot_env.policy.BasePolicy` (the whole policy
contract, with its defaults; docs/policies.md §1).

Importing this package registers their names and the prefixes ``jitter:<sigma>``,
``wjitter:<sigma>,<width_sigma>``, ``ia:<name>`` and ``hindsight:<generations>[,<pairs>]``;
:func:`deepboot_env.policy.make_policy` imports it on its first call, through the
``deepboot_env.plugins`` entry point in ``pyproject.toml``, and each policy's module is imported
only when that policy is built. Most are heuristics. Three are clairvoyant upper references, not
deployable schedulers: ``oracle-lookahead``, ``hesrpt-oracle`` and ``hindsight`` read the true
future. ``mpc``, the non-clairvoyant counterpart of ``oracle-lookahead``, is a baseline that reads
no future but looks into the
simulator it runs in (its ``bind_simulator`` hook) to fork it and play a forecast
(docs/policies.md §15-§17).
"""

from baselines.ats_chain import FCFS, PLACE, RR, SRPT, WARM
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
# The ATS variants form a chain, each the one before it plus one rule; the jitter controls and the
# keep-warm variants take a link's rules (baselines.ats_chain)
register_policy("ats-srpt", "baselines.ats:AtsPolicy", **SRPT, label="ats-srpt")
register_policy("ats-srpt-fcfs", "baselines.ats:AtsPolicy", **SRPT, **FCFS, label="ats-srpt-fcfs")
register_policy("ats-srpt-fcfs-place", "baselines.ats:AtsPolicy", **SRPT, **PLACE, label="ats-srpt-fcfs-place")
register_policy("ats-srpt-fcfs-place-rr", "baselines.ats:AtsPolicy", **SRPT, **RR, label="ats-srpt-fcfs-place-rr")
register_policy("ats-srpt-warm", "baselines.ats:AtsPolicy", **SRPT, **WARM, label="ats-srpt-warm")
# v4's prior with warm pods kept (the prior of deepboot-score-v5)
register_policy(
    "ats-srpt-fcfs-place-rr-warm",
    "baselines.ats:AtsPolicy",
    **SRPT,
    **RR,
    **WARM,
    label="ats-srpt-fcfs-place-rr-warm",
)
# the control a learned priority must beat: ats-srpt with persistent random per-job jitter
register_policy("ats-srpt-jitter", "baselines.jitter:JitteredAtsPolicy", label="ats-srpt-jitter")
register_policy("ats-srpt-fcfs-jitter", "baselines.jitter:JitteredAtsPolicy", **FCFS, label="ats-srpt-fcfs-jitter")
register_policy(
    "ats-srpt-fcfs-place-jitter", "baselines.jitter:JitteredAtsPolicy", **PLACE, label="ats-srpt-fcfs-place-jitter"
)
register_policy(
    "ats-srpt-fcfs-place-rr-jitter", "baselines.jitter:JitteredAtsPolicy", **RR, label="ats-srpt-fcfs-place-rr-jitter"
)
register_policy(
    "ats-srpt-fcfs-place-rr-warm-jitter",
    "baselines.jitter:JitteredAtsPolicy",
    **RR,
    **WARM,
    label="ats-srpt-fcfs-place-rr-warm-jitter",
)
# the score models' controls of their own size: random per-job weights and width tables of the
# size of the model's scores (v5: sigma 0.05 each; v6: 0.13 per job, 0.14 per width class; §7)
_OWN_SIZE_CONTROLS = {
    "ats-srpt-fcfs-place-rr-warm-wjitter": {"width_sigma": 0.05},
    "ats-srpt-fcfs-place-rr-warm-wjitter-v6": {"sigma": 0.13, "width_sigma": 0.14},
}
for _name, _sizes in _OWN_SIZE_CONTROLS.items():
    register_policy(_name, "baselines.jitter:JitteredAtsPolicy", **RR, **WARM, **_sizes, label=_name)
register_prefix("jitter", "baselines.jitter:jittered", arg="sigma")
register_prefix("wjitter", "baselines.jitter:width_jittered", arg="sigma>,<width_sigma")
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
# clairvoyant: the score action's best held per-job scores, searched on the scenario being played
register_policy("hindsight", "baselines.hindsight:HindsightPolicy")
register_prefix("hindsight", "baselines.hindsight:sized", arg="generations[,pairs]")
