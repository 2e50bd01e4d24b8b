"""The queue-aware objective (policy/nightjar.py) and the batch a queue will produce
(driver/queue.py)."""

import random

import pytest

from nightjar_ray.driver.queue import (
    MIN_QUEUED_OUTPUT_TOKENS,
    QueueState,
    batch_ahead,
    joins_batch_ahead,
)
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


def queue(waiting: int, prefilling: int = 0, free: int = 900) -> QueueState:
    return QueueState(
        waiting, prefilling, max_num_reqs=64, num_free_blocks=free, num_total_blocks=1000
    )


def test_batch_ahead_is_capped_by_seats_and_by_kv() -> None:
    assert batch_ahead(4, None) is None
    assert batch_ahead(4, queue(0)) is None
    assert batch_ahead(4, queue(10)) == 14
    assert batch_ahead(4, queue(100)) == 40  # 4 requests use 100 blocks: 40 fit
    assert batch_ahead(60, queue(100, free=0)) is None  # the KV cache is full
    assert batch_ahead(60, queue(100, free=990)) == 64  # seats


def test_prompts_still_in_prefill_chunks_are_queued_too() -> None:
    # nothing waits for a seat, but 3 admitted requests are still prefilling
    assert batch_ahead(4, queue(0, 3)) == 7
    assert batch_ahead(4, queue(2, 3)) == 9
    assert batch_ahead(4, queue(0, 3, free=0)) is None  # ... and no KV for them to decode
    assert joins_batch_ahead(MIN_QUEUED_OUTPUT_TOKENS)
    assert not joins_batch_ahead(MIN_QUEUED_OUTPUT_TOKENS - 1)


def test_waiting_requests_switch_the_objective_to_the_batch_ahead() -> None:
    policy = taught()
    alone = [policy.choose(4, 0) for _ in range(40)]
    assert policy.exploit(4, 4, 0) == 2 and alone.count(2) > 30
    assert not policy.last_queued
    plays = []
    for _ in range(400):
        gamma = policy.choose(4, 0, num_reqs_ahead=24)
        plays.append((gamma, policy.last_queued, policy.last_explored))
    # key(24) = 32 ranks gamma 0 first: every step not probing plays it ...
    assert all(g == 0 for g, queued, _ in plays if queued)
    assert sum(queued for _, queued, _ in plays) > 350
    # ... and probes never look up from key 4's exploited gamma 2
    probes = [g for g, _, explored in plays if explored]
    assert probes and set(probes) <= {1, 2}
    assert policy.num_queued_explore_bins > 0


def test_the_lock_follows_the_batch_ahead_into_another_key_inside_a_bin() -> None:
    """The arm for the batch ahead is locked for a bin, but only while the batch ahead
    stays in its key: alternating between 6 (key 8, untried, its arms priced by key 4's
    step times: gamma 2) and 17-32 (key 32: gamma 0) switches the play at every step, also
    in bins many steps long."""
    policy = taught()
    for _ in range(300):  # bins of several steps from here on
        policy.choose(4, 0)
    plays = set()
    for step in range(600):
        ahead = (17, 32, 24)[step % 3] if step % 2 else 6
        gamma = policy.choose(4, 0, num_reqs_ahead=ahead)
        if not policy.last_explored:
            plays.add((policy._key(ahead), gamma, policy.last_queued))
    assert plays == {(8, 2, True), (32, 0, True)}


def test_an_unranked_key_ahead_borrows_the_largest_ranked_key_between() -> None:
    policy = taught()
    # key 128 has no samples; key 32 is the largest ranked key in (key 4, key 128]
    plays = []
    for _ in range(40):
        gamma = policy.choose(4, 0, num_reqs_ahead=100)
        if not policy.last_explored:
            plays.append((gamma, policy.last_queued))
    assert plays and plays == [(0, True)] * len(plays)
    # nothing ranked above key 4: the bin's own arm stands, not the queue objective
    lone = taught(keys=(4,))
    lone.choose(4, 0, num_reqs_ahead=100)
    assert not lone.last_queued


def test_probes_while_requests_wait_only_look_down() -> None:
    """Key 4 exploits gamma 1 here; with nothing ranked above it the bin's arm stands, so
    only the probes differ: +-1 when nothing waits, 0 or 1 while requests wait."""
    rows = {4: (0.010, 0.008, 0.009)}

    def probes(num_reqs_ahead: int | None) -> set[int]:
        policy = build_policy("nightjar", {"gamma_max": 2}, rng=random.Random(1))
        assert isinstance(policy, NightjarPolicy)
        for gamma, s_per_token in enumerate(rows[4]):
            tokens = 4 * (1 + gamma)
            for _ in range(4):
                policy.observe(StepResult(4, gamma, tokens, tokens * s_per_token))
        seen = set()
        for _ in range(3000):
            gamma = policy.choose(4, 0, num_reqs_ahead)
            if policy.last_explored:
                seen.add(gamma)
        return seen

    assert probes(None) == {0, 1, 2}
    assert probes(100) == {0, 1}


@pytest.mark.parametrize("preset", ["nightjar-paper"])
def test_the_paper_preset_ignores_the_queue(preset: str) -> None:
    policy = build_policy(preset, {"gamma_max": 2}, rng=random.Random(0))
    twin = build_policy(preset, {"gamma_max": 2}, rng=random.Random(0))
    plays = [policy.choose(4, 0, num_reqs_ahead=64) for _ in range(50)]
    assert plays == [twin.choose(4, 0) for _ in range(50)]
    assert not policy.last_queued
