"""The self-check's lines, report and command line, without engines: each line's verdict
on figures shaped like the engine's stats, the report's summary and exit code, and the
usage errors (exit code 2, naming the flag) found before any engine starts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.cli.main import main
from nightjar_ray.engine.offline import ModelSources
from nightjar_ray.engine.selfcheck import CHECK_NAMES, SelfCheckSetup
from nightjar_ray.engine.selfcheck_report import (
    ABSURD_EVENT_S,
    PAPER_TABLE6_S,
    CheckLine,
    SelfCheckReport,
    elastic_line,
    error_line,
    first_divergence,
    gamma_schedule_line,
    guarded,
    latency_line,
    lossless_line,
)
from nightjar_ray.serve.config import CACHE_ENV

REFERENCE = [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_a_report_passes_only_if_every_line_passed() -> None:
    ok = CheckLine("lossless", True, "2/2 prompts identical", {"num_prompts": 2})
    bad = CheckLine("elastic-cycles", False, "pool ended at 40 blocks")
    passing, failing = SelfCheckReport((ok, ok)), SelfCheckReport((ok, bad))
    assert (passing.passed, passing.exit_code) == (True, 0)
    assert (failing.passed, failing.exit_code) == (False, 1)
    assert SelfCheckReport(()).exit_code == 1  # nothing checked is no pass
    assert failing.summary() == CheckLine("summary", False, "1 of 2 failed: elastic-cycles")
    assert failing.format().splitlines() == [
        "lossless        PASS  2/2 prompts identical",
        "elastic-cycles  FAIL  pool ended at 40 blocks",
        "summary         FAIL  1 of 2 failed: elastic-cycles",
    ]
    dumped = json.loads(json.dumps(failing.to_json()))
    assert dumped["exit_code"] == 1 and dumped["summary"]["passed"] is False
    assert [(x["name"], x["status"]) for x in dumped["lines"]] == [
        ("lossless", "PASS"),
        ("elastic-cycles", "FAIL"),
    ]
    assert dumped["lines"][0]["figures"] == {"num_prompts": 2}


def test_lossless_names_the_first_difference() -> None:
    assert lossless_line("lossless", REFERENCE, REFERENCE).passed
    line = lossless_line("lossless", [[1, 2, 3, 4], [5, 6, 9, 8]], REFERENCE)
    assert not line.passed
    assert line.detail == (
        "1/2 prompts identical to stock vLLM; first difference at prompt 1, token 2"
    )
    # a shorter output differs where it ends
    assert first_divergence([[1, 2], [5, 6, 7, 8]], REFERENCE)["token"] == 2
    with pytest.raises(ValueError, match="1 outputs for 2 reference outputs"):
        first_divergence([[1]], REFERENCE)


def _draft_stats(gammas: list[int], catch_up_tokens: int) -> dict[str, Any]:
    steps = [
        {"num_spec_tokens": g, "num_draft_forwards": 0 if g == 0 else g} for g in gammas
    ]  # fmt: skip
    return {"steps": steps, "num_catch_ups": 2, "num_catch_up_tokens": catch_up_tokens}


def test_the_gamma_schedule_needs_every_gamma_and_a_catch_up() -> None:
    schedule = [0, 1, 0, 2]
    good = gamma_schedule_line(
        "gamma-schedule", REFERENCE, REFERENCE, _draft_stats([0, 0, 1, 0, 2], 30), schedule
    )
    assert good.passed, good.detail
    assert good.figures["steps_by_gamma"] == {0: 3, 1: 1, 2: 1}
    assert "2 catch-ups (30 tokens)" in good.detail
    stale = gamma_schedule_line(
        "gamma-schedule", REFERENCE, REFERENCE, _draft_stats([0, 1, 0], 0), schedule
    )
    assert not stale.passed
    assert stale.detail == "gammas never played: [2]; no draft catch-up after a gamma-0 step"
    drafted = _draft_stats([0, 1, 2], 5)
    drafted["steps"][0]["num_draft_forwards"] = 1
    line = gamma_schedule_line("gamma-schedule", REFERENCE, REFERENCE, drafted, schedule)
    assert line.detail == "1 draft forwards in gamma-0 steps"


def _worker() -> dict[str, Any]:
    """Rank stats shaped like ``nightjar_memory_stats`` after a good elastic run."""
    return {
        "num_stock_blocks": 36,
        "num_max_blocks": 44,
        "num_blocks": 36,
        "num_moved_blocks": 5,
        "stock_kv_bytes": 36 * 1024,
        "peak_committed_bytes": 36 * 1024 + 100,
        "history": [[44, False, ["offload"]], [36, True, ["resume"]]],
        "worker_events": {"expand": [2, 0.024], "contract": [2, 0.002], "reload": [2, 0.0002]},
        "scheduler": {
            "peak_num_blocks": 44,
            "num_blocks": 36,
            "num_expansions": 2,
            "num_contractions": 2,
            "memory_events": {
                "expand": [2, 0.002],
                "contract": [2, 0.004],
                "offload": [2, 0.01],
                "reload": [2, 0.02],
            },
        },
        "draft": {
            "draft_bytes": 4096,
            "num_offloads": 2,
            "offload_s": 0.01,
            "num_reloads": 2,
            "reload_dispatch_s": 0.0001,
            "num_verified_reloads": 2,
            "weights_identical": True,
        },
    }


def test_elastic_cycles_pass_on_a_good_run() -> None:
    line = elastic_line("elastic-cycles", [REFERENCE, REFERENCE], REFERENCE, [_worker()])
    assert line.passed, line.detail
    assert "pool 36 -> 44 -> 36 blocks" in line.detail
    assert line.figures["stock_committed_bytes"] == 36 * 1024 + 4096


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda w: w["scheduler"].update(num_blocks=44), "pool ended at 44 blocks, not its"),
        (lambda w: w["scheduler"].update(num_contractions=0), "2 expansions, 0 contractions"),
        (lambda w: w.update(peak_committed_bytes=10**6), "peak committed 1.0 MiB above stock"),
        (lambda w: w["draft"].update(weights_identical=False), "identical=False"),
        (lambda w: w["draft"].update(num_verified_reloads=1), "draft reloads: 1/2 verified"),
        (lambda w: w["scheduler"].update(peak_num_blocks=40), "pool peaked at 40 blocks"),
    ],
)  # fmt: skip
def test_elastic_cycles_fail_naming_what_broke(change: Any, message: str) -> None:
    worker = _worker()
    change(worker)
    line = elastic_line("elastic-cycles", [REFERENCE], REFERENCE, [worker])
    assert not line.passed and message in line.detail


def test_elastic_cycles_fail_on_changed_outputs_or_disagreeing_ranks() -> None:
    changed = elastic_line(
        "elastic-cycles", [REFERENCE, [[1, 2, 3, 4], [5]]], REFERENCE, [_worker()]
    )
    assert not changed.passed
    assert changed.detail.startswith("3/4 prompts identical to stock vLLM")
    other = copy.deepcopy(_worker())
    other["num_moved_blocks"] = 4
    ranks = elastic_line("elastic-cycles", [REFERENCE], REFERENCE, [_worker(), other])
    assert ranks.detail == "tensor-parallel ranks disagree on the pool or the moves"


def test_event_latencies_add_the_workers_share_next_to_table_6() -> None:
    line = latency_line("event-latency", [_worker()])
    assert line.passed, line.detail
    expand = line.figures["expand"]
    # scheduler 2 expansions in 2 ms, worker (offload + commit) 2 in 24 ms
    assert (expand["scheduler_s"], expand["worker_s"]) == pytest.approx((0.001, 0.012))
    assert expand["mean_s"] == pytest.approx(0.013)
    assert expand["ratio"] == pytest.approx(0.013 / PAPER_TABLE6_S["expand"])
    assert "expand 13 ms (scheduler 1 ms + worker 12 ms) = 0.0903x paper 143.9 ms" in line.detail
    assert "contract 3 ms (scheduler 2 ms + worker 1 ms) = 0.252x paper 11.9 ms" in line.detail
    # the reload: the worker's page commit and dispatch, the dispatch alone beside it
    reload = line.figures["reload"]
    assert (reload["mean_s"], reload["dispatch_s"]) == pytest.approx((0.0001, 0.00005))
    assert "offload 5 ms, reload 100 us = 4.57x paper 21.9 us" in line.detail


def test_event_latencies_take_the_slowest_rank() -> None:
    slow = _worker()
    slow["worker_events"] = {"expand": [2, 0.044], "contract": [2, 0.001], "reload": [2, 0.0]}
    figures = latency_line("event-latency", [_worker(), slow]).figures
    assert figures["expand"]["worker_s"] == pytest.approx(0.022)
    assert figures["contract"]["worker_s"] == pytest.approx(0.001)  # rank 0's is slower
    assert figures["reload"]["worker_s"] == pytest.approx(0.0001)


def test_event_latencies_fail_on_a_missing_or_absurd_event() -> None:
    slow, missing, untimed = _worker(), _worker(), _worker()
    slow["scheduler"]["memory_events"]["contract"] = [1, 2 * ABSURD_EVENT_S]
    missing["draft"]["num_offloads"] = 0
    del untimed["worker_events"]  # a worker without the timing: no reload counted
    assert latency_line("event-latency", [slow]).detail == "contract took 2e+04 ms (> 10 s)"
    assert latency_line("event-latency", [missing]).detail == "no offload event ran"
    assert latency_line("event-latency", [untimed]).detail == "no reload event ran"


def test_a_check_that_raises_is_a_failed_line() -> None:
    def broken() -> CheckLine:
        raise RuntimeError("the engine died\nstack...")

    assert guarded("lossless", broken) == CheckLine(
        "lossless", False, "RuntimeError: the engine died"
    )
    assert error_line("x", KeyError("k")).detail == "KeyError: 'k'"


def test_the_setup_rejects_bad_values_naming_the_field() -> None:
    models = ModelSources("t", "d")
    with pytest.raises(ValueError, match=r"^num_prompts must be in \[8, 1000\]"):
        SelfCheckSetup(models, num_prompts=3)
    setup = SelfCheckSetup(models, num_speculative_tokens=3, tensor_parallel_size=2)
    assert setup.gamma_schedule() == [0, 1, 0, 2, 0, 3]
    assert setup.spec_extra() == {"num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}
    assert SelfCheckSetup(models, device="cuda").engine_kwargs()["enforce_eager"] is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "some/dir"], "--target and --draft: give both or neither"),
        (["--device", "cuda"], "--target and --draft: needed on a GPU"),
        (["--prompts", "3", "--device", "cpu"], "--prompts: num_prompts must be in [8, 1000]"),
        (["--target", "generated:nope", "--draft", "x", "--device", "cpu"], "--target: unknown"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an empty cache, as on a clean clone: flags are checked before a pair is generated
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert main(["selfcheck", "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nightjar-ray selfcheck: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_unknown_checks_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=r"^2$"):
        main(["selfcheck", "--checks", "lossless,speed"])
    assert f"unknown check 'speed'; choose from {', '.join(CHECK_NAMES)}" in capsys.readouterr().err
