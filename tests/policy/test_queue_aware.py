"""The queue-aware objective (policy/nightjar.py) and the batch a queue will produce
(driver/queue.py)."""

import random

import pytest

from nightjar_ray.driver.queue import QueueState, batch_ahead
from nightjar_ray.policy import StepResult, build_policy
from nightjar_ray.policy.nightjar import NightjarPolicy

# Seconds per token at gamma 0, 1, 2: speculation pays at B = 4 (gamma 2), loses at
# B = 32 (gamma 0 best).
ROWS = {4: (0.010, 0.008, 0.007), 32: (0.002, 0.0025, 0.003)}


def taught(
    params: dict[str, object] | None = None, keys: tuple[int, ...] = (4, 32)
) -> NightjarPolicy:
    policy = build_policy("nightjar", {"gamma_max": 2, **(params or {})}, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    for b in keys:
        for gamma, s_per_token in enumerate(ROWS[b]):
            tokens = b * (1 + gamma)
            for _ in range(4):
                policy.observe(StepResult(b, gamma, tokens, tokens * s_per_token))
    return policy


def test_batch_ahead_is_capped_by_seats_and_by_kv() -> None:
    def queue(waiting: int, free: int = 900) -> QueueState:
        return QueueState(waiting, max_num_reqs=64, num_free_blocks=free, num_total_blocks=1000)

    assert batch_ahead(4, None) is None
    assert batch_ahead(4, queue(0)) is None
    assert batch_ahead(4, queue(10)) == 14
    assert batch_ahead(4, queue(100)) == 40  # 4 requests use 100 blocks: 40 fit
    assert batch_ahead(60, queue(100, free=0)) is None  # the KV cache is full
    assert batch_ahead(60, queue(100, free=990)) == 64  # seats


def test_waiting_requests_switch_the_objective_to_the_batch_ahead() -> None:
    policy = taught()
    alone = [policy.choose(4, 0) for _ in range(40)]
    assert policy.exploit(4, 4, 0) == 2 and alone.count(2) > 30
    assert not policy.last_queued
    explore_bins = policy.num_explore_bins
    queued = [policy.choose(4, 0, num_reqs_ahead=24) for _ in range(200)]
    # key(24) = 32 ranks gamma 0 first: every step plays it, none explores
    assert queued == [0] * 200 and policy.last_queued and not policy.last_explored
    assert policy.num_explore_bins == explore_bins and policy.num_deferred_explore_bins > 0


def test_an_unranked_key_ahead_borrows_the_largest_ranked_key_between() -> None:
    policy = taught()
    # key 128 has no samples; key 32 is the largest ranked key in (key 4, key 128]
    assert [policy.choose(4, 0, num_reqs_ahead=100) for _ in range(20)] == [0] * 20
    assert policy.last_queued
    # nothing ranked above key 4: the bin's own arm stands, not the queue objective
    lone = taught(keys=(4,))
    lone.choose(4, 0, num_reqs_ahead=100)
    assert not lone.last_queued


def test_a_probe_under_way_ends_when_requests_start_waiting() -> None:
    policy = taught({"explore_bin_steps": None})
    for _ in range(500):
        policy.choose(4, 0)
        if policy.last_explored:
            break
    assert policy.last_explored
    assert policy.choose(4, 0, num_reqs_ahead=24) == 0
    assert not policy.last_explored


@pytest.mark.parametrize("preset", ["nightjar-paper"])
def test_the_paper_preset_ignores_the_queue(preset: str) -> None:
    policy = build_policy(preset, {"gamma_max": 2}, rng=random.Random(0))
    twin = build_policy(preset, {"gamma_max": 2}, rng=random.Random(0))
    plays = [policy.choose(4, 0, num_reqs_ahead=64) for _ in range(50)]
    assert plays == [twin.choose(4, 0) for _ in range(50)]
    assert not policy.last_queued
