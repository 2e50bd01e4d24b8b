"""The load generator's requests: trace scaling and the flags (pure; no endpoint)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nightjar_ray.cli.loadgen import build_requests
from nightjar_ray.cli.main import build_parser
from nightjar_ray.loadgen.workload import TraceScaling, scale_segment, trace_requests
from nightjar_ray.workload.trace import read_trace
from tests.support import cli_error, shared_trace


def _csv(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"{t},{c},{g}" for t, c, g in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_trace_scaling_time_rate_and_tokens(tmp_path: Path) -> None:
    rows = [(f"2023-11-16 18:00:{s:02d}.0000000", 800, 200) for s in range(0, 60, 2)]
    trace = read_trace(_csv(tmp_path / "t.csv", rows))
    assert [r.arrival_s for r in trace[:3]] == [0.0, 2.0, 4.0]
    scaling = TraceScaling(
        offset_s=10, duration_s=10, speedup=2, token_scale=8, max_output_tokens=16
    )
    seg = scale_segment(trace, scaling, random.Random(0))
    # trace seconds [10, 30) replayed in 10 s: arrivals 0, 1, ..., 9
    assert [r.arrival_s for r in seg] == [float(i) for i in range(10)]
    assert [r.req_id for r in seg] == list(range(10))
    assert {(r.num_prompt_tokens, r.num_output_tokens) for r in seg} == {(100, 16)}
    sampled = scale_segment(trace, TraceScaling(duration_s=60, sample=0.5), random.Random(0))
    assert 5 <= len(sampled) <= 25
    with_prompts = trace_requests(seg, 50, random.Random(0))
    assert all(r.prompt is not None and len(r.prompt) == 100 for r in with_prompts)


def test_bad_scaling_is_named() -> None:
    with pytest.raises(ValueError, match="sample"):
        TraceScaling(sample=0.0)


def test_a_missing_trace_is_a_clear_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.csv"
    line = cli_error(["loadgen", "--trace", str(missing), "--out", str(tmp_path / "out")], capsys)
    assert line == f"nightjar-ray loadgen: error: --trace: trace file {missing} does not exist"


def test_the_real_trace_replays_a_varying_rate() -> None:
    parser = build_parser()
    args = parser.parse_args([
        "loadgen", "--trace", str(shared_trace()), "--trace-offset-s", "600", "--duration-s",
        "300", "--trace-speedup", "4", "--trace-sample", "0.02", "--trace-token-scale", "8",
        "--max-input-tokens", "256", "--max-output-tokens", "64",
    ])  # fmt: skip
    requests = build_requests(args)
    assert 100 < len(requests) < 250
    per_minute = [
        sum(1 for r in requests if m * 60 <= r.arrival_s < (m + 1) * 60) for m in range(5)
    ]
    assert max(per_minute) > 1.3 * min(per_minute)  # the trace's rate moves
    assert all(
        r.prompt is not None and 1 <= len(r.prompt) <= 256 and 1 <= r.num_output_tokens <= 64
        for r in requests
    )


def test_synthetic_requests_follow_the_flags() -> None:
    args = build_parser().parse_args(
        ["loadgen", "--rate", "3", "--duration-s", "100", "--input-len", "5:9", "--output-len", "7"]
    )
    requests = build_requests(args)
    assert len(requests) == pytest.approx(300, rel=0.2)
    assert {r.num_output_tokens for r in requests} == {7}
    prompts = [r.prompt for r in requests if isinstance(r.prompt, tuple)]
    assert len(prompts) == len(requests)
    assert all(5 <= len(p) <= 9 for p in prompts)
    assert all(10 <= t < 1000 for p in prompts for t in p)
    assert build_requests(args) == requests  # seeded


def test_request_headers_carry_the_api_key_from_the_environment_and_each_header() -> None:
    from nightjar_ray.loadgen.client import request_headers

    assert request_headers([], {}) == {}
    assert request_headers([], {"NIGHTJAR_API_KEY": "k1"}) == {"Authorization": "Bearer k1"}
    assert request_headers(
        ["Authorization: Bearer k2", "X-Team:  a b "], {"NIGHTJAR_API_KEY": "k1"}
    ) == {
        "Authorization": "Bearer k2",
        "X-Team": "a b",
    }
    with pytest.raises(ValueError, match="--header 'nocolon'"):
        request_headers(["nocolon"], {})
