"""The simulator's workloads: trace windows, length fitting, scenario building."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightjar_ray.sim.presets import get_setting
from nightjar_ray.sim.scenario import WorkloadConfig, build_workload
from nightjar_ray.sim.workload import fit_to_model, rate_timeline, trace_workload
from nightjar_ray.workload.trace import read_trace
from tests.support import shared_trace

TINY_TRACE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
2023-11-16 18:16:51.3910170,9000,16
"""


def test_trace_window_scale_and_length_clamp(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(TINY_TRACE)
    rows = read_trace(path)
    wl = trace_workload(rows, start_s=4.0, duration_s=100.0, time_scale=2.0, max_model_len=4096)
    assert [r.req_id for r in wl] == [0, 1, 2]
    assert wl[0].arrival_s == pytest.approx(0.629158, abs=1e-5)
    assert wl[2].num_prompt_tokens + wl[2].num_output_tokens <= 4096
    with pytest.raises(ValueError, match="no trace requests"):
        trace_workload(rows, start_s=1000.0, duration_s=1.0, time_scale=1.0, max_model_len=4096)


def test_fit_to_model() -> None:
    assert fit_to_model(5000, 100, 4096) == (3996, 100)
    assert fit_to_model(10, 9000, 4096) == (10, 2048)


def test_real_trace_slice_replays_at_the_requested_rate() -> None:
    cfg = WorkloadConfig(
        arrival="trace",
        trace_path=str(shared_trace()),
        trace_start_s=1200,
        trace_duration_s=60,
        trace_qps=2.0,
    )
    wl = build_workload(cfg, get_setting("a100-13b"), "sharegpt", 0)
    assert len(wl) > 100
    span = wl[-1].arrival_s
    assert len(wl) / span == pytest.approx(2.0, rel=0.05)
    assert all(r.num_prompt_tokens + r.num_output_tokens <= 4096 for r in wl)
    assert rate_timeline(wl, 10.0)[0][1] > 0


def test_a_trace_scenario_without_a_trace_names_the_field() -> None:
    cfg = WorkloadConfig(arrival="trace")
    with pytest.raises(ValueError, match=r"workload\.trace_path: arrival 'trace' needs a trace"):
        build_workload(cfg, get_setting("a100-13b"), "sharegpt", 0)


def test_trace_arrivals_with_dataset_lengths(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(TINY_TRACE)
    setting = get_setting("rtx4090-7b")
    base = {
        "arrival": "trace",
        "trace_path": str(path),
        "trace_start_s": 4,
        "trace_duration_s": 100,
    }
    own = build_workload(WorkloadConfig.model_validate(base), setting, "alpaca", 0)
    mixed = build_workload(
        WorkloadConfig.model_validate({**base, "trace_lengths": "dataset"}), setting, "alpaca", 0
    )
    assert [r.arrival_s for r in mixed] == pytest.approx([r.arrival_s for r in own])
    assert [r.num_prompt_tokens for r in own] == [396, 879, 9000]
    assert [r.num_prompt_tokens for r in mixed] != [r.num_prompt_tokens for r in own]
