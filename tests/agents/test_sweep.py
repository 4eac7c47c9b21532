"""``train_policy.py --tune``: a 2-trial sweep on Ray Tune (ASHA), its folders and the exported
best model; the search-space errors. The sweep runs on the module's local Ray instance
(``ray_cluster`` of conftest.py) and is skipped without the ``ray`` extra."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import yaml
from builders import REPO

sys.path.insert(0, str(REPO))  # train_policy.py is a script at the repository root

import train_policy  # noqa: E402
from agents.errors import ConfigError  # noqa: E402
from agents.trainers.sweep import parse_space  # noqa: E402
from traces.generate import generate_workload, write_workload_csv  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_a_two_trial_sweep_keeps_every_run_and_exports_the_best(ray_cluster: str, tmp_path: Path) -> None:
    pytest.importorskip("ray.tune")
    from agents import load_agent

    wl = generate_workload("tiny", 1, train={"num_jobs": 10}, inference={"horizon_s": 4 * 3600.0, "mean_gpus": 3.0})
    tiny = write_workload_csv(wl, tmp_path / "tiny.csv")
    spec = tmp_path / "sweep.yml"
    spec.write_text("seed: {grid: [0, 1]}\nlearning_rate: {loguniform: [1e-4, 1e-3]}\n")
    argv = ["--algo", "maskable_ppo", "--preset", "smoke", "--workload", str(tiny), "--eval-workload", str(tiny)]
    argv += ["-n", "512", "--eval-freq", "256", "--n-envs", "1", "--eval-jobs", "1", "--verbose", "0"]
    sweep_dir = train_policy.run([*argv, "--tune", str(spec), "--log-folder", str(tmp_path / "runs")])
    assert sweep_dir == tmp_path / "runs" / "sweep_1"
    with open(sweep_dir / "trials.csv", encoding="utf-8") as fh:
        trials = list(csv.DictReader(fh))
    assert sorted(int(t["seed"]) for t in trials) == [0, 1] and not any(t["error"] for t in trials)
    for t in trials:
        run = Path(t["run_dir"])
        config = yaml.safe_load((run / "config.yml").read_text())
        assert config["seed"] == int(t["seed"])
        assert config["hyperparams"]["learning_rate"] == pytest.approx(float(t["learning_rate"]))
        assert 1e-4 <= float(t["learning_rate"]) <= 1e-3
        assert list((run / "tb").glob("events.out.tfevents.*")) and (run / "best_model.zip").is_file()
        with open(run / "evaluations.csv", encoding="utf-8") as fh:
            ratios = [float(r["jct_ratio"]) for r in csv.DictReader(fh)]
        assert float(t["best_score"]) == pytest.approx(min(ratios))  # what the trial reported to Tune
        assert int(t["timesteps"]) in (256, 512)  # 256: ASHA stopped it at its first rung
    assert {int(t["timesteps"]) for t in trials} != {256}  # at least one trial ran to the end
    best = min(trials, key=lambda t: float(t["best_score"]))
    model, env = load_agent(str(sweep_dir / "best_model.zip"))
    original, _ = load_agent(str(Path(best["run_dir"]) / "best_model.zip"))
    for key, value in original.policy.state_dict().items():
        assert model.policy.state_dict()[key].equal(value), key


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"gamma": {"normal": [0, 1]}}, "--tune: gamma: expected a constant or one of {grid, choice, uniform, "),
        ({"speed": {"grid": [1]}}, "--tune: unknown key 'speed'; known: num_samples, asha, seed, "),
        ({"learning_rate": {"loguniform": [0, 1e-3]}}, "--tune: learning_rate: loguniform needs 0 < low < high"),
        ({"n_steps": {"grid": [64, "x"]}}, "--tune: hyperparameter n_steps: bad value 'x'"),
        ({"seed": {"grid": [0]}, "num_samples": 0}, "--tune: num_samples must be an integer >= 1"),
        ({"num_samples": 2}, "--tune: the search space is empty"),
    ],
)
def test_a_bad_search_space_is_refused_in_one_line(spec: dict, message: str) -> None:
    with pytest.raises(ConfigError) as bad:
        parse_space(spec)
    assert str(bad.value).startswith(message) and "\n" not in str(bad.value)


def test_a_search_space_reads_yaml_numbers() -> None:
    space, samples, asha = parse_space(
        yaml.safe_load(
            "seed: {grid: [0, 1]}\nlearning_rate: {loguniform: [1e-5, 1e-3]}\nn_epochs: 4\n"
            "num_samples: 3\nasha: {grace_period: 512}"
        )
    )
    assert space == {
        "seed": ("grid", [0, 1]),
        "learning_rate": ("loguniform", [1e-5, 1e-3]),
        "n_epochs": ("constant", 4),
    }
    assert samples == 3 and asha == {"grace_period": 512}
