"""StepDriver: B, gamma attribution, observation rule and async-safe step timing."""

import random
from dataclasses import replace

import pytest

from nightjar_ray.driver.observation import MIN_PREFILL_SAMPLES, ObservationRule, StepSample
from nightjar_ray.driver.queue import QueueState
from nightjar_ray.driver.step import StepBatch
from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.policy import ForcedSchedulePolicy, Policy, StepResult, build_policy


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """Wraps a policy and records what it is asked and told."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.chosen: list[tuple[int, int]] = []
        self.observed: list[StepResult] = []

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        self.chosen.append((num_reqs, max_skip_tokens))
        return self.policy.choose(num_reqs, max_skip_tokens)

    def observe(self, result: StepResult) -> None:
        self.observed.append(result)
        self.policy.observe(result)

    @property
    def gamma_max(self) -> int:
        return self.policy.gamma_max

    @property
    def last_explored(self) -> bool:
        return self.policy.last_explored

    @property
    def last_queued(self) -> bool:
        return self.policy.last_queued

    @property
    def gates_per_request(self) -> bool:
        return self.policy.gates_per_request

    @property
    def draft_gate(self) -> bool:
        return self.policy.draft_gate


def make(
    name: str, params: dict[str, object], **kw: object
) -> tuple[StepDriver, Recorder, FakeClock]:
    if name == "forced":  # the testing seam's schedule, not a registered policy
        policy: Policy = ForcedSchedulePolicy(**params)  # type: ignore[arg-type]
    else:
        policy = build_policy(name, params, rng=random.Random(0))
    rec = Recorder(policy)
    clock = FakeClock()
    stepper = StepDriver(rec, gamma_cap=4, clock=clock, **kw)  # type: ignore[arg-type]
    return stepper, rec, clock


def decode(n: int, skip: int = 0, prefills: int = 0, prompt_tokens: int = 100) -> StepBatch:
    return StepBatch(n, n + prefills, n + prefills, skip, prefills * prompt_tokens)


def test_batch_size_counts_decodes_not_prefills() -> None:
    stepper, rec, _ = make("fixed", {"gamma": 2, "gamma_max": 4})
    stepper.on_schedule(decode(4, prefills=3), 0.0)
    assert rec.chosen == [(4, 0)]
    stepper.on_schedule(StepBatch(0, 2, 5, 7), 0.0)  # only prefills: those that sample
    assert rec.chosen[-1] == (2, 7)
    scheduled, rec2, _ = make("fixed", {"gamma": 2, "gamma_max": 4}, count_scheduled=True)
    scheduled.on_schedule(decode(4, prefills=3), 0.0)
    assert rec2.chosen == [(7, 0)]


def test_no_sampling_request_keeps_previous_gamma_without_asking() -> None:
    stepper, rec, _ = make("forced", {"gammas": [3, 0], "steps_per_gamma": 1, "gamma_max": 4})
    assert stepper.on_schedule(decode(2), 0.0) == 3
    assert stepper.on_schedule(StepBatch(0, 0, 1, 0), 0.0) == 3
    assert len(rec.chosen) == 1


def test_only_steady_steps_are_observed_with_the_verified_gamma() -> None:
    stepper, rec, clock = make("forced", {"gammas": [0, 3], "steps_per_gamma": 2, "gamma_max": 4})
    gammas = []
    for _t in range(6):
        gammas.append(stepper.on_schedule(decode(2), clock.now))
        clock.now += 0.01
        stepper.on_output(num_tokens=2, num_draft_tokens=0, num_accepted_tokens=0)
    assert gammas == [0, 0, 3, 3, 0, 0]
    # steps 0 (prev 0 == 0), 1, 3, 5 are steady; 2 and 4 are transitions
    assert [r.gamma for r in rec.observed] == [0, 0, 3, 0]
    assert [d.observed for d in stepper.history] == [True, True, False, True, False, True]


def test_sync_duration_is_the_step_wall_time() -> None:
    stepper, rec, clock = make("fixed", {"gamma": 1, "gamma_max": 4})
    clock.now = 1.0
    stepper.on_schedule(decode(1), 1.0)
    clock.now = 1.5
    stepper.on_output(2, 1, 1)
    clock.now = 3.0  # idle time between steps is not charged
    stepper.on_schedule(decode(1), 3.0)
    clock.now = 3.25
    done = stepper.on_output(2, 1, 1)
    assert done.duration_s == 0.25
    assert rec.observed[-1].duration_s == 0.25


def test_async_duration_is_the_interval_between_outputs() -> None:
    stepper, _, clock = make("fixed", {"gamma": 1, "gamma_max": 4})
    stepper.on_schedule(decode(1), 0.0)  # step 0 scheduled at t=0
    stepper.on_schedule(decode(1), 0.1)  # step 1 scheduled before step 0 finished
    clock.now = 1.0
    first = stepper.on_output(2, 1, 1)
    stepper.on_schedule(decode(1), 1.05)
    clock.now = 2.0
    second = stepper.on_output(2, 1, 1)
    clock.now = 3.0
    third = stepper.on_output(2, 1, 1)
    assert (first.duration_s, second.duration_s, third.duration_s) == (1.0, 1.0, 1.0)
    assert [d.step for d in stepper.history] == [0, 1, 2]


def test_decision_log_has_one_json_line_per_step(tmp_path: object) -> None:
    import io
    import json

    buf = io.StringIO()
    stepper, _, clock = make("fixed", {"gamma": 2, "gamma_max": 4}, log_file=buf)
    for _ in range(3):
        stepper.on_schedule(decode(3, skip=5), clock.now)
        clock.now += 0.1
        stepper.on_output(9, 6, 4)
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [line["gamma"] for line in lines] == [2, 2, 2]
    assert lines[1]["num_reqs"] == 3 and lines[1]["max_skip_tokens"] == 5
    assert lines[1]["num_accepted_tokens"] == 4 and lines[1]["observed"]


def test_decision_log_marks_the_steps_the_policy_explored() -> None:
    import io
    import json

    buf = io.StringIO()
    stepper, rec, clock = make("nightjar", {"draft_gate": False}, log_file=buf)
    explored = []
    for _ in range(40):
        stepper.on_schedule(decode(3), clock.now)
        explored.append(rec.last_explored)
        clock.now += 0.1
        stepper.on_output(6, 3, 2)
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [line["explored"] for line in lines] == explored
    # NOTE: a cold key's first bins try its arms; later bins exploit.
    assert explored[0] and not all(explored)


def test_steps_carrying_prefill_follow_the_observation_rule() -> None:
    """``step`` keeps a prefill-carrying step's wall time; ``pure`` drops it; so does
    ``prefill-corrected`` until it has priced the target's prefill (at gamma = 0)."""
    for rule, expected in (
        ("step", [False, True, False]),
        ("pure", [False, False]),
        ("prefill-corrected", [False, False]),
    ):
        stepper, rec, clock = make("fixed", {"gamma": 2, "gamma_max": 4}, observation_rule=rule)
        for prefills in (0, 0, 3, 0):
            stepper.on_schedule(decode(1, prefills=prefills), clock.now)
            clock.now += 0.02 if prefills == 0 else 0.5
            stepper.on_output(num_tokens=2 + prefills, num_draft_tokens=2, num_accepted_tokens=1)
        # step 0 is a transition (0 -> 2); the prefill-carrying step 2 follows the rule
        assert [r.duration_s > 0.1 for r in rec.observed] == expected, rule
        assert stepper.history[2].carries_prefill
        # a prompt's first token is not a decode token: the decode emitted 2
        assert all(r.num_tokens == 2 for r in rec.observed)


def test_telemetry_counts_every_step_by_gamma_switches_and_observed_goodput() -> None:
    gammas = [0, 0, 2, 2, 0, 3, 3, 3]
    stepper, _, clock = make("forced", {"gammas": gammas, "steps_per_gamma": 1, "gamma_max": 4})
    for _ in gammas:
        stepper.on_schedule(decode(3), clock.now)
        clock.now += 0.01
        stepper.on_output(5, 0, 0)
    reading = stepper.telemetry.read()
    assert reading.steps_by_gamma == (3, 0, 2, 3, 0)
    assert reading.num_steps == len(gammas)
    assert reading.num_switches == 2  # 0 -> 2 and 0 -> 3
    assert reading.num_observed_steps == stepper.num_observed
    assert reading.observed_tokens == 5 * stepper.num_observed
    assert sum(reading.decisions_by_mode.values()) == len(gammas)
    assert reading.last_gamma == 3 and reading.last_num_reqs == 3


def test_nightjar_reports_exploration_decisions() -> None:
    stepper, _, clock = make("nightjar", {"gamma_max": 4})
    for _ in range(300):
        stepper.on_schedule(decode(2), clock.now)
        clock.now += 0.01
        stepper.on_output(3, 0, 0)
    modes = stepper.telemetry.read().decisions_by_mode
    assert modes["explore"] > 0 and modes["exploit"] > 0
    assert modes["explore"] + modes["exploit"] == 300


def test_draft_away_steps_play_zero_and_neither_ask_nor_teach_the_policy() -> None:
    policy = Recorder(build_policy("fixed", {"gamma": 3, "gamma_max": 3}, rng=random.Random(0)))
    clock = FakeClock()
    stepper = StepDriver(policy, gamma_cap=3, clock=clock, observation_rule="step")  # type: ignore[arg-type]
    batch = StepBatch(4, 4, 4, 0)
    for away in (True, True, False, False):
        gamma = stepper.on_schedule(batch, clock.now, draft_away=away)
        assert gamma == (0 if away else 3)
        clock.now += 0.01
        done = stepper.on_output(4, 0, 0)
        assert done.draft_away is away and not (away and (done.consulted or done.observed))
    assert len(policy.chosen) == 2
    assert all(r.gamma == 3 for r in policy.observed)


class Scripted:
    """A policy that plays a script of (gamma, explored) pairs."""

    gamma_max = 3
    draft_gate = False

    def __init__(self, script: list[tuple[int, bool]]) -> None:
        self.script = iter(script)
        self.last_explored = False
        self.last_queued = False
        self.gates_per_request = False

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        gamma, self.last_explored = next(self.script)
        return gamma

    def observe(self, result: StepResult) -> None:
        pass


def test_sd_disabled_means_an_exploited_gamma_zero() -> None:
    """§6.1 condition (1), the simulator's ``offload_trigger="exploited"``."""
    script = [(3, False), (0, True), (0, False), (2, True)]
    stepper = StepDriver(Scripted(script), gamma_cap=3, clock=FakeClock())  # type: ignore[arg-type]
    disabled = []
    for _ in script:
        stepper.on_schedule(StepBatch(4, 4, 4, 0), 0.0)
        disabled.append(stepper.sd_disabled)
    assert disabled == [False, False, True, False]


class Estimating(Scripted):
    """A scripted policy that opts into the draft gate (gamma 3 saves 4 ms per token)."""

    draft_gate = True
    probe_steps = None

    def latency_estimates(self, num_reqs: int) -> list[float]:
        return [0.010, 0.009, 0.008, 0.006]

    def latency_at_zero_s(self, num_reqs: int) -> float:
        return 0.010


def price_target_prefill(rule: ObservationRule, s_per_token: float) -> None:
    """Teach ``rule`` the target's prefill price from steps as the engine reports them."""
    for _ in range(4):  # one decode at gamma 0: 10 ms
        rule.observe(StepSample(1, 0, 0, 1, 0.010, 0))
    for _ in range(MIN_PREFILL_SAMPLES):  # 1000 prompt tokens alone, draft off
        rule.observe(StepSample(0, 0, 0, 0, 0.010 + 1000 * s_per_token, 1000))
    assert rule.prefill_s_per_token == pytest.approx(s_per_token)


def test_draft_gate_runs_zero_when_the_step_cannot_pay() -> None:
    script = [(3, False)] * 4 + [(3, True)] * 2
    stepper = StepDriver(  # type: ignore[arg-type]
        Estimating(script), gamma_cap=3, clock=FakeClock(), draft_cost_ratio=0.1
    )
    long_prompt = StepBatch(0, 1, 1, 0, 1000, owed_tokens=(1000,), remaining_tokens=(10,))
    # before the target's prefill is priced only "nothing left to gain" stops speculation
    assert stepper.on_schedule(long_prompt, 0.0) == 3
    assert stepper.on_schedule(replace(long_prompt, remaining_tokens=(0,)), 0.0) == 0
    price_target_prefill(stepper.observation, s_per_token=1e-3)
    # gain 10 * 4 ms = 40 ms < cost 1000 * 0.1 * 1 ms = 100 ms: gamma 0, and it says so
    assert stepper.on_schedule(long_prompt, 0.0) == 0
    # 30 tokens to come: 120 ms gain pays for the draft's prefill
    assert stepper.on_schedule(replace(long_prompt, remaining_tokens=(30,)), 0.0) == 3
    # an exploration probe is judged by its best case, every draft accepted:
    # 20 tokens * 10 ms * 3/4 = 150 ms pays (the estimate's 80 ms would not) ...
    assert stepper.on_schedule(replace(long_prompt, remaining_tokens=(20,)), 0.0) == 3
    # ... 10 tokens * 10 ms * 3/4 = 75 ms cannot
    assert stepper.on_schedule(long_prompt, 0.0) == 0
    gated = [d.gated for d in stepper._pending]
    assert gated == [False, True, True, False, False, True]
    assert stepper.telemetry.read().decisions_by_mode == {
        "explore": 1,
        "exploit": 2,
        "queue": 0,
        "gated": 3,
    }
    assert stepper.summary()["gated_steps"] == 3


class StillLearning(Estimating):
    """Its key cannot rank every arm yet; only gamma 0 has an estimate."""

    def latency_estimates(self, num_reqs: int) -> None:  # type: ignore[override]
        return None


def test_draft_gate_judges_a_key_still_learning_by_the_best_case() -> None:
    stepper = StepDriver(  # type: ignore[arg-type]
        StillLearning([(2, False)] * 2), gamma_cap=3, clock=FakeClock(), draft_cost_ratio=0.1
    )
    price_target_prefill(stepper.observation, s_per_token=1e-3)
    owed = StepBatch(4, 4, 4, 0, 0, owed_tokens=(1000,), remaining_tokens=(10,))
    # cost 100 ms; at best 10 tokens * 10 ms * 2/3 = 67 ms: gamma 0
    assert stepper.on_schedule(owed, 0.0) == 0
    # 20 tokens: at best 133 ms, so the arm may be tried
    assert stepper.on_schedule(replace(owed, remaining_tokens=(20,)), 0.0) == 2


class BatchAware(Estimating):
    """At B=1 gamma 3 saves 4 ms per token; at B=4 (key 4) 0.1 ms."""

    def latency_estimates(self, num_reqs: int) -> list[float]:
        if num_reqs == 1:
            return super().latency_estimates(num_reqs)
        return [0.0030, 0.0030, 0.0030, 0.0029]


def test_draft_gate_prices_the_gain_at_the_batch_the_prompts_join() -> None:
    stepper = StepDriver(  # type: ignore[arg-type]
        BatchAware([(3, False)] * 2), gamma_cap=3, clock=FakeClock(), draft_cost_ratio=0.1
    )
    price_target_prefill(stepper.observation, s_per_token=1e-3)
    # one request decodes while three prompts (300 tokens, 30 ms of draft work) join it;
    # 40 tokens to come: at B=1 prices they would save 160 ms, at B=4 4 ms
    joining = StepBatch(1, 4, 4, 0, 300, owed_tokens=(300,), remaining_tokens=(40,))
    assert stepper.on_schedule(joining, 0.0) == 0
    # prompts with chunks still to go decode later, in whatever batch there is then: the
    # gain is priced at the one request decoding now, and the same work is worth drafting
    assert stepper.on_schedule(replace(joining, num_sampling_reqs=1), 0.0) == 3


def test_draft_value_is_the_policy_gain_at_the_last_scheduled_batch() -> None:
    policy = build_policy("nightjar", {"gamma_max": 2}, rng=random.Random(0))
    stepper = StepDriver(policy, gamma_cap=2, clock=FakeClock(), draft_cost_ratio=0.25)
    assert stepper.draft_value() == (None, 0)  # nothing scheduled yet
    stepper.on_schedule(StepBatch(4, 4, 4, 0), 0.0)
    # no key ranks yet: the draft's best case, 3 tokens a step for 1 + 2 * 0.25 steps
    assert stepper.draft_value() == (pytest.approx(2.0), 4)
    for gamma, s_per_token in ((0, 1e-3), (1, 5e-4), (2, 8e-4)):
        policy.observe(StepResult(4, gamma, 100, 100 * s_per_token))
    gain, num_reqs = stepper.draft_value()
    assert num_reqs == 4 and gain == pytest.approx(2.0)
    # the learned ratio, not the best case: a draft that gains little
    policy.observe(StepResult(4, 1, 10_000, 10_000 * 9.5e-4))
    policy.observe(StepResult(4, 2, 10_000, 10_000 * 9.8e-4))
    assert stepper.draft_value()[0] < 1.2


class PerRequest(Estimating):
    """Opts into the request-scope gate."""

    def __init__(self, script: list[tuple[int, bool]]) -> None:
        super().__init__(script)
        self.gates_per_request = True


def test_request_scope_gate_skips_requests_not_steps() -> None:
    stepper = StepDriver(  # type: ignore[arg-type]
        PerRequest([(3, False)] * 3), gamma_cap=3, clock=FakeClock(), draft_cost_ratio=0.1
    )
    price_target_prefill(stepper.observation, s_per_token=1e-3)
    # two decodes in sync and a prompt owing 1000 tokens (100 ms) with 10 to come (40 ms)
    batch = StepBatch(2, 3, 3, 0, 1000, owed_tokens=(0, 0, 1000), remaining_tokens=(50, 50, 10))
    assert stepper.on_schedule(batch, 0.0) == 3
    assert stepper.last_undrafted == frozenset({2})
    # the prompt alone: nobody to draft, the step runs gamma 0 (gated)
    alone = StepBatch(0, 1, 1, 0, 1000, owed_tokens=(1000,), remaining_tokens=(10,))
    assert stepper.on_schedule(alone, 0.0) == 0
    assert stepper.last_undrafted == frozenset()
    # 30 tokens to come pay for the draft's prefill: every request is drafted
    assert stepper.on_schedule(replace(batch, remaining_tokens=(50, 50, 30)), 0.0) == 3
    assert stepper.last_undrafted == frozenset()
    reading = stepper.telemetry.read()
    assert (reading.num_drafted_reqs, reading.num_undrafted_reqs) == (2 + 3, 1)
    assert [d.num_undrafted_reqs for d in stepper._pending] == [1, 0, 0]
    assert reading.decisions_by_mode["gated"] == 1


class Queued(Scripted):
    """Reports every choice as the queue-aware objective's."""

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        self.seen_ahead = num_reqs_ahead
        self.last_queued = num_reqs_ahead is not None
        return super().choose(num_reqs, max_skip_tokens, num_reqs_ahead)


def test_the_driver_tells_the_policy_the_batch_the_queue_will_produce() -> None:
    policy = Queued([(1, False)] * 2)
    stepper = StepDriver(policy, gamma_cap=3, clock=FakeClock())  # type: ignore[arg-type]
    queue = QueueState(
        num_waiting_reqs=6,
        num_prefilling_reqs=0,
        max_num_reqs=8,
        num_free_blocks=50,
        num_total_blocks=100,
    )
    stepper.on_schedule(StepBatch(4, 4, 4, 0, queue=queue), 0.0)
    assert policy.seen_ahead == 8  # 4 + 6 waiting, 8 seats (KV holds 8 at 4 per 50 blocks)
    stepper.on_schedule(StepBatch(4, 4, 4, 0), 0.0)
    assert policy.seen_ahead is None
    modes = stepper.telemetry.read().decisions_by_mode
    assert (modes["queue"], modes["exploit"]) == (1, 1)
    assert [d.queued for d in stepper._pending] == [True, False]


def test_a_pinned_prefill_price_prices_owed_work_before_any_is_learned() -> None:
    stepper = StepDriver(  # type: ignore[arg-type]
        PerRequest([(3, False)] * 2),
        gamma_cap=3,
        clock=FakeClock(),
        draft_cost_ratio=0.1,
        pinned_prefill_price_s_per_token=1e-3,
    )
    assert stepper.observation.prefill_price_s_per_token is None  # nothing learned
    # priced at 1 ms per token all the same: 1000 owed tokens (100 ms) outweigh 10 to come
    batch = StepBatch(2, 3, 3, 0, 1000, owed_tokens=(0, 0, 1000), remaining_tokens=(50, 50, 10))
    assert stepper.on_schedule(batch, 0.0) == 3
    assert stepper.last_undrafted == frozenset({2})
    # unpinned, with no price learned, only "nothing left to gain" skips a request
    unpinned = StepDriver(  # type: ignore[arg-type]
        PerRequest([(3, False)]), gamma_cap=3, clock=FakeClock(), draft_cost_ratio=0.1
    )
    assert unpinned.on_schedule(batch, 0.0) == 3
    assert unpinned.last_undrafted == frozenset()
