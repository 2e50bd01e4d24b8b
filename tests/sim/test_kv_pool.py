"""Block accounting of the paged KV pool, including elastic expand/contract."""

from __future__ import annotations

import random

import pytest

from nightjar_ray.sim.kv_pool import BlockPool


def test_allocate_rounds_up_to_blocks_and_free_returns_them() -> None:
    pool = BlockPool(10, block_size_tokens=16)
    assert pool.blocks_needed(1, 17) == 2
    pool.allocate(1, 17)
    assert pool.num_free_blocks == 8
    assert pool.blocks_needed(1, 32) == 0
    pool.allocate(1, 33)
    assert len(pool.tables[1]) == 3
    assert pool.free(1) == 3
    assert pool.num_free_blocks == 10
    pool.check()


def test_can_allocate_refuses_beyond_capacity() -> None:
    pool = BlockPool(4, block_size_tokens=16)
    assert pool.can_allocate(1, 64)
    assert not pool.can_allocate(1, 65)


def test_expand_then_contract_migrates_live_blocks_below_boundary() -> None:
    pool = BlockPool(8, block_size_tokens=1)
    pool.expand(4)
    assert pool.num_blocks == 12 and pool.num_free_blocks == 12
    pool.allocate(1, 6)
    pool.allocate(2, 4)  # ids 6..9: two of them above the boundary 8
    pool.free(1)
    assert pool.can_contract(4)
    migrated = pool.contract(4)
    assert migrated == 2
    assert pool.num_blocks == 8
    assert all(b < 8 for b in pool.tables[2])
    pool.check()


def test_contract_refused_without_enough_free_blocks() -> None:
    pool = BlockPool(4, block_size_tokens=1)
    pool.expand(2)
    pool.allocate(1, 5)
    assert not pool.can_contract(2)


def test_random_operations_keep_the_invariant() -> None:
    rng = random.Random(3)
    pool = BlockPool(64, block_size_tokens=4)
    sizes: dict[int, int] = {}
    for _ in range(2000):
        op = rng.random()
        req = rng.randrange(12)
        if op < 0.5:
            want = sizes.get(req, 0) + rng.randint(1, 20)
            if pool.can_allocate(req, want):
                pool.allocate(req, want)
                sizes[req] = want
        elif op < 0.8:
            pool.free(req)
            sizes.pop(req, None)
        elif op < 0.9:
            pool.expand(rng.randint(0, 8))
        elif pool.num_blocks > 64 and pool.can_contract(pool.num_blocks - 64):
            pool.contract(pool.num_blocks - 64)
        pool.check()
        for r, n in sizes.items():
            assert len(pool.tables[r]) == -(-n // 4)


def test_bad_pool_rejected() -> None:
    with pytest.raises(ValueError, match=">= 1 block"):
        BlockPool(0, 16)
