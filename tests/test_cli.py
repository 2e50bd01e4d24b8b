"""The command-line entry points run end to end (small sizes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nightjar_ray.cli.main import main


def test_policy_table_prints_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy-table", "--tokens-per-phase", "2000", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for label in ("off", "fixed g=2", "vllm-static", "dsd", "ucbspec", "exp3spec", "nightjar"):
        assert f"\n{label} " in out
    off_row = next(line for line in out.splitlines() if line.startswith("off "))
    assert off_row.split()[1:] == ["1.000"] * 5


def test_bench_policy_reports_median_and_p99(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-policy", "--steps", "2000", "--policies", "nightjar", "off"]) == 0
    out = capsys.readouterr().out
    assert "dict lookup" in out and "nightjar" in out and "med/dict" in out


def test_policy_regret_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy-regret", "--horizons", "200", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "nightjar-paper" in out and "nightjar share" in out


def test_console_script_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nightjar_ray.cli.main", "--help"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "demo" in out and "policy-table" in out and "bench-policy" in out
