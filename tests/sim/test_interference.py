"""Co-location interference: simulator model, matrix files, online predictor, interference-aware
placement and Pollux's avoidance switch."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from builders import cluster_state, job_view

from baselines.interference_aware import InterferenceAwarePlacer, InterferenceAwarePolicy
from baselines.interference_predictor import InterferencePredictor
from baselines.pollux_ga import PolluxProblem
from deepboot_env.evaluation import run_episode
from deepboot_env.placement import place_counts
from deepboot_env.policy import Allocation, BasePolicy, ClusterState, make_policy
from deepboot_env.sim.apps import APP_NAMES, get_app
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.interference import InterferenceError, InterferenceModel
from deepboot_env.sim.rates import RateTable
from deepboot_env.sim.simulator import SimConfig, Simulator
from deepboot_env.sim.state import JobView
from deepboot_env.sim.workload import TrainingJobSpec, Workload
from deepboot_harness.cli import main as cli_main

BATCH = 24
"""bert with a fixed total batch of 24: 2 epochs (hand-checkable), up to 6 replicas."""


class FixedPlacement(BasePolicy):
    """Gives every active job the GPUs per node of its plan (fixed batch)."""

    name = "fixed"
    adaptive_batch = False

    def __init__(self, plan: dict[str, list[int]]) -> None:
        self.plan = plan

    def decide(self, state: ClusterState) -> Allocation:
        return Allocation({j.id: np.array(self.plan[j.name]) for j in state.jobs})


def _two_by_two(interference=None) -> SimConfig:
    cluster = ClusterConfig(train_nodes=2, infer_nodes=0, gpus_per_node=2)
    return SimConfig(cluster=cluster, restart="pollux", interference=interference)


def _bert_seconds(speed: float) -> int:
    """Seconds of training for the bert job on 2 GPUs over 2 nodes at ``speed`` x its rate."""
    app = get_app("bert")
    table = RateTable(app, min(BATCH // app.min_local_bsz, 4), fixed_batch=BATCH)
    total, prev = 0, 0.0
    for epoch, target in enumerate(app.epoch_progress):
        total += round((target - prev) / (table.rate(epoch, True, 2) * speed))
        prev = float(target)
    return total


@pytest.mark.parametrize("slowdown", [0.25, 0.5])
def test_flat_slowdown_stretches_colocated_distributed_jobs_exactly(slowdown: float) -> None:
    jobs = (TrainingJobSpec("a", 0.0, "bert", 2, BATCH), TrainingJobSpec("b", 0.0, "bert", 2, BATCH))
    wl = Workload("two", jobs)
    policy = FixedPlacement({"a": [1, 1], "b": [1, 1]})  # both span both nodes: interfering
    alone = run_episode(policy, Workload("one", jobs[:1]), _two_by_two(slowdown))
    both = run_episode(policy, wl, _two_by_two(slowdown))
    off = run_episode(policy, wl, _two_by_two())
    work = _bert_seconds(1.0)
    assert alone.jcts == {"a": 30.0 + work}  # alone: no interference
    assert off.jcts == {"a": 30.0 + work, "b": 30.0 + work}
    slow = _bert_seconds(1.0 - slowdown)
    assert both.jcts == {"a": 30.0 + slow, "b": 30.0 + slow}
    assert slow / work == pytest.approx(1.0 / (1.0 - slowdown), abs=len(get_app("bert").epoch_progress) / work)


def test_single_node_jobs_are_not_slowed_by_the_flat_rule() -> None:
    jobs = (TrainingJobSpec("a", 0.0, "bert", 2, BATCH), TrainingJobSpec("b", 0.0, "bert", 1, BATCH))
    policy = FixedPlacement({"a": [1, 1], "b": [1, 0]})  # b is on one node only
    m = run_episode(policy, Workload("two", jobs), _two_by_two(0.5))
    assert m.jcts["a"] == 30.0 + _bert_seconds(1.0)


def test_slowdown_applies_only_over_the_colocated_period() -> None:
    """b arrives at 600 s: a is slowed from then until it completes, b until a completes; each
    loses exactly F x the co-located time (up to whole-second rounding per epoch)."""
    f = 0.25
    jobs = (TrainingJobSpec("a", 0.0, "bert", 2, BATCH), TrainingJobSpec("b", 600.0, "bert", 2, BATCH))
    policy = FixedPlacement({"a": [1, 1], "b": [1, 1]})
    m = run_episode(policy, Workload("two", jobs), _two_by_two(f))
    work = _bert_seconds(1.0)
    end_a = m.jcts["a"]
    assert end_a == pytest.approx(600.0 + (30.0 + work - 600.0) / (1.0 - f), abs=2.0)
    end_b = 600.0 + m.jcts["b"]
    assert end_b == pytest.approx(end_a + work - (end_a - 630.0) * (1.0 - f), abs=2.0)


def test_rates_follow_placement_changes_of_neighbours() -> None:
    """A neighbour leaving (b moves to a single node) ends a's slowdown at once."""

    class Moving(FixedPlacement):
        def decide(self, state: ClusterState) -> Allocation:
            b_plan = [1, 1] if state.time < 600 else [1, 0]
            plan = {"a": [1, 1], "b": b_plan}
            return Allocation({j.id: np.array(plan[j.name]) for j in state.jobs})

    jobs = (TrainingJobSpec("a", 0.0, "bert", 2, BATCH), TrainingJobSpec("b", 0.0, "bert", 2, BATCH))
    sim = Simulator(Workload("two", jobs), _two_by_two(0.5), Moving({}))
    ratios = []
    while not sim.done:
        state = sim.observe()
        ratios.append((state.time, {j.name: j.throughput_ratio for j in state.jobs}))
        sim.apply(sim.policy.decide(state), state)
        sim.advance()
    assert ratios[1] == (60.0, {"a": 0.5, "b": 0.5})
    after = [r for t, r in ratios if t > 600]
    assert after and all(r.get("a", 1.0) == 1.0 for r in after)


def _tiny(n: int = 6) -> Workload:
    apps = ["cifar10", "cifar10", "deepspeech2", "cifar10", "bert", "cifar10"]
    return Workload(
        "tiny",
        tuple(TrainingJobSpec(f"j{i}", 30.0 * i, apps[i % len(apps)], 4, 256) for i in range(n)),
    )


def test_off_by_default_is_byte_identical() -> None:
    cfg = SimConfig(cluster=ClusterConfig.parse("4x4"), restart="pollux")
    assert cfg.interference is None and SimConfig(interference=0.0).interference is None
    zeros = InterferenceModel.from_rows([{"app": "*", "neighbor": "*", "network": 0, "host": 0}])
    runs = [
        run_episode("ats", _tiny(), SimConfig(cluster=cfg.cluster, restart="pollux", interference=value))
        for value in (None, 0.0, zeros)
    ]
    dumps = {json.dumps(m.deterministic_dict(), sort_keys=True) for m in runs}
    assert len(dumps) == 1
    on = run_episode("ats", _tiny(), SimConfig(cluster=cfg.cluster, restart="pollux", interference=0.5))
    assert on.train_jct_mean > runs[0].train_jct_mean


def test_golden_tiny_run_interference_aware_beats_oblivious_placement() -> None:
    cfg = SimConfig(cluster=ClusterConfig.parse("4x4"), restart="pollux", interference=0.5)
    ats = run_episode("ats", _tiny(), cfg)
    aware = run_episode("interference-aware", _tiny(), cfg)
    assert ats.train_jobs_done == aware.train_jobs_done == 6
    assert aware.train_jct_mean < ats.train_jct_mean
    assert (round(ats.train_jct_mean, 3), round(aware.train_jct_mean, 3)) == GOLDEN_TINY


GOLDEN_TINY = (2624.5, 2152.333)


# ------------------------------------------------------------------ the model itself


def test_flat_rule_matches_pollux() -> None:
    model = InterferenceModel.flat(0.25)
    allocs = np.array(
        [
            [2, 2, 0, 0, 0],  # A distributed, shares node 1 with B
            [0, 1, 1, 0, 0],  # B distributed
            [0, 0, 0, 2, 2],  # C distributed, alone
            [1, 0, 0, 0, 0],  # D single node, on A's node
        ]
    )
    f = model.speed_factors(allocs, ["bert", "cifar10", "imagenet", "ncf"])
    assert f.tolist() == [0.75, 0.75, 1.0, 1.0]


def test_matrix_rule_products_per_node_and_worst_node() -> None:
    model = InterferenceModel.default_matrix()
    net, host = model.network_array, model.host_array
    i = {a: k for k, a in enumerate(APP_NAMES)}
    b, c, im = i["bert"], i["cifar10"], i["imagenet"]
    allocs = np.array([[1, 1, 0], [0, 1, 1], [2, 0, 0]])  # bert, cifar10 distributed; imagenet single
    f = model.speed_factors(allocs, ["bert", "cifar10", "imagenet"])
    bert_node0 = 1 - host[b, im]
    bert_node1 = 1 - host[b, c] - net[b, c]
    assert f[0] == pytest.approx(min(bert_node0, bert_node1))
    assert f[1] == pytest.approx(1 - host[c, b] - net[c, b])
    assert f[2] == pytest.approx(1 - host[im, b])
    # two aggressors on one node compound
    f3 = model.speed_factors(np.array([[1, 1], [1, 1], [1, 0]]), ["bert", "bert", "imagenet"])
    assert f3[0] == pytest.approx((1 - host[b, b] - net[b, b]) * (1 - host[b, im]))
    assert model.pair_slowdown("bert", "cifar10", True) == pytest.approx(host[b, c] + net[b, c])


def test_matrix_rows_wildcards_and_precedence() -> None:
    rows = [
        {"app": "bert", "neighbor": "cifar10", "network": "0", "host": "0.3"},
        {"app": "*", "neighbor": "*", "network": "0.2"},
        {"app": "bert", "neighbor": "*", "network": 0.1, "host": 0.05},
    ]
    model = InterferenceModel.from_rows(rows)
    b, c, n = APP_NAMES.index("bert"), APP_NAMES.index("cifar10"), APP_NAMES.index("ncf")
    assert model.network_array[n, b] == 0.2 and model.host_array[n, b] == 0.0
    assert model.network_array[b, n] == 0.1 and model.host_array[b, n] == 0.05
    assert model.network_array[b, c] == 0.0 and model.host_array[b, c] == 0.3


BAD_CSV_MATRICES: list[tuple[str, str]] = [
    ("app,neighbor,network,host\nbert,cifar100,0.1,0\n", r"line 2: field 'neighbor': unknown application"),
    ("app,neighbor,network,host\nbert,ncf,abc,0\n", r"line 2: field 'network': expected a number, got 'abc'"),
    ("app,neighbor,network,host\nbert,ncf,0.1,0\nncf,bert,1.5,0\n", r"line 3: field 'network': .*not in \[0, 1\)"),
    ("app,neighbor,network,host\nbert,ncf,0.6,0.5\n", r"line 2: network \+ host"),
    ("app,neighbor,network,host\nbert,ncf,0.1,0\nbert,ncf,0.2,0\n", r"line 3: pair bert,ncf repeats line 2"),
    ("app,network,host\nbert,0.1,0\n", r"header has no 'neighbor' column"),
    ("app,neighbor,speed\nbert,ncf,0.1\n", r"unknown column 'speed'"),
    ("", r"empty file"),
    ("app,neighbor,network,host\n", r"no rows"),
    ("app,neighbor,network,host\nbert,ncf,0.1,0,7\n", r"line 2: more fields"),
    ("app,neighbor,network,host\nbert,,0.1,0\n", r"line 2: field 'neighbor' is missing"),
]
"""Malformed CSV matrix files and the error each gets."""

BAD_JSON_MATRICES: list[tuple[str, str]] = [
    ("{not json", r"invalid JSON"),
    ('{"rows": []}', r"'pairs' list"),
    ('{"pairs": 3}', r"'pairs' must be a list"),
    ('[{"app": "bert", "neighbor": "ncf", "network": true}]', r"pair 1: field 'network': expected a number"),
    ('[{"app": "bert", "neighbor": "ncf", "latency": 1}]', r"pair 1: unknown field 'latency'"),
    ("[3]", r"pair 1: expected an object"),
]
"""Malformed JSON matrix files and the error each gets."""


@pytest.mark.parametrize(
    "filename, text, match",
    [("m.csv", text, match) for text, match in BAD_CSV_MATRICES]
    + [("m.json", text, match) for text, match in BAD_JSON_MATRICES],
)
def test_bad_matrix_file_names_file_row_and_field(tmp_path: Path, filename: str, text: str, match: str) -> None:
    path = tmp_path / filename
    path.write_text(text)
    with pytest.raises(InterferenceError, match=match) as err:
        InterferenceModel.from_file(path)
    assert str(path) in str(err.value)


def test_matrix_file_formats_and_missing_file(tmp_path: Path) -> None:
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("app,neighbor,network,host\n*,*,0.25,\n")
    json_path = tmp_path / "m.json"
    json_path.write_text(json.dumps({"pairs": [{"app": "*", "neighbor": "*", "network": 0.25}]}))
    a, b = InterferenceModel.from_file(csv_path), InterferenceModel.from_file(json_path)
    assert a.network == b.network and a.host == b.host and a.active
    with pytest.raises(InterferenceError, match="no such file"):
        InterferenceModel.from_file(tmp_path / "nope.csv")
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(InterferenceError, match=r"\.csv or \.json"):
        InterferenceModel.from_file(tmp_path / "m.txt")
    assert InterferenceModel.from_file("default") == InterferenceModel.default_matrix()
    with pytest.raises(InterferenceError):
        SimConfig(interference=1.0)
    with pytest.raises(InterferenceError):
        SimConfig(interference="0.5")  # type: ignore[arg-type]


def test_cli_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = tmp_path / "wl.csv"
    wl.write_text("name,time,application,num_replicas,batch_size\na,0,bert,2,24\nb,0,bert,2,24\n")
    out = tmp_path / "m.json"
    base = ["simulate", "--workload", str(wl), "--cluster", "2x2", "--restart", "pollux", "--policy", "fifo"]
    assert cli_main([*base, "--quiet", "--interference", "0.25", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["train_jobs_done"] == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("app,neighbor,network\nbert,bogus,0.1\n")
    assert cli_main([*base, "--quiet", "--interference-matrix", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.csv: line 2: field 'neighbor'" in err and "Traceback" not in err
    assert cli_main([*base, "--quiet", "--interference", "1.2"]) == 2
    assert "--interference" in capsys.readouterr().err
    assert cli_main([*base, "--quiet", "--interference", "0.1", "--interference-matrix", "default"]) == 2
    assert "not both" in capsys.readouterr().err


# ------------------------------------------------------------------ predictor


def _scenarios(model: InterferenceModel, rng: np.random.Generator, n: int, noise: float = 0.0):
    """n (app, alloc, neighbours, observed ratio, true ratio) samples of random co-locations."""
    out = []
    while len(out) < n:
        free = np.full(4, 4)
        jobs = []
        for _ in range(int(rng.integers(2, 7))):
            k = int(rng.integers(1, min(8, int(free.sum())) + 1)) if free.sum() else 0
            alloc = np.zeros(4, dtype=np.int64)
            for node in rng.permutation(4):
                take = min(k, int(free[node]), int(rng.integers(1, 5)))
                alloc[node] += take
                free[node] -= take
                k -= take
            if alloc.any():
                jobs.append((str(rng.choice(APP_NAMES)), alloc))
        if not jobs:
            continue
        truth = model.speed_factors(np.stack([a for _, a in jobs]), [a for a, _ in jobs])
        for i, (app, alloc) in enumerate(jobs):
            seen = min(truth[i] * math.exp(rng.normal(0.0, noise)), 1.0) if noise else truth[i]
            out.append((app, alloc, jobs[:i] + jobs[i + 1 :], seen, truth[i]))
    return out[:n]


@pytest.mark.parametrize("model", [InterferenceModel.flat(0.25), InterferenceModel.default_matrix()])
def test_predictor_error_shrinks_with_samples(model: InterferenceModel) -> None:
    rng = np.random.default_rng(0)
    held_out = _scenarios(model, rng, 300)
    train = _scenarios(model, rng, 1500, noise=0.02)
    errors = []
    for n in (0, 30, 300, 1500):
        pred = InterferencePredictor()
        for app, alloc, others, seen, _ in train[:n]:
            pred.add(pred.features(app, alloc, others), seen)
        assert pred.samples == n
        errors.append(math.sqrt(np.mean([(pred.predict(a, al, o) - t) ** 2 for a, al, o, _, t in held_out])))
    assert errors[0] > errors[1] > errors[2] > errors[3]
    assert errors[3] < (0.01 if model.kind == "flat" else 0.06)


def test_predictor_learns_from_observed_states() -> None:
    jobs = (TrainingJobSpec("a", 0.0, "bert", 2, BATCH), TrainingJobSpec("b", 0.0, "bert", 2, BATCH))
    sim = Simulator(Workload("two", jobs), _two_by_two(0.5), FixedPlacement({"a": [1, 1], "b": [1, 1]}))
    pred = InterferencePredictor(prior_slowdown=0.1)
    state = sim.observe()
    sim.apply(sim.policy.decide(state), state)
    sim.advance()
    state = sim.observe()
    assert [j.throughput_ratio for j in state.jobs] == [0.5, 0.5]
    before = pred.predict("bert", np.array([1, 1]), [("bert", np.array([1, 1]))])
    assert before == pytest.approx(0.9)
    for _ in range(50):
        assert pred.observe(state) == 2
    after = pred.predict("bert", np.array([1, 1]), [("bert", np.array([1, 1]))])
    assert after == pytest.approx(0.5, abs=0.02)
    assert pred.predict("bert", np.array([2, 0]), [("bert", np.array([0, 2]))]) == 1.0  # not sharing


# ------------------------------------------------------------------ placement and policies


def _job(job_id: int, app: str, alloc, max_replicas: int = 16) -> JobView:
    return job_view(job_id, app, alloc, max_replicas, arrival=float(job_id))


def _state(cluster: str, jobs) -> ClusterState:
    return cluster_state(cluster, jobs, time=600.0)


def test_placement_separates_distributed_jobs_when_it_can() -> None:
    state = _state("4x4", [_job(0, "cifar10", [2, 2, 0, 0]), _job(1, "bert", [0, 0, 0, 0])])
    cap = state.training_capacity()
    oblivious = place_counts(state, {0: 4, 1: 6}, cap)
    assert oblivious[1].tolist() == [2, 0, 4, 0]  # best fit shares node 0 with the other distributed job
    aware = InterferenceAwarePlacer(InterferencePredictor()).place(state, {0: 4, 1: 6}, cap)
    assert aware[0].tolist() == [2, 2, 0, 0]
    assert aware[1].tolist() == [0, 0, 4, 2]
    # a single-node job may share: best fit, as ATS
    aware = InterferenceAwarePlacer(InterferencePredictor()).place(state, {0: 4, 1: 2}, cap)
    assert aware[1].tolist() == place_counts(state, {0: 4, 1: 2}, cap)[1].tolist() == [2, 0, 0, 0]


def test_placement_trims_when_sharing_is_predicted_to_cost_more() -> None:
    state = _state("3x4", [_job(0, "cifar10", [2, 2, 0]), _job(1, "cifar10", [0, 0, 0])])
    cap = state.training_capacity()
    pred = InterferencePredictor(prior_slowdown=0.6)  # sharing believed to cost 60 %
    aware = InterferenceAwarePlacer(pred).place(state, {0: 4, 1: 6}, cap)
    assert aware[1].tolist() == [0, 0, 4]  # 4 GPUs alone beat 6 GPUs at 40 % speed
    keep = InterferenceAwarePlacer(pred, trim=False).place(state, {0: 4, 1: 6}, cap)
    assert keep[1].sum() == 6


def test_policies_registered_and_wrapper() -> None:
    aware = make_policy("interference-aware")
    assert isinstance(aware, InterferenceAwarePolicy) and aware.name == "interference-aware"
    wrapped = make_policy("ia:tiresias")
    assert wrapped.name == "ia:tiresias" and wrapped.adaptive_batch is False
    noavoid = make_policy("pollux-noavoid", population=8, generations=2)
    assert noavoid.name == "pollux-noavoid" and not noavoid.avoid_interference
    assert make_policy("pollux", population=8, generations=2).avoid_interference
    cfg = SimConfig(cluster=ClusterConfig.parse("4x4"), restart="pollux", interference=0.5)
    m = run_episode("ia:tiresias", _tiny(4), cfg)
    assert m.train_jobs_done == 4


def test_pollux_avoidance_switch_in_repair() -> None:
    def problem(avoid: bool) -> PolluxProblem:
        return PolluxProblem(
            job_ids=np.arange(2),
            nodes=np.arange(2),
            cap=np.array([4, 4]),
            base=np.zeros((2, 2)),
            max_replicas=np.array([8, 8]),
            speedup=np.zeros(2 * 2 * 9),
            kdim=9,
            scale=0.25,
            phi=np.ones(2),
            avoid=avoid,
        )

    both = np.array([[[1, 1], [1, 1]]], dtype=float)
    rng = np.random.default_rng(0)
    assert problem(True).repair(both.copy(), rng)[0].tolist() == [[1, 1], [0, 0]]
    assert problem(False).repair(both.copy(), rng)[0].tolist() == [[1, 1], [1, 1]]


def test_pollux_avoidance_makes_injected_interference_irrelevant() -> None:
    cluster = ClusterConfig.parse("3x2")
    small = {"population": 16, "generations": 6}
    jct = {}
    for name in ("pollux", "pollux-noavoid"):
        for f in (None, 0.5):
            cfg = SimConfig(cluster=cluster, restart="pollux", interference=f)
            jct[name, f] = run_episode(make_policy(name, **small), _tiny(), cfg).train_jct_mean
    assert jct["pollux", None] == jct["pollux", 0.5]  # no node ever holds two distributed jobs
    assert jct["pollux-noavoid", 0.5] > jct["pollux-noavoid", None]  # without avoidance they do
    assert jct["pollux", 0.5] < jct["pollux-noavoid", 0.5]


def test_compare_reports_interference(tmp_path: Path) -> None:
    from deepboot_harness.compare import compare

    wl = tmp_path / "wl.csv"
    wl.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,4,256\nb,30,cifar10,4,256\n")
    cfg = SimConfig(cluster=ClusterConfig.parse("2x4"), restart="pollux", interference=0.25)
    frame = compare(["ats"], [str(wl)], [0], cfg, out_dir=tmp_path / "out", progress=False)
    assert frame["interference"].tolist() == ["flat 0.25"]
    assert "interference: flat 0.25" in (tmp_path / "out" / "results.md").read_text()
    plain = compare(["ats"], [str(wl)], [0], SimConfig(cluster=cfg.cluster, restart="pollux"), progress=False)
    assert "interference" not in plain.columns
