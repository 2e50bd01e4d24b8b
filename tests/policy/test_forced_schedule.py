"""The forced gamma schedule: the engine's testing seam (``testing.forced_gammas``)."""

from __future__ import annotations

import json

import pytest

from nightjar_ray.policy import ForcedSchedulePolicy, StepResult, policy_names


def test_plays_each_gamma_for_its_steps_and_wraps_around() -> None:
    policy = ForcedSchedulePolicy([0, 3, 1], steps_per_gamma=2, gamma_max=3)
    assert [policy.choose(4, 0) for _ in range(8)] == [0, 0, 3, 3, 1, 1, 0, 0]
    policy.observe(StepResult(4, 3, 16, 0.01, 12, 12))  # learns nothing, checks results
    with pytest.raises(ValueError, match="gamma"):
        policy.observe(StepResult(4, 4, 20, 0.01, 16, 16))


def test_snapshot_restores_the_position_in_the_schedule() -> None:
    policy = ForcedSchedulePolicy([0, 2], steps_per_gamma=3, gamma_max=2)
    for _ in range(4):
        policy.choose(1, 0)
    clone = ForcedSchedulePolicy([0, 2], steps_per_gamma=3, gamma_max=2)
    clone.restore(json.loads(json.dumps(policy.snapshot())))
    assert [clone.choose(1, 0) for _ in range(5)] == [policy.choose(1, 0) for _ in range(5)]


@pytest.mark.parametrize(
    ("gammas", "steps", "message"),
    [([0, 4], 1, r"gammas \[0, 4\] must be non-empty, in \[0, 3\]"), ([], 1, "non-empty"),
     ([1], 0, "steps_per_gamma must be >= 1")],
)  # fmt: skip
def test_bad_schedules_fail_clearly(gammas: list[int], steps: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ForcedSchedulePolicy(gammas, steps, gamma_max=3)


def test_it_is_not_a_product_policy() -> None:
    assert "cyclic" not in policy_names() and "forced" not in policy_names()
