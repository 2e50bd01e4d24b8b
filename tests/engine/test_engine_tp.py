"""Tensor parallelism (TP=2 on the 2-core CPU): every rank skips and catches up
the same steps (decisions follow the broadcast SchedulerOutput), outputs stay
identical to plain TP=2 decoding and acceptance survives the switches."""

import pytest
import torch

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import offline_engine, run_batch, spec_counters
from nightjar_ray.models.pair import ModelPair
from tests.reference_engines import ReferenceEngines

from .conftest import TP2_ENGINE, TP2_ENV, TP2_SPEC

pytestmark = pytest.mark.engine


def test_tp2_ranks_agree_and_stay_lossless(
    copy_pair: ModelPair,
    prompts: list[list[int]],
    reference_engines: ReferenceEngines,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in TP2_ENV.items():
        monkeypatch.setenv(name, value)
    reference = reference_engines.outputs(copy_pair, prompts[:4], 40, env=TP2_ENV, **TP2_ENGINE)
    config = NightjarConfig(testing={"forced_gammas": [0, 3], "forced_steps_per_gamma": 3})
    with offline_engine(copy_pair, config, spec_extra=TP2_SPEC, **TP2_ENGINE) as llm:
        outputs = run_batch(llm, prompts[:4], 40).token_ids
        ranks = llm.collective_rpc("nightjar_draft_stats")
        acceptance = spec_counters(llm).acceptance_rate
        config_of = llm.llm_engine.vllm_config
        dtypes = (
            config_of.model_config.dtype,
            config_of.speculative_config.draft_model_config.dtype,
        )
    # the pair's float32, not the bfloat16 vLLM's "auto" picks on x86 (AMX bf16 GEMMs round
    # differently per batch shape, which flipped near-tied greedy tokens here)
    assert dtypes == (torch.float32, torch.float32)
    assert outputs == reference
    assert len(ranks) == 2 and ranks[0]["num_catch_ups"] > 0
    keys = ("num_skipped_steps", "num_catch_ups", "num_catch_up_tokens", "num_draft_forwards")
    assert [r[k] for k in keys for r in ranks[:1]] == [r[k] for k in keys for r in ranks[1:]]
    assert acceptance >= 0.9
