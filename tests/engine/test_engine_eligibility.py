"""Per-request draft eligibility on a real engine: the draft runs over part of a batch.

Requests switch in and out of eligibility (``testing.forced_undrafted_cycle``) while the
others speculate: greedy outputs stay the plain engine's, the catch-up rebuilds the draft
KV of a request that becomes eligible again (draft == target keeps accepting), and with
the real draft gate a request that is never eligible never has a draft KV slot written.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from nightjar_ray.driver.queue import MIN_QUEUED_OUTPUT_TOKENS
from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import (
    SpecCounters,
    draft_stats,
    offline_engine,
    random_prompts,
    run_batch,
    spec_counters,
)
from nightjar_ray.models.pair import TINY_SPEC, ModelPair
from tests.reference_engines import ReferenceEngines

from .conftest import MAX_TOKENS, SMALL_ENGINE, SPEC_EXTRA, speculating_snapshot

pytestmark = pytest.mark.engine

SWITCHING = {"forced_undrafted_cycle": 2, "forced_undrafted_steps": 3}
"""Half the requests undrafted at a time; each switches every 3 steps."""


def switching_run(
    pair: ModelPair, prompts: list[list[int]], **testing: Any
) -> tuple[list[list[int]], dict[str, Any], SpecCounters]:
    config = NightjarConfig(
        policy="fixed",
        policy_params={"gamma": 3},
        testing={**SWITCHING, **testing},
    )
    with offline_engine(pair, config, spec_extra=SPEC_EXTRA, **SMALL_ENGINE) as llm:
        outputs = run_batch(llm, prompts, MAX_TOKENS).token_ids
        stats = draft_stats(llm)
        counters = spec_counters(llm)
    return outputs, stats, counters


def check_switching(stats: dict[str, Any]) -> None:
    """Partial steps, catch-ups of requests coming back, and steps where every
    request was undrafted (gamma 0) all happened."""
    steps = stats["steps"]
    partial = [s for s in steps if s["num_undrafted_reqs"] > 0]
    assert stats["num_partial_steps"] == len(partial) >= 10
    assert all(0 < s["num_undrafted_reqs"] < s["num_reqs"] for s in partial)
    assert all(s["num_spec_tokens"] == 3 and s["num_draft_forwards"] >= 3 for s in partial)
    assert stats["num_catch_ups"] >= 5 and stats["num_catch_up_tokens"] > 0
    assert any(s["num_catch_up_reqs"] > 0 and s["num_undrafted_reqs"] > 0 for s in steps)


def test_switching_eligibility_is_lossless(
    lossy_pair: ModelPair, prompts: list[list[int]], reference_engines: ReferenceEngines
) -> None:
    outputs, stats, _ = switching_run(lossy_pair, prompts)
    check_switching(stats)
    assert outputs == reference_engines.outputs(lossy_pair, prompts, MAX_TOKENS, **SMALL_ENGINE)


def test_catch_up_after_eligibility_keeps_the_draft_kv_exact(
    copy_pair: ModelPair, prompts: list[list[int]], reference_engines: ReferenceEngines
) -> None:
    outputs, stats, counters = switching_run(copy_pair, prompts)
    check_switching(stats)
    assert counters.num_draft_tokens > 100
    assert counters.acceptance_rate >= 0.9
    assert outputs == reference_engines.outputs(copy_pair, prompts, MAX_TOKENS, **SMALL_ENGINE)


def test_without_catch_up_eligibility_switches_lose_acceptance(
    copy_pair: ModelPair, prompts: list[list[int]]
) -> None:
    """The control of the test above: the same switches, the stale draft KV never
    rebuilt."""
    _, stats, counters = switching_run(copy_pair, prompts, skip_catch_up=True)
    assert stats["num_partial_steps"] >= 10 and stats["num_catch_ups"] == 0
    assert counters.num_draft_tokens > 100
    assert counters.acceptance_rate < 0.6


SHORT_PROMPTS = random_prompts(3, 9, TINY_SPEC.vocab_size, seed=9)
"""27 tokens: all three prefill in the first step, then decode 40 tokens each."""
LONG_PROMPTS = random_prompts(3, 200, TINY_SPEC.vocab_size, seed=201)
"""One output token each (nothing left to emit after the step that samples it: never
eligible); their chunks share the 64-token steps with the short ones' decodes."""


def mixed_run(
    pair: ModelPair, tmp_path: Path, scope: str
) -> tuple[list[list[int]], dict[int, int], list[dict[str, Any]]]:
    """The short and long prompts in one batch under the real draft gate in ``scope``:
    outputs, draft KV slots written per prompt (by index) and the decision log."""
    log = tmp_path / "decisions.jsonl"
    config = NightjarConfig(
        decision_log_path=str(log),
        policy_snapshot=str(speculating_snapshot(tmp_path / "policy.json")),
        testing={"count_draft_slots": True, "policy_overrides": {"draft_gate_scope": scope}},
    )
    with offline_engine(pair, config, spec_extra=SPEC_EXTRA, **SMALL_ENGINE) as llm:
        outputs = run_batch(llm, MIXED_PROMPTS, MIXED_MAX_TOKENS).token_ids
        written = draft_stats(llm)["num_draft_kv_slots"]
    assert "?" not in written  # every slot a draft forward wrote belongs to a request
    # vLLM names a request "<arrival number>-<suffix>": the prompt's index here
    slots = {int(req_id.split("-")[0]): n for req_id, n in written.items()}
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    return outputs, slots, decisions


MIXED_PROMPTS = SHORT_PROMPTS + LONG_PROMPTS
MIXED_MAX_TOKENS = [MAX_TOKENS] * len(SHORT_PROMPTS) + [1] * len(LONG_PROMPTS)
SHORT = range(len(SHORT_PROMPTS))
LONG = range(len(SHORT_PROMPTS), len(MIXED_PROMPTS))


def speculating_steps_with_long_chunks(decisions: list[dict[str, Any]]) -> int:
    """Steps after the first (whose prefill tokens are the short prompts') that
    speculated while a long prompt's chunk was scheduled."""
    return sum(d["gamma"] > 0 and d["num_prefill_tokens"] > 0 for d in decisions[1:])


def test_a_never_eligible_prompt_never_enters_a_draft_forward(
    copy_pair: ModelPair, reference_engines: ReferenceEngines, tmp_path: Path
) -> None:
    outputs, slots, decisions = mixed_run(copy_pair, tmp_path, "request")
    assert speculating_steps_with_long_chunks(decisions) >= 5
    assert all(slots.get(i, 0) >= len(SHORT_PROMPTS[i]) for i in SHORT)
    assert [slots.get(i, 0) for i in LONG] == [0, 0, 0]
    engine = reference_engines.engine(copy_pair, **SMALL_ENGINE)
    assert outputs == run_batch(engine, MIXED_PROMPTS, MIXED_MAX_TOKENS).token_ids


def test_the_step_gate_drafts_the_prompts_that_share_a_speculating_step(
    copy_pair: ModelPair, tmp_path: Path
) -> None:
    """The control: the same batch under the step-level gate (all or nothing) makes the
    draft prefill the long prompts whose chunks ride in steps that speculate."""
    _, slots, decisions = mixed_run(copy_pair, tmp_path, "step")
    assert speculating_steps_with_long_chunks(decisions) >= 5
    assert all(d["num_undrafted_reqs"] == 0 for d in decisions)
    assert sum(slots.get(i, 0) > 0 for i in LONG) >= 2


def test_a_prompt_prefilling_beside_a_decode_is_queued_if_it_will_decode(
    copy_pair: ModelPair, tmp_path: Path
) -> None:
    """Nothing waits for a seat (8 seats, 2 requests), but a 150-token prompt prefills in
    chunks beside a decoding request: B' (``driver/queue.py``) counts it when it has
    tokens to come (``MIN_QUEUED_OUTPUT_TOKENS``), not when it emits one and leaves."""
    log = tmp_path / "decisions.jsonl"
    config = NightjarConfig(decision_log_path=str(log))
    long_outputs = [MIN_QUEUED_OUTPUT_TOKENS, 1]
    with offline_engine(copy_pair, config, spec_extra=SPEC_EXTRA, **SMALL_ENGINE) as llm:
        num_steps = []
        for i, num_output_tokens in enumerate(long_outputs):  # new prompts: no cache hits
            long_prompt = LONG_PROMPTS[i][:150]  # 150 + 64 tokens fit max_model_len
            run_batch(llm, [SHORT_PROMPTS[i], long_prompt], [40, num_output_tokens])
            num_steps.append(len(log.read_text().splitlines()))
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    for output, steps in zip(
        long_outputs, (decisions[: num_steps[0]], decisions[num_steps[0] :]), strict=True
    ):
        chunk_steps = [d for d in steps if d["num_prefill_tokens"] > 0 and d["consulted"]]
        assert len(chunk_steps) >= 3
        expected = 2 if output >= MIN_QUEUED_OUTPUT_TOKENS else None
        assert [d["num_reqs_ahead"] for d in chunk_steps] == [expected] * len(chunk_steps)
