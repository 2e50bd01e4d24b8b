"""`nightjar-ray bench-serve` end to end on real Ray Serve and vLLM (tiny pair, eager
engines, three contenders, `off`, nightjar with elastic memory and fixed-1, at most two apps
resident, so two waves; one short scenario, two rounds): every contender is its own app
under its route, each round's requests reach every app of the wave, `off` runs in both
waves, the report and JSON are written, each app's counters come from its policy actor, and
`--render` rebuilds the same report from the JSON without a cluster.

The end-to-end run deploys three apps (about 4 minutes on 2 cores), so it is a `research`
test (`make bench-research`); the default suite renders a recorded run's JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port

RECORDED = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "bench-serve.json"


def test_render_rebuilds_the_report_of_a_recorded_run_without_a_cluster(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n")
    render = [
        sys.executable, "-m", "nightjar_ray.cli.main", "bench-serve", "--render", str(RECORDED),
        "--out", str(tmp_path / "out"), "--report", str(report),
    ]  # fmt: skip
    proc = subprocess.run(render, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(RECORDED.read_text())
    text = report.read_text()
    assert "<!-- bench-serve:start -->" in text and "**throughput**" in text
    scenarios = [k for k in data if k != "meta"]
    header = "| policy | " + " | ".join(scenarios) + " |"
    assert text.count(header) >= 2  # throughput and mean E2E, a column per scenario
    for contender in set(data[scenarios[0]]) - {"off"}:  # ratios to `off`, a row each
        assert f"| {contender} | " in text
    assert (tmp_path / "out" / "ratios.png").stat().st_size > 0


@pytest.mark.engine
@pytest.mark.research
def test_bench_serve_runs_interleaved_rounds_and_writes_the_report(
    nightjar_cache: Path, tmp_path: Path
) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n")
    cmd = [
        sys.executable, "-m", "nightjar_ray.cli.main", "bench-serve", "--pair", "tiny",
        "--contenders", "off,nightjar-elastic,fixed-1", "--max-resident", "2",
        "--scenarios", "low", "--rounds", "2", "--enforce-eager",
        "--duration-s", "5", "--capacity-rps", "3", "--http-port", str(free_port()),
        "--out", str(tmp_path / "out"), "--report", str(report),
    ]  # fmt: skip
    env = {**os.environ, "NIGHTJAR_CACHE_DIR": str(nightjar_cache)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "bench-serve.json").read_text())
    assert data["meta"]["waves"] == [["off", "nightjar-elastic"], ["off", "fixed-1"]]
    runs = data["low"]
    assert set(runs) == {"off", "nightjar-elastic", "fixed-1"}
    assert [(s["bench_wave"], s["bench_round"]) for s in runs["off"]] == [
        (0, 0), (0, 1), (1, 0), (1, 1),
    ]  # fmt: skip
    assert [(s["bench_wave"], s["bench_round"]) for s in runs["fixed-1"]] == [(1, 0), (1, 1)]
    for contender, n in (("off", 4), ("nightjar-elastic", 2), ("fixed-1", 2)):
        assert len(runs[contender]) == n
        assert all(s["failed"] == 0 and s["completed"] > 0 for s in runs[contender])
    # paired: every contender got the same requests in each round, in either wave
    prompts = [s["num_prompts"] for s in runs["off"]]
    assert prompts[:2] == prompts[2:]
    assert [s["num_prompts"] for s in runs["nightjar-elastic"]] == prompts[:2]
    assert [s["num_prompts"] for s in runs["fixed-1"]] == prompts[2:]
    # each app's counters, read from its policy actor: off never speculates, the
    # nightjar app stepped (and the elastic app's memory events are reported)
    counters = data["meta"]["counters"]
    assert sum(counters["off"]["steps_by_gamma"][1:]) == 0 < counters["off"]["steps_by_gamma"][0]
    assert sum(counters["nightjar-elastic"]["steps_by_gamma"]) > 0
    assert set(counters["nightjar-elastic"]["memory_events"]) >= {"expand", "contract"}
    steps = counters["fixed-1"]["steps_by_gamma"]  # a second wave's app, deployed after
    assert steps[1] > 0 and steps[0] == 0 == sum(steps[2:])  # the first was deleted
    text = report.read_text()
    assert "<!-- bench-serve:start -->" in text and "| nightjar-elastic | " in text
    assert "| fixed-1 | " in text and "2 wave(s)" in text
    assert (tmp_path / "out" / "ratios.png").stat().st_size > 0

    # --render: the same tables from the JSON alone
    rendered = tmp_path / "rendered.md"
    render = [
        sys.executable, "-m", "nightjar_ray.cli.main", "bench-serve", "--render",
        str(tmp_path / "out" / "bench-serve.json"), "--out", str(tmp_path / "re"),
        "--report", str(rendered),
    ]  # fmt: skip
    proc = subprocess.run(render, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = text.split("**throughput**", 1)[1]
    assert rendered.read_text().split("**throughput**", 1)[1] == table
