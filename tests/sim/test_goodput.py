"""Property and regression tests of the Pollux goodput model (deepboot_env/sim/goodput.py).

Notation as in docs/goodput.md §1: N nodes, K replicas (GPUs), micro-batch m, extra accumulation
steps s, total batch M = K m (s + 1), reference batch M0.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deepboot_env.sim.apps import APP_NAMES, get_app
from deepboot_env.sim.goodput import (
    efficiency,
    evaluate,
    iteration_time,
    optimize,
    split_batch,
    statistical_gain,
)
from deepboot_env.sim.rates import RateTable

ADAPTIVE_APPS = tuple(a for a in APP_NAMES if get_app(a).fixed_batch_size is None)
"""Applications whose batch size the optimiser chooses (ncf keeps its fixed 32,768)."""

MEASURED_NODES = (1, 2, 3, 4)
"""The placements/scalability traces cover up to 16 GPUs on up to 4 nodes (of 4 GPUs)."""


def _config(draw, app_name: str | None = None) -> tuple[str, int, int, int]:
    """(app, epoch, N, K) with 1 <= N <= 4, N <= K <= 16 and K <= 4 when N = 1."""
    app = draw(st.sampled_from(APP_NAMES)) if app_name is None else app_name
    epoch = draw(st.integers(0, get_app(app).max_epochs - 1))
    nodes = draw(st.sampled_from(MEASURED_NODES))
    lo, hi = (1, 4) if nodes == 1 else (nodes, 16)
    replicas = draw(st.integers(lo, hi))
    return app, epoch, nodes, replicas


configs = st.composite(_config)


def _throughput(app_name: str, nodes: np.ndarray, replicas: np.ndarray, choice) -> np.ndarray:
    app = get_app(app_name)
    t = iteration_time(app.throughput_params, nodes, replicas, choice.local_bsz, choice.accum_steps)
    return choice.total_batch / t


# ---------------------------------------------------------------------------------------------
# statistical efficiency


@settings(max_examples=200, deadline=None)
@given(app=st.sampled_from(APP_NAMES), data=st.data())
def test_efficiency_in_unit_interval(app: str, data: st.DataObject) -> None:
    prof = get_app(app)
    epoch = data.draw(st.integers(0, prof.max_epochs - 1))
    total = data.draw(st.floats(prof.init_batch_size, prof.max_batch_size))
    sqr, var = prof.grad_stats(epoch, total)
    eff = float(efficiency(total, prof.init_batch_size, sqr, var))
    assert 0.0 < eff <= 1.0 + 1e-12
    # at M0 nothing is lost
    sqr0, var0 = prof.grad_stats(epoch, prof.init_batch_size)
    assert float(efficiency(prof.init_batch_size, prof.init_batch_size, sqr0, var0)) == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(
    app=st.sampled_from(APP_NAMES),
    sqr=st.one_of(st.just(0.0), st.floats(1e-6, 1e6)),
    var=st.floats(1e-6, 1e6),
    a=st.floats(0.0, 1.0),
    b=st.floats(0.0, 1.0),
)
def test_larger_batch_never_raises_efficiency(app: str, sqr: float, var: float, a: float, b: float) -> None:
    """With fixed gradient statistics, efficiency (phi + M0) / (phi + M) is non-increasing in M."""
    prof = get_app(app)
    m0, mmax = prof.init_batch_size, prof.max_batch_size
    small, large = sorted((m0 + a * (mmax - m0), m0 + b * (mmax - m0)))
    e_small = float(efficiency(small, m0, sqr, var))
    e_large = float(efficiency(large, m0, sqr, var))
    assert e_large <= e_small + 1e-12
    assert 0.0 < e_large <= 1.0 + 1e-12
    if sqr > 0:  # closed form with the noise scale phi = M0 var / sqr
        phi = m0 * var / sqr
        assert e_large == pytest.approx((phi + m0) / (phi + large), rel=1e-9)


def test_statistical_gain_bounds_and_degenerate_denominator() -> None:
    totals = np.array([12.0, 24.0, 96.0, 384.0])
    gain = statistical_gain(totals, 12.0, 2.0, 3.0)
    assert np.all(gain >= 1.0 - 1e-12)
    assert np.all(gain <= totals / 12.0 + 1e-12)
    # no gradient signal at all: gain 1 (documented guard), efficiency 1/scale
    assert np.all(statistical_gain(totals, 12.0, 0.0, 0.0) == 1.0)
    # pure noise (sqr = 0): every example counts, efficiency 1
    assert np.allclose(efficiency(totals, 12.0, 0.0, 5.0), 1.0)


# ---------------------------------------------------------------------------------------------
# goodput = throughput x efficiency


@settings(max_examples=200, deadline=None)
@given(cfg=configs(), data=st.data())
def test_goodput_is_throughput_times_efficiency(cfg: tuple[str, int, int, int], data: st.DataObject) -> None:
    app, epoch, nodes, replicas = cfg
    prof = get_app(app)
    m = data.draw(st.integers(prof.min_local_bsz, prof.max_local_bsz))
    s = data.draw(st.integers(0, 3))
    assume(replicas * m * (s + 1) >= prof.init_batch_size)
    goodput, rate = evaluate(prof, np.array([nodes]), np.array([replicas]), np.array([m]), np.array([s]), epoch=epoch)

    # by hand, straight from the formulas of docs/goodput.md §2-§3
    a_c, b_c, a_n, b_n, a_r, b_r, gamma = prof.throughput_params
    t_acc = a_c + b_c * m
    extra = max(replicas - 2, 1e-8)
    t_net = a_n + b_n * extra if nodes > 1 else (a_r + b_r * extra if replicas > 1 else 1e-8 + 1e-8 * extra)
    t_iter = s * t_acc + (t_acc**gamma + t_net**gamma) ** (1 / gamma)
    assert float(iteration_time(prof.throughput_params, nodes, replicas, m, s)) == pytest.approx(t_iter, rel=1e-12)
    total = replicas * m * (s + 1)
    sqr, var = prof.grad_stats(epoch, total)
    scale = total / prof.init_batch_size
    gain = (var + sqr) / (var / scale + sqr)
    assert float(statistical_gain(total, prof.init_batch_size, sqr, var)) == pytest.approx(gain, rel=1e-12)
    throughput = total / t_iter
    eff = gain / scale
    assert float(goodput[0]) == pytest.approx(throughput * eff, rel=1e-9)
    # progress rate (M0-iterations per second) = gain / T = goodput / M0
    assert float(rate[0]) == pytest.approx(gain / t_iter, rel=1e-9)
    assert float(rate[0]) == pytest.approx(float(goodput[0]) / prof.init_batch_size, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(cfg=configs())
def test_optimize_choice_is_consistent_and_feasible(cfg: tuple[str, int, int, int]) -> None:
    app, epoch, nodes, replicas = cfg
    prof = get_app(app)
    n, k = np.array([nodes]), np.array([replicas])
    choice = optimize(prof, n, k, epoch=epoch, fixed_batch=prof.fixed_batch_size)
    m, s = choice.local_bsz, choice.accum_steps
    assert float(choice.total_batch[0]) == float(k[0] * m[0] * (s[0] + 1))
    assert float(choice.total_batch[0]) <= prof.max_batch_size
    if prof.fixed_batch_size is None:
        assert prof.min_local_bsz <= m[0] <= prof.max_local_bsz
        assert choice.total_batch[0] >= prof.init_batch_size
    goodput, rate = evaluate(prof, n, k, m, s, epoch=epoch)
    assert float(choice.goodput[0]) == pytest.approx(float(goodput[0]), rel=1e-12)
    assert float(choice.rate[0]) == pytest.approx(float(rate[0]), rel=1e-12)
    assert choice.goodput[0] > 0


@settings(max_examples=60, deadline=None)
@given(cfg=configs(), data=st.data())
def test_optimize_beats_every_candidate(cfg: tuple[str, int, int, int], data: st.DataObject) -> None:
    """The chosen configuration has the best goodput of every candidate total batch."""
    app, epoch, nodes, replicas = cfg
    prof = get_app(app)
    assume(prof.fixed_batch_size is None)
    choice = optimize(prof, np.array([nodes]), np.array([replicas]), epoch=epoch)
    lo = max(prof.init_batch_size, prof.min_local_bsz * replicas)
    frac = data.draw(st.integers(0, 49)) / 49
    total = np.exp(np.log(lo) + (np.log(prof.max_batch_size) - np.log(lo)) * frac)
    m, s = split_batch(prof, np.array([replicas]), np.array([total]))
    if prof.min_local_bsz <= m[0] <= prof.max_local_bsz:
        goodput, _ = evaluate(prof, np.array([nodes]), np.array([replicas]), m, s, epoch=epoch)
        assert goodput[0] <= choice.goodput[0] * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------
# more GPUs and throughput


@settings(max_examples=150, deadline=None)
@given(
    app=st.sampled_from(("bert", "imagenet")),
    data=st.data(),
)
def test_throughput_at_optimum_monotone_in_gpus_bert_imagenet(app: str, data: st.DataObject) -> None:
    """bert and imagenet: at the goodput optimum, one more GPU never lowers throughput (exact).

    This does NOT hold for every application of the fitted model (see the next tests and
    ``test_throughput_at_optimum_can_drop``): it holds exactly for these two on every epoch.
    """
    _, epoch, nodes, replicas = _config(data.draw, app)
    assume(replicas < (4 if nodes == 1 else 16))
    n = np.array([nodes, nodes])
    k = np.array([replicas, replicas + 1])
    choice = optimize(get_app(app), n, k, epoch=epoch)
    tput = _throughput(app, n, k, choice)
    assert tput[1] >= tput[0] * (1 - 1e-12)
    assert choice.goodput[1] >= choice.goodput[0] * (1 - 1e-12)


@pytest.mark.parametrize("app", ADAPTIVE_APPS)
@pytest.mark.parametrize("nodes", MEASURED_NODES)
def test_best_throughput_monotone_in_gpus(app: str, nodes: int) -> None:
    """Hardware side: with efficiency pinned to 1 (grad_sqr = 0) the optimiser maximises raw
    throughput, and one more GPU never lowers it by more than 1 %.

    The 1 % allowance is for batch quantisation only: at K + 1 GPUs the largest total batch
    K m (s + 1) <= Mmax reachable with whole micro-batches and whole accumulation steps can be
    slightly smaller than at K (yolov3, mmax = 8: K = 12 reaches 480, K = 13 only 416 on the
    50-point grid: -0.7 %). bert, cifar10, deepspeech2 and imagenet are exactly monotone.
    """
    prof = get_app(app)
    ks = np.arange(1, 5) if nodes == 1 else np.arange(nodes, 17)
    ns = np.full(len(ks), nodes)
    choice = optimize(prof, ns, ks, stats=(0.0, 1.0))
    tput = _throughput(app, ns, ks, choice)
    assert np.allclose(choice.goodput, tput)  # efficiency 1: goodput is throughput
    tol = 0.01 if app == "yolov3" else 1e-12
    assert np.all(tput[1:] >= tput[:-1] * (1 - tol)), np.round(np.diff(tput) / tput[:-1], 4)


def test_throughput_at_optimum_can_drop() -> None:
    """Why "more GPUs never lower throughput at the optimum" is false for the fitted model.

    yolov3 at epoch 0 has a tiny gradient noise scale (phi = M0 var / sqr ~ 0.65 << M0 = 8), so
    any batch above M0 wastes almost all its examples and the optimiser keeps M = 8 on 1 and on 2
    GPUs. On 2 GPUs each does m = 4 instead of 8, saving 4 beta_c ~ 0.08 s of compute, but the
    all-reduce adds alpha_r ~ 0.155 s with gamma = 1 (no overlap), so throughput falls by ~19 %.
    The Pollux reference model shows the same effect for yolov3 ep0 (docs/references.md §6.1:
    speedup 1.00 on 2 GPUs, 0.95 on 4).
    """
    prof = get_app("yolov3")
    n, k = np.array([1, 1]), np.array([1, 2])
    choice = optimize(prof, n, k, epoch=0)
    assert choice.total_batch.tolist() == [8.0, 8.0]
    assert choice.local_bsz.tolist() == [8.0, 4.0]
    a_c, b_c, _, _, a_r, b_r, gamma = prof.throughput_params
    t1 = a_c + b_c * 8
    t2 = ((a_c + b_c * 4) ** gamma + (a_r + b_r * 1e-8) ** gamma) ** (1 / gamma)
    assert t2 > t1  # the network time exceeds the compute saved
    tput = _throughput("yolov3", n, k, choice)
    assert tput[0] == pytest.approx(8 / t1)
    assert tput[1] == pytest.approx(8 / t2)
    assert tput[1] < 0.85 * tput[0]
    # a bigger batch on 2 GPUs would raise throughput but lose more in efficiency
    faster = evaluate(prof, np.array([1]), np.array([2]), np.array([8]), np.array([0]), epoch=0)[0]
    assert 16 / iteration_time(prof.throughput_params, 1, 2, 8, 0) > tput[0]
    assert faster[0] < choice.goodput[1]


def test_fixed_batch_ncf_throughput_falls_across_nodes() -> None:
    """ncf keeps M = 32,768 (fixed batch). Splitting it over K GPUs saves only beta_c M / K of
    compute (beta_c ~ 5e-7 s, alpha_c ~ 7e-3 s) while the all-reduce alpha_n + beta_n (K - 2)
    grows, so across nodes throughput peaks at K = 5 and falls with every GPU after that
    (the reference docs/references.md §6.1 has the same shape: 1.97 on 4 GPUs -> 1.21 on 8 -> 1.11 on 16)."""
    prof = get_app("ncf")
    ks = np.arange(2, 17)
    ns = np.full(len(ks), 2)
    choice = optimize(prof, ns, ks, epoch=0, fixed_batch=prof.fixed_batch_size)
    assert np.all(choice.total_batch <= 32768) and np.all(choice.total_batch >= 32768 - ks)
    tput = _throughput("ncf", ns, ks, choice)
    assert int(ks[np.argmax(tput)]) == 5
    assert np.all(np.diff(tput[3:]) < 0)
    assert prof.throughput_params[1] < 1e-6


# ---------------------------------------------------------------------------------------------
# split_batch


@settings(max_examples=300, deadline=None)
@given(app=st.sampled_from(APP_NAMES), data=st.data())
def test_split_batch_respects_bounds(app: str, data: st.DataObject) -> None:
    prof = get_app(app)
    k = data.draw(st.integers(1, prof.max_useful_replicas()))
    lo = max(prof.init_batch_size, prof.min_local_bsz * k)
    assume(lo <= prof.max_batch_size)
    total = data.draw(st.floats(lo, prof.max_batch_size))
    m, s = split_batch(prof, np.array([k]), np.array([total]))
    m, s = float(m[0]), float(s[0])
    assert m == int(m) and s == int(s) and s >= 0
    assert prof.min_local_bsz <= m <= prof.max_local_bsz
    assert k * m * (s + 1) <= prof.max_batch_size
    # the split loses less than one micro-batch step per replica of the requested total
    assert k * m * (s + 1) > total - k * (s + 1)
    if k == 1 and total > prof.init_batch_size + 1e-8:
        assert s >= 1  # a single replica above M0 needs >= 2 micro-batches (Pollux)
    else:
        assert s == max(np.ceil(total / k / prof.max_local_bsz - 1e-8) - 1, 0)


def test_split_batch_without_accumulation() -> None:
    prof = get_app("bert")
    m, s = split_batch(prof, np.array([4, 4]), np.array([48.0, 384.0]), accumulation=False)
    assert s.tolist() == [0.0, 0.0]
    assert m.tolist() == [12.0, 96.0]  # 96 > mmax: optimize() marks it infeasible


# ---------------------------------------------------------------------------------------------
# RateTable


def _direct(prof, flag: int, ks: np.ndarray, epoch: int, fixed_batch: int | None):
    """What a RateTable row must hold, from optimize()/evaluate() directly: the job picks its batch
    with the statistics it observes (the epoch's statistics at M0) and progresses at the true rate
    of that choice (statistics interpolated at the batch it uses); infeasible K give 0."""
    nodes = np.full(len(ks), 1 + flag)
    choice = optimize(prof, nodes, ks, stats=prof.observed_stats(epoch), fixed_batch=fixed_batch)
    goodput, rate = evaluate(prof, nodes, ks, choice.local_bsz, choice.accum_steps, epoch=epoch)
    ok = choice.goodput > 0
    return choice, np.where(ok, rate, 0.0), np.where(ok, goodput, 0.0)


@pytest.mark.parametrize("app", APP_NAMES)
def test_rate_table_equals_direct_optimize(app: str) -> None:
    prof = get_app(app)
    assert prof.traced_batch_sizes[0] == prof.init_batch_size
    cap = prof.max_useful_replicas()
    table = RateTable(prof, cap)
    ks = np.arange(1, cap + 1)
    for epoch in sorted({0, prof.max_epochs // 2, prof.max_epochs - 1}):
        assert prof.observed_stats(epoch) == (prof.grad_sqr[epoch, 0], prof.grad_var[epoch, 0])
        for flag in (0, 1):
            choice, rate, goodput = _direct(prof, flag, ks, epoch, prof.fixed_batch_size)
            rates = table.rates(epoch)
            assert rates[flag, 0] == 0.0
            assert np.array_equal(rates[flag, 1:], rate)
            assert np.all(rates[flag, 1:] > 0)  # every K up to the cap is feasible
            assert np.array_equal(table.goodputs(epoch)[flag, 1:], goodput)
            for k in (1, cap // 2 + 1, cap):
                assert table.rate(epoch, bool(flag), k) == float(rate[k - 1])
                assert table.total_batch(epoch, bool(flag), k) == float(choice.total_batch[k - 1])
        assert table.rate(epoch, False, 0) == 0.0 and table.total_batch(epoch, False, 0) == 0.0
        # more GPUs than the table holds are no better than its last column
        assert table.rate(epoch, True, cap + 5) == table.rate(epoch, True, cap)


@pytest.mark.parametrize("app", ADAPTIVE_APPS)
def test_rate_table_never_beats_the_oracle_choice(app: str) -> None:
    """The job chooses among the same candidates as an oracle that knows the true statistics at
    every batch size (goodput = M0 x rate), so its true rate can only be lower or equal."""
    prof = get_app(app)
    cap = min(prof.max_useful_replicas(), 16)
    table = RateTable(prof, cap)
    ks = np.arange(1, cap + 1)
    for epoch in range(0, prof.max_epochs, max(1, prof.max_epochs // 10)):
        for flag in (0, 1):
            oracle = optimize(prof, np.full(cap, 1 + flag), ks, epoch=epoch)
            assert np.allclose(oracle.goodput, prof.init_batch_size * oracle.rate)
            assert np.all(table.rates(epoch)[flag, 1:] <= oracle.rate * (1 + 1e-12))


def test_rate_table_fixed_batch() -> None:
    prof = get_app("cifar10")
    table = RateTable(prof, 8, fixed_batch=2048)
    _, rate, _ = _direct(prof, 1, np.arange(1, 9), 3, 2048)
    assert np.array_equal(table.rates(3)[1, 1:], rate)
    # a fixed batch has one candidate: the statistics only set its rate, not the choice
    assert np.array_equal(rate, optimize(prof, np.full(8, 2), np.arange(1, 9), epoch=3, fixed_batch=2048).rate)
    # 2048 over 2 GPUs: m = 1024 (= mmax), no accumulation
    assert table.total_batch(3, True, 2) == 2048.0
    # 2048 over 3 GPUs: m = ceil(682.7) = 683, so 2049 (Pollux rounds the micro-batch up; only
    # Mmax is a hard cap, docs/goodput.md §4.2)
    assert table.total_batch(3, True, 3) == 2049.0
    big = RateTable(prof, 8, fixed_batch=4096)
    # 4096 over 3 GPUs: L = 1365.3 > mmax = 1024 so s = 1, m = ceil(682.7) = 683 gives 4098 > Mmax,
    # clipped to m = floor(4096 / 6) = 682: 4092
    assert big.total_batch(3, True, 3) == 4092.0


# ---------------------------------------------------------------------------------------------
# speedup anchors (docs/references.md §6.1)

# (app, epoch) -> {(N, K): (speedup, chosen total batch)} from the reference "placements" fits
ANCHORS: dict[tuple[str, int], dict[tuple[int, int], tuple[float, int]]] = {
    ("bert", 0): {(1, 2): (1.83, 24), (1, 4): (3.45, 48), (2, 8): (3.83, 192), (4, 16): (5.62, 384)},
    ("bert", 1): {(1, 2): (1.88, 48), (1, 4): (3.62, 48), (2, 8): (4.88, 288), (4, 16): (7.85, 384)},
    ("cifar10", 0): {(1, 2): (1.53, 128), (1, 4): (2.06, 140), (2, 8): (0.99, 512), (4, 16): (0.94, 864)},
    ("cifar10", 50): {(1, 2): (1.98, 566), (1, 4): (3.63, 808), (2, 8): (5.17, 2328), (4, 16): (7.60, 3936)},
    ("deepspeech2", 0): {(1, 2): (1.38, 20), (1, 4): (1.65, 40), (2, 8): (1.19, 80), (4, 16): (1.04, 160)},
    ("deepspeech2", 40): {(1, 2): (1.99, 316), (1, 4): (3.94, 308), (2, 8): (7.24, 640), (4, 16): (10.52, 640)},
    ("imagenet", 0): {(1, 2): (1.87, 200), (1, 4): (3.34, 240), (2, 8): (4.39, 664), (4, 16): (5.94, 1152)},
    ("imagenet", 45): {(1, 2): (1.97, 396), (1, 4): (3.80, 780), (2, 8): (6.94, 1536), (4, 16): (12.31, 2640)},
    ("ncf", 0): {(1, 2): (1.56, 26882), (1, 4): (1.97, 32768), (2, 8): (1.21, 32768), (4, 16): (1.11, 32768)},
    ("yolov3", 0): {(1, 2): (1.00, 8), (1, 4): (0.95, 16), (2, 8): (0.40, 32), (4, 16): (0.34, 64)},
    ("yolov3", 25): {(1, 2): (1.73, 48), (1, 4): (3.13, 96), (2, 8): (3.84, 256), (4, 16): (5.51, 384)},
}

BATCH_MISMATCH = {
    ("deepspeech2", 40, (1, 2)),
    ("deepspeech2", 40, (1, 4)),
    ("yolov3", 25, (1, 2)),
    ("yolov3", 25, (4, 16)),
}
"""Anchors whose chosen batch differs by more than 25 % although the speedup agrees within 10 %:
the goodput surface is nearly flat in M there. deepspeech2 epoch 40 (phi ~ 3e4 >> Mmax): ours
picks Mmax = 640, the reference ~310 (2.0-2.1x). yolov3 (mmax = 8) can only reach multiples of
8 K (s + 1): ours 64 vs 48 on 2 GPUs and 512 vs 384 on 16 (1.33x)."""


def _anchor_speedups(app: str, epoch: int, cfgs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    prof = get_app(app)
    i0 = int(np.flatnonzero(prof.traced_batch_sizes == prof.init_batch_size)[0])
    stats = (float(prof.grad_sqr[epoch, i0]), float(prof.grad_var[epoch, i0]))
    n = np.array([1] + [c[0] for c in cfgs])
    k = np.array([1] + [c[1] for c in cfgs])
    choice = optimize(prof, n, k, stats=stats)
    return choice.goodput[1:] / choice.goodput[0], choice.total_batch[1:]


@pytest.mark.parametrize(("app", "epoch"), sorted(ANCHORS))
def test_speedup_anchors_approximately(app: str, epoch: int) -> None:
    """Speedups G*(N, K) / G*(1, 1) with the trace statistics at M0 (docs/references.md §6.1).

    Our parameters are refitted (apps.json), not the reference fits of docs/references.md §6.1, so the anchors are only
    approximately reproduced: within 25 % on every (N, K) up to 16 GPUs (worst: yolov3 ep0 -21 %,
    deepspeech2 ep0 -17 %; everything else within 8 %). The chosen batch sizes agree within 25 %
    (most exactly) except the four listed in ``BATCH_MISMATCH``.
    """
    cfgs = list(ANCHORS[(app, epoch)])
    speedups, batches = _anchor_speedups(app, epoch, cfgs)
    for cfg, sp, batch in zip(cfgs, speedups, batches, strict=True):
        ref_sp, ref_batch = ANCHORS[(app, epoch)][cfg]
        assert sp == pytest.approx(ref_sp, rel=0.25), (cfg, sp, ref_sp)
        if (app, epoch, cfg) in BATCH_MISMATCH:
            assert not batch == pytest.approx(ref_batch, rel=0.25)
            assert sp == pytest.approx(ref_sp, rel=0.10)
        else:
            assert batch == pytest.approx(ref_batch, rel=0.25), (cfg, batch, ref_batch)


def test_speedup_anchor_base_batches() -> None:
    """(1, 1) batches chosen (docs/references.md §6.2): exact except ncf (ours 22,052 vs 19,974)."""
    expected = {
        ("bert", 0): 12,
        ("cifar10", 0): 128,
        ("cifar10", 50): 492,
        ("deepspeech2", 0): 20,
        ("deepspeech2", 40): 240,
        ("imagenet", 0): 200,
        ("yolov3", 0): 8,
    }
    for (app, epoch), batch in expected.items():
        prof = get_app(app)
        stats = (float(prof.grad_sqr[epoch, 0]), float(prof.grad_var[epoch, 0]))
        assert prof.traced_batch_sizes[0] == prof.init_batch_size
        assert optimize(prof, np.array([1]), np.array([1]), stats=stats).total_batch[0] == batch
