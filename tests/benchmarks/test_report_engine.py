"""The engine report pairs each round with `off`'s own (docs/benchmarks.md's figures)."""

from __future__ import annotations

from benchmarks import report_engine as report


def test_ratios_to_off_pair_each_round_with_offs_own_round() -> None:
    """A contender's ratio is taken round by round (the same prompts, the same host
    moment), not median over median; a run without E2E shows none."""
    res = {
        "off": {"tokens_per_s": {"4": 2.0}, "round_tokens_per_s": {"4": [1.0, 2.0, 4.0]}},
        "nightjar": {"tokens_per_s": {"4": 2.0}, "round_tokens_per_s": {"4": [1.1, 2.0, 3.0]}},
    }
    assert report.round_ratios(res, "nightjar", "off", "round_tokens_per_s", "4") == [
        1.1,
        1.0,
        0.75,
    ]
    assert report.round_ratios(res, "nightjar", "off", "round_mean_e2e_s", "4") is None
    table = report.paired_table(res)
    assert "| nightjar | 4 | 1.000 (0.750-1.100) | - |" in table
    assert "| off | 4 | 1.000 (1.000-1.000) | - |" in table


def test_nightjar_is_tested_against_each_engine_and_the_aa_control_against_off() -> None:
    """Twelve rounds ahead in every one: the signed-rank p is 2 / 2**12; none for E2E."""
    off = [float(i) for i in range(1, 13)]
    res = {
        "off": {"tokens_per_s": {"4": 1.0}, "round_tokens_per_s": {"4": off}},
        "nightjar": {
            "tokens_per_s": {"4": 1.0},
            "round_tokens_per_s": {"4": [x * 1.1 for x in off]},
        },
        report.AA_CONTROL: {"tokens_per_s": {"4": 1.0}, "round_tokens_per_s": {"4": off}},
    }
    table = report.learner_table(res)
    assert "| nightjar / off | 4 | 1.100 (higher in 12 of 12; p 0.000) | - |" in table
    assert f"| {report.AA_CONTROL} / off | 4 | 1.000 (higher in 0 of 12; p 1.000) | - |" in table


def test_the_report_names_the_host_a_run_was_timed_on() -> None:
    """Absolute tok/s differ several-fold between AVX2 and AVX512 hosts of one kind."""
    host = {"cpu": "AMD EPYC", "num_cpus": 2, "torch_cpu_capability": "AVX2",
            "torch": "2.9.0", "vllm": "0.32.0", "python": "3.11.7"}  # fmt: skip
    assert report.host_line(host) == (
        "Host: AMD EPYC, 2 CPUs, torch CPU kernels AVX2, torch 2.9.0, vLLM 0.32.0"
    )
    assert report.host_line(None) is None  # a run recorded before hosts were kept


def test_the_best_static_is_chosen_among_static_policies_only() -> None:
    """A line-up with another nightjar configuration (the step gate) faster than every
    static: the verdict's best static is still the fastest static policy's engine."""
    res = {
        label: {"tokens_per_s": {"4": tps}}
        for label, tps in [
            ("off", 1.0),
            ("nightjar", 1.3),
            ("nightjar step-gate", 1.25),
            ("fixed-2", 1.2),
            ("fixed-3", 1.1),
            (report.AA_CONTROL, 1.0),
        ]
    }
    lineup = (
        '[["off","off",{}],["nightjar","nightjar",{}],'
        '["nightjar step-gate","nightjar",{"draft_gate_scope":"step"}],'
        '["fixed-2","fixed",{"gamma":2}],["fixed-3","fixed",{"gamma":3}]]'
    )
    static = report.static_labels(res, lineup)
    assert static == ["off", "fixed-2", "fixed-3"]
    verdict = report.verdict(res, ["4"], False, 64, static)
    assert verdict.startswith("B=4: nightjar / best static (fixed-2) 1.083")
    # a run of the default line-up (no --e2e-policies): every engine but nightjar's
    assert report.static_labels(res, None) == ["off", "nightjar step-gate", "fixed-2", "fixed-3"]
