"""Switch-cost profiles, configs, bucketing, and the registry's error messages."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nightjar_ray.policy import (
    SwitchCostTable,
    build_policy,
    operator_policy_config,
    policy_config,
    policy_names,
)
from nightjar_ray.policy.bucketing import bucket_fn, bucket_span_fn, pow2_key
from nightjar_ray.policy.registry import load_switch_cost


def test_builtin_paper_profile_matches_table_3() -> None:
    table = SwitchCostTable.builtin("paper-rtx4090-7b")
    assert table.cost_s_at(128, 32) == pytest.approx(17.87e-3)
    assert table.cost_s_at(512, 64) == pytest.approx(102.03e-3)


def test_bilinear_interpolation_and_clamping() -> None:
    table = SwitchCostTable.from_rows([(0, 1, 0.0), (0, 3, 2.0), (100, 1, 10.0), (100, 3, 12.0)])
    assert table.cost_s_at(50, 2) == pytest.approx(6.0e-3)  # centre: mean of corners
    assert table.cost_s_at(25, 1) == pytest.approx(2.5e-3)
    assert table.cost_s_at(0, 2) == pytest.approx(1.0e-3)
    assert table.cost_s_at(1000, 1) == pytest.approx(10.0e-3)  # clamped in L_max
    assert table.cost_s_at(100, 500) == pytest.approx(12.0e-3)  # clamped in B


def test_profile_csv_round_trip(tmp_path: Path) -> None:
    table = SwitchCostTable.from_rows([(16, 1, 1.5), (16, 8, 2.5), (64, 1, 3.0), (64, 8, 9.0)])
    path = tmp_path / "profile.csv"
    table.save(path)
    assert SwitchCostTable.load(path) == table


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b,c\n1,2,3\n", "header"),
        ("max_skip_tokens,num_reqs,switch_cost_ms\n1,2,x\n", "bad switch-cost row"),
        (
            "max_skip_tokens,num_reqs,switch_cost_ms\n1,1,1\n1,2,1\n2,1,1\n",
            "not rectangular",
        ),
        ("max_skip_tokens,num_reqs,switch_cost_ms\n1,1,1\n1,1,2\n", "duplicate"),
        ("max_skip_tokens,num_reqs,switch_cost_ms\n1,1,-1\n", ">= 0"),
    ],
)
def test_bad_profiles_fail_clearly(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        SwitchCostTable.load(path)


def test_unknown_builtin_profile() -> None:
    with pytest.raises(ValueError, match="no built-in"):
        load_switch_cost("builtin:nope", 0.0)
    # the profile is the engine config's (switch_cost_profile), not a policy parameter
    with pytest.raises(ValueError, match="switch_cost_profile"):
        policy_config("nightjar", {"switch_cost_profile": "builtin:paper-rtx4090-7b"})


@pytest.mark.parametrize("name", ["nightjar", "nightjar-paper"])
def test_operators_pick_a_preset_and_set_none_of_its_research_parameters(name: str) -> None:
    assert operator_policy_config(name, {"gamma_max": 3}).gamma_max == 3
    with pytest.raises(ValueError, match=r"policy 'nightjar.*' \(fields: bucketing\)"):
        operator_policy_config(name, {"bucketing": "exact"})
    # research code sets them on top of the preset
    assert policy_config(name, {"bucketing": "pow2"}).bucketing == "pow2"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "params", "field"),
    [
        ("nightjar", {"gamma_max": -1}, "gamma_max"),
        ("nightjar", {"bucketing": "log"}, "bucketing"),
        ("nightjar", {"switch_cost_ms": -3}, "switch_cost_ms"),
        # NOTE: a one-step probe is always a transition step, never a sample: no arm learns.
        ("nightjar", {"explore_bin_steps": 1}, "explore_bin_steps"),
        ("nightjar", {"typo_field": 1}, "typo_field"),
        ("fixed", {"gamma": 6, "gamma_max": 4}, "gamma"),
        ("vllm-static", {"num_speculative_tokens_per_batch_size": [[2, 4, 1]]}, "start at 1"),
        (
            "vllm-static",
            {"num_speculative_tokens_per_batch_size": [[1, 4, 1], [3, 8, 0]]},
            "overlapping",
        ),
        ("ucbspec", {"delta": 1.5}, "delta"),
        ("dsd", {"refit_interval": 0}, "refit_interval"),
    ],
)
def test_invalid_configs_name_the_field(name: str, params: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        policy_config(name, params)


def test_unknown_policy_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="nightjar"):
        policy_config("magic")
    assert {"nightjar", "fixed", "off", "vllm-static", "dsd", "ucbspec", "exp3spec"} <= set(
        policy_names()
    )


@pytest.mark.parametrize("name", policy_names())
def test_choices_stay_in_range_and_bad_context_raises(name: str) -> None:
    params = {"gamma": 1} if name == "fixed" else {}
    policy = build_policy(name, params, rng=random.Random(0))
    for b in range(1, 200):
        assert 0 <= policy.choose(b, b) <= policy.gamma_max
    with pytest.raises(ValueError, match="num_reqs"):
        policy.choose(0, 0)
    with pytest.raises(ValueError, match="max_skip_tokens"):
        policy.choose(1, -1)


def test_pow2_buckets() -> None:
    assert [pow2_key(b) for b in (1, 2, 3, 4, 5, 8, 9, 100)] == [1, 2, 4, 4, 8, 8, 16, 128]
    assert bucket_fn("exact")(37) == 37
    with pytest.raises(ValueError, match="unknown bucketing"):
        bucket_fn("nope")


@pytest.mark.parametrize("name", ["exact", "pow2"])
def test_a_keys_span_is_exactly_the_batch_sizes_that_share_it(name: str) -> None:
    """The queue-aware lock asks "same key ahead?" by a range test on the key's span, so
    the span must hold every batch size of the key and no other."""
    key_of, span_of = bucket_fn(name), bucket_span_fn(name)
    for num_reqs in range(1, 2050):
        key = key_of(num_reqs)
        lo, hi = span_of(key)
        assert lo <= num_reqs <= hi
        assert key_of(lo) == key_of(hi) == key
        assert lo == 1 or key_of(lo - 1) != key
        assert key_of(hi + 1) != key
    with pytest.raises(ValueError, match="unknown bucketing"):
        bucket_span_fn("nope")
