"""``nightjar-ray simulate`` smoke tests (small configurations)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from nightjar_ray.cli import simulate
from nightjar_ray.cli.main import main
from nightjar_ray.sim.experiments import RunKnobs, elastic_params
from nightjar_ray.sim.presets import get_setting
from nightjar_ray.sim.scenario import ScenarioConfig, load_scenario
from nightjar_ray.workload.trace import TRACE_ENV
from tests.support import cli_error


def test_simulate_run_prints_metrics_and_writes_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timeline = tmp_path / "timeline.csv"
    code = main(
        ["simulate", "run", "--qps", "8", "--num-requests", "40", "--timeline-csv", str(timeline)]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "throughput" in out and "TTFT" in out and "TPOT" in out and "E2E" in out
    lines = timeline.read_text().splitlines()
    assert lines[0].startswith("time_s,duration_s,num_reqs,gamma")
    assert len(lines) > 10


def test_simulate_compare_prints_ratio_table_and_oracle(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "simulate",
            "compare",
            "--setting",
            "a100-13b",
            "--qps",
            "2",
            "--num-requests",
            "40",
            "--no-trace",
            "--with-ceiling",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    for label in (
        "nightjar",
        "off",
        "fixed-5",
        "vllm-static",
        "dsd",
        "ucbspec",
        "oracle",
        "gamma0+offload",
    ):
        assert label in out
    assert "| 2 qps | " in out


def test_scenario_file_runs_and_unknown_field_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps(
            {"setting": "l20x2-32b", "policy": "dsd", "workload": {"qps": 1.0, "num_requests": 20}}
        )
    )
    assert main(["simulate", "run", "--scenario", str(good)]) == 0
    assert "dsd" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"workload": {"qps": 1.0, "burst": 3}}))
    with pytest.raises(ValueError, match=r"workload\.burst"):
        load_scenario(bad)


def test_compare_replays_the_trace_at_the_preset_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"2023-11-16 18:{m:02d}:{s:02d}.0000000,100,20" for m in range(10) for s in (0, 30)]
    trace.write_text("\n".join(rows) + "\n")
    code = main(
        [
            "simulate",
            "compare",
            "--setting",
            "l20x2-32b",
            "--trace-only",
            "--trace",
            str(trace),
            "--contenders",
            "fixed-1",  # `off`, the baseline of every ratio, runs anyway
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "| trace @ 3 qps |" in out
    assert "| load | off | fixed-1 |" in out


def test_compare_and_run_without_a_trace_exit_saying_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    error = cli_error(["simulate", "compare", "--trace-only"], capsys)
    assert f"simulate: error: no trace given: pass --trace PATH or set {TRACE_ENV}" in error
    error = cli_error(["simulate", "run", "--arrival", "trace"], capsys)
    assert f"simulate: error: no trace given: pass --trace PATH or set {TRACE_ENV}" in error
    missing = tmp_path / "missing.csv"
    error = cli_error(["simulate", "run", "--arrival", "trace", "--trace", str(missing)], capsys)
    assert error.endswith(f"simulate run: error: argument --trace: no such file: {missing}")


def test_compare_names_unknown_contenders(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "compare", "--no-trace", "--contenders", "off,fixed-9"]
    assert "--contenders: unknown ['fixed-9']; choose from" in cli_error(argv, capsys)


def test_simulate_run_applies_policy_params(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "run", "--qps", "4", "--num-requests", "30", "--policy", "fixed"]
    assert main([*args, "--policy-params", '{"gamma": 2}']) == 0
    assert "mean gamma 2.00" in capsys.readouterr().out


def _capture_knobs(monkeypatch: pytest.MonkeyPatch) -> list[RunKnobs]:
    """Make ``simulate run`` stop at the simulation, recording the knobs it was given."""
    seen: list[RunKnobs] = []

    def spy(setting: object, contender: object, wl: object, ds: str, seed: int, knobs: RunKnobs):  # type: ignore[no-untyped-def]
        seen.append(knobs)
        raise SystemExit("stopped at the simulation")

    monkeypatch.setattr(simulate, "run_contender", spy)
    return seen


def test_reclaim_flag_reaches_the_elastic_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reclaim is the simulator's default; ``--no-reclaim-draft-kv`` is the paper's offload."""
    seen = _capture_knobs(monkeypatch)
    for flag, expected in (([], True), (["--no-reclaim-draft-kv"], False)):
        with pytest.raises(SystemExit, match="stopped at the simulation"):
            main(["simulate", "run", "--num-requests", "5", *flag])
        assert seen[-1].reclaim_draft_kv is expected
    assert ScenarioConfig.model_validate({}).knobs.reclaim_draft_kv
    assert not ScenarioConfig.model_validate({"reclaim_draft_kv": False}).knobs.reclaim_draft_kv


def test_contract_persist_flag_reaches_the_elastic_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _capture_knobs(monkeypatch)
    with pytest.raises(SystemExit, match="stopped at the simulation"):
        main(["simulate", "run", "--num-requests", "5", "--contract-persist-steps", "3"])
    assert elastic_params(get_setting("rtx4090-7b"), seen[-1]).contract_persist_steps == 3
    with pytest.raises(ValidationError, match="contract_persist_steps"):
        ScenarioConfig.model_validate({"contract_persist_steps": 0})


def _nightjar_gap(table: str) -> float:
    """The `nightjar / oracle` cell of a one-load ratio table."""
    row = next(line for line in table.splitlines() if line.startswith("| 2 qps |"))
    return float(row.rstrip(" |").rsplit("|", 1)[1])


def test_compare_over_seeds_summarises_nightjar_against_each_seeds_oracle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "compare", "--setting", "a100-13b", "--qps", "2", "--num-requests", "40"]
    argv += ["--no-trace", "--contenders", "nightjar,fixed-4"]
    gaps = []
    for seed in ("0", "1", "2"):
        assert main([*argv, "--seed", seed]) == 0
        gaps.append(_nightjar_gap(capsys.readouterr().out))
    assert len(set(gaps)) > 1  # the seeds differ, so the summary has something to average
    assert main([*argv, "--seeds", "0,1,2"]) == 0
    out = capsys.readouterr().out
    per_seed, summary = out.split("seeds 0,1,2")
    assert [_nightjar_gap(t) for t in per_seed.split("seed ")[1:]] == gaps
    row = next(line for line in summary.splitlines() if line.startswith("| 2 qps |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert [float(c.split()[0]) for c in cells[1:4]] == gaps
    assert float(cells[4]) == pytest.approx(sum(gaps) / 3, abs=1e-3)
    assert float(cells[5]) == min(gaps)
    assert cells[6] == f"{sum(g > 1.0 for g in gaps)}/3"


@pytest.mark.parametrize("seeds", ["0,x", "1,1", "-1"])
def test_compare_rejects_bad_seeds_naming_the_flag(
    seeds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "compare", "--no-trace", f"--seeds={seeds}"]
    assert "simulate: error: --seeds: expected" in cli_error(argv, capsys)


def test_compare_in_processes_prints_what_one_process_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "compare", "--setting", "rtx4090-7b", "--qps", "4,12"]
    argv += ["--num-requests", "40", "--no-trace", "--contenders", "nightjar,fixed-2"]
    argv += ["--seeds", "0,1"]
    assert main(argv) == 0
    serial = capsys.readouterr().out
    assert main([*argv, "--jobs", "3"]) == 0
    assert capsys.readouterr().out == serial
    # per seed a ratio and an absolute table, then the summary
    assert serial.count("| 4 qps |") == 5 and serial.count("| 12 qps |") == 5


def test_compare_rejects_jobs_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "compare", "--no-trace", "--jobs", "0"]
    assert "--jobs: expected an integer >= 1" in cli_error(argv, capsys)
