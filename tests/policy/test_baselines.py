"""Each baseline reproduces decisions computed by hand on small examples."""

from __future__ import annotations

import math
import random

import pytest

from nightjar_ray.policy import PolicyStats, StepResult, build_policy
from nightjar_ray.policy.dsd import ACCEPTANCE_TABLE, STEP_TIME_TABLE, DsdPolicy
from nightjar_ray.policy.exp3spec import Exp3SpecPolicy
from nightjar_ray.policy.ucbspec import UcbSpecPolicy


def test_fixed_and_off() -> None:
    fixed = build_policy("fixed", {"gamma": 3, "gamma_max": 5}, rng=random.Random(0))
    off = build_policy("off", {}, rng=random.Random(0))
    assert {fixed.choose(b, 7) for b in range(1, 100)} == {3}
    assert {off.choose(b, 7) for b in range(1, 100)} == {0}


def test_vllm_static_table_semantics() -> None:
    """Ranges map directly; gaps take the range below; above the last takes the last;
    k is clamped to num_speculative_tokens (gamma_max)."""
    table = [[1, 2, 5], [4, 8, 2], [16, 31, 1]]
    policy = build_policy(
        "vllm-static",
        {"gamma_max": 4, "num_speculative_tokens_per_batch_size": table},
        rng=random.Random(0),
    )
    expected = {1: 4, 2: 4, 3: 4, 4: 2, 8: 2, 9: 2, 15: 2, 16: 1, 31: 1, 32: 1, 500: 1}
    assert {b: policy.choose(b, 0) for b in expected} == expected


def _dsd_with_model(alpha: float) -> DsdPolicy:
    """Step time exactly T = 10 + 2*g + 0.5*B*(g+1) + 0.1*B*g ms on a grid of cells."""
    policy = build_policy("dsd", {"gamma_max": 3}, rng=random.Random(0))
    assert isinstance(policy, DsdPolicy)
    step_cells = {
        (b, g): (5.0, 1e-3 * (10 + 2 * g + 0.5 * b * (g + 1) + 0.1 * b * g))
        for b in (1, 2, 8, 32, 64)
        for g in range(4)
    }
    accept_cells = {(0, g): (100.0, alpha) for g in (1, 2, 3)}
    policy.load_stats(
        PolicyStats("dsd", {STEP_TIME_TABLE: step_cells, ACCEPTANCE_TABLE: accept_cells})
    )
    policy.load_local_state({"num_chosen": 10_000})  # past the warm-up
    return policy


def test_dsd_goodput_argmax_by_hand() -> None:
    """alpha=0.6, goodput E/T (tok/s) per gamma 0..3:
    B=1: 95.24, 122.14, 124.84, 118.91 -> 2
    B=8: 571.43, 615.38, 568.12, 506.05 -> 1
    B=64: 1523.81, 1242.72, 1021.50, 853.33 -> 0"""
    policy = _dsd_with_model(0.6)
    assert policy.choose(1, 0) == 2
    assert policy.theta == pytest.approx([0.010, 0.002, 0.0005, 0.0001], rel=1e-4, abs=1e-8)
    assert policy.choose(8, 0) == 1
    assert policy.choose(64, 0) == 0


def test_dsd_decision_deadlock_is_faithful() -> None:
    """With a pessimistic alpha DSD turns SD off and, seeing no acceptance data at
    gamma=0, never turns it back on, even where the true acceptance is high."""
    policy = _dsd_with_model(0.2)  # alpha=0.2: gamma=0 best at every B (hand-computed)
    for _ in range(2_000):
        gamma = policy.choose(1, 0)
        assert gamma == 0
        policy.observe(StepResult(1, gamma, 1, 0.0105))
    assert policy.alpha() == pytest.approx(0.2)


def test_dsd_warmup_round_robin_then_model() -> None:
    policy = build_policy("dsd", {"gamma_max": 2, "warmup_steps_per_arm": 2}, rng=random.Random(0))
    assert [policy.choose(4, 0) for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def test_ucbspec_by_hand() -> None:
    """K=3 (L=2), delta=0.1; goodputs arm0: 100 x2, arm1: 90 x1, arm2: 120 x8 (G=120, t=11).
    mu = 1 + L*g/G: 2.6667, 2.5, 3.0; cr = (L/2) sqrt((1+n)/n^2 (1+2 log(K t^2 sqrt(1+n)/delta))):
    3.7242, 6.0145, 1.6598 -> UCB 6.3908, 8.5145, 4.6598 -> arm 1 (greedy would pick 2)."""
    policy = build_policy("ucbspec", {"gamma_max": 2, "delta": 0.1}, rng=random.Random(0))
    assert isinstance(policy, UcbSpecPolicy)
    assert [policy.choose(1, 0) for _ in range(3)] == [0, 1, 2]  # round-robin first
    for gamma, goodputs in ((0, [100] * 2), (1, [90]), (2, [120] * 8)):
        for g in goodputs:
            policy.observe(StepResult(1, gamma, g, 1.0))
    assert policy.ucb_scores() == pytest.approx([6.3908, 8.5145, 4.6598], abs=1e-3)
    assert policy.choose(1, 0) == 1


def test_exp3spec_by_hand() -> None:
    """K=2 (L=1). After rounds with known Z_hat sums the distribution is
    p_i = exp(-eta S_i) / sum_j exp(-eta S_j), eta = sqrt(log K / (t K))."""
    policy = build_policy("exp3spec", {"gamma_max": 1}, rng=random.Random(0))
    assert isinstance(policy, Exp3SpecPolicy)
    assert policy.probabilities() == pytest.approx([0.5, 0.5])
    # round 1: arm drawn with p=0.5; goodput = G (first step) -> r=1 -> Z_hat = 0
    gamma = policy.choose(1, 0)
    policy.observe(StepResult(1, gamma, 100, 1.0))
    assert policy.export_stats().tables["loss_estimate"][(0, gamma)] == (1.0, 0.0)
    # round 2: the other arm at half the goodput -> r = 0.5; Z_hat = (1 - 0.5) / p
    other = 1 - gamma
    p_other = policy.probabilities()[other]
    policy._pending.clear()
    policy.observe(StepResult(1, other, 50, 1.0))
    z = policy.export_stats().tables["loss_estimate"][(0, other)][1]
    assert z == pytest.approx(0.5 / p_other)
    eta = math.sqrt(math.log(2) / (3 * 2))
    sums = {gamma: 0.0, other: z}
    weights = {i: math.exp(-eta * s) for i, s in sums.items()}
    expected = [weights[i] / sum(weights.values()) for i in (0, 1)]
    assert policy.probabilities() == pytest.approx(expected)


def _loss_sum(policy: Exp3SpecPolicy, gamma: int) -> float:
    n, mean = policy.export_stats().tables["loss_estimate"].get((0, gamma), (0.0, 0.0))
    return n * mean


def test_exp3spec_uses_the_probability_the_arm_was_drawn_with() -> None:
    """With a step in flight (async scheduling), Z_hat divides by the draw-time p."""
    policy = build_policy("exp3spec", {"gamma_max": 3}, rng=random.Random(1))
    assert isinstance(policy, Exp3SpecPolicy)
    for goodput in (100, 50):  # make the distribution non-uniform
        policy.observe(StepResult(1, policy.choose(1, 0), goodput, 1.0))
    draw_probs = policy.probabilities()
    first = policy.choose(1, 0)
    second = policy.choose(1, 0)  # chosen before `first` is observed
    policy.observe(StepResult(1, first, 100, 1.0))  # r = 1: Z_hat = 0, but t moves on
    assert policy.probabilities() != pytest.approx(draw_probs)
    before = _loss_sum(policy, second)
    policy.observe(StepResult(1, second, 25, 1.0))  # r = 0.25
    assert _loss_sum(policy, second) - before == pytest.approx(0.75 / draw_probs[second])
