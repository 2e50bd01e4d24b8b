"""``benchmarks/sim_overload.py``: nightjar against the statics under overload, per seed."""

from __future__ import annotations

import re
import sys

import pytest

from benchmarks import sim_overload as tool


def _match(pattern: str, line: str) -> re.Match[str]:
    found = re.search(pattern, line)
    assert found is not None, line
    return found


def test_sim_overload_prints_each_seed_and_the_worst(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim_overload", "--setting", "rtx4090-7b", "--loads", "1.5", "--seeds", "2"]
    monkeypatch.setattr(sys, "argv", [*argv, "--requests", "30", "--jobs", "1"])
    tool.main()
    lines = capsys.readouterr().out.splitlines()
    per_seed = [ln for ln in lines if " seed " in ln]
    assert len(per_seed) == 2
    ratios = [float(_match(r"best static \(\S+\) ([0-9.]+)", ln)[1]) for ln in per_seed]
    summary = _match(r"mean ([0-9.]+), worst ([0-9.]+)", lines[-1])
    assert float(summary[2]) == pytest.approx(min(ratios), abs=1e-3)
    assert float(summary[1]) == pytest.approx(sum(ratios) / 2, abs=1e-3)


def test_sim_overload_refuses_no_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["sim_overload", "--seeds", "0"])
    with pytest.raises(SystemExit, match="--seeds"):
        tool.main()
