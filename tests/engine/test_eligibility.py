"""The scheduler's req_id view of per-request draft eligibility (pure Python)."""

from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.eligibility import (
    ForcedUndrafted,
    drafted_req_ids,
    undrafted_req_ids,
)


def test_driver_indices_name_requests_in_the_step_order() -> None:
    starts = {"c": 7, "a": 0, "b": 3}
    assert undrafted_req_ids(frozenset({0, 2}), starts) == {"c", "b"}
    assert undrafted_req_ids(frozenset(), starts) == frozenset()


def test_drafted_requests_are_none_at_gamma_zero_else_all_but_the_undrafted() -> None:
    starts = {"a": 0, "b": 3, "c": 7}
    assert set(drafted_req_ids(starts, 0, frozenset())) == set()
    assert set(drafted_req_ids(starts, 2, frozenset())) == {"a", "b", "c"}
    assert set(drafted_req_ids(starts, 2, frozenset({"b"}))) == {"a", "c"}


def test_forced_pattern_numbers_requests_by_arrival_and_forgets_finished_ones() -> None:
    testing = NightjarConfig(
        testing={"forced_undrafted_cycle": 3, "forced_undrafted_steps": 1}
    ).testing
    forced = ForcedUndrafted(testing)
    forced.begin_step({"a": 0, "b": 0}, ())  # step 0: a is #0, b is #1
    assert forced.undrafted({"a": 0, "b": 0}) == {"a"}
    forced.begin_step({"a": 5, "b": 5, "c": 0}, ())  # step 1: c is #2
    assert forced.undrafted({"a": 5, "b": 5, "c": 0}) == {"c"}
    forced.begin_step({"b": 6, "d": 0}, ["a", "c"])  # step 2: d is #3 (#1 would skip it)
    assert forced.undrafted({"b": 6, "d": 0}) == {"b"}
