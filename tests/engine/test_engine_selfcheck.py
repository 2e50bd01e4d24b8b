"""``nightjar-ray selfcheck`` on the generated tiny pair (real engines): every line passes
(graph modes as a CUDA host would run them, event latencies with the workers' share, a
switch-cost profile the policy loads) and the command exits 0; with a block remap broken on purpose
(``TestingConfig.fault_wrong_block_remap``) the elastic line fails, naming what differs,
the event-latency line of the same run still passes, and the report's exit code is 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.engine.offline import ModelSources
from nightjar_ray.engine.selfcheck import CHECK_NAMES, SelfCheckSetup, run_selfcheck
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.models.pair import ModelPair
from nightjar_ray.policy import SwitchCostTable

pytestmark = pytest.mark.engine


def test_selfcheck_passes_on_the_generated_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NIGHTJAR_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["selfcheck", "--device", "cpu", "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.splitlines()
    report = json.loads((tmp_path / "out" / "selfcheck.json").read_text())
    assert [line["name"] for line in report["lines"]] == list(CHECK_NAMES)
    assert all(line["status"] == "PASS" for line in report["lines"]), report["lines"]
    assert report["exit_code"] == 0
    rows = {row.split()[0]: row.split()[1] for row in printed if row.split()[:1]}
    assert all(rows[name] == "PASS" for name in [*CHECK_NAMES, "summary"])
    figures = {line["name"]: line["figures"] for line in report["lines"]}
    assert figures["gamma-schedule"]["num_catch_up_tokens"] > 0
    elastic = figures["elastic-cycles"]
    assert elastic["num_max_blocks"] > elastic["num_stock_blocks"] == elastic["num_blocks_after"]
    assert figures["graph-modes"]["modes"] == {
        "0": "PIECEWISE",
        "1": "PIECEWISE",
        "2": "PIECEWISE",
        "3": "FULL",
    }
    latency = figures["event-latency"]
    assert latency["expand"]["paper_s"] == 143.9e-3
    for kind in ("expand", "contract"):  # every event the scheduler ran, each rank timed
        assert latency[kind]["num_worker_events"] == latency[kind]["count"] > 0
        assert latency[kind]["worker_s"] > 0 and latency[kind]["scheduler_s"] > 0
    assert latency["reload"]["count"] > 0 and latency["reload"]["worker_s"] > 0
    csv = tmp_path / "out" / "switch-cost.csv"
    table = SwitchCostTable.load(csv)
    assert (table.skip_grid, table.batch_grid) == ((16, 64), (1, 2))
    assert figures["switch-cost"]["path"] == str(csv.resolve())
    assert f"  switch_cost_profile: {csv.resolve()}" in printed


def test_a_wrong_block_remap_fails_the_elastic_line(lossy_pair: ModelPair) -> None:
    setup = SelfCheckSetup(
        ModelSources.of(lossy_pair), testing=TestingConfig(fault_wrong_block_remap=True)
    )
    report = run_selfcheck(setup, ("elastic-cycles", "event-latency"))
    elastic, latency = report.lines
    assert latency.passed, latency.detail  # the same run: its events still happened
    assert not elastic.passed
    assert elastic.name == "elastic-cycles"
    assert "prompts identical to stock vLLM; first difference at prompt" in elastic.detail
    assert elastic.figures["num_moved_blocks"] > 0
    assert report.exit_code == 1
    assert report.summary().detail == "1 of 2 failed: elastic-cycles"
