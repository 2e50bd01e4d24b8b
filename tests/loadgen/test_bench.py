"""Benchmark orchestration and its statistics, on a fake runner (the seam; the real
endpoint path is tests/serve/test_bench_serve.py)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from nightjar_ray.loadgen.bench import (
    CONTROL,
    ROUND,
    SCENARIOS,
    WAVE,
    BenchResult,
    plan_waves,
    run_rounds,
    scenarios,
)
from nightjar_ray.loadgen.client import RunResult
from nightjar_ray.loadgen.report import END, START, markdown, ratio_table, write_section
from nightjar_ray.loadgen.stats import bootstrap_ci, paired_ratios, resolution
from nightjar_ray.workload import RequestRecord, RequestSpec
from tests.support import SHARED_TRACE, cli_error

SPEED = {"off": 1.0, CONTROL: 1.0, "fast": 1.2, "slow": 0.8}


def _fake_runner(calls: list[tuple[str, int]], drift: list[float]):  # type: ignore[no-untyped-def]
    """Every request takes 1 s x drift / speed; the drift changes between rounds."""

    def run(contender: str, requests: list[RequestSpec]) -> RunResult:
        calls.append((contender, len(requests)))
        scale = drift[(len(calls) - 1) // 3 % len(drift)] / SPEED[contender]
        records = []
        for spec in requests:
            sent, out = spec.arrival_s, spec.num_output_tokens
            r = RequestRecord(
                spec.req_id, sent, sent, spec.num_prompt_tokens, out,
                sent + 0.1 * scale, sent + 1.0 * scale, max_tokens=out,
            )  # fmt: skip
            records.append(r)
        return RunResult(records, 0.0, 10.0 * scale)

    return run


def test_rounds_interleave_and_ratios_cancel_the_drift() -> None:
    calls: list[tuple[str, int]] = []
    # the machine drifts by up to 40% from round to round (three runs a round)
    drift = [1.0, 1.4, 0.8]
    runner = _fake_runner(calls, drift)
    low = SCENARIOS["low"]
    result = run_rounds(runner, ["off", "fast", CONTROL], [low], 3, 2.0, 30.0, 1000)
    assert len(calls) == 9
    # one request list per round, shared by every contender of the round
    for rnd in range(3):
        assert len({n for _, n in calls[3 * rnd : 3 * rnd + 3]}) == 1
    # the order is shuffled between rounds
    assert len({tuple(c for c, _ in calls[3 * r : 3 * r + 3]) for r in range(3)}) > 1
    table = ratio_table(result, "output_throughput")["low"]
    assert table["fast"].median == pytest.approx(1.2, rel=1e-6)
    assert table[CONTROL].median == pytest.approx(1.0, rel=1e-6)


def test_paired_ratios_and_bootstrap() -> None:
    rng = random.Random(0)
    s = paired_ratios([1.1, 1.2, 0.9, 1.0], [1.0, 1.0, 1.0, 1.0], rng)
    assert s.median == pytest.approx(1.05) and (s.low, s.high) == (0.9, 1.2)
    assert s.ci_low <= 1.05 <= s.ci_high and s.ci_low >= 0.9 and s.ci_high <= 1.2
    assert resolution(s) == pytest.approx(max(1 - s.ci_low, s.ci_high - 1))
    lo, hi = bootstrap_ci([2.0] * 5, rng)
    assert lo == hi == 2.0
    with pytest.raises(ValueError, match="one value per round"):
        paired_ratios([1.0], [1.0, 2.0], rng)


def test_report_section_is_regenerated_in_place(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []
    result = run_rounds(
        _fake_runner(calls, [1.0]),
        ["off", "fast", CONTROL],
        [SCENARIOS["high"]],
        2,
        2.0,
        20.0,
        1000,
    )
    section = markdown(result, "Header line.")
    assert "| fast | 1.200" in section and "A/A resolution" in section
    assert "Failed requests in the whole run: 0." in section
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n")
    write_section(doc, section)
    write_section(doc, section.replace("Header line.", "Second run."))
    text = doc.read_text()
    assert text.count(START) == 1 and text.count(END) == 1
    assert "Second run." in text and "Header line." not in text and text.startswith("# Benchmarks")


def test_every_scenario_builds_requests_scaled_to_capacity() -> None:
    # NOTE: the shared trace lives next to the checkout (../shared); a clone elsewhere
    # checks every other scenario.
    has_trace = SHARED_TRACE.is_file()
    table = scenarios(SHARED_TRACE if has_trace else None)
    expected = {"low", "medium", "high", "burst", "prefill-heavy", "mixed"}
    assert set(table) == (expected | {"trace"} if has_trace else expected)
    counts = {name: len(s.build(1.0, 0, 600.0, 1000)) for name, s in table.items()}
    assert counts["low"] < counts["medium"] < counts["high"]
    assert counts["high"] == pytest.approx(540, rel=0.15)
    if has_trace:
        assert counts["trace"] == pytest.approx(300, rel=0.3)  # 0.5x capacity on average
    assert counts["prefill-heavy"] == pytest.approx(120, rel=0.2)  # 0.2x: long prompts
    heavy = table["prefill-heavy"].build(1.0, 0, 60.0, 1000)
    assert all(512 <= r.num_prompt_tokens <= 1024 and r.num_output_tokens <= 16 for r in heavy)
    assert all(r.prompt is not None and len(r.prompt) == r.num_prompt_tokens for r in heavy)
    assert counts["mixed"] == pytest.approx(180, rel=0.2)  # 0.3x capacity


def test_the_mixed_scenario_puts_both_shapes_in_one_stream() -> None:
    """Long prompts with short outputs and short prompts with long outputs, a fair coin per
    request, arriving interleaved (so they share batches)."""
    mixed = scenarios()["mixed"].build(2.0, 0, 120.0, 1000)
    long_prompt = [r for r in mixed if r.num_prompt_tokens >= 512]
    chat = [r for r in mixed if r.num_prompt_tokens <= 128]
    assert len(long_prompt) + len(chat) == len(mixed)
    assert all(r.num_output_tokens <= 8 for r in long_prompt)
    assert all(96 <= r.num_output_tokens <= 192 for r in chat)
    assert 0.35 < len(long_prompt) / len(mixed) < 0.65
    kinds = [r.num_prompt_tokens >= 512 for r in sorted(mixed, key=lambda r: r.arrival_s)]
    assert sum(a != b for a, b in itertools.pairwise(kinds)) > len(mixed) // 4


def test_waves_keep_off_resident_and_cap_the_apps() -> None:
    names = ["off", "a", CONTROL, "b", "c", "d", "e"]
    waves = plan_waves(names, 4)
    assert waves == [["off", CONTROL, "a", "b"], ["off", CONTROL, "c", "d"], ["off", CONTROL, "e"]]
    assert all(len(w) <= 4 for w in waves)
    assert plan_waves(names, 7) == [["off", CONTROL, "a", "b", "c", "d", "e"]]
    assert plan_waves(["off", "a", "b"], 2) == [["off", "a"], ["off", "b"]]
    assert plan_waves(["off", CONTROL], 2) == [["off", CONTROL]]
    with pytest.raises(ValueError, match="max_resident=2"):
        plan_waves(names, 2)
    with pytest.raises(ValueError, match="'off'"):
        plan_waves(["a", "b"], 4)


def _scaled_runner(scale: dict[str, float]):  # type: ignore[no-untyped-def]
    """Every request takes ``scale['machine']`` / speed seconds; the test changes the
    machine's speed between waves."""
    calls = [0]

    def run(contender: str, requests: list[RequestSpec]) -> RunResult:
        calls[0] += 1
        runner = _fake_runner([], [scale["machine"] * (1 + 0.1 * (calls[0] % 2))])
        return runner(contender, requests)  # type: ignore[no-any-return]

    return run


def test_each_wave_pairs_with_its_own_off() -> None:
    scale = {"machine": 1.0}
    runner = _scaled_runner(scale)
    low, high = SCENARIOS["low"], SCENARIOS["high"]
    result = run_rounds(runner, ["off", "fast"], [low], 2, 2.0, 20.0, 1000)
    scale["machine"] = 2.0  # the next wave runs on a machine twice as slow
    run_rounds(runner, ["off", "slow"], [low, high], 2, 2.0, 20.0, 1000, result=result, wave=1)
    assert result.num_waves() == 2
    assert [(s[WAVE], s[ROUND]) for s in result.summaries["low"]["off"]] == [
        (0, 0), (0, 1), (1, 0), (1, 1),
    ]  # fmt: skip
    fast, base = result.paired("low", "fast", "output_throughput")
    assert len(fast) == len(base) == 2
    table = ratio_table(result, "output_throughput")
    # paired with their own wave's off, the machine's change between waves cancels
    assert table["low"]["fast"].median == pytest.approx(1.2, rel=0.15)
    assert table["low"]["slow"].median == pytest.approx(0.8, rel=0.15)
    assert "fast" not in table["high"]
    # a contender absent from a scenario renders "-" rather than failing the report
    section = markdown(result, "h")
    assert "| fast | " in section and section.split("| fast | ")[1].split("\n")[0].endswith("| - |")

    # the same runs saved as two files and merged: the pairs are unchanged
    first, second = BenchResult(), BenchResult()
    for scenario, by in result.summaries.items():
        for contender, runs in by.items():
            for s in runs:
                into = first if s[WAVE] == 0 else second
                into.add(scenario, contender, s, 0, s[ROUND])
    first.merge(second)
    assert ratio_table(first, "output_throughput") == table

    # a file saved before waves (no tags) pairs by position
    untagged = {"meta": {}, "low": {
        "off": [{"output_throughput": 10.0}, {"output_throughput": 20.0}],
        "fast": [{"output_throughput": 12.0}, {"output_throughput": 24.0}],
    }}  # fmt: skip
    old = BenchResult.from_json(untagged)
    assert ratio_table(old, "output_throughput")["low"]["fast"].ratios == (1.2, 1.2)


def test_bench_serve_refuses_bad_waves_and_mismatched_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # checked before any cluster starts
    argv = ["bench-serve", "--contenders", "off,off-aa,nightjar", "--max-resident", "2"]
    assert "--max-resident: max_resident=2 leaves no room" in cli_error(argv, capsys)
    files = []
    for i, capacity in enumerate((2.5, 3.5)):
        meta = {"capacity_rps": capacity, "pair": "default", "duration_s": 40.0}
        data = {"meta": meta, "low": {"off": [{"output_throughput": 1.0}]}}
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(data))
    argv = ["bench-serve", "--render", *map(str, files), "--out", str(tmp_path / "o")]
    assert "--render: the files differ in capacity_rps" in cli_error(argv, capsys)


def test_replica_reports_sum_into_one_apps_counters() -> None:
    from nightjar_ray.cli.bench_local import add_counts, sum_reports

    reports = [
        {
            "steps_by_gamma": [5, 2],
            "decisions_by_mode": {"exploit": 6, "gate": 1},
            "memory_events": {"offload": (1, 0.5)},
        },
        {"steps_by_gamma": [1, 0, 0, 3], "decisions_by_mode": {"exploit": 4}},
        {},  # a replica that has not reported yet
    ]
    total = sum_reports(reports)
    assert total == {
        "steps_by_gamma": [6, 2, 0, 3],
        "decisions_by_mode": {"exploit": 10, "gate": 1},
        "memory_events": {"offload": 1},
    }
    again = add_counts(total, sum_reports(reports[:1]))  # the same app in a second wave
    assert again["steps_by_gamma"] == [11, 4, 0, 3]
    assert again["memory_events"] == {"offload": 2}


def test_each_run_keeps_its_contenders_pools_in_a_fresh_folder(tmp_path: Path) -> None:
    """A contender's policy actor snapshots its pool under the run's ``--out``, emptied at
    the start: a name used by an earlier run (``nightjar``) must not start from what that
    run learned, or the first round is warm for it and cold for a new name."""
    from nightjar_ray.cli.bench_local import contender_args, fresh_pool_dir
    from nightjar_ray.engine import NightjarConfig

    stale = tmp_path / "policy-pool" / "nightjar-policy.nightjar.bench.0.json"
    stale.parent.mkdir()
    stale.write_text("{}")
    pools = fresh_pool_dir(tmp_path)
    assert pools == stale.parent.resolve() and not any(pools.iterdir())
    args = contender_args("default", "nightjar", {}, snapshot_dir=str(pools))
    config = NightjarConfig.model_validate(args["nightjar"])
    assert config.pooling.snapshot_dir == str(pools)
    assert config.pooling.sync_interval_s == 1.0  # the main job's other pooling fields stay
