"""The draft gate (policy/draft_gate.py): its learned price and its verdicts."""

import random

import pytest

from nightjar_ray.driver.draft_gate import (
    DraftGate,
    approx_num_params,
    best_case_gain,
    remaining_after_step,
)
from nightjar_ray.policy import StepResult, build_policy
from nightjar_ray.policy.nightjar import NightjarPolicy

ESTIMATES = [0.010, 0.008, 0.006]
"""Latency per token at gamma 0, 1, 2: gamma 2 saves 4 ms per token."""


PRICE = 1e-3
"""Target prefill s per token: at ratio 0.1 the draft costs 0.1 ms per owed token."""


def test_approx_num_params_prices_a_small_draft_far_below_its_target() -> None:
    target = approx_num_params(32, 4096, 11008, 32000)
    assert 6.5e9 < target < 7.0e9  # a 7B model
    draft = approx_num_params(2, 1024, 2816, 32000)
    assert 0.01 < draft / target < 0.02


def test_gate_compares_expected_gain_with_owed_draft_work() -> None:
    gate = DraftGate(0.1)
    # gain = 10 tokens * 4 ms = 40 ms; cost = 1000 owed * 0.1 ms = 100 ms -> stop
    assert not gate.allows(2, ESTIMATES, 1000, 10, PRICE)
    # 100 remaining tokens -> 400 ms gain beats 100 ms
    assert gate.allows(2, ESTIMATES, 1000, 100, PRICE)
    # gamma 1 saves 2 ms per token: 50 tokens -> 100 ms, exactly the cost -> speculate
    assert gate.allows(1, ESTIMATES, 1000, 50, PRICE)
    assert not gate.allows(1, ESTIMATES, 1000, 49, PRICE)
    assert gate.num_gated_steps == 2


def test_gate_never_stops_what_owes_nothing_or_gamma_zero() -> None:
    gate = DraftGate(0.1)
    assert gate.allows(
        2, ESTIMATES, num_owed_tokens=0, num_remaining_tokens=0, target_prefill_s_per_token=PRICE
    )
    assert gate.allows(0, ESTIMATES, 10_000, 0, PRICE)
    assert gate.num_gated_steps == 0


def test_no_output_left_stops_at_any_price_even_unlearned() -> None:
    gate = DraftGate(0.1)
    assert not gate.allows(3, None, 500, 0, None)
    assert not gate.allows(3, None, 500, 0, None, explored=True)
    assert gate.allows(3, None, 500, 1, None)


def test_unknown_price_or_estimates_let_speculation_run() -> None:
    gate = DraftGate(0.1)
    assert gate.allows(2, ESTIMATES, 10_000, 1, None)
    assert gate.allows(2, None, 10_000, 1, PRICE)
    assert gate.num_gated_steps == 0


def test_a_key_still_learning_is_judged_by_the_best_case_from_gamma_zero() -> None:
    gate = DraftGate(0.1)
    # no ranking yet, l~[B, 0] = 10 ms: 10 tokens could save at most 10 * 10 * 2/3 ms
    assert not gate.allows(2, None, 1000, 10, PRICE, latency_at_zero_s=0.010)  # 67 < 100 ms
    assert gate.allows(2, None, 1000, 20, PRICE, latency_at_zero_s=0.010)  # 133 >= 100 ms
    assert gate.num_gated_steps == 1


def test_nightjar_reports_gamma_zero_latency_before_its_key_is_complete() -> None:
    policy = build_policy("nightjar", {"gamma_max": 2}, rng=random.Random(0))
    assert policy.latency_at_zero_s(4) is None
    policy.observe(StepResult(4, 0, 4, 0.040))
    assert policy.latency_estimates(4) is None  # gamma 1 and 2 untried
    assert policy.latency_at_zero_s(4) == pytest.approx(0.010)
    assert policy.latency_at_zero_s(0) is None


def test_a_key_gamma_zero_never_ran_at_reads_the_largest_smaller_key_that_did() -> None:
    """A batch that just grew into a new key (B 128 -> 129) has no l~[B, 0] there yet. Time
    per token falls as the batch grows, so a smaller key's l~[., 0] is an upper bound on
    this one's and keeps the gate's best case a bound; without it the gate knows nothing
    and drafts every request, its whole catch-up included, in a probe's step."""
    policy = build_policy("nightjar", {"gamma_max": 2}, rng=random.Random(0))
    policy.observe(StepResult(4, 0, 4, 0.040))
    policy.observe(StepResult(100, 0, 100, 0.500))
    assert policy.latency_at_zero_s(200) == pytest.approx(0.005)  # key 128's, not key 4's
    assert policy.latency_at_zero_s(100) == pytest.approx(0.005)
    assert policy.latency_at_zero_s(3) == pytest.approx(0.010)  # its own key, 4
    assert policy.latency_at_zero_s(2) is None  # no key up to 2 ran gamma 0


def test_exploration_probes_are_judged_by_their_best_case() -> None:
    gate = DraftGate(0.1)
    worse = [0.010, 0.012, 0.015]  # the probe's arm looks worse than gamma 0
    # 10 owed tokens cost 1 ms; the estimate stops an exploit, not a probe
    assert not gate.allows(2, worse, 10, 100, PRICE)
    assert gate.allows(2, worse, 10, 100, PRICE, explored=True)
    # best case: 2 of 3 tokens free -> 100 tokens * 10 ms * 2/3 = 667 ms; 6,670 owed
    # tokens cost 667 ms (pays, just), 6,680 do not
    assert best_case_gain(2, 0.010, 100) == pytest.approx(0.6667, abs=1e-4)
    assert gate.allows(2, worse, 6_660, 100, PRICE, explored=True)
    assert not gate.allows(2, worse, 6_680, 100, PRICE, explored=True)
    # a long prompt owed with a few tokens left: no acceptance rate could pay for it
    assert not gate.allows(4, [*ESTIMATES, 0.004, 0.003], 800, 5, PRICE, explored=True)
    assert gate.num_gated_steps == 3


def test_ratio_is_validated() -> None:
    with pytest.raises(ValueError, match="draft_cost_ratio"):
        DraftGate(0.0)
    with pytest.raises(ValueError, match="draft_cost_ratio"):
        DraftGate(1.5)


def test_remaining_after_step() -> None:
    assert remaining_after_step(max_tokens=16, num_output_tokens=0) == 15
    assert remaining_after_step(max_tokens=1, num_output_tokens=0) == 0
    assert remaining_after_step(max_tokens=4, num_output_tokens=9) == 0


def _trained(params: dict[str, object]) -> NightjarPolicy:
    policy = build_policy("nightjar", {"gamma_max": 2, **params}, rng=random.Random(0))
    assert isinstance(policy, NightjarPolicy)
    for gamma, seconds in ((0, 0.010), (1, 0.016), (2, 0.018)):
        for _ in range(4):
            policy.observe(StepResult(1, gamma, 1 + gamma, seconds))
    return policy


def test_nightjar_opts_in_and_exposes_its_ranked_row() -> None:
    policy = _trained({})
    assert policy.draft_gate
    assert policy.latency_estimates(1) == pytest.approx([0.010, 0.008, 0.006])
    assert policy.latency_estimates(64) is None  # key never tried
    assert not _trained({"draft_gate": False}).draft_gate
    paper = build_policy("nightjar-paper", {"gamma_max": 2}, rng=random.Random(0))
    fixed = build_policy("fixed", {"gamma": 2, "gamma_max": 2}, rng=random.Random(0))
    assert not paper.draft_gate and not fixed.draft_gate


def test_request_scope_skips_exactly_the_requests_that_cannot_pay() -> None:
    gate = DraftGate(0.1)
    # gamma 2 saves 4 ms a token; a request owing 1000 tokens costs 100 ms of draft work
    owed = (0, 1000, 1000, 0, 500)
    remaining = (5, 10, 25, 0, 10)
    # 1: 40 ms < 100 ms; 2: 100 ms pays; 3: nothing left to emit; 4: 40 ms < 50 ms
    assert gate.undrafted(2, ESTIMATES, owed, remaining, PRICE) == frozenset({1, 3, 4})
    assert gate.num_undrafted_reqs == 3 and gate.num_gated_steps == 0
    # a request that owes nothing is drafted whatever it saves
    assert gate.undrafted(2, ESTIMATES, (0,), (1,), PRICE) == frozenset()
    # no request pays: the step counts as gated
    assert gate.undrafted(2, ESTIMATES, (1000, 0), (10, 0), PRICE) == frozenset({0, 1})
    assert gate.num_gated_steps == 1


def test_request_scope_before_anything_is_learned_skips_only_finished_requests() -> None:
    gate = DraftGate(0.1)
    assert gate.undrafted(2, ESTIMATES, (1000, 9), (10, 0), None) == frozenset({1})
    assert gate.undrafted(2, None, (1000, 9), (10, 0), PRICE) == frozenset({1})
    assert gate.undrafted(0, ESTIMATES, (1000,), (10,), PRICE) == frozenset()


def test_request_scope_skips_every_owing_request_when_gamma_saves_nothing() -> None:
    """A gamma chosen for another batch size (the queue-aware objective) may lose at this
    one: then no owed work is worth paying, but requests in sync still speculate."""
    worse = [0.006, 0.008, 0.010]
    gate = DraftGate(0.1)
    assert gate.undrafted(2, worse, (0, 1, 1000), (100, 10_000, 10_000), PRICE) == {1, 2}


def test_a_probe_weighs_its_catch_up_against_its_own_steps_only() -> None:
    """A probe plays its arm for ``probe_steps`` steps, then the bin may turn back to gamma
    0 and the lag grows again: a catch-up is worth a probe only if the probe's own tokens
    pay for it. Requests in sync are drafted; a batch that all lags is not caught up."""
    gate = DraftGate(0.1)
    worse = [0.010, 0.012, 0.015]
    # best case at gamma 2: 10 ms * 2/3 a token; 200 owed tokens cost 20 ms = 3 tokens
    owed, remaining = (0, 200, 200), (50, 50, 2)
    assert gate.undrafted(2, worse, owed, remaining, PRICE, explored=True) == frozenset({2})
    probe = gate.undrafted(2, worse, owed, remaining, PRICE, explored=True, probe_steps=1)
    assert probe == frozenset({2})  # 1 step emits up to 3 tokens: 20 ms just pays
    # 400 owed tokens need 6 tokens: the request's 50 would pay, the probe's 3 do not
    assert gate.undrafted(2, worse, (0, 400), (50, 50), PRICE, True) == set()
    assert gate.undrafted(2, worse, (0, 400), (50, 50), PRICE, True, probe_steps=1) == {1}
    # an exploit is not a probe: the horizon does not apply
    assert gate.undrafted(2, ESTIMATES, (0, 400), (50, 50), PRICE, probe_steps=1) == set()


def test_a_probe_that_would_draft_a_quarter_of_its_decoding_requests_or_fewer_is_gated() -> None:
    """A probe's step is learned as the arm's: one that drafts a few requests is a far
    cheaper step than the arm's. Skipping over three quarters of the decoding requests
    skips them all, counted as a gated step (not as undrafted requests); an exploit
    drafts whichever requests pay, however few."""
    gate = DraftGate(0.1)
    owed = (0, *(800,) * 4)  # one request in sync, four lag by a whole prompt
    remaining = (50,) * 5
    probe = gate.undrafted(2, ESTIMATES, owed, remaining, PRICE, True, None, 1, 5)
    assert probe == frozenset(range(5))
    assert (gate.num_gated_steps, gate.num_undrafted_reqs) == (1, 0)
    # all four lag: nothing to draft, gated
    four = gate.undrafted(2, ESTIMATES, owed[1:], remaining[1:], PRICE, True, None, 1, 4)
    assert four == frozenset(range(4))
    # three of four lagging is not over three quarters: the probe drafts the one in sync
    mixed = (0, *(800,) * 3)
    assert gate.undrafted(2, ESTIMATES, mixed, remaining[1:], PRICE, True, None, 1, 4) == {1, 2, 3}
    assert (gate.num_gated_steps, gate.num_undrafted_reqs) == (2, 3)
    exploit = gate.undrafted(2, ESTIMATES, owed, remaining, PRICE, False, None, 1, 5)
    assert exploit == frozenset()  # 50 tokens at 4 ms save 200 ms, over 80 ms of draft work
