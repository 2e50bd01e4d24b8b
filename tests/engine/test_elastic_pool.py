"""ElasticBlockPool on vLLM's own BlockPool: growth, contraction, refusal, accounting."""

import pytest
from vllm.v1.core.block_pool import BlockPool

from nightjar_ray.engine.block_pool import ElasticBlockPool


def _pool(num_blocks: int = 12, max_blocks: int = 20) -> ElasticBlockPool:
    return ElasticBlockPool(
        BlockPool(num_blocks, enable_caching=True, hash_block_size=16), max_blocks
    )


def test_expand_appends_free_blocks_handed_out_last() -> None:
    elastic = _pool()
    pool = elastic.pool
    first = pool.get_new_blocks(3)
    assert elastic.can_expand(8) and not elastic.can_expand(9) and not elastic.can_expand(0)
    assert list(elastic.expand(8)) == list(range(12, 20))
    elastic.check()
    assert pool.num_gpu_blocks == 20 and pool.get_num_free_blocks() == 20 - 1 - 3
    order = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    assert order[-8:] == list(range(12, 20)), "new blocks must be used after the old ones"
    assert [b.block_id for b in first] == [1, 2, 3]


def test_contract_moves_live_region_blocks_down_and_keeps_references() -> None:
    elastic = _pool()
    pool = elastic.pool
    elastic.expand(8)
    held = pool.get_new_blocks(19)  # every block but the null block
    region = [b for b in held if b.block_id >= 12]
    pool.free_blocks([b for b in held if 2 <= b.block_id < 12])  # room below the boundary
    shared = region[0]
    pool.touch([shared])  # a prefix block held by two requests moves once
    assert elastic.plan_contract(12) is None  # 8 live blocks >= id 8, 6 free below it
    moves = elastic.plan_contract(8)
    assert moves is not None and sorted(moves) == list(range(12, 20))
    assert all(dst < 12 for dst in moves.values()) and len(set(moves.values())) == 8
    elastic.contract(8, moves)
    elastic.check()
    assert pool.num_gpu_blocks == 12 and pool.get_num_free_blocks() == 2
    # the request-held objects are the same, with their new ids
    assert sorted(b.block_id for b in region) == sorted(moves.values())
    assert shared.ref_cnt == 2 and pool.blocks[shared.block_id] is shared


def test_contract_drops_region_free_blocks_and_their_cache_entries() -> None:
    elastic = _pool()
    pool = elastic.pool
    elastic.expand(8)
    blocks = pool.get_new_blocks(13)  # ids 1..13: one live block in the region
    pool.free_blocks(blocks[:4])
    moves = elastic.plan_contract(8)
    assert moves == {12: moves[12], 13: moves[13]} and len(moves) == 2
    elastic.contract(8, moves)
    elastic.check()
    assert all(b.block_id < 12 for b in pool.free_block_queue.get_all_free_blocks())
    assert len(pool.blocks) == 12


def test_contract_is_refused_not_forced_when_blocks_do_not_fit() -> None:
    elastic = _pool()
    elastic.expand(8)
    elastic.pool.get_new_blocks(19)
    assert elastic.plan_contract(8) is None
    assert elastic.plan_contract(0) is None
    elastic.check()


def test_max_blocks_below_the_pool_is_an_error() -> None:
    with pytest.raises(ValueError, match="max_num_blocks"):
        ElasticBlockPool(BlockPool(12, enable_caching=False, hash_block_size=16), 11)


def test_compaction_cycle_alternates_retries_and_counts() -> None:
    from nightjar_ray.memory.cycles import CompactionCycle

    elastic = _pool(12, 12)
    cycle = CompactionCycle(elastic, region_blocks=4, cycle_steps=2)
    held = elastic.pool.get_new_blocks(11)  # full: nothing can move down
    assert [cycle.before_schedule() for _ in range(3)] == [None, None, None]
    assert cycle.stats.num_refused == 2 and not cycle.contracted
    elastic.pool.free_blocks(held[:5])  # ids 1..5 free, 8..11 live in the region
    event = cycle.before_schedule()
    assert event is not None and sorted(event.moves) == [8, 9, 10, 11] and cycle.contracted
    assert event.release == (8, 12) and event.num_blocks == 8 and not event.draft_commands
    assert elastic.num_blocks == 8
    assert cycle.before_schedule() is None and cycle.contracted  # waits cycle_steps
    expanded = cycle.before_schedule()
    assert expanded is not None and expanded.num_blocks == 12 and not cycle.contracted
    assert elastic.num_blocks == 12
    stats = cycle.stats.to_json()
    assert stats["num_contractions"] == stats["num_expansions"] == 1
    assert stats["num_moved_blocks"] == 4


def test_compaction_region_must_leave_a_usable_block() -> None:
    from nightjar_ray.memory.cycles import CompactionCycle

    with pytest.raises(ValueError, match="chaos_region_blocks"):
        CompactionCycle(_pool(12, 12), region_blocks=11, cycle_steps=1)


def test_draft_cycle_alternates_offload_and_reload() -> None:
    from nightjar_ray.memory.cycles import DraftCycle

    cycle = DraftCycle(2)
    events = [cycle.before_schedule() for _ in range(8)]
    commands = [e.draft_commands if e else None for e in events]
    offload, reload = ("offload",), ("reload", "resume")
    assert commands == [None, offload, None, reload, None, offload, None, reload]
    assert cycle.resident and cycle.stats.num_offload_commands == 2
    with pytest.raises(ValueError, match="cycle_steps must be >= 1"):
        DraftCycle(0)
