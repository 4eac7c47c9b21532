"""benchmarks/bench_episode.py: one episode's CPU per policy, against another checkout."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
from builders import REPO


def _bench_main() -> Callable[[list[str]], int]:
    path = REPO / "benchmarks" / "bench_episode.py"
    spec = importlib.util.spec_from_file_location("bench_episode", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_a_checkout_against_itself_plays_the_same_episode(capsys: pytest.CaptureFixture[str]) -> None:
    """Both children play ``ats`` on test-01 to the same mean JCT, and the speed-up is printed."""
    status = _bench_main()(["--policies", "ats", "--repeat", "1", "--against", str(REPO), "--restart", "afe"])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = [line for line in out.splitlines() if "best CPU" in line]
    assert len(rows) == 2 and "13,139 events" in rows[0]
    assert rows[0].split("train JCT mean ")[1].split(" s,")[0] == rows[1].split("train JCT mean ")[1].split(" s,")[0]
    assert "speed-up" in out


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder that is no checkout, and a simulation option the simulator does not know."""
    assert _bench_main()(["--against", str(tmp_path)]) == 2
    assert f"--against {tmp_path}: not a checkout" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _bench_main()(["--restart", "bogus"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'bogus'" in err[0]


def test_arrays_play_the_same_episode(capsys: pytest.CaptureFixture[str]) -> None:
    """``--arrays`` times the episode on the compiled loop's arrays too: the same mean JCT."""
    status = _bench_main()(["--policies", "ats", "--repeat", "1", "--arrays", "--truth", "fitted"])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = [line for line in out.splitlines() if "best CPU" in line]
    assert len(rows) == 2 and rows[1].lstrip().startswith("arrays") and "arrays speed-up" in out
