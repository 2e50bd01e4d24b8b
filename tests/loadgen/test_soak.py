"""Soak bookkeeping: gauge parsing, the RSS trend, KV return, the goal, the trace scaling,
and the sampling loop against the SSE stub (the real server runs in tests/serve)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightjar_ray.cli.soak import soak_requests
from nightjar_ray.loadgen.client import RunResult
from nightjar_ray.loadgen.soak import (
    SoakSample,
    parse_gauges,
    rss_by_kind,
    run_soak,
    slope_per_hour,
    summarize_soak,
)
from nightjar_ray.workload import RequestRecord, RequestSpec
from nightjar_ray.workload.trace import TRACE_ENV
from tests.support import cli_error, shared_trace

from .test_client_stream import stub  # noqa: F401  (fixture)

EXPOSITION = """# HELP ray_nightjar_kv_free_blocks free
# TYPE ray_nightjar_kv_free_blocks gauge
ray_nightjar_kv_free_blocks{ReplicaId="a",SessionName="s"} 100.0
ray_nightjar_kv_free_blocks{ReplicaId="b",SessionName="s"} 20.0
ray_nightjar_kv_blocks{ReplicaId="a"} 128.0
ray_nightjar_kv_blocks_other 5.0
ray_vllm_num_requests_running{x="y"} 3.0
"""


def test_gauges_are_summed_over_label_sets_and_names_match_exactly() -> None:
    got = parse_gauges(EXPOSITION)
    assert got == {"ray_nightjar_kv_free_blocks": 120.0, "ray_nightjar_kv_blocks": 128.0}


def test_slope_per_hour() -> None:
    assert slope_per_hour([0.0, 1800.0, 3600.0], [1.0, 2.0, 3.0]) == pytest.approx(2.0)
    assert slope_per_hour([0.0, 60.0, 120.0], [5.0, 5.0, 5.0]) == 0.0
    assert slope_per_hour([1.0], [2.0]) == 0.0


def _sample(t: float, rss: int, free: float) -> SoakSample:
    gauges = {"ray_nightjar_kv_free_blocks": free, "ray_nightjar_kv_blocks": 128.0}
    return SoakSample(t, {"worker": rss, "engine_core": 1000}, gauges, 0)


def _run(statuses: list[str]) -> RunResult:
    records = [RequestRecord(i, 0.0, 0.0, 4, 4, 0.5, 1.0, s) for i, s in enumerate(statuses)]
    return RunResult(records, 0.0, 600.0)


def test_flat_memory_returned_blocks_no_failure_is_ok() -> None:
    samples = [_sample(60.0 * i, 2**30 + (i % 2) * 4096, 60.0) for i in range(1, 11)]
    report = summarize_soak(samples, _sample(0, 2**30, 127), _sample(660, 2**30, 127), _run(["ok"]))
    assert report.ok and report.kv_returned
    assert report.kv_min_free_blocks == 60.0 and report.num_requests == 1


def test_growth_lost_blocks_or_a_failure_each_fail_the_goal() -> None:
    flat = [_sample(60.0 * i, 2**30, 60.0) for i in range(1, 11)]
    growing = [_sample(60.0 * i, 2**30 + i * 2**25, 60.0) for i in range(1, 11)]
    idle = _sample(0, 2**30, 127)
    report = summarize_soak(growing, idle, _sample(660, 2**30, 127), _run(["ok"]))
    assert not report.ok and report.rss_trend_fraction > 0.02
    # Growth in the first half only (warm-up) does not count.
    warm = [_sample(60.0 * i, 2**30 + min(i, 5) * 2**25, 60.0) for i in range(1, 11)]
    assert summarize_soak(warm, idle, _sample(660, 2**30, 127), _run(["ok"])).ok
    leaked = summarize_soak(flat, idle, _sample(660, 2**30, 126), _run(["ok"]))
    assert not leaked.kv_returned and not leaked.ok
    failed = summarize_soak(flat, idle, _sample(660, 2**30, 127), _run(["ok", "error"]))
    assert failed.num_failed == 1 and not failed.ok
    with pytest.raises(ValueError, match="no samples"):
        summarize_soak([], idle, idle, _run([]))


def test_rss_by_kind_finds_this_process_under_its_own_title() -> None:
    import psutil

    title = " ".join(psutil.Process().cmdline())
    got = rss_by_kind({title[:20]: "me", "no-such-process-title": "none"})
    assert got["me"] >= psutil.Process().memory_info().rss // 2 and got["none"] == 0


def test_soak_requests_span_the_minutes_at_the_mean_rate() -> None:
    reqs = soak_requests(shared_trace(), 30.0, 0.4, 2048)
    assert 0.85 * 720 < len(reqs) < 1.15 * 720
    assert reqs[-1].arrival_s > 0.97 * 1800 and all(r.arrival_s < 1800 for r in reqs)
    assert max(r.num_output_tokens for r in reqs) <= 96
    assert max(r.num_prompt_tokens for r in reqs) <= 256
    assert all(r.prompt is not None and len(r.prompt) == r.num_prompt_tokens for r in reqs)


def test_soak_without_a_trace_exits_saying_how_to_name_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    error = cli_error(["soak", "--out", str(tmp_path)], capsys)
    assert f"soak: error: no trace given: pass --trace PATH or set {TRACE_ENV}" in error
    missing = tmp_path / "missing.csv"
    monkeypatch.setenv(TRACE_ENV, str(missing))
    error = cli_error(["soak", "--out", str(tmp_path)], capsys)
    assert f"soak: error: {TRACE_ENV}: trace file {missing} does not" in error


def test_run_soak_samples_during_and_around_the_load(stub: str) -> None:  # noqa: F811
    from . import test_client_stream

    test_client_stream._Stub.mode[:] = ["clean"] * 8
    calls: list[int] = []

    def sampler() -> tuple[dict[str, int], dict[str, float]]:
        calls.append(1)
        return {"worker": 10 * len(calls)}, {"ray_nightjar_kv_free_blocks": 5.0}

    reqs = [RequestSpec(i, 0.25 * i, 2, 0, (1, 2)) for i in range(6)]
    samples, before, after, run = run_soak(stub, "m", reqs, sampler, 0.2, settle_s=0.0)
    assert all(r.ok for r in run.records) and len(run.records) == 6
    assert before.t_s < samples[0].t_s and samples[-1].t_s <= after.t_s
    assert len(samples) >= 4 and before.rss_bytes == {"worker": 10}
    assert after.num_done == 6


def test_wait_for_gauges_polls_until_the_kv_gauge_is_exported() -> None:
    from nightjar_ray.loadgen.soak import wait_for_gauges

    readings = iter([{}, {}, {"ray_nightjar_kv_free_blocks": 3.0}])
    assert wait_for_gauges(lambda: ({}, next(readings)), 5.0, 0.0)
    assert not wait_for_gauges(lambda: ({}, {}), 0.05, 0.01)
