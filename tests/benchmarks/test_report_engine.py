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
    assert report.to_off(res, "nightjar", "round_tokens_per_s", "4") == [1.1, 1.0, 0.75]
    assert report.to_off(res, "nightjar", "round_mean_e2e_s", "4") is None
    table = report.paired_table(res)
    assert "| nightjar | 4 | 1.000 (0.750-1.100) | - |" in table
    assert "| off | 4 | 1.000 (1.000-1.000) | - |" in table
