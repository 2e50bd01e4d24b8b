"""`nightjar-ray bench-serve` end to end on real Ray Serve and vLLM (tiny pair, two
contenders, `off` and nightjar with elastic memory, one short scenario, two rounds): every
contender is its own app under its route, each round's requests reach both, the report and
JSON are written, and each app's counters come from its policy actor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import free_port

pytestmark = pytest.mark.engine


def test_bench_serve_runs_interleaved_rounds_and_writes_the_report(
    nightjar_cache: Path, tmp_path: Path
) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n")
    cmd = [
        sys.executable, "-m", "nightjar_ray.cli.main", "bench-serve", "--pair", "tiny",
        "--contenders", "off,nightjar-elastic", "--scenarios", "low", "--rounds", "2",
        "--duration-s", "8", "--capacity-rps", "3", "--http-port", str(free_port()),
        "--out", str(tmp_path / "out"), "--report", str(report),
    ]  # fmt: skip
    env = {**os.environ, "NIGHTJAR_CACHE_DIR": str(nightjar_cache)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "bench-serve.json").read_text())
    runs = data["low"]
    assert set(runs) == {"off", "nightjar-elastic"}
    for contender in ("off", "nightjar-elastic"):
        assert len(runs[contender]) == 2
        assert all(s["failed"] == 0 and s["completed"] > 0 for s in runs[contender])
    # paired: both contenders got the same requests in each round
    assert [s["num_prompts"] for s in runs["off"]] == [
        s["num_prompts"] for s in runs["nightjar-elastic"]
    ]
    # each app's counters, read from its policy actor: off never speculates, the
    # nightjar app stepped (and the elastic app's memory events are reported)
    counters = data["meta"]["counters"]
    assert sum(counters["off"]["steps_by_gamma"][1:]) == 0 < counters["off"]["steps_by_gamma"][0]
    assert sum(counters["nightjar-elastic"]["steps_by_gamma"]) > 0
    assert set(counters["nightjar-elastic"]["memory_events"]) >= {"expand", "contract"}
    text = report.read_text()
    assert "<!-- bench-serve:start -->" in text and "| nightjar-elastic | " in text
    assert (tmp_path / "out" / "ratios.png").stat().st_size > 0
