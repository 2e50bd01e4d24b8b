"""The ``factored`` latency estimator (the default): step time per key, acceptance shared."""

from __future__ import annotations

import random

import pytest

from nightjar_ray.driver.observation import depth_counts
from nightjar_ray.policy import PolicyStats, StepResult, build_policy
from nightjar_ray.policy.base import validate_result
from nightjar_ray.policy.batch_curve import STEPS_TABLE
from nightjar_ray.policy.factored import REACH_TABLE, REQS_TABLE
from nightjar_ray.policy.nightjar import LATENCY_TABLE, NightjarPolicy

STEP_S = 0.010
TOKENS_PER_REQ = {0: 1.0, 1: 1.8, 2: 2.3, 3: 2.8, 4: 3.5}
"""Acceptance in this test: tokens a request emits per step at each gamma."""


def _policy(**params: object) -> NightjarPolicy:
    policy = build_policy("nightjar", params, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    return policy


def _step(num_reqs: int, gamma: int, tokens_per_req: float | None = None) -> StepResult:
    per_req = TOKENS_PER_REQ[gamma] if tokens_per_req is None else tokens_per_req
    num_tokens = round(num_reqs * per_req)
    accepted = num_tokens - num_reqs
    return StepResult(num_reqs, gamma, num_tokens, STEP_S, num_reqs * gamma, accepted)


def _drafted(gamma: int, accepted: list[int]) -> StepResult:
    """A step of ``len(accepted)`` drafted requests, each accepting that many drafts."""
    num_reqs = len(accepted)
    num_tokens = num_reqs + sum(accepted)
    depths = depth_counts(accepted, gamma)
    return StepResult(num_reqs, gamma, num_tokens, STEP_S, num_reqs * gamma, sum(accepted), depths)


def _one_unlucky_draw(policy: NightjarPolicy) -> None:
    """Key 16 learns every arm with the usual acceptance; key 4 sees gamma 4 once, in a
    step that accepted nothing, and the other arms many times. A step takes as long
    whatever gamma (memory-bound), so the longest gamma is best at both keys."""
    for _ in range(20):
        for gamma in TOKENS_PER_REQ:
            policy.observe(_step(16, gamma))
    for _ in range(20):
        for gamma in range(4):
            policy.observe(_step(4, gamma))
    policy.observe(_step(4, 4, tokens_per_req=1.0))


def test_one_unlucky_acceptance_draw_does_not_retire_an_arm() -> None:
    """The A100 low-load cell's failure (docs/benchmarks.md): token-weighted keeps the
    unlucky draw and exploits gamma 3; factored ranks gamma 4 from the pooled acceptance."""
    factored, weighted = _policy(), _policy(latency_estimator="token-weighted")
    for policy in (factored, weighted):
        _one_unlucky_draw(policy)
    assert weighted.exploit(4, 4, 0) == 3
    assert factored.exploit(4, 4, 0) == 4
    assert factored.exploit(16, 16, 0) == weighted.exploit(16, 16, 0) == 4
    # The key's own evidence still counts: its step time over the shrunk acceptance.
    pooled = (20 * 56 + 4) / (20 * 16 + 4)  # tokens / request-steps at gamma 4, all keys
    shrunk = (4 + 16 * pooled) / (4 + 16)  # key 4's 4 request-steps and the prior's 16
    estimate = factored.estimate(4, 4)
    assert estimate is not None
    assert estimate == pytest.approx(STEP_S / 4 / shrunk, rel=1e-9)


def test_a_zero_prior_is_the_token_weighted_estimator_exactly() -> None:
    rng = random.Random(3)
    zero, weighted = (
        _policy(tokens_prior_req_steps=0.0, batch_curve=False),
        _policy(latency_estimator="token-weighted"),
    )
    for _ in range(3000):
        b, g = rng.choice((1, 2, 3, 5, 8, 13, 40)), rng.randint(0, 4)
        result = _step(b, g, rng.uniform(1.0, g + 1.0))
        result = result._replace(duration_s=rng.uniform(0.005, 0.05))
        zero.observe(result)
        weighted.observe(result)
        assert zero.choose(b, 8) == weighted.choose(b, 8)
    for b in (1, 2, 4, 8, 40):
        for g in range(5):
            assert zero.estimate(b, g) == pytest.approx(weighted.estimate(b, g), rel=1e-12)


def _random_step(rng: random.Random) -> StepResult:
    b, g = rng.choice((1, 3, 8, 20)), rng.randint(0, 4)
    step = _drafted(g, [rng.randint(0, g) for _ in range(b)]) if g else _step(b, 0)
    return step._replace(duration_s=rng.uniform(0.005, 0.05))


def test_factored_statistics_merge_exactly_and_survive_a_restore() -> None:
    """Two replicas' merged tables rank as one policy that saw both step streams."""
    rng = random.Random(7)
    steps = [_random_step(rng) for _ in range(2000)]
    a, b, both = _policy(), _policy(), _policy()
    for i, result in enumerate(steps):
        (a if i % 2 else b).observe(result)
        both.observe(result)
    merged = a.export_stats().merge(b.export_stats())
    assert set(merged.tables) == {LATENCY_TABLE, REQS_TABLE, REACH_TABLE, STEPS_TABLE}
    assert merged.tables[REACH_TABLE]
    restored = _policy()
    restored.load_stats(PolicyStats.from_json(merged.to_json()))
    for batch in (1, 3, 8, 20):
        for gamma in range(5):
            expected = both.estimate(batch, gamma)
            assert restored.estimate(batch, gamma) == pytest.approx(expected, rel=1e-9)


def test_latency_only_statistics_load_as_token_weighted() -> None:
    """A snapshot without the requests-per-token table (token-weighted replicas, older
    snapshots) loads; its arms keep their token-weighted means."""
    policy = _policy()
    cells = {(8, g): (50.0, 1e-3 * (1.0 - 0.1 * g)) for g in range(5)}
    policy.load_stats(PolicyStats(policy.name, {LATENCY_TABLE: cells}))
    assert policy.estimate(8, 3) == pytest.approx(0.7e-3)
    assert policy.exploit(8, 8, 0) == 4


def test_the_prior_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="tokens_prior_req_steps"):
        build_policy("nightjar", {"tokens_prior_req_steps": -1.0}, rng=random.Random(0))


EASY, HARD = 4, 0
"""Acceptance depths of two kinds of request: one accepts every draft, one none."""


def _teach_key_4(policy: NightjarPolicy) -> None:
    """Key 4 plays gammas 0-3 on half easy, half hard requests; its three gamma-4 probes
    meet one easy request and three hard ones. A step takes as long whatever gamma
    (memory-bound), so on the same requests the longest gamma is best."""
    for _ in range(20):
        for gamma in range(4):
            policy.observe(_drafted(gamma, [min(EASY, gamma)] * 2 + [HARD] * 2))
    for _ in range(3):
        policy.observe(_drafted(4, [EASY] + [HARD] * 3))


def test_paired_depths_price_a_rare_longer_arm_on_the_same_requests() -> None:
    """The A100 low-load cell at policy seed 1000 (docs/benchmarks.md): the probes of
    gamma 4 met harder requests than the arm the key plays, and tokens per request from
    the probes alone rank gamma 4 below gamma 3 for good. Acceptance depths compare the
    two on the requests each probe met: every request that accepted 3 drafts accepted a
    fourth, so gamma 4 emits more."""
    paired, unpaired = _policy(), _policy(paired_acceptance=False)
    for policy in (paired, unpaired):
        _teach_key_4(policy)
    assert unpaired.exploit(4, 4, 0) == 3
    assert paired.exploit(4, 4, 0) == 4
    row = paired.latency_estimates(4)
    assert row is not None and row == sorted(row, reverse=True)  # t rises with gamma


def test_depth_counts_and_their_validation() -> None:
    assert depth_counts([0, 2, 3, 3], 3) == (4, 3, 3, 2)
    assert depth_counts([5], 3) == (1, 1, 1, 1)  # capped at gamma
    assert depth_counts([], 3) == depth_counts([1], 0) == ()
    good = _drafted(3, [0, 2, 3])
    validate_result(good, 4)
    for bad in ((3, 2, 1), (3, 2, 3, 1), (4, 2, 1, 0)):
        with pytest.raises(ValueError, match="num_reqs_reaching"):
            validate_result(good._replace(num_reqs_reaching=bad), 4)
