"""The score sizes of a score model (agents/saved/score_sizes.py): what its own-size control draws."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from builders import REPO

from agents.models.app_table import TABLE_SIZE, AppTablePolicy
from agents.saved.score_sizes import codec_log, main, score_sizes, table_log
from deepboot_env.env.action import ScoreCodec, make_codec
from deepboot_env.policy import make_policy
from traces.families import FAMILIES, val_scenarios


def _codec(width_classes: int = 3) -> ScoreCodec:
    codec = make_codec("score", 4, 4, "ats-srpt", width_classes=width_classes)
    assert isinstance(codec, ScoreCodec)
    return codec


def _state(*ids: int, apps: tuple[str, ...] = ()) -> SimpleNamespace:
    apps = apps or ("bert",) * len(ids)
    return SimpleNamespace(jobs=[SimpleNamespace(id=i, app=app) for i, app in zip(ids, apps, strict=True)])


def test_job_scores_are_centred_per_decision_and_width_scores_are_not() -> None:
    codec = _codec()
    log = codec_log(codec, max_jobs=4)
    codec.held, codec.held_widths = {1: 0.5, 2: 0.5, 3: 0.5}, {}
    log(_state(1, 2, 3))  # one shift shared by every job: no size
    assert log.sizes().per_job == 0.0 and log.sizes().per_width_class == 0.0
    codec.held, codec.held_widths = {1: 0.3}, {2: (0.6, 0.0, 0.0)}
    log(_state(1, 2, 3, 4, 5))  # job 5 is past the 4 slots; jobs 2-4 hold no score (0)
    log(_state())  # no jobs: no decision
    sizes = log.sizes()
    assert sizes.decisions == 2
    # centred: 0.3 - 0.075 and three times -0.075, over the 3 + 4 job entries
    assert sizes.per_job == pytest.approx(math.sqrt((0.225**2 + 3 * 0.075**2) / 7))
    # uncentred: one 0.6 over the (3 + 4) x 3 class entries
    assert sizes.per_width_class == pytest.approx(math.sqrt(0.36 / 21))


def test_a_model_without_width_scores_sizes_them_at_zero() -> None:
    codec = _codec(width_classes=0)
    log = codec_log(codec, max_jobs=4)
    codec.held = {1: 0.2, 2: -0.2}
    log(_state(1, 2))
    assert log.sizes().per_job == pytest.approx(0.2) and log.sizes().per_width_class == 0.0


def test_a_table_sizes_every_job_by_its_application_row() -> None:
    values = [0.0] * TABLE_SIZE
    values[0], values[1] = 0.4, -0.2  # bert and cifar10's scores
    values[6 + 1] = 0.3  # cifar10's "two" width value (class-major: the second row, the second application)
    log = table_log(AppTablePolicy(values))
    log(_state(*range(40), apps=("bert",) * 39 + ("cifar10",)))  # no slot limit: all 40 jobs
    sizes = log.sizes()
    mean = (39 * 0.4 - 0.2) / 40
    assert sizes.decisions == 1
    assert sizes.per_job == pytest.approx(math.sqrt((39 * (0.4 - mean) ** 2 + (-0.2 - mean) ** 2) / 40))
    assert sizes.per_width_class == pytest.approx(math.sqrt(0.09 / 120))


def test_v6_measures_the_documented_sizes_and_its_control_draws_them() -> None:
    """Golden: docs/history.md#score-v6 (0.131 per job, 0.145 per width class over 4,933 decisions on
    two val seeds of each family), and ``...-wjitter-v6`` draws those sizes to two places."""
    sizes = score_sizes(str(REPO / "models" / "lineage" / "deepboot-score-v6.zip"), val_scenarios(FAMILIES, 2))
    assert sizes.decisions == 4933
    assert round(sizes.per_job, 3) == 0.131 and round(sizes.per_width_class, 3) == 0.145
    control = make_policy("ats-srpt-fcfs-place-rr-warm-wjitter-v6")
    assert (control.sigma, control.width_sigma) == (round(sizes.per_job, 2), round(sizes.per_width_class, 2))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["deepboot-v0"], "deepboot-v0: not a score model (action_mode 'residual')"),
        (["nowhere/model.zip"], "no saved model at nowhere/model.zip"),
        (["deepboot-score-v8", "--seeds", "0"], "--seeds must be 1 to 100, got 0"),
        (["table:nowhere.json"], "nowhere.json: no such table file"),
    ],
)
def test_bad_input_gets_one_line(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and message in err and "\n" not in err and "Traceback" not in err
