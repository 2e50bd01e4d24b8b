"""The simulator research scripts run end to end (small sizes): ``simulate_calibrate.py``,
``simulate_tune.py`` and ``suite_trace.py``."""

from __future__ import annotations

import pytest

from benchmarks import simulate_calibrate, simulate_tune, suite_trace


def test_simulate_calibrate(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_calibrate.main(["--setting", "l20x2-32b"]) == 0
    out = capsys.readouterr().out
    assert "Table 1" in out and "Table 3" in out and "17.87" in out


def test_simulate_tune_prints_one_ratio_per_variant_and_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--setting", "l20x2-32b", "--qps", "1", "--num-requests", "20"]
    assert simulate_tune.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [c.strip() for c in lines[1].strip("|").split("|")]
    assert header == ["load"] + [v.label for v in simulate_tune.variants()]
    assert lines[3].startswith("| 1 qps |") and len(lines) == 4
    ratios = [float(c) for c in lines[3].strip("|").split("|")[1:]]
    assert len(ratios) == len(header) - 1 and all(r > 0.0 for r in ratios)


def test_suite_trace_prints_runs_windows_decisions_and_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--setting", "l20x2-32b", "--workload", "low", "--seed", "0", "--warm"]
    argv += ["--window-s", "20", "--steps", "0:10", "--table", "1,8"]
    assert suite_trace.main(argv) == 0
    out = capsys.readouterr().out
    runs = [line for line in out.splitlines() if line.startswith("== ")]
    assert runs[0].startswith("== off: mean E2E") and runs[1].startswith("== nightjar-warm:")
    assert runs[2].startswith("== nightjar-warm: decisions started in [0.0, 10.0)")
    decisions = out.split(runs[2])[1].splitlines()[1:]
    assert decisions and all(" explored " in d and " observed " in d for d in decisions)
    assert all(0.0 <= float(d.split()[0].removesuffix("s")) < 10.0 for d in decisions)
    # NOTE: warm-started, nightjar starts from the earlier run's table: key 8 ranks its arms.
    started = out.split("nightjar started from")[1].split("nightjar ended with")[0]
    (row,) = [line for line in started.splitlines() if line.startswith("  B    8 key    8:")]
    assert len(row.split("|")[1].split()) == 5
