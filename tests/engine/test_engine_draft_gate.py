"""The draft gate on a real engine: a prompt that asks for one token is never drafted, a
long prompt with a few tokens to come is gated by price, and greedy outputs are the
plain engine's."""

import json
from pathlib import Path

import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import draft_stats, offline_engine, random_prompts, run_batch
from nightjar_ray.models.pair import TINY_SPEC, ModelPair
from tests.reference_engines import ReferenceEngines

from .conftest import SMALL_ENGINE, SPEC_EXTRA, speculating_snapshot

pytestmark = pytest.mark.engine

LONG_PROMPTS = random_prompts(3, 200, TINY_SPEC.vocab_size, seed=200)
"""Four 64-token chunks each under SMALL_ENGINE's step budget."""
PRICED_PROMPTS = random_prompts(3, 240, TINY_SPEC.vocab_size, seed=240)
PRICED_MAX_TOKENS = 3
"""Two decode steps each: the first has one token to come (only the price can stop it),
the second none."""
PINNED_PRICE_S_PER_TOKEN = 0.005
"""``c`` for the gate, pinned: a tiny model's prompt chunk costs about what a decode step
does, so the price learned from step timings is noise on a loaded host (a 63-token
chunk measured faster than a decode step left it unlearned, and a CI run drafted the
priced prompts). At 5 ms per prompt token 240 owed tokens outweigh one token's saving by
a factor of 6 or more even at a contended host's 185 ms best case, and a 5-token prompt
with 39 to come still drafts at this host's ~2 ms saving per token. Learning ``c`` is
tests/policy/test_observation.py's."""


def test_one_token_requests_never_draft_their_prompt(
    copy_pair: ModelPair,
    prompts: list[list[int]],
    reference_engines: ReferenceEngines,
    tmp_path: Path,
) -> None:
    log = tmp_path / "decisions.jsonl"
    config = NightjarConfig(
        decision_log_path=str(log),
        policy_snapshot=str(speculating_snapshot(tmp_path / "policy.json")),
        testing={"draft_gate_price_s_per_token": PINNED_PRICE_S_PER_TOKEN},
    )
    outputs: list[list[int]] = []
    forwards_per_long_prompt = []
    with offline_engine(copy_pair, config, spec_extra=SPEC_EXTRA, **SMALL_ENGINE) as llm:
        for prompt in prompts[:4]:  # one at a time, speculating (the snapshot's choice)
            outputs += run_batch(llm, [prompt], 40).token_ids
        num_warmup_steps = len(log.read_text().splitlines())
        for prompt in LONG_PROMPTS:
            before = draft_stats(llm)["num_draft_forwards"]
            outputs += run_batch(llm, [prompt], 1).token_ids
            forwards_per_long_prompt.append(draft_stats(llm)["num_draft_forwards"] - before)
        stats = draft_stats(llm)
        num_one_token_steps = len(log.read_text().splitlines())
        for prompt in PRICED_PROMPTS:
            outputs += run_batch(llm, [prompt], PRICED_MAX_TOKENS).token_ids
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    warmup, long_steps = (
        decisions[:num_warmup_steps],
        decisions[num_warmup_steps:num_one_token_steps],
    )
    _check_priced_gating(decisions[num_one_token_steps:])
    assert any(d["gamma"] > 0 for d in warmup), "the warm-up should speculate"
    # the bandit wanted to speculate over the long prompts; the gate ran gamma 0 instead
    assert sum(d["gated"] for d in long_steps) >= 3
    prompt_steps = [d for d in long_steps if d["num_prefill_tokens"] > 0]
    assert len(prompt_steps) >= 12 and all(d["gamma"] == 0 for d in prompt_steps)
    assert forwards_per_long_prompt == [0, 0, 0]
    assert stats["num_catch_up_tokens"] < sum(
        len(p) for p in prompts[:4]
    )  # prompts never caught up
    llm = reference_engines.engine(copy_pair, **SMALL_ENGINE)
    reference = [run_batch(llm, [p], 40).token_ids[0] for p in prompts[:4]]
    reference += [run_batch(llm, [p], 1).token_ids[0] for p in LONG_PROMPTS]
    reference += [run_batch(llm, [p], PRICED_MAX_TOKENS).token_ids[0] for p in PRICED_PROMPTS]
    assert outputs == reference


def _check_priced_gating(steps: list[dict[str, int]]) -> None:
    """With ``c`` pinned, the decode steps of a 240-token prompt with one token to come are
    gated by price: the draft would have to catch up 240 tokens (the copy pair's draft
    costs what the target does) to save at most one step. The ``remaining == 0`` rule explains one
    gated decode step per request, no more."""
    decode_steps = [d for d in steps if d["num_decode_reqs"] > 0 and d["num_prefill_tokens"] == 0]
    assert len(decode_steps) == len(PRICED_PROMPTS) * (PRICED_MAX_TOKENS - 1)
    assert all(d["gamma"] == 0 for d in decode_steps)
    assert sum(d["gated"] for d in decode_steps) > len(PRICED_PROMPTS)
