"""Tensor parallelism (TP=2 on the 2-core CPU): every rank skips and catches up
the same steps (decisions follow the broadcast SchedulerOutput), outputs stay
identical to plain TP=2 decoding and acceptance survives the switches."""

import pytest
import torch

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import offline_engine, run_batch, spec_counters
from nightjar_ray.models.pair import ModelPair

from .conftest import SMALL_ENGINE

pytestmark = pytest.mark.engine

TP2 = {"tensor_parallel_size": 2, **SMALL_ENGINE}


def test_tp2_ranks_agree_and_stay_lossless(
    copy_pair: ModelPair, prompts: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one core per rank
    with offline_engine(copy_pair, None, **TP2) as llm:
        reference = run_batch(llm, prompts[:4], 40).token_ids
    config = NightjarConfig(
        testing={"forced_gammas": [0, 3], "forced_steps_per_gamma": 3}, gamma_max=3
    )
    spec_extra = {"draft_tensor_parallel_size": 2}
    with offline_engine(copy_pair, config, spec_extra=spec_extra, **TP2) as llm:
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
