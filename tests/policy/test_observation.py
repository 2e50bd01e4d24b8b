"""One observation rule for engine and simulator; speculation pays for its draft prefill."""

from __future__ import annotations

import dataclasses
import random

import pytest

from nightjar_ray.driver.observation import (
    DEFAULT_OBSERVATION_RULE,
    MIN_PREFILL_SAMPLES,
    MIN_PREFILL_TOKENS,
    ObservationRule,
    StepSample,
)
from nightjar_ray.driver.step import Choice, StepBatch
from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.policy import StepResult, build_policy, policy_config
from nightjar_ray.policy.forced import ForcedSchedulePolicy
from nightjar_ray.policy.presets import NightjarParams
from nightjar_ray.sim import server as sim_server
from nightjar_ray.sim.experiments import RunKnobs, default_contenders

BASE_S = 0.020
TARGET_S_PER_PROMPT_TOKEN = 1e-5
DRAFT_S_PER_PROMPT_TOKEN = 2e-6


def test_engine_and_simulator_run_the_same_step_driver_with_the_same_default() -> None:
    from nightjar_ray.engine import scheduler as engine_scheduler
    from nightjar_ray.sim.presets import SETTINGS

    server = sim_server.SimServer(
        SETTINGS["rtx4090-7b"],
        build_policy("off", {}, rng=random.Random(0)),
        sim_server.ServerOptions(),
    )
    assert engine_scheduler.StepDriver is sim_server.StepDriver is StepDriver
    assert type(server.driver) is StepDriver
    assert type(server.driver.observation) is ObservationRule
    assert server.driver.observation.name == DEFAULT_OBSERVATION_RULE
    assert NightjarConfig().testing.observation_rule == RunKnobs().observed_time
    assert RunKnobs().observed_time == DEFAULT_OBSERVATION_RULE
    policy = build_policy("off", {}, rng=random.Random(0))
    stepper = StepDriver(policy, gamma_cap=4, clock=lambda: 0.0)
    assert isinstance(stepper.observation, ObservationRule)
    assert stepper.observation.name == DEFAULT_OBSERVATION_RULE


def test_defaults_are_one_config_in_engine_and_simulator() -> None:
    nightjar = next(c for c in default_contenders() if c.label == "nightjar")
    simulated = NightjarParams.model_validate(nightjar.params)
    assert NightjarConfig().policy_config() == simulated == NightjarParams()


@pytest.mark.parametrize("preset", ["nightjar", "nightjar-paper"])
def test_research_overrides_build_the_same_policy_in_engine_and_simulator(preset: str) -> None:
    """The simulator's --nightjar-params and the engine's testing.policy_overrides build one
    parameter object, so both policies play the same gammas from the same seed."""
    overrides = {"bucketing": "exact", "explore_bin_steps": 3, "switch_cost_ms": 2.0}
    engine = NightjarConfig(policy=preset, seed=7, testing={"policy_overrides": overrides})
    simulated = policy_config(preset, {"gamma_max": 4, **overrides})
    assert engine.policy_config() == simulated
    a, b = engine.build_policy(), build_policy(preset, simulated, rng=random.Random(7))
    assert type(a) is type(b)
    for step in range(300):
        num_reqs = 1 + step % 9
        gamma = a.choose(num_reqs, step % 50)
        assert gamma == b.choose(num_reqs, step % 50)
        result = StepResult(num_reqs, gamma, num_reqs * (1 + gamma), 0.01 + 0.002 * gamma)
        a.observe(result)
        b.observe(result)


def _step(gamma: int, num_prefill_tokens: int, num_reqs: int = 4) -> StepSample:
    """A step whose time is the decode's, the target's prefill, and (gamma > 0) the draft's."""
    tokens = num_reqs * (1 + gamma)
    duration = BASE_S * (1 + 0.3 * gamma) + TARGET_S_PER_PROMPT_TOKEN * num_prefill_tokens
    if gamma > 0:
        duration += DRAFT_S_PER_PROMPT_TOKEN * num_prefill_tokens
    return StepSample(num_reqs, gamma, gamma, tokens, duration, num_prefill_tokens)


def _calibrated(rule: ObservationRule) -> ObservationRule:
    for _ in range(5):
        observed = rule.observe(_step(0, 0))  # a pure decode step is learned as it ran
        assert observed is not None and observed.duration_s == _step(0, 0).duration_s
    for i in range(MIN_PREFILL_SAMPLES):
        rule.observe(_step(0, 500 + 100 * i))
    return rule


def test_mixed_step_charges_draft_prefill_to_speculation() -> None:
    rule = _calibrated(ObservationRule("prefill-corrected"))
    assert rule.prefill_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    pure = rule.observe(_step(2, 0))
    mixed = rule.observe(_step(2, 2000))
    assert pure is not None and mixed is not None
    # the target's 2,000 prompt tokens are gone, the draft's forward over them stays
    assert mixed.duration_s - pure.duration_s == pytest.approx(2000 * DRAFT_S_PER_PROMPT_TOKEN)
    off_mixed = rule.observe(_step(0, 2000))
    off_pure = rule.observe(_step(0, 0))
    assert off_mixed is not None and off_pure is not None
    assert off_mixed.duration_s == pytest.approx(off_pure.duration_s, rel=1e-6)
    # the pure rule never sees the draft's prefill: the mixed step is not a sample
    assert ObservationRule("pure").observe(_step(2, 2000)) is None
    # wall time charges the target's prefill to whichever gamma ran
    walled = ObservationRule("step").observe(_step(2, 2000))
    assert walled is not None and walled.duration_s == _step(2, 2000).duration_s


def test_uncalibrated_rule_skips_mixed_steps_and_transitions_are_never_samples() -> None:
    rule = ObservationRule("prefill-corrected")
    assert rule.prefill_s_per_token is None
    assert rule.observe(_step(2, 1000)) is None
    assert rule.observe(_step(2, 0)._replace(next_gamma=0)) is None
    assert rule.observe(_step(0, 0)._replace(num_reqs=0)) is None
    with pytest.raises(ValueError, match="observation rule"):
        ObservationRule("bogus")


def test_engine_stepper_learns_corrected_times_from_its_own_steps() -> None:
    """The engine path end to end: gamma=0 steps price the target's prefill, then a gamma=2
    step with prefill chunks is observed with the draft's prefill still in it."""
    policy = ForcedSchedulePolicy([0] * 40 + [2] * 40, steps_per_gamma=1, gamma_max=4)
    seen: list[float] = []
    real_observe = policy.observe
    policy.observe = lambda r: (seen.append(r.duration_s), real_observe(r))[1]  # type: ignore[method-assign]
    now = [0.0]
    stepper = StepDriver(policy, gamma_cap=4, clock=lambda: now[0])
    for i in range(80):
        prompt = 0 if i % 3 else 1000
        gamma = 0 if i < 40 else 2
        stepper.on_schedule(StepBatch(4, 5 if prompt else 4, 5 if prompt else 4, 0, prompt), now[0])
        sample = _step(gamma, prompt)
        now[0] += sample.duration_s
        stepper.on_output(sample.num_tokens + (1 if prompt else 0), 4 * gamma, 4 * gamma)
    assert stepper.observation.prefill_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    pure, wall = _step(2, 0).duration_s, _step(2, 1000).duration_s
    expected_mixed = pure + 1000 * DRAFT_S_PER_PROMPT_TOKEN
    assert wall > expected_mixed  # wall time holds the target's prefill too
    assert any(d == pytest.approx(expected_mixed) for d in seen)
    assert all(d <= expected_mixed + 1e-9 for d in seen)


def test_prompt_only_steps_price_the_target_prefill_without_the_drafts_share() -> None:
    """One request at a time never has a mixed step: steps of prompt chunks alone price
    the target's prefill, with the draft's share (ratio r) taken out when it ran."""
    ratio = DRAFT_S_PER_PROMPT_TOKEN / TARGET_S_PER_PROMPT_TOKEN
    rule = ObservationRule("prefill-corrected", draft_cost_ratio=ratio)
    one_decode = StepSample(1, 0, 0, 1, BASE_S, 0)
    for _ in range(3):
        rule.observe(one_decode)
    for i in range(MIN_PREFILL_SAMPLES):
        prompt = 500 + 100 * i
        drafted = i % 2
        duration = (
            BASE_S + (TARGET_S_PER_PROMPT_TOKEN + drafted * DRAFT_S_PER_PROMPT_TOKEN) * prompt
        )
        assert rule.observe(StepSample(0, 0, drafted * 3, 0, duration, prompt)) is None
    assert rule.prefill_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    for name in ("pure", "step"):  # only the default rule learns a price
        other = ObservationRule(name, draft_cost_ratio=ratio)
        other.observe(one_decode)
        for _ in range(MIN_PREFILL_SAMPLES):
            other.observe(StepSample(0, 0, 0, 0, BASE_S + 0.01, 1000))
        assert other.prefill_s_per_token is None


def test_one_long_prompt_on_a_cold_engine_teaches_the_gate_its_price() -> None:
    """A burst of long prompts arrives at a cold engine: the first prompt's step prices the
    target's prefill for the draft gate at once (``MIN_PREFILL_TOKENS``), so the gate
    prices the draft's work on the rest of the burst; samples are corrected only after
    ``MIN_PREFILL_SAMPLES`` steps, and short prompts need that many for the gate too."""
    one_decode = StepSample(1, 0, 0, 1, BASE_S, 0)

    def prompt_only(num_prompt_tokens: int) -> StepSample:
        duration = BASE_S + TARGET_S_PER_PROMPT_TOKEN * num_prompt_tokens
        return StepSample(0, 0, 0, 0, duration, num_prompt_tokens)

    rule = ObservationRule("prefill-corrected")
    rule.observe(one_decode)
    rule.observe(prompt_only(MIN_PREFILL_TOKENS - 1))
    assert rule.prefill_price_s_per_token is None
    rule.observe(prompt_only(944))
    assert rule.prefill_price_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    assert rule.prefill_s_per_token is None
    assert rule.observe(_step(0, 2000, num_reqs=1)) is None  # not corrected yet: no sample
    short = ObservationRule("prefill-corrected")
    short.observe(one_decode)
    for i in range(MIN_PREFILL_SAMPLES):
        assert short.prefill_price_s_per_token is None, i
        short.observe(prompt_only(8))
    assert short.prefill_price_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    assert short.prefill_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)


def test_a_mixed_step_whose_key_never_ran_pure_learns_against_the_nearest_key() -> None:
    """Long prompts keep every step at B=6 mixed, so key 8 never has a pure gamma 0 step:
    its excess is taken over the nearest key with one (the lower of two as near) for the
    draft gate's price only, and no price is learned before any key has one."""
    rule = ObservationRule("prefill-corrected")
    assert rule.observe(_step(0, 2000, num_reqs=6)) is None
    assert rule.prefill_s_per_token is None
    rule.observe(_step(0, 0, num_reqs=2))
    rule.observe(_step(0, 0, num_reqs=32)._replace(duration_s=1.0))  # two keys further
    rule.observe(_step(0, 2000, num_reqs=6))
    assert rule.prefill_price_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    for _ in range(MIN_PREFILL_SAMPLES):  # the nearest key's base never corrects samples
        assert rule.observe(_step(0, 2000, num_reqs=6)) is None
    assert rule.prefill_s_per_token is None
    tie = ObservationRule("prefill-corrected")
    tie.observe(_step(0, 0, num_reqs=4))
    tie.observe(_step(0, 0, num_reqs=16)._replace(duration_s=1.0))  # as near as key 4
    tie.observe(_step(0, 2000, num_reqs=8))
    assert tie.prefill_price_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)


def test_draft_work_the_gate_priced_is_taken_out_of_the_sample() -> None:
    """A gated policy's step reports the owed tokens its draft ran over (prompt chunks and
    catch-up); the gate charges them per request, so the sample leaves them out and the
    arm's estimate is its decode alone, not charged twice."""
    ratio = DRAFT_S_PER_PROMPT_TOKEN / TARGET_S_PER_PROMPT_TOKEN
    rule = _calibrated(ObservationRule("prefill-corrected", draft_cost_ratio=ratio))
    pure = rule.observe(_step(2, 0))
    mixed = rule.observe(_step(2, 2000)._replace(num_drafted_owed_tokens=2000))
    assert pure is not None and mixed is not None
    assert mixed.duration_s == pytest.approx(pure.duration_s, rel=1e-6)
    catch_up = _step(2, 0)._replace(
        duration_s=_step(2, 0).duration_s + 300 * DRAFT_S_PER_PROMPT_TOKEN
    )
    caught = rule.observe(catch_up._replace(num_drafted_owed_tokens=300))
    assert caught is not None and caught.duration_s == pytest.approx(pure.duration_s, rel=1e-6)
    # not reported (the paper preset, no gate): the draft's work stays in the sample
    kept = rule.observe(catch_up)
    assert kept is not None and kept.duration_s == pytest.approx(catch_up.duration_s)


def test_the_driver_reports_the_owed_tokens_of_drafted_requests_only() -> None:
    """Request scope: the driver sums the owed tokens of the requests the draft runs over;
    the skipped ones' owed work is not done this step and is not taken out."""
    policy = build_policy("nightjar", {}, rng=random.Random(0))
    driver = StepDriver(policy, gamma_cap=4, clock=lambda: 0.0, draft_cost_ratio=0.1)
    for _ in range(MIN_PREFILL_SAMPLES + 2):
        driver.observation.observe(StepSample(1, 0, 0, 1, BASE_S, 0))
        driver.observation.observe(StepSample(1, 0, 0, 1, BASE_S + 0.01, 1000))
    for _ in range(6):
        for g in range(5):
            policy.observe(StepResult(3, g, 3 * (1 + g), BASE_S))
    batch = StepBatch(3, 3, 3, 0, 0, owed_tokens=(5000, 4, 0), remaining_tokens=(0, 200, 300))
    choice = driver.choose(3, 0)
    assert choice.gamma > 0
    driver.commit(batch, choice, 0.0)
    assert driver.last_undrafted == frozenset({0})
    assert driver._pending[-1].num_drafted_owed_tokens == 4


def test_the_driver_reads_the_policys_rows_only_for_a_step_that_owes_the_draft() -> None:
    """The gate prices owed draft work; a speculating step that owes none (every request
    in sync, no prompt chunk) is not priced, so the policy's rows are not read, and the
    gate still skips a request with nothing left to emit."""
    policy = build_policy("nightjar", {}, rng=random.Random(0))
    reads: list[int] = []
    real = policy.latency_estimates
    policy.latency_estimates = lambda b: (reads.append(b), real(b))[1]  # type: ignore[method-assign]
    driver = StepDriver(policy, gamma_cap=4, clock=lambda: 0.0, draft_cost_ratio=0.1)
    for _ in range(6):
        for g in range(5):
            policy.observe(StepResult(3, g, 3 * (1 + g), BASE_S))
    in_sync = StepBatch(3, 3, 3, 0, 0, owed_tokens=(0, 0, 0), remaining_tokens=(0, 200, 300))
    assert driver.commit(in_sync, replace_gamma(driver.choose(3, 0), 2), 0.0) == 2
    assert (reads, driver.last_undrafted) == ([], frozenset({0}))
    owing = dataclasses.replace(in_sync, owed_tokens=(0, 4, 0))
    assert driver.commit(owing, replace_gamma(driver.choose(3, 0), 2), 0.0) == 2
    assert reads == [3]


def test_the_driver_prices_a_cold_burst_from_its_first_long_prompt() -> None:
    """The step after a cold engine's first long prompt (a burst behind it): the gate has
    that prompt's price, so the draft does not run over 5,000 owed prompt tokens for the
    15 tokens the request still emits; before that prompt the gate had no price and
    speculated."""
    cpu_s_per_prompt_token = 5e-3  # a CPU engine's order of magnitude
    for learned in (False, True):
        policy = build_policy("nightjar", {}, rng=random.Random(0))
        driver = StepDriver(policy, gamma_cap=4, clock=lambda: 0.0, draft_cost_ratio=0.1)
        driver.observation.observe(StepSample(1, 0, 0, 1, BASE_S, 0))
        if learned:
            duration = BASE_S + cpu_s_per_prompt_token * 944
            driver.observation.observe(StepSample(0, 0, 0, 0, duration, 944))
        for _ in range(3):
            policy.observe(StepResult(2, 0, 2, BASE_S))
        batch = StepBatch(2, 2, 2, 0, 0, owed_tokens=(0, 5000), remaining_tokens=(15, 15))
        played = driver.commit(batch, replace_gamma(driver.choose(2, 0), 2), 0.0)
        assert (played, driver.last_undrafted) == (
            (2, frozenset({1})) if learned else (2, frozenset())
        )


def test_a_step_that_left_requests_undrafted_is_learned_as_if_all_were_drafted() -> None:
    """Request scope: in a step verifying gamma 2, 3 of 4 decoding requests were drafted
    (6 draft tokens, 3 accepted) and the fourth emitted one token. The arm is learned at
    the acceptance the drafted ones saw (1 + 1 token each), not diluted by the skipped one,
    or the gate would price ever lower savings and skip ever more requests."""
    seen: list[StepResult] = []
    policy = build_policy("nightjar", {}, rng=random.Random(0))
    real = policy.observe
    policy.observe = lambda r: (seen.append(r), real(r))[1]  # type: ignore[method-assign]
    now = [0.0]
    driver = StepDriver(policy, gamma_cap=4, clock=lambda: now[0])
    batch = StepBatch(4, 4, 4, 0)
    for choice_gamma in (2, 2):
        choice = driver.choose(4, 0)
        driver.commit(batch, replace_gamma(choice, choice_gamma), now[0])
    now[0] += 0.02
    driver.on_output(4, 0, 0)  # the first step verified nothing (a transition: no sample)
    now[0] += 0.02
    driver.on_output(3 * 2 + 1, 6, 3)
    assert seen and seen[-1].gamma == 2 and seen[-1].num_tokens == 4 * 2
    # the step scope (and the paper) learn the step as it ran
    paper = build_policy("nightjar", {"draft_gate_scope": "step"}, rng=random.Random(0))
    paper_seen: list[StepResult] = []
    real_paper = paper.observe
    paper.observe = lambda r: (paper_seen.append(r), real_paper(r))[1]  # type: ignore[method-assign]
    stepper = StepDriver(paper, gamma_cap=4, clock=lambda: now[0])
    for _ in range(2):
        stepper.commit(batch, replace_gamma(stepper.choose(4, 0), 2), now[0])
    now[0] += 0.02
    stepper.on_output(4, 0, 0)
    now[0] += 0.02
    stepper.on_output(3 * 2 + 1, 6, 3)
    assert paper_seen and paper_seen[-1].num_tokens == 7


def replace_gamma(choice: Choice, gamma: int) -> Choice:
    return dataclasses.replace(choice, gamma=gamma)


def test_a_gated_policy_that_never_plays_zero_prices_the_drafts_work_all_the_same() -> None:
    """Low load on a CPU host: Nightjar speculates at gamma 2 from the start and never runs
    a pure gamma 0 step. Its drivers report the owed tokens its draft ran over, so steady
    gamma 2 steps are bases and mixed ones price the target's prefill for the draft gate
    (their draft's share taken out). Samples are still corrected only with a price learned
    at gamma 0, and a policy whose draft work is not reported learns nothing from them, as
    before (the paper preset)."""
    ratio = DRAFT_S_PER_PROMPT_TOKEN / TARGET_S_PER_PROMPT_TOKEN
    gated = ObservationRule("prefill-corrected", ratio, draft_work_reported=True)
    ungated = ObservationRule("prefill-corrected", ratio)
    for rule in (gated, ungated):
        rule.observe(_step(2, 0))
        mixed = _step(2, 600)._replace(num_drafted_owed_tokens=600)
        assert rule.observe(mixed) is None  # not a sample: nothing corrects it yet
    assert gated.prefill_price_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    assert gated.prefill_s_per_token is None
    assert ungated.prefill_price_s_per_token is None
    # a prompt-only step prices it against the one-decode base at the gamma it proposes
    alone = ObservationRule("prefill-corrected", ratio, draft_work_reported=True)
    alone.observe(_step(3, 0, num_reqs=1))
    prompt_only = _step(3, 944, num_reqs=1)._replace(num_reqs=0, num_drafted_owed_tokens=944)
    assert alone.observe(prompt_only) is None
    assert alone.prefill_price_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)
    assert alone.prefill_s_per_token is None
    # with a gamma 0 base at hand, prompt-only steps price against it, trusted as before
    alone.observe(StepSample(1, 0, 0, 1, BASE_S, 0))
    for _ in range(MIN_PREFILL_SAMPLES):
        alone.observe(
            prompt_only._replace(
                duration_s=BASE_S + 944 * TARGET_S_PER_PROMPT_TOKEN + 944 * DRAFT_S_PER_PROMPT_TOKEN
            )
        )
    assert alone.prefill_s_per_token == pytest.approx(TARGET_S_PER_PROMPT_TOKEN)


def test_the_gate_of_a_policy_that_speculates_from_the_start_skips_long_prompts() -> None:
    """The served ``mixed`` workload's cold start (its decision log): Nightjar played
    gamma 0 on 4 of 142 steps, so a price learned at gamma 0 only never came and the draft
    prefilled every 512-1,024-token prompt that had 2-8 tokens to emit. Learned at the
    gamma it plays, the price arrives with the first long prompt's step."""
    policy = build_policy("nightjar", {}, rng=random.Random(0))
    driver = StepDriver(policy, gamma_cap=4, clock=lambda: 0.0, draft_cost_ratio=0.1)
    cpu_s_per_prompt_token = 5e-3
    for _ in range(3):
        driver.observation.observe(StepSample(2, 3, 3, 8, BASE_S, 0))
        policy.observe(StepResult(2, 0, 2, BASE_S))
    first = BASE_S + cpu_s_per_prompt_token * (900 + 0.1 * 900)
    driver.observation.observe(StepSample(2, 3, 3, 8, first, 900, 6, 6, 900))
    # the next long prompt's first chunk joins two decodes
    batch = StepBatch(2, 2, 3, 0, 900, owed_tokens=(0, 0, 900), remaining_tokens=(80, 80, 5))
    played = driver.commit(batch, replace_gamma(driver.choose(2, 0), 3), 0.0)
    assert (played, driver.last_undrafted) == (3, frozenset({2}))


def test_a_probe_in_a_key_gamma_zero_never_ran_at_skips_the_requests_it_cannot_catch_up() -> None:
    """The batch grew from 128 into key 256 while the policy played gamma 0: the probe's
    first step there has no l~[B, 0] at its own key. The gate prices it at key 128's,
    so requests that lag by a whole prompt stay undrafted (before, it knew nothing,
    drafted all of them and paid every catch-up in one step) and those in sync are
    drafted. A probe that would leave more than three quarters of its decoding requests
    undrafted plays gamma 0 instead: its step would be a far cheaper one than the arm's,
    learned with the tokens of a batch it did not draft."""
    for num_lagging, played in ((29, 1), (96, 1), (97, 0), (128, 0)):
        policy = build_policy("nightjar", {}, rng=random.Random(0))
        driver = StepDriver(policy, gamma_cap=4, clock=lambda: 0.0, draft_cost_ratio=0.1)
        driver.observation.observe(StepSample(1, 0, 0, 1, BASE_S, 0))
        for _ in range(MIN_PREFILL_SAMPLES + 2):
            driver.observation.observe(StepSample(1, 0, 0, 1, BASE_S + 1000 * 1e-4, 1000))
        for _ in range(3):
            policy.observe(StepResult(128, 0, 128, 0.025))
        owed = (*(0,) * (129 - num_lagging), *(800,) * num_lagging)
        batch = StepBatch(128, 129, 129, 0, 0, owed_tokens=owed, remaining_tokens=(200,) * 129)
        probe = dataclasses.replace(driver.choose(129, 0), gamma=1, explored=True)
        assert driver.commit(batch, probe, 0.0) == played
        lagging = frozenset(range(129 - num_lagging, 129))
        assert driver.last_undrafted == (lagging if played else frozenset())
        # the gate decides and counts: a gated probe is a gated step, not undrafted requests
        assert driver.gate.num_undrafted_reqs == (num_lagging if played else 0)
        assert driver.gate.num_gated_steps == (0 if played else 1)
    # an exploitation step is not a probe: it drafts the requests that pay, however few
    exploit = dataclasses.replace(driver.choose(129, 0), gamma=1, explored=False)
    assert driver.commit(batch, exploit, 0.0) == 1
