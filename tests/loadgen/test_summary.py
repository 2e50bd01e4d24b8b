"""The run summary: vllm bench serve's names and definitions, failures counted."""

from __future__ import annotations

import pytest

from nightjar_ray.loadgen.client import RunResult
from nightjar_ray.loadgen.summary import parse_slos, percentile, summarize
from nightjar_ray.workload import RequestRecord


def _ok(i: int, ttft: float, e2e: float, out: int, itl: list[float]) -> RequestRecord:
    sent = float(i)
    return RequestRecord(
        i, sent, sent, 10, out, sent + ttft, sent + e2e, max_tokens=out, itl_s=tuple(itl)
    )


def _failed(i: int, status: str, error: str) -> RequestRecord:
    return RequestRecord(i, float(i), float(i), 10, 0, None, None, status, error, max_tokens=5)


def _run() -> RunResult:
    records = [
        _ok(0, 0.1, 1.1, 11, [0.1] * 10),
        _ok(1, 0.3, 2.3, 21, [0.1] * 20),
        _failed(2, "http_500", "boom"),
        _failed(3, "error", "ReadTimeout"),
    ]
    return RunResult(records, 0.0, 4.0)


def test_summary_values() -> None:
    s = summarize(_run(), {"ttft": 200.0})
    assert s["num_prompts"] == 4 and s["completed"] == 2 and s["failed"] == 2
    assert s["failures"] == {"http_500": 1, "error": 1}
    assert s["total_input_tokens"] == 20 and s["total_output_tokens"] == 32
    assert s["request_throughput"] == pytest.approx(0.5)
    assert s["output_throughput"] == pytest.approx(8.0)
    assert s["total_token_throughput"] == pytest.approx(13.0)
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_tpot_ms"] == pytest.approx(100.0)  # (1.1-0.1)/10 and (2.3-0.3)/20
    assert s["mean_itl_ms"] == pytest.approx(100.0)
    assert s["mean_e2el_ms"] == pytest.approx(1700.0)
    assert s["p99_e2el_ms"] == pytest.approx(1100 + 1200 * 0.99)
    assert s["request_goodput"] == pytest.approx(0.25)  # only the first meets ttft <= 200 ms


def test_percentile_matches_numpys_linear_rule() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile([], 99) == 0.0


def test_slo_parsing() -> None:
    assert parse_slos("ttft:500,tpot:100") == {"ttft": 500.0, "tpot": 100.0}
    assert parse_slos(None) == {}
    for bad, message in (
        ("ttft", "bad SLO 'ttft'"),
        ("foo:1", "bad SLO 'foo:1'"),
        ("tpot:x", "not a number"),
        ("e2el:-1", "e2el must be > 0"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_slos(bad)
