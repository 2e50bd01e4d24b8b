"""KV compaction under load on the real engine: greedy outputs do not change.

The chaos cycle (``TestingConfig.chaos_cycle_steps``) gives the top blocks of a
small KV pool back every other step while many requests generate, so requests hold
blocks in the region when it is compacted; their KV pages move, every rank's block
tables are rewritten (``engine/block_remap.py``) and, the KV cache living in the arena
(``engine/kv_rebind.py``), the region's pages are released to the OS. Skipping the
page move makes outputs differ (checked by hand: 6 of 12 prompts changed), so this test
would catch a broken move or remap.
"""

from collections.abc import Iterator

import pytest

from nightjar_ray.engine import NightjarConfig
from nightjar_ray.engine.offline import offline_engine, random_prompts, run_batch
from nightjar_ray.models.pair import TINY_SPEC, ModelPair
from tests.reference_engines import ReferenceEngines

from .conftest import LENGTHS, SPEC_EXTRA, TIGHT_ENGINE, TP2_ENGINE, TP2_ENV, TP2_SPEC

pytestmark = pytest.mark.engine

MAX_TOKENS = 48


@pytest.fixture(scope="module")
def many_prompts() -> list[list[int]]:
    return [random_prompts(1, n, TINY_SPEC.vocab_size, seed=100 + n)[0] for n in LENGTHS]


@pytest.fixture(scope="module")
def tight_reference(
    reference_engines: ReferenceEngines, lossy_pair: ModelPair, many_prompts: list[list[int]]
) -> list[list[int]]:
    return reference_engines.outputs(lossy_pair, many_prompts, MAX_TOKENS, **TIGHT_ENGINE)


def test_compaction_cycles_under_load_are_lossless(
    lossy_pair: ModelPair, many_prompts: list[list[int]], tight_reference: list[list[int]]
) -> None:
    config = NightjarConfig(
        testing={
            "forced_gammas": [0, 3],
            "forced_steps_per_gamma": 3,
            "chaos_cycle_steps": 1,
            "chaos_region_blocks": 12,
        },
    )
    with offline_engine(lossy_pair, config, spec_extra=SPEC_EXTRA, **TIGHT_ENGINE) as llm:
        runs = [run_batch(llm, many_prompts, MAX_TOKENS).token_ids for _ in range(2)]
        (worker,) = llm.collective_rpc("nightjar_memory_stats")
    assert runs == [tight_reference, tight_reference]
    sched = worker["scheduler"]
    assert sched["num_contractions"] >= 50 and sched["num_expansions"] >= 49
    assert sched["num_moved_blocks"] > 0, "no request held blocks in the region"
    assert sched["num_refused"] > 0, "the refuse-and-retry path was not exercised"
    assert worker["num_moved_blocks"] == sched["num_moved_blocks"]
    assert worker["num_remapped_entries"] >= worker["num_moved_blocks"]
    # the KV cache lives in the arena: each contraction gave the region's pages back
    # (12 blocks x every layer's page; pages of 16 KiB are whole OS pages here)
    region_bytes = 12 * worker["pool_kv_bytes"] // 36
    assert worker["num_released_bytes"] == sched["num_contractions"] * region_bytes
    stock_kv = (
        TIGHT_ENGINE["kv_cache_memory_bytes"] // worker["block_bytes"] * worker["block_bytes"]
    )
    assert 0 < worker["arena_resident_bytes"] <= stock_kv == worker["stock_kv_bytes"]


@pytest.fixture(scope="module")
def tp2_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in TP2_ENV.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def tp2_reference(
    tp2_env: None,
    reference_engines: ReferenceEngines,
    lossy_pair: ModelPair,
    many_prompts: list[list[int]],
) -> list[list[int]]:
    return reference_engines.outputs(
        lossy_pair, many_prompts[:12], MAX_TOKENS, env=TP2_ENV, **TP2_ENGINE
    )


def test_tp2_ranks_apply_the_same_moves_and_stay_lossless(
    lossy_pair: ModelPair, many_prompts: list[list[int]], tp2_reference: list[list[int]]
) -> None:
    config = NightjarConfig(
        testing={
            "forced_gammas": [0, 3],
            "forced_steps_per_gamma": 3,
            "chaos_cycle_steps": 1,
            "chaos_region_blocks": 12,
        },
    )
    with offline_engine(lossy_pair, config, spec_extra=TP2_SPEC, **TP2_ENGINE) as llm:
        outputs = run_batch(llm, many_prompts[:12], MAX_TOKENS).token_ids
        ranks = llm.collective_rpc("nightjar_memory_stats")
    assert outputs == tp2_reference
    assert len(ranks) == 2
    same = (
        "num_moved_blocks", "num_remapped_entries", "scheduler", "num_released_bytes", "history"
    )  # fmt: skip
    assert [ranks[0][k] for k in same] == [ranks[1][k] for k in same]
    assert ranks[0]["num_moved_blocks"] > 0
    assert ranks[0]["num_moved_blocks"] == ranks[0]["scheduler"]["num_moved_blocks"]


def test_tp2_ranks_offload_grow_compact_and_reload_together(
    lossy_pair: ModelPair, many_prompts: list[list[int]], tp2_reference: list[list[int]]
) -> None:
    """The controller's events at TP=2: both ranks hold the same N_max, offload and
    reload the same number of times, move the same blocks, and stay lossless."""
    config = NightjarConfig(
        elastic_memory={
            "enabled": True,
            "tau_low_fraction": 0.3,  # 12 requests on 36 blocks: scarce at 11 free
            "expand_persist_steps": 2,
            "contract_persist_steps": 2,
        },
        testing={"forced_gammas": [0, 3], "forced_steps_per_gamma": 6, "self_check": True},
    )
    with offline_engine(lossy_pair, config, spec_extra=TP2_SPEC, **TP2_ENGINE) as llm:
        outputs = run_batch(llm, many_prompts[:12], MAX_TOKENS).token_ids
        ranks = llm.collective_rpc("nightjar_memory_stats")
    assert outputs == tp2_reference
    assert len(ranks) == 2
    sched = ranks[0]["scheduler"]
    assert sched["num_expansions"] >= 1 and sched["num_contractions"] >= 1
    assert sched["peak_num_blocks"] == ranks[0]["num_max_blocks"] > ranks[0]["num_stock_blocks"]
    # both ranks agree on residency and pool size after every event, in order
    same = ("num_max_blocks", "num_moved_blocks", "scheduler", "num_released_bytes", "history")
    assert [ranks[0][k] for k in same] == [ranks[1][k] for k in same]
    history = ranks[0]["history"]
    n_max, n_orig = ranks[0]["num_max_blocks"], ranks[0]["num_stock_blocks"]
    assert [n_max, False, ["offload"]] in history and [n_orig, False, ["reload"]] in history
    assert history[-1] == [n_orig, True, ["resume"]]
    for rank in ranks:
        draft = rank["draft"]
        assert draft["num_offloads"] == sched["num_expansions"]
        assert draft["num_reloads"] == sched["num_contractions"] and draft["resident"]
        assert draft["weights_identical"] and draft["num_verified_reloads"] == draft["num_reloads"]
        # against stock vLLM's KV buffer from the same budget, not the pool vLLM sized
        full = rank["block_bytes"]
        stock_kv = TP2_ENGINE["kv_cache_memory_bytes"] // full * full
        assert rank["peak_committed_bytes"] <= stock_kv + draft["draft_bytes"]
