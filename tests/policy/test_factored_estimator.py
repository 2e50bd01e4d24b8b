"""The ``factored`` latency estimator (the default): step time per key, acceptance shared."""

from __future__ import annotations

import random

import pytest

from nightjar_ray.policy import PolicyStats, StepResult, build_policy
from nightjar_ray.policy.batch_curve import STEPS_TABLE
from nightjar_ray.policy.factored import REQS_TABLE
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


def test_factored_statistics_merge_exactly_and_survive_a_restore() -> None:
    """Two replicas' merged tables rank as one policy that saw both step streams."""
    rng = random.Random(7)
    steps = [
        _step(b, g, rng.uniform(1.0, g + 1.0))._replace(duration_s=rng.uniform(0.005, 0.05))
        for b, g in ((rng.choice((1, 3, 8, 20)), rng.randint(0, 4)) for _ in range(2000))
    ]
    a, b, both = _policy(), _policy(), _policy()
    for i, result in enumerate(steps):
        (a if i % 2 else b).observe(result)
        both.observe(result)
    merged = a.export_stats().merge(b.export_stats())
    assert set(merged.tables) == {LATENCY_TABLE, REQS_TABLE, STEPS_TABLE}
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
