"""The simulator research scripts run end to end (small sizes): ``simulate_calibrate.py``
and ``simulate_tune.py``."""

from __future__ import annotations

import pytest

from benchmarks import simulate_calibrate, simulate_tune


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
