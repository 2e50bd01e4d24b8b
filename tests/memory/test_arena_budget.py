"""What a KV arena commits, counted without touching memory (``memory/arena_budget.py``),
against hand-counted units and against a real CPU arena's resident pages (``mincore``)."""

from __future__ import annotations

import mmap

import pytest

from nightjar_ray.memory.arena import CPUKVArena
from nightjar_ray.memory.arena_budget import (
    ArenaBudget,
    CommitReplay,
    max_rounding_bytes,
    reserve_bytes,
)
from nightjar_ray.memory.arena_units import unit_span

KIB, MIB = 1 << 10, 1 << 20
G = 2 * MIB
"""The CUDA allocation granularity of current GPUs."""
UNITS = (4 * KIB, G)
"""The CPU arena's unit (the common OS page) and the CUDA arena's."""


def test_unit_span_touches_partial_units_and_covers_whole_ones() -> None:
    # a layer at 8 KiB of 6000-byte pages, 10 slots, 4 KiB units
    assert unit_span(8192, 6000, 10, (1, 3), 4096, whole=False) == range(3, 7)
    assert unit_span(8192, 6000, 10, (1, 3), 4096, whole=True) == range(4, 6)
    assert unit_span(8192, 6000, 10, (2, 2), 4096, whole=False) == range(0)
    # reaching the last slot covers the layer's padding too: bytes 56192..68192 cover
    # units 14, 15 and, with the padding up to 69632, unit 16
    assert unit_span(8192, 6000, 10, (8, 10), 4096, whole=True) == range(14, 17)
    assert unit_span(8192, 6000, 10, (8, 9), 4096, whole=True) == range(14, 15)
    with pytest.raises(ValueError, match="layer offset 100 is not a multiple of 4096"):
        unit_span(100, 6000, 10, (0, 1), 4096, whole=False)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(
    "page_units",
    [1.0, 2.0, 1.5, 0.75, 1 / 8, 3 / 128],
    ids=["page=unit", "page=2unit", "page=1.5unit", "page=0.75unit", "page=unit/8", "odd"],
)
def test_max_rounding_is_the_largest_baseline_excess_over_every_pool_size(
    unit: int, page_units: float
) -> None:
    """``unit - gcd(page, unit)`` per layer, 0 for pages that are whole units; reached
    by some pool size and never exceeded (every residue of N * page mod unit is tried)."""
    page = int(page_units * unit)
    layers = (page, page, 2 * page)
    bound = max_rounding_bytes(layers, unit)
    excess = [
        ArenaBudget(layers, (2,), n, unit, 0).baseline_bytes(n) - n * sum(layers)
        for n in range(1, 2 * unit // page + 3)
    ]
    assert min(excess) >= 0 and max(excess) <= bound
    if page % unit == 0:
        assert bound == 0
    else:
        assert bound > 0 and max(excess) > 0


def test_max_rounding_of_pages_that_do_not_divide_the_unit() -> None:
    assert max_rounding_bytes([6000], 4096) == 4096 - 16  # gcd(6000, 4096) = 16
    assert max_rounding_bytes([16 * KIB, 8 * KIB], G) == (G - 16 * KIB) + (G - 8 * KIB)
    assert max_rounding_bytes([3 * G], G) == 0
    assert reserve_bytes(0, 3000) == 0
    assert reserve_bytes(1, 3000) == reserve_bytes(3000, 3000) == 3000
    assert reserve_bytes(3001, 3000) == 6000


def test_baseline_and_expansion_counted_by_hand_at_2_mib() -> None:
    """K and V of one target layer (16 KiB pages) and a draft layer (4 KiB), 100 blocks:
    1600 KiB and 400 KiB each round up to one 2 MiB chunk."""
    budget = ArenaBudget((16 * KIB, 16 * KIB, 4 * KIB), (2,), 100, G, draft_bytes=0)
    assert budget.baseline_bytes(100) == 3 * G
    assert budget.expanded_bytes(100) == 2 * G  # the draft's chunk released
    assert budget.expanded_bytes(128) == 2 * G  # 128 x 16 KiB fill the chunk exactly
    assert budget.expanded_bytes(129) == 4 * G
    # 4 MiB hold the two target chunks up to 128 blocks; a byte less holds no growth
    assert budget.largest_num_max_blocks(2 * G) == 128
    assert budget.largest_num_max_blocks(2 * G - 1) == 100


@pytest.mark.parametrize("unit", UNITS)
def test_largest_n_max_stays_within_stock_and_one_more_block_would_not(unit: int) -> None:
    pages = (6000, 6000, 10000, 10000, 3000, 3000)  # > unit and not dividing it at 4 KiB
    budget = ArenaBudget(pages, (4, 5), 1000, unit, draft_bytes=5 * unit + 123)
    stock = budget.stock_bytes(1000)
    n_max = budget.largest_num_max_blocks(stock)
    formula = stock // budget.target_block_bytes  # the bound without rounding
    assert 1000 < n_max <= formula
    assert budget.expanded_bytes(n_max) <= stock < budget.expanded_bytes(n_max + 1)


def test_n_max_equals_the_formula_when_pages_are_whole_units() -> None:
    budget = ArenaBudget((8 * KIB, 8 * KIB, 4 * KIB), (2,), 36, 4 * KIB, draft_bytes=40 * KIB)
    stock = budget.stock_bytes(36)
    assert budget.baseline_bytes(36) == 36 * budget.block_bytes
    assert budget.largest_num_max_blocks(stock) == stock // budget.target_block_bytes == 47


def test_n_max_is_n_orig_when_no_block_more_fits() -> None:
    """A draft page far below the unit: at 2 MiB one more target block needs a second
    chunk, which the stock bytes do not hold."""
    budget = ArenaBudget((16 * KIB, 4 * KIB), (1,), 128, G, draft_bytes=0)
    stock = budget.stock_bytes(128)  # 2.5 MiB
    assert budget.expanded_bytes(128) == G <= stock < budget.expanded_bytes(129)
    assert budget.largest_num_max_blocks(stock) == 128


def test_budget_refuses_impossible_shapes() -> None:
    with pytest.raises(ValueError, match="num_blocks and unit_bytes must be >= 1"):
        ArenaBudget((4096,), (), 0, 4096, 0)
    with pytest.raises(ValueError, match=r"draft layers \(3,\) outside"):
        ArenaBudget((4096, 4096), (3,), 4, 4096, 0)
    with pytest.raises(ValueError, match="needs KV layers of the target"):
        ArenaBudget((4096,), (0,), 4, 4096, 0).largest_num_max_blocks(1 << 20)


def test_replay_release_keeps_units_shared_with_committed_blocks() -> None:
    replay = CommitReplay((6000,), 10, 4096)
    replay.commit([0], 0, 10)
    assert replay.resident_bytes == 15 * 4096  # 60000 bytes + padding
    replay.release([0], 1, 3)  # bytes 6000..18000: units 2, 3 wholly inside
    assert replay.resident_bytes == 13 * 4096
    replay.commit([0], 1, 2)  # bytes 6000..12000 touch units 1, 2: unit 2 back
    assert replay.resident_bytes == 14 * 4096


def _write(arena: CPUKVArena, layers: range | tuple[int, ...], start: int, end: int) -> None:
    """What the engine does after a commit: write the blocks (pages become resident
    whether or not the kernel populates them at commit)."""
    for layer in layers:
        arena.layer_pages(layer)[start:end] = 1


@pytest.mark.parametrize(
    "pages",
    [(6000, 6000, 10000, 3000), (4096, 4096, 2048, 2048), (1000, 1000, 700)],
    ids=["page>unit,not dividing", "whole and half units", "page<unit"],
)
def test_cpu_arena_resident_pages_are_what_the_budget_predicts(pages: tuple[int, ...]) -> None:
    """A real mmap arena, sized with the budget's N_max: after the start's commit of
    [0, N_orig) of every layer, and after an expansion (draft released, region committed),
    ``mincore`` reads exactly the predicted bytes, and those stay within stock."""
    n_orig, draft = 37, (len(pages) - 1,)
    target = tuple(p for p in range(len(pages)) if p not in draft)
    budget = ArenaBudget(pages, draft, n_orig, mmap.PAGESIZE, draft_bytes=3 * mmap.PAGESIZE + 5)
    n_max = budget.largest_num_max_blocks(budget.stock_bytes(n_orig))
    arena = CPUKVArena(pages, n_max)
    try:
        arena.commit_blocks(range(len(pages)), 0, n_orig)
        _write(arena, range(len(pages)), 0, n_orig)
        assert arena.resident_bytes() == budget.baseline_bytes(n_max)
        arena.release_blocks(draft, 0, n_max)
        arena.commit_blocks(target, n_orig, n_max)
        _write(arena, target, n_orig, n_max)
        assert arena.resident_bytes() == budget.expanded_bytes(n_max)
        assert arena.resident_bytes() <= budget.stock_bytes(n_orig)  # the draft is away
    finally:
        arena.close()
