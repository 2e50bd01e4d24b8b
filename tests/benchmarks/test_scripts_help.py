"""Every script in ``benchmarks/`` runs from the repository root as
``python benchmarks/<script>.py`` and answers ``--help`` (without starting an engine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("[a-z]*.py"))


def test_the_scripts_are_found() -> None:
    assert {"bench_engine.py", "policy_table.py", "simulate_tune.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_answers_help(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {script} ")
