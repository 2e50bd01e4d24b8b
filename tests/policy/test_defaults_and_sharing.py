"""Defaults from evidence, the paper preset, and ranking untried arms from a neighbour key."""

from __future__ import annotations

import random

import pytest

from nightjar_ray.policy import StepResult, build_policy
from nightjar_ray.policy.nightjar import NightjarPaperPolicy, NightjarPolicy
from nightjar_ray.policy.presets import NightjarParams, nightjar_params

DEFAULTS = {
    "gamma_max": 4,
    "bucketing": "pow2",
    "switch_cost_ms": 0.0,
    "switch_cost_weight": 0.0,
    "latency_estimator": "factored",
    "tokens_prior_req_steps": 16.0,
    "paired_acceptance": True,
    "batch_curve": True,
    "exploration": "local",
    "explore_bin_steps": 2,
    "share_across_keys": False,
    "untried_arm_bound": True,
    "gamma_zero_bound_max_reqs": 16,
    "min_arm_tokens_per_req": 1.0,
    "draft_gate": True,
    "draft_gate_scope": "request",
    "queue_aware": True,
    "price_draft_memory": True,
}
PAPER = {
    **DEFAULTS,
    "bucketing": "exact",
    "switch_cost_weight": 1.0,
    "latency_estimator": "step-mean",
    "paired_acceptance": False,
    "batch_curve": False,
    "exploration": "uniform",
    "explore_bin_steps": None,
    "untried_arm_bound": False,
    "gamma_zero_bound_max_reqs": 0,
    "min_arm_tokens_per_req": 0.0,
    "draft_gate": False,
    "queue_aware": False,
    "price_draft_memory": False,
}


def test_presets_hold_the_measured_defaults_and_the_papers_exact_settings() -> None:
    assert nightjar_params("nightjar").model_dump() == DEFAULTS == NightjarParams().model_dump()
    assert nightjar_params("nightjar-paper").model_dump() == PAPER
    assert nightjar_params("nightjar-paper", {"gamma_max": 2}).model_dump() == {
        **PAPER,
        "gamma_max": 2,
    }
    with pytest.raises(ValueError, match="unknown nightjar preset 'nightjar-fast'"):
        nightjar_params("nightjar-fast")


def _trace_key_128(params: dict[str, object]) -> NightjarPolicy:
    """Key 128 as the L20 trace replay learned it (seed 1, 121 s): at B = 82, gamma 1 emits
    1.6 tokens a request at 0.83 ms a token, gamma 0 costs 0.97 ms a token."""
    policy = build_policy("nightjar", params, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    tokens_per_req = (1.0, 1.6, 2.0, 2.3, 2.5)
    ms_per_token = (0.97, 0.83, 0.97, 0.98, 1.08)
    for gamma, (t, ms) in enumerate(zip(tokens_per_req, ms_per_token, strict=True)):
        num_tokens = round(82 * t)
        for _ in range(3):
            policy.observe(StepResult(82, gamma, num_tokens, num_tokens * ms * 1e-3))
    return policy


def test_after_a_gamma_zero_probe_the_default_returns_to_the_faster_arm() -> None:
    """After a gamma = 0 step, Eq. 4's switch term prices the catch-up by the longest lag (a
    new prompt's, 600 tokens) over the whole batch: 14 ms, 0.42 ms a token even at the old
    weight 0.03, more than gamma 1's lead of 0.14 ms. The old default held gamma 0 and the
    draft was offloaded for the rest of the replay (docs/benchmarks.md, "The switch term
    left to the draft gate"); the default leaves the catch-up to the draft gate."""
    switch = {"switch_cost_ms": 14.0}
    assert _trace_key_128(switch).exploit(128, 82, 600) == 1
    assert _trace_key_128({**switch, "switch_cost_weight": 0.03}).exploit(128, 82, 600) == 0
    # the paper's weight deadlocks harder still
    assert _trace_key_128({**switch, "switch_cost_weight": 1.0}).exploit(128, 82, 600) == 0


def test_paper_preset_is_its_own_policy_and_keeps_its_statistics_apart() -> None:
    paper = build_policy("nightjar-paper", {}, rng=random.Random(0))
    default = build_policy("nightjar", {}, rng=random.Random(0))
    assert isinstance(paper, NightjarPaperPolicy) and paper.name == "nightjar-paper"
    assert type(default) is NightjarPolicy
    default.observe(StepResult(4, 1, 6, 0.01))
    with pytest.raises(ValueError, match="nightjar"):
        paper.load_stats(default.export_stats())
    # the preset's fields can still be overridden one by one
    tuned = build_policy("nightjar-paper", {"bucketing": "pow2"}, rng=random.Random(0))
    assert isinstance(tuned, NightjarPolicy) and tuned.config.bucketing == "pow2"


def _with_complete_key(share: bool) -> NightjarPolicy:
    params = {"bucketing": "exact", "share_across_keys": share, "untried_arm_bound": False}
    policy = build_policy("nightjar", params, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    # key 16 knows every arm: gamma 2 is best there
    for gamma, latency in enumerate((1.0e-3, 0.9e-3, 0.7e-3, 0.8e-3, 1.1e-3)):
        policy.observe(StepResult(16, gamma, 16, 16 * latency))
    return policy


def test_untried_arms_are_ranked_from_the_nearest_complete_key() -> None:
    shared = _with_complete_key(share=True)
    assert shared.exploit(12, 12, 0) == 2  # the neighbour's best, not gamma 0 first
    # a tried arm of the key itself rescales the neighbour's row: gamma 1 measured 2x its
    # neighbour value and 0.5x... only tried arms use their own means
    shared.observe(StepResult(12, 2, 10, 10 * 2.0e-3))  # gamma 2 is slow here
    assert shared.exploit(12, 12, 0) == 2  # rescaled row keeps the neighbour's order...
    shared.observe(StepResult(12, 1, 10, 10 * 0.5e-3))  # ...until gamma 1 is measured better
    assert shared.exploit(12, 12, 0) == 1
    paper_like = _with_complete_key(share=False)
    assert paper_like.exploit(12, 12, 0) == 0  # plays untried arms in order


def test_sharing_needs_a_complete_key_and_forgets_it_with_new_statistics() -> None:
    params = {"bucketing": "exact", "share_across_keys": True, "untried_arm_bound": False}
    policy = build_policy("nightjar", params, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    assert policy.exploit(12, 12, 0) == 0  # nothing to share yet
    donor = _with_complete_key(share=True)
    policy.load_stats(donor.export_stats())
    assert policy.exploit(12, 12, 0) == 2
    policy.load_stats(build_policy("nightjar", {}, rng=random.Random(0)).export_stats())
    assert policy.exploit(12, 12, 0) == 0


def _one_unlucky_sample(min_tokens: float) -> NightjarPolicy:
    """Key 1 (one request): gamma 3 was tried once and every draft token was rejected.
    (Without the unimodal bound, which would price gamma 3 from gamma 2 instead.)"""
    params = {"min_arm_tokens_per_req": min_tokens, "bucketing": "pow2", "untried_arm_bound": False}
    policy = build_policy("nightjar", params, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    for gamma, tokens, step_s in ((0, 2, 40e-3), (1, 2, 25e-3), (2, 2, 27e-3), (4, 3, 30e-3)):
        policy.observe(StepResult(1, gamma, tokens, step_s))  # gamma 4: 10 ms/token, best
    policy.observe(StepResult(1, 3, 1, 28e-3))  # 1 token: 28 ms/token, worst of all
    return policy


def test_one_unlucky_sample_no_longer_retires_an_arm() -> None:
    paper_rule = _one_unlucky_sample(0.0)
    assert paper_rule.exploit(1, 1, 0) == 4  # gamma 3 trusted after one rejected step
    guarded = _one_unlucky_sample(2.0)
    assert guarded.exploit(1, 1, 0) == 3  # 1 token < 2 per request x key 1: play it again
    guarded.observe(StepResult(1, 3, 4, 28e-3))  # the next step accepts all three
    assert guarded.exploit(1, 1, 0) == 4  # settled (5 tokens): 11.2 ms/token, not the best
    for _ in range(2):
        guarded.observe(StepResult(1, 3, 4, 28e-3))
    assert guarded.exploit(1, 1, 0) == 3  # 13 tokens in 112 ms: 8.6 ms/token, the best


def test_min_arm_tokens_scale_with_the_keys_batch_size() -> None:
    policy = build_policy("nightjar", {"min_arm_tokens_per_req": 2.0}, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    for gamma in range(5):  # key 16 (pow2 of 9..16): 16 tokens each, below 2 x 16
        policy.observe(StepResult(12, gamma, 16, 16e-3))
    assert policy.exploit(16, 12, 0) == 0  # every arm still unsettled: the first again
    for gamma in range(5):
        policy.observe(StepResult(12, gamma, 16, 16e-3 * (1 + abs(gamma - 2))))
    assert policy.exploit(16, 12, 0) == 2  # 32 tokens each: the estimates rank
    # statistics loaded from a pool (another replica) settle keys the same way
    fresh = build_policy("nightjar", {"min_arm_tokens_per_req": 2.0}, rng=random.Random(1))
    fresh.load_stats(policy.export_stats())
    assert isinstance(fresh, NightjarPolicy) and fresh.exploit(16, 12, 0) == 2


def test_min_arm_tokens_needs_token_counts() -> None:
    with pytest.raises(ValueError, match="min_arm_tokens_per_req"):
        NightjarParams(latency_estimator="step-mean", min_arm_tokens_per_req=1.0)
    NightjarParams(latency_estimator="step-mean", min_arm_tokens_per_req=0.0)


def test_speculation_gain_is_the_key_own_ratio_else_a_smaller_key_bound() -> None:
    # token-weighted: the steps below emit 100 tokens whatever B and gamma, which the
    # factored estimator would read as an acceptance (and the test is about the gain)
    params = {"gamma_max": 2, "latency_estimator": "token-weighted"}
    policy = build_policy("nightjar", params, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    # nothing ranks yet: no evidence either way, the draft's best case stands
    assert policy.speculation_gain(4, best_case=3.5) == 3.5
    # key 4 (pow2): 1 ms a token plain, 0.5 ms at gamma 1, 0.8 ms at gamma 2
    for gamma, s_per_token in ((0, 1e-3), (1, 5e-4), (2, 8e-4)):
        policy.observe(StepResult(4, gamma, 100, 100 * s_per_token))
    assert policy.speculation_gain(4, 3.5) == pytest.approx(2.0)
    # key 16 has not tried every arm: bounded by the largest smaller key that ranks
    policy.observe(StepResult(16, 0, 100, 0.05))
    assert policy.speculation_gain(16, 3.5) == pytest.approx(2.0)
    assert policy.speculation_gain(2, 3.5) == 3.5  # nothing ranks at or below key 2
    # the paper preset, and a policy that keeps no estimates, price nothing
    paper = build_policy("nightjar-paper", {}, rng=random.Random(0))
    assert paper.speculation_gain(4, 3.5) is None
    assert (
        build_policy("fixed", {"gamma": 2}, rng=random.Random(0)).speculation_gain(4, 3.5) is None
    )
