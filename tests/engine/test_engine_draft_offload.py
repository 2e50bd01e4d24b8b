"""Draft offload and reload under load on the real engine (the chaos cycles).

Every few steps the draft's weights go to the host store and its KV pages to the OS
while requests generate, with KV compaction cycles running at the same time; N steps
later the weights come back and every request's draft KV is rebuilt by the catch-up.
Greedy outputs equal plain decoding; with a draft that copies the target, acceptance
stays ~1, which it would not if the rebuilt draft KV were wrong (checked by hand:
without the lag invalidation at reload it fell to 0.27).
"""

import json
from pathlib import Path

import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import (
    draft_stats,
    offline_engine,
    random_prompts,
    run_batch,
    spec_counters,
)
from nightjar_ray.models.pair import TINY_SPEC, ModelPair

from .test_engine_compaction import TIGHT_ENGINE

pytestmark = pytest.mark.engine

LENGTHS = (40, 90, 17, 64, 33, 75, 50, 88, 21, 60, 45, 70)
MAX_TOKENS = 48


def test_offload_reload_cycles_are_lossless_and_rebuild_the_draft_kv(
    copy_pair: ModelPair, tmp_path: Path
) -> None:
    prompts = [random_prompts(1, n, TINY_SPEC.vocab_size, seed=200 + n)[0] for n in LENGTHS]
    with offline_engine(copy_pair, None, **TIGHT_ENGINE) as llm:
        reference = run_batch(llm, prompts, MAX_TOKENS).token_ids
    log = tmp_path / "decisions.jsonl"
    config = NightjarConfig(
        gamma_max=3,
        policy="fixed",
        policy_params={"gamma": 3},
        decision_log_path=str(log),
        elastic_memory={"chaos_offload_steps": 5, "chaos_cycle_steps": 2, "chaos_region_blocks": 8},
    )
    with offline_engine(copy_pair, config, **TIGHT_ENGINE) as llm:
        outputs = run_batch(llm, prompts, MAX_TOKENS).token_ids
        (worker,) = llm.collective_rpc("nightjar_memory_stats")
        acceptance = spec_counters(llm).acceptance_rate
        catch_up = draft_stats(llm)
    assert outputs == reference
    draft = worker["draft"]
    assert draft["num_offloads"] >= 4 and draft["num_reloads"] >= 3
    assert draft["weights_identical"] and draft["draft_bytes"] > 0
    assert worker["scheduler"]["num_offload_commands"] == draft["num_offloads"]
    assert worker["scheduler"]["num_contractions"] > 0
    assert catch_up["num_catch_up_tokens"] > 0
    assert acceptance >= 0.9
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    away = [d for d in decisions if d["draft_away"]]
    assert away and all(d["gamma"] == 0 and not d["observed"] for d in away)
    assert all(not d["consulted"] for d in away)
