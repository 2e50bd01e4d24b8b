"""Arrival processes, trace scaling and request building (pure; no endpoint)."""

from __future__ import annotations

import itertools
import random
import statistics
from pathlib import Path

import pytest

from nightjar_ray.cli.loadgen import build_requests
from nightjar_ray.cli.main import build_parser
from nightjar_ray.loadgen.arrivals import Gamma, Ramp, Step, build_arrivals, poisson
from nightjar_ray.loadgen.trace import TraceScaling, load_trace, scale_segment
from tests.support import shared_trace


def _cv(times: list[float]) -> float:
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_has_the_rate_and_the_burstiness_asked(burstiness: float) -> None:
    times = Gamma(2.0, burstiness).times(5000.0, random.Random(1))
    assert len(times) / 5000.0 == pytest.approx(2.0, rel=0.05)
    # gaps ~ Gamma(k, .): coefficient of variation 1/sqrt(k)
    assert _cv(times) == pytest.approx(burstiness**-0.5, rel=0.08)
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 5000.0


def test_arrivals_are_deterministic_for_a_seed() -> None:
    a = poisson(1.0).times(100.0, random.Random(7))
    assert a == poisson(1.0).times(100.0, random.Random(7))
    assert a != poisson(1.0).times(100.0, random.Random(8))


def test_step_alternates_its_phases() -> None:
    times = Step(((10.0, 0.5), (10.0, 5.0))).times(2000.0, random.Random(0))
    low = sum(1 for t in times if (t // 10) % 2 == 0)
    high = len(times) - low
    assert low / 1000.0 == pytest.approx(0.5, rel=0.15)
    assert high / 1000.0 == pytest.approx(5.0, rel=0.05)


def test_ramp_rises_linearly() -> None:
    times = Ramp(1.0, 9.0).times(1000.0, random.Random(0))
    first = sum(1 for t in times if t < 100.0) / 100.0  # rate ~1.4 over the first tenth
    last = sum(1 for t in times if t >= 900.0) / 100.0  # ~8.6
    assert first == pytest.approx(1.4, rel=0.2) and last == pytest.approx(8.6, rel=0.1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("poisson", 0.0), "positive rate"),
        (("gamma", 1.0, 0.0), "burstiness"),
        (("step", 1.0, 1.0, "10-0.5"), "SECONDS:RATE"),
        (("ramp", 1.0), "end rate"),
        (("zipf", 1.0), "unknown arrival"),
    ],
)
def test_bad_arrivals_are_named(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_arrivals(*args)  # type: ignore[arg-type]


def _csv(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"{t},{c},{g}" for t, c, g in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_trace_scaling_time_rate_and_tokens(tmp_path: Path) -> None:
    rows = [(f"2023-11-16 18:00:{s:02d}.0000000", 800, 200) for s in range(0, 60, 2)]
    trace = load_trace(_csv(tmp_path / "t.csv", rows))
    assert [r.arrival_s for r in trace[:3]] == [0.0, 2.0, 4.0]
    scaling = TraceScaling(
        offset_s=10, duration_s=10, speedup=2, token_scale=8, max_output_tokens=16
    )
    seg = scale_segment(trace, scaling, random.Random(0))
    # trace seconds [10, 30) replayed in 10 s: arrivals 0, 1, ..., 9
    assert [r.arrival_s for r in seg] == [float(i) for i in range(10)]
    assert {(r.num_prompt_tokens, r.num_output_tokens) for r in seg} == {(100, 16)}
    sampled = scale_segment(trace, TraceScaling(duration_s=60, sample=0.5), random.Random(0))
    assert 5 <= len(sampled) <= 25


def test_trace_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("time,prompt\n1,2\n")
    with pytest.raises(ValueError, match="expected columns"):
        load_trace(bad)
    with pytest.raises(ValueError, match="sample"):
        TraceScaling(sample=0.0)


def test_the_real_trace_replays_a_varying_rate() -> None:
    parser = build_parser()
    args = parser.parse_args([
        "loadgen", "--trace", str(shared_trace()), "--trace-offset-s", "600", "--duration-s", "300",
        "--trace-speedup", "4", "--trace-sample", "0.02", "--trace-token-scale", "8",
        "--max-input-tokens", "256", "--max-output-tokens", "64",
    ])  # fmt: skip
    requests = build_requests(args)
    assert 100 < len(requests) < 250
    per_minute = [
        sum(1 for r in requests if m * 60 <= r.arrival_s < (m + 1) * 60) for m in range(5)
    ]
    assert max(per_minute) > 1.3 * min(per_minute)  # the trace's rate moves
    assert all(1 <= len(r.prompt_token_ids) <= 256 and 1 <= r.max_tokens <= 64 for r in requests)


def test_synthetic_requests_follow_the_flags() -> None:
    args = build_parser().parse_args(
        ["loadgen", "--rate", "3", "--duration-s", "100", "--input-len", "5:9", "--output-len", "7"]
    )
    requests = build_requests(args)
    assert len(requests) == pytest.approx(300, rel=0.2)
    assert {r.max_tokens for r in requests} == {7}
    assert all(5 <= len(r.prompt_token_ids) <= 9 for r in requests)
    assert all(10 <= t < 1000 for r in requests for t in r.prompt_token_ids)
    assert build_requests(args) == requests  # seeded
