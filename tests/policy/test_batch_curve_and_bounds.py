"""Arms ranked at the exact batch size (``batch_curve``) and untried arms priced by lower
bounds instead of played (``untried_arm_bound``)."""

from __future__ import annotations

import random

import pytest

from nightjar_ray.policy import PolicyStats, StepResult, build_policy
from nightjar_ray.policy.batch_curve import STEPS_TABLE
from nightjar_ray.policy.nightjar import NightjarPolicy

TOKENS_PER_REQ = {0: 1.0, 1: 1.3, 2: 1.5, 3: 1.6, 4: 1.65}


def _policy(**params: object) -> NightjarPolicy:
    policy = build_policy("nightjar", params, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    return policy


def _step_s(num_reqs: int, gamma: int) -> float:
    """A weights read plus work per verified token: gamma 1 beats gamma 0 below B = 86."""
    return 0.020 + 1e-4 * num_reqs * (1 + gamma)


def _step(num_reqs: int, gamma: int) -> StepResult:
    num_tokens = round(num_reqs * TOKENS_PER_REQ[gamma])
    return StepResult(
        num_reqs,
        gamma,
        num_tokens,
        _step_s(num_reqs, gamma),
        num_reqs * gamma,
        num_tokens - num_reqs,
    )


def _true_best(num_reqs: int, num_arms: int) -> int:
    def latency(g: int) -> float:
        return _step_s(num_reqs, g) / (num_reqs * TOKENS_PER_REQ[g])

    return min(range(num_arms), key=latency)


def _learn_keys(policy: NightjarPolicy, arms: range, seed: int = 1) -> None:
    """Every arm at batch sizes spread over keys 64, 128 and 256."""
    rng = random.Random(seed)
    for _ in range(400):
        b = rng.randint(33, 256)
        for g in arms:
            policy.observe(_step(b, g))


def test_the_curve_finds_a_crossover_inside_one_key() -> None:
    """gamma 1 wins below B = 86 and loses above: key 128 (65..128) holds both sides. The
    key's mean plays one arm over the whole key; the curve follows the crossover."""
    assert _true_best(70, 2) == 1 and _true_best(120, 2) == 0
    curve, flat = _policy(gamma_max=1), _policy(gamma_max=1, batch_curve=False)
    for policy in (curve, flat):
        _learn_keys(policy, range(2))
    assert curve.exploit(128, 70, 0) == 1
    assert curve.exploit(128, 120, 0) == 0
    assert flat.exploit(128, 70, 0) == flat.exploit(128, 120, 0)
    for b in (40, 60, 70, 100, 120, 200, 250):
        assert curve.exploit(curve._key(b), b, 0) == _true_best(b, 2), b


def test_the_curve_estimate_is_the_step_time_at_b() -> None:
    """Between two keys' points the estimate is the interpolated step time over B."""
    policy = _policy(gamma_max=1)
    for b in (60, 100):  # one point each in keys 64 and 128
        for _ in range(5):
            for g in range(2):
                policy.observe(_step(b, g))
    row = policy.latency_estimates(80)
    assert row is not None
    # step time is linear in B, so the interpolation between B = 60 and 100 is exact
    assert row[0] == pytest.approx(_step_s(80, 0) / 80, rel=1e-6)


def test_curve_statistics_merge_and_restore() -> None:
    a, b = _policy(gamma_max=1), _policy(gamma_max=1)
    _learn_keys(a, range(2), seed=1)
    _learn_keys(b, range(2), seed=2)
    merged = a.export_stats().merge(b.export_stats())
    assert STEPS_TABLE in merged.tables
    one = _policy(gamma_max=1)
    one.load_stats(PolicyStats.from_json(merged.to_json()))
    assert one.exploit(128, 70, 0) == 1 and one.exploit(128, 120, 0) == 0


def test_an_arm_that_lost_to_a_smaller_one_retires_the_arms_above_it() -> None:
    """Latency per token is unimodal in gamma: once gamma 1 is worse than 0 at a key, the
    arms above it are priced at gamma 1's estimate and never played to find out."""
    bound, tries = _policy(), _policy(untried_arm_bound=False)
    for policy in (bound, tries):
        for g in (0, 1, 0, 1):  # twice: an arm settles at 256 tokens at key 256
            policy.observe(_step(200, g))
        assert policy.latency_estimates(200) is None or policy is bound
    assert bound.exploit(256, 200, 0) == 0
    row = bound.latency_estimates(200)
    assert row is not None and row[2:] == [row[1]] * 3
    assert tries.exploit(256, 200, 0) == 2  # the paper's rule: the next untried arm


def test_untried_arms_are_priced_from_a_smaller_key() -> None:
    """Key 16 knows every arm; key 64 has tried gamma 0 only. An arm is played untried only
    if its lower bound (key 16's ratio to gamma 0) ranks best."""
    policy = _policy()
    for _ in range(5):
        for g in TOKENS_PER_REQ:
            policy.observe(_step(16, g))
    policy.observe(_step(60, 0))
    policy.observe(_step(60, 0))
    row = policy.latency_estimates(60)
    assert row is not None
    at16 = [_step_s(16, g) / (16 * TOKENS_PER_REQ[g]) for g in TOKENS_PER_REQ]
    for g in range(1, 5):
        assert row[g] == pytest.approx(row[0] * at16[g] / at16[0], rel=0.05)
    best16 = min(range(5), key=at16.__getitem__)
    assert policy.exploit(64, 60, 0) == best16 > 0


def test_a_key_between_that_lost_past_its_mode_bounds_the_longer_arms() -> None:
    """Key 16 knows every arm (gamma 4 pays there); key 64 settled gamma 0-3 only, and
    gamma 3 lost to a shorter arm; key 128 has tried gamma 0 alone. gamma 4's bound at
    key 128 is not key 16's ratio, far below, but at least key 64's gamma 3 over gamma 0:
    relative cost does not fall as B grows, and past the mode a longer arm costs more."""
    policy = _policy()
    for _ in range(5):
        for g in TOKENS_PER_REQ:
            policy.observe(_step(16, g))
        for g in range(4):
            policy.observe(_step(60, g))
    for _ in range(3):
        policy.observe(_step(120, 0))
    at60 = [_step_s(60, g) / (60 * TOKENS_PER_REQ[g]) for g in range(4)]
    assert at60[3] > min(at60[:3])  # past the mode at key 64
    row = policy.latency_estimates(120)
    assert row is not None
    assert row[4] >= row[0] * at60[3] / at60[0] * 0.95
    # key 16's ratio alone would have priced gamma 4 the best arm at B = 120
    at16 = [_step_s(16, g) / (16 * TOKENS_PER_REQ[g]) for g in TOKENS_PER_REQ]
    assert row[0] * at16[4] / at16[0] < min(row[:4])
    assert policy.exploit(128, 120, 0) == 1


def test_a_key_without_gamma_zero_prices_it_by_a_smaller_keys_step_time() -> None:
    """Key 4 knows every arm; key 16 has tried nothing. Step time does not fall as B
    grows, so each arm costs at least key 4's step time over B requests' tokens: the key
    plays the arm those bounds rank best, not gamma 0 first, and once gamma 4 is settled
    gamma 0 (at least 0.0204 s over 12 tokens) is priced out without being played."""
    bound, paper = _policy(), _policy(untried_arm_bound=False)
    for policy in (bound, paper):
        for _ in range(5):
            for g in TOKENS_PER_REQ:
                policy.observe(_step(4, g))
    row = bound._estimates.ranked(16, 12)
    assert row is not None
    assert bound.latency_estimates(12) is None  # the gate and the gain need gamma 0's own
    for g in TOKENS_PER_REQ:
        # tokens per request as the steps emit them (rounded), on 12 requests
        per_req = _step(4, g).num_tokens / 4
        true = _step_s(12, g) / _step(12, g).num_tokens
        assert _step_s(4, g) / (12 * per_req) * 0.95 <= row[g] <= true
    assert bound.exploit(16, 12, 0) == _true_best(4, 5) == 4
    assert paper.exploit(16, 12, 0) == 0  # the paper's rule: untried arms in order
    played = []
    for _ in range(12):  # Eq. 4 plays its arm; each sample settles it (2 steps at key 16)
        gamma = bound.exploit(16, 12, 0)
        played.append(gamma)
        bound.observe(_step(12, gamma))
    row = bound._estimates.ranked(16, 12)
    assert row is not None and row[0] >= _step_s(4, 0) / 12 * 0.95 > min(row)
    assert 0 not in played and played[-1] > 0


def test_no_smaller_key_means_the_arm_is_tried_first() -> None:
    """A key below every key that knows its arms has no lower bound: it tries in order."""
    policy = _policy()
    for _ in range(5):
        for g in TOKENS_PER_REQ:
            policy.observe(_step(100, g))
    policy.observe(_step(6, 0))
    policy.observe(_step(6, 0))
    assert policy.latency_estimates(6) is None
    assert policy.exploit(8, 6, 0) == 1


def test_an_exploration_bin_of_an_unranked_key_plays_its_trial_arm() -> None:
    """Before a key ranks, a probe would duplicate the trial of untried arms (in order) at
    a random arm, a long one as likely as a short: it plays the trial arm instead."""
    policy = _policy()
    policy.observe(_step(200, 0))
    policy.observe(_step(200, 0))
    played = {policy.choose(200, 0) for _ in range(40)}
    assert played == {0, 1}
    paper = _policy(untried_arm_bound=False)
    paper.observe(_step(200, 0))
    paper.observe(_step(200, 0))
    assert {paper.choose(200, 0) for _ in range(200)} - {0, 1}


def _key_with_gamma_zero(**params: object) -> NightjarPolicy:
    """Key 256 knows gamma 0 only and no smaller key knows anything: gamma 1 is a trial."""
    policy = _policy(**params)
    policy.observe(_step(200, 0))
    policy.observe(_step(200, 0))
    return policy


def test_a_trial_plays_for_a_probe_then_the_best_settled_arm() -> None:
    """Trying an arm no bound prices is exploration: it plays ``explore_bin_steps`` steps
    of the bin, unobserved steps included, then the bin plays the best settled arm."""
    capped = _key_with_gamma_zero(explore_bin_steps=2)
    whole_bins = _key_with_gamma_zero(explore_bin_steps=None)
    played = [capped.choose(200, 0) for _ in range(400)]
    assert set(played) == {0, 1}
    # bins grow as sqrt(H): once they are longer than the probe, most steps exploit
    assert sum(played[200:]) < 0.5 * 200
    assert sum(whole_bins.choose(200, 0) for _ in range(400)) == 400  # never observed


def test_while_requests_wait_only_exploration_bins_try() -> None:
    """The waiting requests would pay for a trial's steps: with a queue an exploitation bin
    plays the best settled arm and only exploration bins (rate 1/b) try gamma 1, so the
    trial takes fewer steps than without a queue, but still happens (a key that exists
    only under queueing must learn)."""
    queued, idle = _key_with_gamma_zero(), _key_with_gamma_zero()
    with_queue = sum(queued.choose(200, 0, 230) for _ in range(400))
    without = sum(idle.choose(200, 0) for _ in range(400))
    assert 0 < with_queue < without / 2, (with_queue, without)


def test_speculation_gain_reads_bounded_rows_not_only_complete_keys() -> None:
    """Under the bound a key rarely tries every arm, so 'no complete key' is no evidence
    that speculation does not pay: the memory rule's gain reads the bounded rows (an A100
    whose speculation doubles throughput once offloaded its draft for good without it)."""
    policy = _policy()
    # key 4: gamma 1 beats gamma 0 (4 ms vs 5 ms a token), gamma 2 loses to gamma 1, so
    # gamma 3 and 4 are priced by unimodality and never played: ranked, not complete
    for gamma, tokens, step_s in ((0, 4, 0.020), (1, 5, 0.020), (2, 5, 0.024)):
        for _ in range(2):
            policy.observe(StepResult(4, gamma, tokens, step_s))
    assert 4 not in policy._estimates.complete_keys
    row = policy.latency_estimates(4)
    assert row is not None and row[3:] == [row[2]] * 2
    gain = policy.speculation_gain(200, 5.0)  # key 256 has seen nothing: the largest key below
    assert gain == pytest.approx(row[0] / row[1], rel=1e-9) and gain > 1.2


def test_speculation_gain_reads_a_key_only_once_its_gamma_zero_is_its_own() -> None:
    """Key 16 prices gamma 0 by key 4's step time and ranks its arms, but a bound on
    l~[B, 0] would understate the gain the memory rule gives the draft up on: the gain (and
    the draft gate's row) read key 4's row until key 16 settles gamma 0 itself."""
    policy = _policy()
    for _ in range(5):
        for g in TOKENS_PER_REQ:
            policy.observe(_step(4, g))
    for _ in range(2):
        policy.observe(_step(12, 4))
    estimates = policy._estimates
    at4, at16 = estimates.ranked(4), estimates.ranked(16)
    assert at4 is not None and at16 is not None  # key 16 ranks with gamma 0 bounded
    assert policy.latency_estimates(12) is None
    assert policy.speculation_gain(12, 5.0) == pytest.approx(at4[0] / min(at4), rel=1e-9)
    for _ in range(2):  # 24 tokens of gamma 0 settle it at key 16
        policy.observe(_step(12, 0))
    at16 = estimates.ranked(16)
    assert at16 is not None and policy.latency_estimates(12) is not None
    assert policy.speculation_gain(12, 5.0) == pytest.approx(at16[0] / min(at16), rel=1e-9)


@pytest.mark.parametrize(
    ("max_reqs", "num_reqs", "tries_zero"),
    [(32, 12, False), (32, 40, True), (64, 40, False), (0, 12, True)],
)
def test_gamma_zero_is_priced_before_trying_only_up_to_its_max_key(
    max_reqs: int, num_reqs: int, tries_zero: bool
) -> None:
    """Keys up to ``gamma_zero_bound_max_reqs`` price gamma 0 by a smaller key's step time
    and play the arm the bounds rank best; a larger key tries gamma 0 first (the evidence
    the gain and the gate read); 0 turns the step-time bound for gamma 0 off."""
    policy = _policy(gamma_zero_bound_max_reqs=max_reqs)
    for _ in range(5):
        for g in TOKENS_PER_REQ:
            policy.observe(_step(num_reqs // 3, g))
    key = policy._key(num_reqs)
    assert key > policy._key(num_reqs // 3)
    gamma = policy.exploit(key, num_reqs, 0)
    assert (gamma == 0) is tries_zero, gamma


def _drafted_step(rng: random.Random, num_reqs: int, gamma: int) -> StepResult:
    """A step at ``gamma`` whose drafted requests each accept with probability 0.7."""
    reaching = [num_reqs] if gamma else []
    for _ in range(gamma):
        reaching.append(sum(rng.random() < 0.7 for _ in range(reaching[-1])))
    accepted = sum(reaching[1:])
    duration_s = _step_s(num_reqs, gamma) * (1.0 + 0.1 * rng.random())
    return StepResult(
        num_reqs,
        gamma,
        num_reqs + accepted,
        duration_s,
        num_reqs * gamma,
        accepted,
        tuple(reaching),
    )


def _rows(policy: NightjarPolicy) -> list[list[float] | None]:
    return [policy.latency_estimates(b) for b in range(1, 201)]


def test_reading_the_rows_between_steps_changes_no_row_and_no_decision() -> None:
    """The draft gate reads the ranked row between steps, which keeps what it computed
    (the pooled acceptance depths, each key's curve points) for the next read. A policy
    read after every step and one read only now and then must play the same arms and
    rank the same rows, exactly, also after a snapshot restored over played state."""
    read_often, read_rarely = _policy(), _policy()
    rng = random.Random(3)
    for i in range(3000):
        b = rng.randint(1, 200)
        gamma = read_often.choose(b, 0)
        assert read_rarely.choose(b, 0) == gamma
        step = _drafted_step(rng, b, gamma)
        read_often.observe(step)
        read_rarely.observe(step)
        read_often.latency_estimates(rng.randint(1, 200))
        if i % 500 == 499:
            assert _rows(read_often) == _rows(read_rarely)
        if i == 1500:
            stats = read_often.export_stats()
            read_often.load_stats(stats)
            read_rarely.load_stats(stats)
    assert _rows(read_often) == _rows(read_rarely)


def test_a_restored_snapshot_with_the_same_counts_is_read_afresh() -> None:
    """Curve points are kept per key while its counts do not change; a snapshot restored
    over them with the same counts but other means must not be read from what was kept."""
    policy = _policy(gamma_max=2)
    _learn_keys(policy, range(3))
    before = _rows(policy)
    stats = policy.export_stats()
    slower = {cell: (n, 1.5 * m) for cell, (n, m) in stats.tables[STEPS_TABLE].items()}
    changed = PolicyStats(stats.policy, {**stats.tables, STEPS_TABLE: slower}, stats.maxima)
    policy.load_stats(changed)
    fresh = _policy(gamma_max=2)
    fresh.load_stats(changed)
    assert _rows(policy) == _rows(fresh)
    assert _rows(policy) != before
