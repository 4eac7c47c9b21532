"""Builders shared by test modules (``from builders import ...``: ``tests/`` holds conftest.py, so
pytest puts it on the path for the modules of every subfolder)."""

from __future__ import annotations

import math
import random
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest import MonkeyPatch

from deepboot_env import evaluation
from deepboot_env.evaluation import run_episode
from deepboot_env.policy import BasePolicy
from deepboot_env.sim import jobs as jobs_module
from deepboot_env.sim.cluster import ClusterConfig
from deepboot_env.sim.jobs import ProjectionState, RunResult, TrainingJob
from deepboot_env.sim.metrics import EpisodeMetrics
from deepboot_env.sim.simulator import SimConfig
from deepboot_env.sim.workload import InferenceRequestSpec, TrainingJobSpec, Workload

REPO = Path(__file__).resolve().parents[1]
"""The repository's root (the folder above ``tests/``)."""

SHARED_DATA = REPO.parent / "shared" / "data"
"""The shared data beside the repository (raw traces, reference runs); tests that need it skip without it."""

SHIPPED_MODEL = REPO / "agents" / "pretrained" / "deepboot-v0.zip"
"""The shipped PPO model."""


def interrupt_when(argv: Sequence[str], ready: Callable[[], bool], timeout: float = 120.0) -> tuple[int, str]:
    """Start ``argv`` in its own process group, wait until ``ready()``, send Ctrl-C (SIGINT to the
    group, workers included); the exit status and stderr."""
    import os
    import signal
    import subprocess
    import time

    def as_from_a_terminal() -> None:
        """Ctrl-C's disposition in a terminal: a test run in the background by a shell without
        job control inherits SIGINT ignored, and Python keeps an inherited SIG_IGN."""
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not ready():
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


WITHOUT_GYM_PRELUDE = (
    "import sys\n"
    "for m in ('gymnasium', 'stable_baselines3', 'sb3_contrib'): sys.modules[m] = None\n"
    "from deepboot_env.sim.workload import TrainingJobSpec, Workload\n"
    "from deepboot_env.sim.simulator import SimConfig, Simulator\n"
    "from deepboot_env.sim.cluster import ClusterConfig\n"
    "one_ncf_job = Workload('w', (TrainingJobSpec('a', 0.0, 'ncf', 1, 32768),))\n"
    "one_gpu = SimConfig(cluster=ClusterConfig(1, 0, 1))\n"
)
"""What :func:`assert_runs_without_gym` runs first: gymnasium, SB3 and sb3-contrib made
unimportable, then from the simulation core ``one_ncf_job`` (a workload of one 1-GPU ncf job) and
``one_gpu`` (a ``SimConfig`` of one node with one GPU)."""


def es_smoke_argv(preset: str, runs: Path, *extra: str) -> list[str]:
    """``train_policy.py --algo es`` arguments of a smoke run of ``preset``: one short-period train
    scenario, one antithetic pair, one val episode, validation every generation, runs in ``runs``."""
    return [
        "--algo", "es", "--preset", preset, "--workload", "family:short-period",
        "--eval-workload", "family:short-period", "--eval-episodes", "1", "--eval-jobs", "1",
        "-params", "pairs:1", "seeds_per_family:1", "eval_freq:1", "--verbose", "0", "-f", str(runs), *extra,
    ]  # fmt: skip


def assert_runs_without_gym(code: str) -> None:
    """Run :data:`WITHOUT_GYM_PRELUDE` and then ``code`` in a fresh interpreter in the repository,
    and assert that it exits 0 (showing its stderr otherwise)."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_GYM_PRELUDE + code], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def masked_random_action(env, rng):
    """A random valid target-mode action of ``env`` (a ``DeepBootEnv``): in every slot and in the
    lending level, a uniform choice among those ``env.action_masks()`` allows."""
    import numpy as np

    from deepboot_env.env.action import GPU_BUCKETS

    mask = env.action_masks()
    nb = len(GPU_BUCKETS)
    action = [rng.choice(np.flatnonzero(mask[i * nb : (i + 1) * nb])) for i in range(env.max_jobs)]
    action.append(rng.choice(np.flatnonzero(mask[env.max_jobs * nb :])))
    return np.array(action)


def training_workload(apps: Sequence[str], n: int = 8, gap: float = 40.0) -> Workload:
    """``n`` training jobs ``j0, j1, ...`` arriving every ``gap`` s, cycling over ``apps``, each
    asking for 4 GPUs and a total batch of 512 (or its application's largest, if smaller)."""
    from deepboot_env.sim.apps import get_app

    jobs = tuple(
        TrainingJobSpec(f"j{i}", float(i * gap), app, num_replicas=4, batch_size=min(512, get_app(app).max_batch_size))
        for i, app in ((i, apps[i % len(apps)]) for i in range(n))
    )
    return Workload(name="tiny", jobs=jobs)


def lending_requests(n: int = 12) -> tuple[InferenceRequestSpec, ...]:
    """``n`` 200-s inference requests every 40 s from t = 300 s, cycling over four apps'
    instances: enough load on a 1x4 inference cluster to force reclaims of lent GPUs."""
    apps = ["ncf", "bert", "cifar10", "yolov3"]
    return tuple(
        InferenceRequestSpec(
            name=f"r{i}", arrival=300.0 + 40.0 * i, instance=f"infer-{apps[i % 4]}-1", app=apps[i % 4], duration=200.0
        )
        for i in range(n)
    )


def lending_workload(apps: Sequence[str]) -> Workload:
    """Six training jobs of ``apps`` 10 s apart (:func:`training_workload`) and the
    :func:`lending_requests`: on 1x4+1x4, lent GPUs are reclaimed."""
    return Workload(name="tiny-mixed", jobs=training_workload(apps, 6, gap=10.0).jobs, requests=lending_requests(12))


def run_lending_twice(apps: Sequence[str], recorder: Callable[[], RecordingPolicy]) -> tuple[RecordingPolicy, object]:
    """Run :func:`lending_workload` of ``apps`` on 1x4+1x4 (``afe``, policy seed 5) twice, each
    time under a fresh ``recorder()``, and check what every lending policy must do there: all 6
    jobs and 12 requests served, GPUs lent and reclaimed, the two runs identical. The first run's
    recorder and metrics."""
    import json

    from deepboot_env.evaluation import run_episode
    from deepboot_env.sim.cluster import ClusterConfig
    from deepboot_env.sim.simulator import SimConfig

    workload = lending_workload(apps)
    config = SimConfig(cluster=ClusterConfig.parse("1x4+1x4"), restart="afe")
    runs = []
    for _ in range(2):
        rec = recorder()
        runs.append((rec, run_episode(rec, workload, config, seed=5)))
    (rec, metrics), (_, again) = runs
    assert metrics.train_jobs_done == 6 and metrics.infer_requests_done == 12
    assert metrics.lent_gpu_seconds > 0 and metrics.reclaims > 0
    assert json.dumps(metrics.deterministic_dict(), sort_keys=True) == json.dumps(
        again.deterministic_dict(), sort_keys=True
    )
    return rec, metrics


def recorded_episode(
    recorder: RecordingPolicy, apps: Sequence[str], cluster: str = "2x4", seed: int = 3, n: int = 8
) -> tuple[RecordingPolicy, EpisodeMetrics]:
    """``recorder``'s episode of :func:`training_workload` (``n`` jobs of ``apps``) on ``cluster``
    (``pollux`` restarts, policy ``seed``): the recorder and the metrics."""
    from deepboot_env.evaluation import run_episode
    from deepboot_env.sim.cluster import ClusterConfig
    from deepboot_env.sim.simulator import SimConfig

    config = SimConfig(cluster=ClusterConfig.parse(cluster), restart="pollux")
    return recorder, run_episode(recorder, training_workload(apps, n), config, seed=seed)


def run_recorded_twice(
    apps: Sequence[str], recorder: Callable[[], RecordingPolicy]
) -> tuple[RecordingPolicy, EpisodeMetrics]:
    """Run :func:`recorded_episode` of ``apps`` twice, each time under a fresh ``recorder()``, and
    check what every population search must do there: all 8 jobs done, the two runs identical
    (metrics, and the same jobs and GPUs at each of more than 5 decisions). The first run's
    recorder and metrics."""
    import json

    import numpy as np

    (rec, metrics), (again_rec, again) = recorded_episode(recorder(), apps), recorded_episode(recorder(), apps)
    assert metrics.train_jobs_done == metrics.train_jobs == 8
    assert json.dumps(metrics.deterministic_dict(), sort_keys=True) == json.dumps(
        again.deterministic_dict(), sort_keys=True
    )
    assert len(rec.decisions) == len(again_rec.decisions) > 5
    for (_, first, *_), (_, second, *_) in zip(rec.decisions, again_rec.decisions, strict=True):
        assert first.keys() == second.keys() and all(np.array_equal(first[k], second[k]) for k in first)
    return rec, metrics


class RecordingPolicy(BasePolicy):
    """Wraps ``policy`` (its name, batch rule, reset and reclaim): ``decisions`` holds, per
    decision, the state, the validated allocation and then ``extra(policy)``."""

    def __init__(self, policy, extra: Callable[[object], tuple] = lambda policy: ()) -> None:
        self.policy = policy
        self.name = policy.name
        self.adaptive_batch = policy.adaptive_batch
        self.extra = extra
        self.decisions: list[tuple] = []

    def reset(self, seed: int | None = None) -> None:
        self.policy.reset(seed)

    def decide(self, state):
        from deepboot_env.sim.state import validate_allocation

        alloc = self.policy.decide(state)
        self.decisions.append((state, validate_allocation(state, alloc), *self.extra(self.policy)))
        return alloc

    def choose_reclaim(self, state, request):
        return self.policy.choose_reclaim(state, request)


def check_within_capacity(state, alloc, lend: bool) -> None:
    """``alloc`` (validated GPUs per node by job) gives no job more than its ``max_replicas``,
    fits the training capacity of ``state`` (lent GPUs included if ``lend``), and uses no
    inference GPU without ``lend``."""
    import numpy as np

    from deepboot_env.sim.cluster import NODE_INFER

    cap = state.training_capacity(lend=lend)
    total = np.zeros(state.num_nodes, dtype=np.int64)
    for job_id, arr in alloc.items():
        assert arr.min() >= 0
        assert arr.sum() <= state.job(job_id).max_replicas
        total += arr
    assert np.all(total <= cap)
    if not lend:
        assert total[state.node_kinds == NODE_INFER].sum() == 0


def check_best_allocation(values, caps: Sequence[int], capacity: int, chosen: Sequence[int]) -> None:
    """The widths ``chosen`` (job i takes ``chosen[i]`` GPUs, value ``values[i][w]``) reach the
    largest sum of values over every allocation of at most ``capacity`` GPUs, job i taking
    0..caps[i] (exhaustive search, to a relative 1e-12)."""
    import itertools

    import pytest

    best = max(
        sum(values[i][w] for i, w in enumerate(ws))
        for ws in itertools.product(*(range(c + 1) for c in caps))
        if sum(ws) <= capacity
    )
    assert sum(values[i][w] for i, w in enumerate(chosen)) == pytest.approx(best, rel=1e-12)


FIT_RTOL = 1e-2
"""Tolerance on predicted step times when a refit is compared with the shipped profiles: the
seven throughput parameters are not all identifiable (scipy releases reach slightly different
optima of the same fit, e.g. 1.17 vs earlier), the times they predict agree within 0.4 %."""


def assert_same_calibration(computed: dict, shipped: dict, apps_dir) -> None:
    """``computed`` profiles (a refit of the traces in ``apps_dir``) equal ``shipped``: every
    derived constant exactly, the measured curves to float precision, the throughput model by the
    step times it predicts at every fitted observation (within :data:`FIT_RTOL`)."""
    import numpy as np

    from traces import calibrate as cal
    from traces.app_traces import read_app_traces

    assert sorted(computed) == sorted(shipped)
    for name, prof in shipped.items():
        new = computed[name]
        for field in ("init_batch_size", "max_batch_size", "min_local_bsz", "max_local_bsz", "max_epochs"):
            assert getattr(new, field) == getattr(prof, field), (name, field)
        np.testing.assert_allclose(new.epoch_progress, prof.epoch_progress, rtol=1e-5, err_msg=name)
        table = cal.fit_observations(read_app_traces(apps_dir / name))
        shape = (table.nodes, table.replicas, table.local_bsz)
        times = [cal.sync_step_time(p.throughput_params, *shape) for p in (new, prof)]
        np.testing.assert_allclose(times[0], times[1], rtol=FIT_RTOL, err_msg=name)


def fast_lookahead(**changes):
    """Cheap :class:`~baselines.lookahead.LookaheadSettings` for tests: three candidates (one
    stateful), ten minutes ahead, a choice point every 3 boundaries; ``changes`` replace some."""
    from baselines.lookahead import LookaheadSettings

    return LookaheadSettings(
        **{"candidates": ("ats", "ones-lend", "ats-nolend"), "horizon_s": 600.0, "every": 3, **changes}
    )


def episode_json(policy, workload, config, seed: int = 0) -> str:
    """The deterministic metrics of ``policy``'s episode on ``workload`` as one comparable text."""
    import json

    from deepboot_env.evaluation import run_episode

    return json.dumps(run_episode(policy, workload, config, seed).deterministic_dict(), sort_keys=True)


def job_view(
    job_id: int,
    app: str,
    alloc,
    max_replicas: int = 16,
    *,
    epoch: int = 0,
    age: float = 600.0,
    service: float | None = None,
    restarts: int = 0,
    stalled: float = 0.0,
    req: tuple[int, int] = (4, 512),
    arrival: float | None = None,
):
    """A hand-made :class:`JobView` of ``app`` holding ``alloc`` (GPUs per node): arrival
    100 + id and attained service 100 x id unless given, the profile's full rate table."""
    import numpy as np

    from deepboot_env.sim.apps import get_app
    from deepboot_env.sim.rates import RateTable
    from deepboot_env.sim.state import JobView

    profile = get_app(app)
    return JobView(
        id=job_id,
        name=f"{app}-{job_id}",
        app=app,
        arrival=100.0 + job_id if arrival is None else arrival,
        age=age,
        attained_service=float(job_id * 100 if service is None else service),
        num_restarts=restarts,
        alloc=np.asarray(alloc, dtype=np.int64),
        epoch=epoch,
        progress_fraction=epoch / profile.max_epochs,
        max_replicas=max_replicas,
        requested_replicas=req[0],
        requested_batch=req[1],
        stalled_seconds=stalled,
        remaining_work=1e6,
        rates=RateTable(profile, profile.max_useful_replicas()),
    )


def warm_start_problem(policy, build_problem, state=None):
    """A population search's warm start: ``policy`` (ONES or Pollux, reset with seed 4) decides on
    three idle 4-GPU cifar10 jobs on 4x4; then job 0 finishes, job 5 arrives (room for one GPU)
    and job 2 has the least attained service. Returns the previous population, its job ids and the
    next problem, ``build_problem(state("4x4", jobs), lend=False)`` (``state``: default
    :func:`cluster_state`)."""
    state = state or cluster_state
    jobs = [job_view(i, "cifar10", [0, 0, 0, 0], max_replicas=4, service=i) for i in range(3)]
    policy.reset(4)
    policy.decide(state("4x4", jobs))
    prev, prev_ids = policy._pop.copy(), list(policy._pop_ids)
    new_jobs = [
        job_view(2, "cifar10", [0, 0, 0, 0], max_replicas=4, service=0),
        job_view(1, "cifar10", [0, 0, 0, 0], max_replicas=4, service=50),
        job_view(5, "cifar10", [0, 0, 0, 0], max_replicas=1, service=60),
    ]
    return prev, prev_ids, build_problem(state("4x4", new_jobs), lend=False)


def cluster_state(cluster: str, jobs, running=None, restart: str = "pollux", time: float = 1000.0):
    """A hand-made :class:`ClusterState` of ``cluster`` (e.g. "4x4", "1x4+1x4") whose training
    GPUs are the jobs' allocations, with ``running`` inference pods per node (none by default)."""
    import numpy as np

    from deepboot_env.sim.cluster import ClusterConfig
    from deepboot_env.sim.state import ClusterState

    cfg = ClusterConfig.parse(cluster)
    zeros = np.zeros(cfg.num_nodes, dtype=np.int64)
    return ClusterState(
        time=time,
        interval=60.0,
        config=cfg,
        node_kinds=cfg.node_kinds(),
        train_used=sum((j.alloc for j in jobs), zeros.copy()),
        running=zeros.copy() if running is None else np.asarray(running, dtype=np.int64),
        protect=zeros.copy(),
        sleeping=zeros.copy(),
        jobs=tuple(jobs),
        waiting_requests=0,
        recent_arrivals=(0,) * 10,
        restart_model=restart,
    )


def check_completion_bounds(env, steps: int, seed: int = 4) -> int:
    """Step ``env`` (a reset ``DeepBootEnv``) with masked random actions for up to ``steps``
    decisions, asserting before each that every active job's completion bounds (the loose one and
    the one at its placement's rates) never exceed its projected completion; returns how many
    projections were checked."""
    import numpy as np

    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(steps):
        for job in env.sim.active_jobs:
            due = job.time_of_completion()
            if due is not None:
                assert job.completion_lower_bound() <= due
                assert job.completion_bound_from(job.projection_state()) <= due
                checked += 1
        _, _, terminated, _, _ = env.step(masked_random_action(env, rng))
        if terminated:
            break
    return checked


def drive(sim, policy, steps: int | None = None, on_state: Callable[[object], None] | None = None) -> None:
    """Take ``steps`` decisions of ``policy`` in ``sim`` (all that are left if None), as the
    evaluation loop does; ``on_state`` sees every state before ``policy`` decides on it."""
    while not sim.done and (steps is None or steps > 0):
        state = sim.observe()
        if on_state is not None:
            on_state(state)
        sim.apply(policy.decide(state), state)
        sim.advance()
        steps = None if steps is None else steps - 1


def episode_record(sim, events: bool = False) -> str:
    """Everything an episode produced: the metrics (JCTs included), the timeline, the request
    records, reclaims and restarts (and the event count if ``events``), as one comparable text."""
    import json

    metrics = sim.metrics().deterministic_dict()
    records = [(r.index, r.arrival, r.start, r.finish, r.cold, r.pod) for r in sim.requests]
    parts = [metrics, sim.timeline, records, sim.reclaims, sim.restarts]
    return json.dumps([*parts, sim.num_events] if events else parts, sort_keys=True)


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)
"""A Markdown fenced block: its language and its body."""


def shell_commands(markdown: str) -> list[list[str]]:
    """The commands of a Markdown text's fenced ``bash`` blocks, each as its argv: continuation
    lines joined, comments dropped, ``&&`` / ``;`` / ``|`` chains split."""
    commands = []
    for language, body in FENCE.findall(markdown):
        if language not in ("bash", "sh", "shell"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            argv: list[str] = []
            for token in lexer:
                if token in ("&&", ";", "|", "||", "&"):
                    commands.append(argv)
                    argv = []
                else:
                    argv.append(token)
            commands.append(argv)
    return [argv for argv in commands if argv]


RunCase = tuple[TrainingJob, float, ProjectionState]


def recorded_run_cases(workload: Workload) -> list[RunCase]:
    """Every third call of ``_run`` in episodes that cover stalls (afe, full, pollux), stop-free
    phases and interference (speeds below 1), each with the job as it was then and the horizons
    asked plus random ones: the time itself, just before and at the end of the first phase,
    a short and a long step, and infinity (a projection)."""
    recorded: list[RunCase] = []
    calls = iter(range(1 << 62))
    real = jobs_module._run

    def recording(job: TrainingJob, t1: float, start: ProjectionState) -> RunResult:
        if next(calls) % 3 == 0:
            recorded.append((job.clone(), t1, start))
        return real(job, t1, start)

    with MonkeyPatch.context() as patch:
        patch.setattr(jobs_module, "_run", recording)
        patch.setattr(evaluation, "ARRAY_EPISODES", False)  # the Python loop's calls, not the arrays'
        for policy, config in [
            ("ats", SimConfig()),
            ("optimus", SimConfig(restart="stopfree")),
            ("ats", SimConfig(restart="stopfree", interference=0.3)),
            ("pollux", SimConfig(cluster=ClusterConfig.parse_shared("8x4"), restart="pollux")),
            ("fifo", SimConfig(restart="full", interference=0.3)),
        ]:
            run_episode(policy, workload, config)
    rng = random.Random(0)
    cases: list[RunCase] = []
    for job, t1, start in recorded:
        t0, phases = start[0], start[3]
        stall_end = t0 + phases[0].seconds if phases else t0
        horizons = [t1, t0, stall_end, max(stall_end - 1.0, t0), math.inf]
        horizons += [t0 + rng.expovariate(1 / 120), t0 + rng.expovariate(1 / 7200), stall_end + rng.uniform(0, 90)]
        cases += [(job, horizon, start) for horizon in horizons]
    return cases
