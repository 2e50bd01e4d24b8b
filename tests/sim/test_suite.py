"""The workload suite: generators, capacity, the judgement, and the CLI."""

from __future__ import annotations

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.sim.presets import get_setting
from nightjar_ray.sim.suite import (
    LONG_OUTPUT,
    PREFILL_HEAVY,
    SHAREGPT,
    SUITE,
    capacity_qps,
    suite_workload,
)
from nightjar_ray.workload.trace import TRACE_ENV
from tests.support import SHARED_TRACE, cli_error, shared_trace

SETTING = get_setting("rtx4090-7b")


def _rate(workload: tuple, lo_s: float, hi_s: float) -> float:  # type: ignore[type-arg]
    return sum(lo_s <= r.arrival_s < hi_s for r in workload) / (hi_s - lo_s)


@pytest.mark.parametrize("name", list(SUITE))
def test_every_workload_is_deterministic_sorted_and_fits_the_model(name: str) -> None:
    trace = shared_trace() if name == "trace" else SHARED_TRACE
    first, again = (suite_workload(name, SETTING, 1, trace_path=trace) for _ in range(2))
    assert first == again and len(first) > 100
    assert [r.arrival_s for r in first] == sorted(r.arrival_s for r in first)
    assert all(
        r.num_prompt_tokens + r.num_output_tokens <= SETTING.target.max_model_len for r in first
    )
    if name != "trace":
        assert suite_workload(name, SETTING, 2) != first


def test_the_trace_workload_needs_a_trace_and_says_how_to_give_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match=f"pass --trace PATH or set {TRACE_ENV}"):
        suite_workload("trace", SETTING, 0)
    monkeypatch.delenv(TRACE_ENV, raising=False)
    error = cli_error(["simulate", "suite", "--workloads", "low,trace", "--seeds", "0"], capsys)
    assert f"simulate: error: no trace given: pass --trace PATH or set {TRACE_ENV}" in error


def test_capacity_is_measured_per_length_mix() -> None:
    sharegpt, heavy, long_out = (
        capacity_qps(SETTING, m) for m in (SHAREGPT, PREFILL_HEAVY, LONG_OUTPUT)
    )
    assert heavy < sharegpt and long_out < sharegpt  # long prompts or long outputs cost more
    assert capacity_qps(SETTING, SHAREGPT) == sharegpt


def test_prefill_heavy_lengths_and_burst() -> None:
    wl = suite_workload("prefill-heavy", SETTING, 0)
    assert all(2048 <= r.num_prompt_tokens <= 8192 and 5 <= r.num_output_tokens <= 50 for r in wl)
    rate = 0.4 * capacity_qps(SETTING, PREFILL_HEAVY)
    calm_s = 0.4 * (len(wl) / rate)
    burst_s = 0.2 * len(wl) / (4 * rate)
    # the middle phase arrives about 4x as fast as the calm ones
    calm, burst = _rate(wl, 0, calm_s), _rate(wl, calm_s, calm_s + burst_s)
    assert 2.5 < burst / calm < 6.0


def test_long_output_and_on_off_shapes() -> None:
    long_out = suite_workload("long-output", SETTING, 0)
    assert all(500 <= r.num_output_tokens <= 2000 for r in long_out)
    assert sorted(r.num_prompt_tokens for r in long_out)[len(long_out) // 2] in range(70, 140)
    on_off = suite_workload("on-off", SETTING, 0)
    windows = [_rate(on_off, 60 * k, 60 * (k + 1)) for k in range(6)]
    assert all(windows[k + 1] > 3 * windows[k] for k in (0, 2, 4))  # 1.5x vs 0.3x capacity
    with pytest.raises(ValueError, match="unknown suite workload"):
        suite_workload("nope", SETTING, 0)


@pytest.mark.parametrize("name", list(SUITE))
def test_length_scale_lengthens_each_workload_at_the_same_rates(name: str) -> None:
    trace = shared_trace() if name == "trace" else SHARED_TRACE
    short = suite_workload(name, SETTING, 3, trace_path=trace)
    long = suite_workload(name, SETTING, 3, 3, trace)
    assert 2.6 < len(long) / len(short) < 3.4
    span = long[-1].arrival_s / short[-1].arrival_s
    assert 2.6 < span < 3.4  # same rates: three times the requests over three times the time
    if name in ("low", "crossover", "high", "long-output", "on-off", "trace"):
        assert long[: len(short)] == short  # the short run is the long run's start


def test_run_suite_runs_the_lengthened_workloads() -> None:
    from nightjar_ray.sim.experiments import default_contenders
    from nightjar_ray.sim.suite_report import run_suite

    statics = [c for c in default_contenders() if c.label in ("off", "fixed-1")]
    one, two = (run_suite(["l20x2-32b"], ["low"], [0], statics, length_scale=k)[0] for k in (1, 2))
    requests = [cell.row.summaries["off"].num_requests for cell in (one, two)]
    assert requests == [len(suite_workload("low", get_setting("l20x2-32b"), 0, k)) for k in (1, 2)]
    assert requests[1] > 1.8 * requests[0]


def test_max_num_seqs_caps_the_batch_at_the_same_arrivals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--max-num-seqs``: the same requests, fewer seats, so requests wait for one."""
    from nightjar_ray.sim.experiments import default_contenders
    from nightjar_ray.sim.suite_report import run_suite

    statics = [c for c in default_contenders() if c.label == "off"]
    own, capped = (
        run_suite(["l20x2-32b"], ["high"], [0], statics, max_num_seqs=n)[0] for n in (None, 8)
    )
    summaries = [cell.row.summaries["off"] for cell in (own, capped)]
    assert summaries[0].num_requests == summaries[1].num_requests
    assert summaries[1].mean_ttft_s > 2 * summaries[0].mean_ttft_s
    error = cli_error(["simulate", "suite", "--workloads", "low", "--max-num-seqs", "0"], capsys)
    assert "--max-num-seqs: expected an integer >= 1, got 0" in error
    error = cli_error(["simulate", "suite", "--workloads", "low", "--jobs", "0"], capsys)
    assert "--jobs: expected an integer >= 1, got 0" in error


def test_length_scale_out_of_range_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in (0, 9):
        with pytest.raises(ValueError, match="length_scale"):
            suite_workload("low", SETTING, 0, bad)
        argv = ["simulate", "suite", "--workloads", "low", "--length-scale", str(bad)]
        assert "--length-scale: expected an integer in 1..8" in cli_error(argv, capsys)
    compare = ["simulate", "compare", "--setting", "l20x2-32b", "--contenders", "off"]
    argv = [*compare, "--workloads", "low", "--length-scale", "9"]
    assert "--length-scale: expected an integer in 1..8" in cli_error(argv, capsys)
    argv = [*compare, "--length-scale", "2"]
    assert "--length-scale applies to --workloads" in cli_error(argv, capsys)


def test_simulate_suite_and_compare_run_named_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "suite", "--settings", "l20x2-32b", "--workloads", "low", "--seeds", "0"]
    assert main([*args, "--with-paper-preset", "--warm-start", "--with-batch-oracle"]) == 0
    out = capsys.readouterr().out
    assert "| l20x2-32b | low |" in out and "cells passing" in out
    assert "| nightjar-paper |" in out and "observation rule: prefill-corrected" in out
    assert "| nightjar-warm |" in out and "| batch-oracle |" in out
    assert "| policy | mean thr / best static |" in out

    compare = ["simulate", "compare", "--setting", "l20x2-32b", "--workloads", "prefill-heavy"]
    assert main([*compare, "--contenders", "nightjar"]) == 0
    assert "| prefill-heavy |" in capsys.readouterr().out
    error = cli_error(["simulate", "suite", "--workloads", "bogus"], capsys)
    assert "argument --workloads: unknown suite workload 'bogus'; choose from low," in error


def test_policy_seed_offset_changes_only_the_policys_draws() -> None:
    from nightjar_ray.sim.experiments import RunKnobs, default_contenders, run_contender
    from nightjar_ray.sim.presets import get_setting

    setting = get_setting("l20x2-32b")
    workload = suite_workload("crossover", setting, 0)[:120]
    by_label = {c.label: c for c in default_contenders()}

    def run(label: str, offset: int) -> tuple[float, ...]:
        knobs = RunKnobs(policy_seed_offset=offset)
        result = run_contender(setting, by_label[label], workload, "sharegpt", 0, knobs)
        return tuple(r.finish_s for r in result.records)

    assert run("nightjar", 0) == run("nightjar", 0)  # deterministic
    assert run("nightjar", 0) != run("nightjar", 1000)  # other policy draws
    assert run("fixed-2", 0) == run("fixed-2", 1000)  # the workload and acceptance stay
