"""The serving simulator: determinism, token accounting, preemption, elastic memory."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from nightjar_ray.driver.queue import MIN_QUEUED_OUTPUT_TOKENS
from nightjar_ray.driver.step import Choice, StepBatch
from nightjar_ray.policy import PolicyStats, StepResult, build_policy
from nightjar_ray.policy.base import Policy
from nightjar_ray.sim.elastic import DraftState, ElasticParams
from nightjar_ray.sim.experiments import RunKnobs, elastic_params
from nightjar_ray.sim.metrics import finish_s, summarize
from nightjar_ray.sim.presets import get_setting
from nightjar_ray.sim.server import ServerOptions, SimServer
from nightjar_ray.workload import RequestSpec
from tests.sim.simhelpers import poisson_workload, server, small_memory_setting
from tests.support import shared_trace

SETTING = get_setting("rtx4090-7b")


def test_same_seed_same_run_and_other_seed_differs() -> None:
    wl = poisson_workload(SETTING, 10.0, 120)
    runs = [
        server(SETTING, "nightjar", {"bucketing": "pow2"}, draft_when_off="skip", seed=s).run(wl)
        for s in (5, 5, 6)
    ]
    assert runs[0] == runs[1]
    assert runs[0].timeline != runs[2].timeline


def test_every_request_finishes_with_its_tokens() -> None:
    wl = poisson_workload(SETTING, 20.0, 150)
    result = server(SETTING, "fixed", {"gamma": 3}, check_invariants=True).run(wl)
    assert len(result.records) == len(wl)
    for spec, rec in zip(wl, result.records, strict=True):
        assert rec.num_output_tokens == spec.num_output_tokens
        assert spec.arrival_s <= rec.first_token_s <= rec.finish_s


def test_preemption_by_recompute_under_memory_pressure() -> None:
    setting = small_memory_setting()
    wl = poisson_workload(setting, 30.0, 200)
    srv = server(setting, "fixed", {"gamma": 4}, check_invariants=True)
    result = srv.run(wl)
    assert result.num_preemptions > 0
    assert len(result.records) == len(wl)
    assert any(r.num_preemptions > 0 for r in result.records)
    assert srv.pool.num_free_blocks == srv.pool.num_blocks


def test_no_draft_means_more_blocks_and_gamma_zero() -> None:
    with_draft = server(SETTING, "fixed", {"gamma": 2})
    without = server(SETTING, "off", {}, use_draft=False)
    assert without.plan.num_orig_blocks > with_draft.plan.num_orig_blocks
    result = without.run(poisson_workload(SETTING, 5.0, 30))
    assert all(s.gamma == 0 for s in result.timeline)


def test_request_too_large_for_pool_is_rejected() -> None:
    srv = server(small_memory_setting(), "off", {}, use_draft=False)
    big = RequestSpec(0, 0.0, srv.max_request_tokens, 8)
    with pytest.raises(ValueError, match="tokens"):
        srv.run([big])


def test_skip_mode_pays_catch_up_and_sync_mode_does_not() -> None:
    wl = poisson_workload(SETTING, 10.0, 80)
    params = {"num_speculative_tokens_per_batch_size": [(1, 8, 3), (9, 1 << 20, 0)]}
    skip = server(SETTING, "vllm-static", params, draft_when_off="skip").run(wl)
    sync = server(SETTING, "vllm-static", params, draft_when_off="sync").run(wl)
    assert skip.catchup_s > 0.0
    assert sync.catchup_s == 0.0


def _elastic(setting_name: str = "rtx4090-7b", persist: int = 4) -> ElasticParams:
    return elastic_params(
        get_setting(setting_name), RunKnobs(0.10, persist, reclaim_draft_kv=False)
    )


def test_offload_under_pressure_then_reload_when_quiet() -> None:
    setting = small_memory_setting()
    burst = poisson_workload(setting, 40.0, 150)
    quiet_start = burst[-1].arrival_s + 120.0
    tail = [RequestSpec(1000 + i, quiet_start + i * 2.0, 50, 20) for i in range(5)]
    srv = server(
        setting, "off", {}, draft_when_off="skip", elastic=_elastic(), check_invariants=True
    )
    result = srv.run([*burst, *tail])
    kinds = [e.kind for e in result.memory_events]
    assert kinds[:3] == ["expand", "contract", "reloaded"]
    expand = result.memory_events[0]
    assert expand.num_blocks == srv.plan.num_draft_blocks
    assert summarize(result).num_offloads >= 1
    assert srv.pool.num_blocks == srv.plan.num_orig_blocks  # contracted back


def _reclaiming(setting_name: str = "rtx4090-7b") -> ElasticParams:
    return elastic_params(get_setting(setting_name), RunKnobs(0.10, 4, reclaim_draft_kv=True))


def test_reclaim_plan_matches_a_deployment_without_draft() -> None:
    for setting in (SETTING, small_memory_setting()):
        plan = server(setting, "off", {}).plan
        no_draft = server(setting, "off", {}, use_draft=False).plan
        assert plan.num_reclaim_blocks > plan.num_draft_blocks
        # NOTE: blocks are 16-token units; reclaiming gives the pool off's token capacity.
        assert plan.num_orig_blocks + plan.num_reclaim_blocks == no_draft.num_orig_blocks


def test_reclaim_offload_grows_pool_to_off_and_rebuilds_draft_kv() -> None:
    setting = small_memory_setting()
    burst = poisson_workload(setting, 40.0, 150)
    quiet_start = burst[-1].arrival_s + 120.0
    tail = [RequestSpec(1000 + i, quiet_start + i * 2.0, 50, 20) for i in range(5)]
    runs = {}
    for reclaim, params in (("weights", _elastic()), ("weights+kv", _reclaiming())):
        srv = server(
            setting, "off", {}, draft_when_off="skip", elastic=params, check_invariants=True
        )
        runs[reclaim] = (srv, srv.run([*burst, *tail]))
    srv, result = runs["weights+kv"]
    expand = result.memory_events[0]
    assert expand.kind == "expand" and expand.num_blocks == srv.plan.num_reclaim_blocks
    assert [e.kind for e in result.memory_events][1:3] == ["contract", "reloaded"]
    assert srv.pool.num_blocks == srv.plan.num_orig_blocks  # contracted back
    assert len(result.records) == len(burst) + len(tail)
    # more KV under the burst: fewer preemptions than offloading the weights alone
    assert result.num_preemptions < runs["weights"][1].num_preemptions


def _drafter_state_at_expands(srv: SimServer, wl: Sequence[RequestSpec]) -> list[tuple[bool, bool]]:
    """Run ``wl``; at each offload: (some drafter had KV before, every drafter rebuilds after)."""
    seen: list[tuple[bool, bool]] = []
    elastic_step = srv._elastic_step

    def spy() -> None:
        assert srv.elastic is not None
        num_events = len(srv.elastic.events)
        behind = [r.draft_lag < r.num_computed for r in srv.scheduler.running]
        elastic_step()
        if len(srv.elastic.events) > num_events and srv.elastic.events[-1].kind == "expand":
            rebuilt = all(r.draft_lag == r.num_computed for r in srv.scheduler.running)
            seen.append((any(behind), rebuilt))

    srv._elastic_step = spy  # type: ignore[method-assign]
    srv.run(wl)
    return seen


def test_reclaim_drops_draft_kv_of_live_requests() -> None:
    setting = small_memory_setting()
    wl = poisson_workload(setting, 40.0, 150)
    static = {"num_speculative_tokens_per_batch_size": [(1, 2, 2), (3, 1 << 20, 0)]}
    for reclaim in (False, True):
        params = _reclaiming() if reclaim else _elastic()
        srv = server(setting, "vllm-static", static, draft_when_off="skip", elastic=params)
        at_expand = _drafter_state_at_expands(srv, wl)
        assert at_expand, "the burst must trigger an offload"
        # some drafter had KV before the offload; only reclaiming throws it away
        assert any(had for had, _ in at_expand)
        assert all(rebuilt for _, rebuilt in at_expand) == reclaim


def test_no_offload_while_speculating() -> None:
    setting = small_memory_setting()
    wl = poisson_workload(setting, 40.0, 150)
    srv = server(setting, "fixed", {"gamma": 2}, draft_when_off="skip", elastic=_elastic())
    assert srv.run(wl).memory_events == ()


def test_persist_window_delays_offload() -> None:
    setting = small_memory_setting()
    wl = poisson_workload(setting, 40.0, 150)
    first = []
    for persist in (1, 64):
        srv = server(setting, "off", {}, draft_when_off="skip", elastic=_elastic(persist=persist))
        events = srv.run(wl).memory_events
        first.append(events[0].time_s)
    assert first[0] < first[1]


def test_gamma_is_zero_while_the_draft_is_offloaded() -> None:
    setting = small_memory_setting()
    wl = poisson_workload(setting, 40.0, 150)
    srv = server(
        setting,
        "vllm-static",
        {"num_speculative_tokens_per_batch_size": [(1, 2, 2), (3, 1 << 20, 0)]},
        draft_when_off="skip",
        elastic=_elastic(),
    )
    result = srv.run(wl)
    events = result.memory_events
    assert events and events[0].kind == "expand"
    end = next((e.time_s for e in events if e.kind == "reloaded"), float("inf"))
    offloaded = [s for s in result.timeline if events[0].time_s < s.time_s < end]
    assert offloaded and all(s.gamma == 0 for s in offloaded)


def test_elastic_requires_skip_mode() -> None:
    with pytest.raises(ValueError, match="skip"):
        server(SETTING, "off", {}, draft_when_off="sync", elastic=_elastic())


def test_memory_plan_follows_paper_section_6() -> None:
    plan = server(SETTING, "off", {}).plan
    assert plan.num_draft_blocks == -(-SETTING.draft.weight_bytes // plan.block_bytes)
    assert plan.num_scale_blocks == plan.num_orig_blocks + plan.num_draft_blocks
    small = server(small_memory_setting(), "off", {}).plan
    assert small.num_orig_blocks < plan.num_orig_blocks


class _Recorder(Policy):
    """Plays a fixed gamma and records every StepResult it is shown."""

    name = "recorder"

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma
        self.results: list[StepResult] = []

    @property
    def gamma_max(self) -> int:
        return self.gamma

    def choose(self, num_reqs: int, max_skip_tokens: int, num_reqs_ahead: int | None = None) -> int:
        return self.gamma

    def observe(self, result: StepResult) -> None:
        self.results.append(result)

    def export_stats(self) -> PolicyStats:
        return PolicyStats(self.name)

    def load_stats(self, stats: PolicyStats) -> None:
        pass


def _observed(mode: str) -> tuple[list[StepResult], list[float]]:
    policy = _Recorder(2)
    srv = SimServer(SETTING, policy, ServerOptions(observed_time=mode))  # type: ignore[arg-type]
    result = srv.run(poisson_workload(SETTING, 15.0, 120))
    return policy.results, [s.duration_s for s in result.timeline if s.num_reqs]


def test_observed_time_modes() -> None:
    step, wall = _observed("step")
    pure, _ = _observed("pure")
    corrected, _ = _observed("prefill-corrected")
    # the first decode step switches 0 -> 2 (a transition, never a sample of the engine's rule)
    assert len(step) == len(wall) - 1
    assert [r.duration_s for r in step] == pytest.approx(wall[1:])
    assert 0 < len(pure) < len(step)
    # gamma never 0: the target's prefill is never priced, so corrected falls back to pure
    assert len(corrected) == len(pure)
    assert all(r.num_reqs >= 1 and r.num_draft_tokens == 2 * r.num_reqs for r in step)


def test_every_sample_carries_its_drafted_requests_acceptance_depths() -> None:
    """What the ``paired_acceptance`` estimator learns from, as the engine reports it:
    per depth, the drafted requests that accepted at least that many drafts."""
    policy = _Recorder(2)
    srv = SimServer(SETTING, policy, ServerOptions())  # type: ignore[arg-type]
    srv.run(poisson_workload(SETTING, 15.0, 120))
    results = policy.results
    assert len(results) > 100
    # what the policy actor's pool gains from them (reach_rate's count), in the telemetry
    tried = sum(sum(r.num_reqs_reaching[:-1]) for r in results)
    assert srv.driver.telemetry.read().observed_depth_reqs == tried > 0
    for r in results:
        assert len(r.num_reqs_reaching) == 3 and r.num_reqs_reaching[0] == r.num_reqs
        assert sum(r.num_reqs_reaching[1:]) == r.num_accepted_tokens
    assert any(r.num_reqs_reaching[2] < r.num_reqs_reaching[0] for r in results)
    assert any(r.num_reqs_reaching[2] > 0 for r in results)


def test_the_simulator_runs_only_the_engines_observation_rules() -> None:
    with pytest.raises(ValueError, match="unknown observation rule 'decode'"):
        _observed("decode")


def _commit(srv: SimServer, gamma: int, explored: bool) -> None:
    """One decode step of B=5 through the server's step driver, as ``_step`` commits it."""
    batch = StepBatch(5, 5, 5, 0)
    choice = Choice(gamma, 5, consulted=True, explored=explored)
    srv.driver.commit(batch, choice, srv.now_s)


def test_offload_trigger_ignores_exploration_probes_of_gamma_zero() -> None:
    params = {"bucketing": "pow2"}
    strict = server(SETTING, "nightjar", params, draft_when_off="skip", elastic=_elastic())
    literal = server(
        SETTING,
        "nightjar",
        params,
        draft_when_off="skip",
        elastic=_elastic(),
        offload_trigger="played",
    )
    for srv in (strict, literal):
        _commit(srv, 0, explored=True)  # a probe of gamma 0
    assert not strict.sd_disabled()
    assert literal.sd_disabled()
    _commit(strict, 0, explored=False)
    assert strict.sd_disabled()
    _commit(strict, 2, explored=False)
    assert not strict.sd_disabled()


def test_a_server_runs_one_workload() -> None:
    srv = server(SETTING, "off", {}, use_draft=False)
    wl = poisson_workload(SETTING, 5.0, 5)
    srv.run(wl)
    with pytest.raises(ValueError, match="one workload"):
        srv.run(wl)


def test_reload_waits_for_contract_persist_steps_of_calm() -> None:
    """The reload condition (no queue, room for the draft) must hold for
    ``contract_persist_steps`` consecutive steps; one busy step restarts the count."""
    setting = get_setting("rtx4090-7b")
    params = replace(_elastic(persist=1), contract_persist_steps=3)
    srv = server(setting, "off", {}, draft_when_off="skip", elastic=params)
    elastic = srv.elastic
    assert elastic is not None
    elastic._expand(0.0)  # an empty pool: room for the draft from the first step
    calls = [(0, 0), (1, 0), (2, 5), (3, 0), (4, 0), (5, 0)]  # (time, waiting): busy at t=2
    states = []
    for now_s, waiting in calls:
        elastic.after_step(float(now_s), sd_disabled=True, num_waiting=waiting)
        states.append(elastic.state)
    assert states[:5] == [DraftState.OFFLOADED] * 5
    assert states[5] is DraftState.RELOADING
    with pytest.raises(ValueError, match="contract_persist_steps"):
        server(
            setting,
            "off",
            {},
            draft_when_off="skip",
            elastic=replace(params, contract_persist_steps=0),
        )


def test_draft_gate_spares_long_prompts_with_short_outputs() -> None:
    """The engine's draft gate runs in the simulator: one request at a time, 3000-token
    prompts, 3 output tokens; the draft's prefill is not paid where it cannot pay back."""
    setting = get_setting("rtx4090-7b")
    wl = [RequestSpec(i, i * 2.0, 3000, 3) for i in range(60)]
    runs = {}
    for gate in (True, False):
        srv = server(setting, "nightjar", {"draft_gate": gate}, draft_when_off="skip")
        result = srv.run(wl)
        e2e = sum(r.finish_s - r.arrival_s for r in result.records) / len(result.records)
        runs[gate] = (srv.driver.gate.num_gated_steps, e2e, srv.driver.observation)
    (gated_on, e2e_on, rule), (gated_off, e2e_off, _) = runs[True], runs[False]
    assert rule is not None and rule.prefill_s_per_token is not None
    assert gated_on > 10 and gated_off == 0
    assert e2e_on < 0.99 * e2e_off


def test_an_outvalued_draft_is_offloaded_sooner_under_load_once_the_policy_has_evidence() -> None:
    """The 4090 at 2x the crossover (workload seed 5): the 129-256 batch key was still
    trying its arms when the pool filled, so the paper's condition (speculation off)
    waited; the draft's memory, as KV cache, was worth more. A policy warm-started from
    the pool knows how little speculation gains there and offloads sooner. A cold one,
    before any key ranks its arms, weighs the draft at its best case (about 4.0x for a
    draft 6.5% of the target's size), which that draft's memory never beats: it waits
    for the paper's condition. (Seed 1, where this was first seen, no longer shows it:
    since the draft gate prices a probe at a new key from the smaller key's gamma-0
    time, speculation stops there as soon as the pool fills, rule or not.)"""
    from nightjar_ray.sim.experiments import (
        WARM_START_SEED_OFFSET,
        default_contenders,
        run_contender,
    )
    from nightjar_ray.sim.suite import suite_workload

    setting = get_setting("rtx4090-7b")
    workload = suite_workload("high", setting, 5)
    earlier = suite_workload("high", setting, 5 + WARM_START_SEED_OFFSET)
    # NOTE: the queue-aware objective and the untried-arm bound stop speculating there
    # before the pool fills; this checks the memory rule on a policy that still
    # speculates under load.
    contenders = default_contenders(
        nightjar_params={"queue_aware": False, "untried_arm_bound": False}
    )
    (cold,) = [c for c in contenders if c.label == "nightjar"]
    first_expand: dict[tuple[bool, bool], float] = {}
    thr: dict[tuple[bool, bool], float] = {}
    for warm, rule in itertools.product((True, False), (True, False)):
        run = run_contender(
            setting,
            replace(cold, warm_start=warm),
            workload,
            "sharegpt",
            5,
            RunKnobs(offload_outvalued=rule),
            warm_workload=earlier if warm else None,
        )
        first_expand[warm, rule] = next(e.time_s for e in run.memory_events if e.kind == "expand")
        thr[warm, rule] = summarize(run).throughput_tokens_per_s
    # warm: 13.9 s against 17.5 s, 1.019x the throughput (measured)
    assert first_expand[True, True] < first_expand[True, False] - 1.0
    assert thr[True, True] > 1.01 * thr[True, False]
    # cold: 12.0 s with and without the rule (here a key ranks before the pool fills, so
    # this holds with a gain of 1.0 without evidence too; the best case itself is checked
    # in tests/engine/test_stepper.py, draft_value)
    assert abs(first_expand[False, True] - first_expand[False, False]) < 1.0


def test_the_l20_trace_replay_keeps_the_draft_it_speculates_with() -> None:
    """L20 trace replay, seed 2 (about a second): with the old switch weight (0.03) a short
    gamma = 0 probe locked a key at gamma 0 although its table ranked gamma 1 first, and the
    draft was offloaded for most of the replay; the default leaves catch-up to the draft gate
    and keeps speculating (docs/benchmarks.md, "The switch term left to the draft gate")."""
    from nightjar_ray.sim.experiments import default_contenders, run_contender
    from nightjar_ray.sim.suite import suite_workload

    trace = shared_trace()
    setting = get_setting("l20x2-32b")
    workload = suite_workload("trace", setting, 2, trace_path=trace)
    results = {}
    for weight in (None, 0.03):
        # NOTE: the queue-aware objective is off in both: this checks the switch term.
        params: dict[str, object] = {"queue_aware": False}
        if weight is not None:
            params["switch_cost_weight"] = weight
        (nightjar,) = [
            c for c in default_contenders(nightjar_params=params) if c.label == "nightjar"
        ]
        results[weight] = run_contender(setting, nightjar, workload, "sharegpt", 2)
    expand_s = {
        w: next((e.time_s for e in r.memory_events if e.kind == "expand"), float("inf"))
        for w, r in results.items()
    }
    end_s = max(finish_s(rec) for rec in results[None].records)
    assert expand_s[0.03] < 0.5 * end_s < expand_s[None]
    thr = {w: summarize(r).throughput_tokens_per_s for w, r in results.items()}
    assert thr[None] > 1.03 * thr[0.03]


def test_request_scope_skips_the_long_prompts_in_batches_that_speculate() -> None:
    """Long-prompt/3-token requests share batches with 400-token ones: the step gate
    lets them ride along (the batch as a whole pays), the request gate leaves their
    prompts out of the draft while the others speculate, and pays less draft work."""
    setting = get_setting("rtx4090-7b")
    wl = [RequestSpec(i, i * 0.25, 3000 if i % 2 else 50, 3 if i % 2 else 400) for i in range(200)]
    runs = {}
    for scope in ("request", "step"):
        srv = server(setting, "nightjar", {"draft_gate_scope": scope}, draft_when_off="skip")
        result = srv.run(wl)
        e2e = sum(r.finish_s - r.arrival_s for r in result.records) / len(result.records)
        speculating = sum(s.gamma > 0 for s in result.timeline)
        runs[scope] = (srv.driver.gate.num_undrafted_reqs, srv.catchup_s, e2e, speculating)
    (skipped, catch_up, e2e, speculating), (skipped_step, catch_up_step, e2e_step, _) = (
        runs["request"],
        runs["step"],
    )
    assert skipped > 50 and skipped_step == 0 and speculating > 400
    assert catch_up < 0.9 * catch_up_step
    assert e2e <= e2e_step


def _queued_decisions(long_output_tokens: int) -> int:
    """Queue-aware decisions of a policy taught at B = 2 and 3 (key 4) serving two long
    decodes while three 8,000-token prompts arrive one at a time, each finishing before
    the next: nothing waits for a seat but at each arrival's own step."""
    policy = build_policy("nightjar", {"gamma_max": 2}, rng=random.Random(0))
    for num_reqs in (2, 4):
        for gamma in range(3):
            for _ in range(4):
                n = num_reqs * (1 + gamma)
                policy.observe(StepResult(num_reqs, gamma, n, n * 0.01 * (1 - 0.1 * gamma)))
    short = [RequestSpec(i, 0.0, 16, 2000) for i in range(2)]
    long = [RequestSpec(2 + i, 0.5 + 4 * i, 8000, long_output_tokens) for i in range(3)]
    srv = SimServer(SETTING, policy, ServerOptions())
    result = srv.run(short + long)
    assert sum(s.num_waiting > 0 for s in result.timeline) == 0  # after each admission
    return srv.driver.telemetry.read().decisions_by_mode["queue"]


def test_prompts_prefilling_in_chunks_are_the_queue_the_policy_prices() -> None:
    """Long prompts prefilling over several steps beside two decoding requests are queued
    work: the queue-aware objective prices the batch they will join (``driver/queue.py``,
    the engine's rule) while their chunks run, not only at their arrival, and not when
    they emit a token or two and leave (``MIN_QUEUED_OUTPUT_TOKENS``)."""
    num_chunk_steps = 8000 // SETTING.max_num_batched_tokens  # beyond the arrival's step
    assert MIN_QUEUED_OUTPUT_TOKENS > 2
    assert _queued_decisions(100) >= _queued_decisions(2) + num_chunk_steps
