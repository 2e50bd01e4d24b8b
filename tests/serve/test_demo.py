"""The main job, as CI runs it: ``nightjar-ray demo --exit-after-report`` on the tiny pair.

It starts its own local Ray cluster, deploys the app, drives low -> high -> low load
through the OpenAI endpoint and prints one row per phase.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import free_port

pytestmark = pytest.mark.engine


def test_main_job_reports_all_three_phases_and_exits(nightjar_cache: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "nightjar_ray.cli.main",
        "demo",
        "--pair",
        "tiny",
        "--phase-seconds",
        "6",
        "--high-concurrency",
        "6",
        "--max-tokens",
        "24",
        "--http-port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        "--exit-after-report",
    ]
    env = {**os.environ, "NIGHTJAR_CACHE_DIR": str(nightjar_cache)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    table = out[out.index("Per phase") :].splitlines()
    rows = [line.split() for line in table if re.match(r"^(low|high) ", line)]
    assert [r[0] for r in rows] == ["low", "high", "low"]
    for row in rows:
        requests, failed, tokens_per_s = int(row[2]), int(row[3]), float(row[4])
        assert requests > 0 and failed == 0 and tokens_per_s > 0
        assert "1/1" in row and any(re.fullmatch(r"\d:\d+%", cell) for cell in row)
    assert int(rows[1][1]) == 6  # the high phase ran at the requested concurrency
    for step in ("[1/4]", "[2/4]", "[3/4]", "[4/4]"):
        assert step in out
