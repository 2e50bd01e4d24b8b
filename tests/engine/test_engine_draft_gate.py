"""The draft gate on a real engine: a prompt that asks for one token is never drafted,
and greedy outputs are the plain engine's."""

import json
from pathlib import Path

import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import draft_stats, offline_engine, random_prompts, run_batch
from nightjar_ray.models.pair import TINY_SPEC, ModelPair

from .conftest import SMALL_ENGINE

pytestmark = pytest.mark.engine

LONG_PROMPTS = random_prompts(3, 200, TINY_SPEC.vocab_size, seed=200)
"""Four 64-token chunks each under SMALL_ENGINE's step budget."""


def test_one_token_requests_never_draft_their_prompt(
    copy_pair: ModelPair, prompts: list[list[int]], tmp_path: Path
) -> None:
    log = tmp_path / "decisions.jsonl"
    config = NightjarConfig(gamma_max=3, decision_log_path=str(log))
    outputs: list[list[int]] = []
    forwards_per_long_prompt = []
    with offline_engine(copy_pair, config, **SMALL_ENGINE) as llm:
        for prompt in prompts[:4]:  # one at a time: the bandit learns that B=1 speculates
            outputs += run_batch(llm, [prompt], 40).token_ids
        num_warmup_steps = len(log.read_text().splitlines())
        for prompt in LONG_PROMPTS:
            before = draft_stats(llm)["num_draft_forwards"]
            outputs += run_batch(llm, [prompt], 1).token_ids
            forwards_per_long_prompt.append(draft_stats(llm)["num_draft_forwards"] - before)
        stats = draft_stats(llm)
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    warmup, long_steps = decisions[:num_warmup_steps], decisions[num_warmup_steps:]
    assert any(d["gamma"] > 0 for d in warmup), "the warm-up should speculate"
    # the bandit wanted to speculate over the long prompts; the gate ran gamma 0 instead
    assert sum(d["gated"] for d in long_steps) >= 3
    prompt_steps = [d for d in long_steps if d["num_prefill_tokens"] > 0]
    assert len(prompt_steps) >= 12 and all(d["gamma"] == 0 for d in prompt_steps)
    assert forwards_per_long_prompt == [0, 0, 0]
    assert stats["num_catch_up_tokens"] < sum(
        len(p) for p in prompts[:4]
    )  # prompts never caught up
    with offline_engine(copy_pair, None, **SMALL_ENGINE) as llm:
        reference = [run_batch(llm, [p], 40).token_ids[0] for p in prompts[:4]]
        reference += [run_batch(llm, [p], 1).token_ids[0] for p in LONG_PROMPTS]
    assert outputs == reference
