"""Rebinding KV views onto the arena, for the layouts vLLM's backends use.

The runner here is a stand-in holding real tensors laid out the way vLLM 0.32's
``allocate_kv_cache`` lays them out (one int8 buffer, one view per layer): the rebind
only reads ``kv_caches``, ``kv_cache_config.num_blocks`` and the attention layers of
``static_forward_context``. The real engine runs it in tests/engine/test_engine_compaction.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from nightjar_ray.engine.kv_rebind import (
    arena_budget,
    kv_reserve_bytes,
    num_max_blocks,
    plan_kv_arena,
    rebind_kv_to_arena,
    spec_arena_pages,
)
from nightjar_ray.memory.arena_budget import ArenaBudget
from nightjar_ray.memory.kernels import move_blocks_torch

NUM_BLOCKS, BLOCK_SIZE, HEADS, HEAD_DIM = 6, 16, 2, 64
NAMES = ("model.layers.0.attn", "model.layers.1.attn", "draft_model.layers.0.attn")


@dataclass
class Layer:
    kv_cache: torch.Tensor
    bound: list[torch.Tensor] = field(default_factory=list)

    def bind_kv_cache(self, kv: torch.Tensor) -> None:
        self.kv_cache = kv
        self.bound.append(kv)


def _runner(views: list[torch.Tensor]) -> SimpleNamespace:
    context = {name: Layer(view) for name, view in zip(NAMES, views, strict=True)}
    return SimpleNamespace(
        kv_caches=list(views),
        kv_cache_config=SimpleNamespace(num_blocks=NUM_BLOCKS),
        compilation_config=SimpleNamespace(static_forward_context=context),
    )


def _block_major() -> list[torch.Tensor]:
    """vLLM's CPU layout (LBHNC): per layer a contiguous [blocks, heads, tokens, 2*dim]."""
    buf = torch.zeros(3 * NUM_BLOCKS * HEADS * BLOCK_SIZE * 2 * HEAD_DIM * 2, dtype=torch.int8)
    layers = buf.view(torch.bfloat16).view(3, NUM_BLOCKS, HEADS, BLOCK_SIZE, 2 * HEAD_DIM)
    return list(layers.unbind(0))


def _token_major() -> list[torch.Tensor]:
    """FlashAttention's default (LBNHC): logical [blocks, heads, tokens, 2*dim], physically
    [blocks, tokens, heads, 2*dim], so the views are not contiguous."""
    buf = torch.zeros(3 * NUM_BLOCKS * BLOCK_SIZE * HEADS * 2 * HEAD_DIM * 2, dtype=torch.int8)
    layers = buf.view(torch.bfloat16).view(3, NUM_BLOCKS, BLOCK_SIZE, HEADS, 2 * HEAD_DIM)
    return [layer.transpose(1, 2) for layer in layers.unbind(0)]


def _kv_outermost() -> list[torch.Tensor]:
    """K/V outermost per layer: [2, blocks, tokens, heads, dim] (older FlashAttention)."""
    buf = torch.zeros(3 * 2 * NUM_BLOCKS * BLOCK_SIZE * HEADS * HEAD_DIM * 2, dtype=torch.int8)
    layers = buf.view(torch.bfloat16).view(3, 2, NUM_BLOCKS, BLOCK_SIZE, HEADS, HEAD_DIM)
    return list(layers.unbind(0))


LAYOUTS = {"block_major": _block_major, "token_major": _token_major, "kv_outermost": _kv_outermost}
PAGE_BYTES = HEADS * BLOCK_SIZE * HEAD_DIM * 2  # one K or V half of a block, bf16: 4 KiB


@pytest.mark.parametrize("name", LAYOUTS)
def test_rebind_keeps_shapes_and_page_strides_and_binds_every_layer(name: str) -> None:
    old = LAYOUTS[name]()
    runner = _runner(old)
    plan = plan_kv_arena(runner)
    kv_halves = 2 if name == "kv_outermost" else 1
    assert plan.num_blocks == NUM_BLOCKS
    assert plan.page_bytes == (2 * PAGE_BYTES // kv_halves,) * (3 * kv_halves)
    assert plan.draft_layers == tuple(range(2 * kv_halves, 3 * kv_halves))
    slots = 10
    arena = rebind_kv_to_arena(runner, plan, slots)
    try:
        block_dim = 1 if name == "kv_outermost" else 0
        for layer, (before, after) in enumerate(zip(old, runner.kv_caches, strict=True)):
            want_shape = list(before.shape)
            want_shape[block_dim] = slots
            assert list(after.shape) == want_shape and after.dtype == before.dtype
            inside = [
                d for d in range(before.dim()) if before.stride(d) <= before.stride(block_dim)
            ]
            assert [after.stride(d) for d in inside] == [before.stride(d) for d in inside]
            context = runner.compilation_config.static_forward_context
            assert context[NAMES[layer]].kv_cache is after
        assert arena.resident_bytes() == 0  # the worker commits once the old buffer is gone
    finally:
        arena.close()


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_block_written_through_a_view_is_that_blocks_arena_pages(name: str) -> None:
    """Each view's block b (K and V halves) lands in its own arena layers' page b, no two
    layers alias, and the block mover over the arena moves what the views see."""
    runner = _runner(LAYOUTS[name]())
    plan = plan_kv_arena(runner)
    arena = rebind_kv_to_arena(runner, plan, NUM_BLOCKS + 2)
    try:
        gen = torch.Generator().manual_seed(0)
        for view in runner.kv_caches:
            view.copy_(torch.randn(view.shape, generator=gen).to(view.dtype))
        expected = [view.clone() for view in runner.kv_caches]
        for p, (index, first) in enumerate(zip(plan.order, plan.first_layers, strict=True)):
            view = runner.kv_caches[index]
            halves = view.unbind(0) if name == "kv_outermost" else (view,)
            for k, half in enumerate(halves):
                page = arena.layer_pages(first + k)[3]
                assert page.data_ptr() == half[3].data_ptr(), (p, k)
        move_blocks_torch(arena.layout, arena.buffer, {4: 1})
        block_dim = 1 if name == "kv_outermost" else 0
        for view, want in zip(runner.kv_caches, expected, strict=True):
            moved = want.clone()
            moved.select(block_dim, 1).copy_(want.select(block_dim, 4))
            assert torch.equal(view.view(torch.int16), moved.view(torch.int16))
    finally:
        arena.close()


def test_num_max_blocks_counts_the_draft_share_of_every_block() -> None:
    """Pages of whole OS pages: N_max is the formula; at 2 MiB chunks the rounding comes
    off it and the expanded commit stays within stock."""
    plan = plan_kv_arena(_runner(_kv_outermost()))
    full, target = 3 * 2 * PAGE_BYTES, 2 * 2 * PAGE_BYTES
    page = arena_budget(plan, draft_bytes=0, unit_bytes=PAGE_BYTES)
    assert num_max_blocks(page, NUM_BLOCKS) == NUM_BLOCKS * full // target
    page = arena_budget(plan, draft_bytes=5 * target, unit_bytes=PAGE_BYTES)
    assert num_max_blocks(page, NUM_BLOCKS) == (NUM_BLOCKS * full) // target + 5
    assert num_max_blocks(page, NUM_BLOCKS + 2) == ((NUM_BLOCKS + 2) * full) // target + 5
    chunk = arena_budget(plan, draft_bytes=(2 << 20) * 5, unit_bytes=2 << 20)
    stock = chunk.stock_bytes(NUM_BLOCKS)
    n_max = num_max_blocks(chunk, NUM_BLOCKS)
    assert NUM_BLOCKS < n_max < stock // target
    assert chunk.expanded_bytes(n_max) <= stock < chunk.expanded_bytes(n_max + 1)
    with pytest.raises(ValueError, match="KV layers of both the target and the draft"):
        arena_budget(replace(plan, draft_layers=()), 0, PAGE_BYTES)


def _spec(heads: int, head_dim: int, block_size: int = 16) -> Any:
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=heads, head_size=head_dim, dtype=torch.bfloat16
    )


def _layout(name: str) -> tuple[int, ...]:
    from vllm.v1.kv_cache_interface import KVCacheLayout

    return tuple(KVCacheLayout[name].layer_view_order)


def test_spec_pages_split_per_head_only_where_heads_lie_outside_the_block() -> None:
    specs = [_spec(4, 128)] * 2 + [_spec(2, 64)]  # 32 KiB target pages, 8 KiB draft
    assert spec_arena_pages(specs, _layout("LBNHC")) == [32 << 10, 32 << 10, 8 << 10]
    assert spec_arena_pages(specs, _layout("LBHNC")) == [32 << 10, 32 << 10, 8 << 10]
    assert spec_arena_pages(specs, _layout("LHBNC")) == [8 << 10] * 8 + [4 << 10] * 2


@pytest.mark.parametrize(("target_layers", "heads"), [(28, 4), (64, 4)], ids=["7B", "32B-TP2-rank"])
@pytest.mark.parametrize("unit", [4096, 2 << 20], ids=["cpu-page", "cuda-2MiB"])
def test_the_reserve_keeps_baseline_and_expansion_within_stock_vllm(
    target_layers: int, heads: int, unit: int
) -> None:
    """Qwen2.5 shapes beside a 0.5B draft (24 layers, 2 KV heads of 64, its page raised
    to the target's as vLLM unifies them), bf16, 16-token blocks: for KV budgets that
    put N_orig * page at every residue of the unit, vLLM's block count from the budget
    less the reserve keeps the arena at start within stock vLLM's KV buffer, and N_max
    keeps the expanded arena within stock's KV buffer plus the draft's weights."""
    specs = [_spec(heads, 128)] * (target_layers + 24)
    pages = spec_arena_pages(specs, _layout("LBNHC"))
    full = sum(pages)
    reserve = kv_reserve_bytes(specs, _layout("LBNHC"), unit)
    assert reserve % full == 0 and reserve // full <= -(-len(pages) * unit // full)
    draft = tuple(range(target_layers, len(pages)))
    for available in range(40 << 30, (40 << 30) + 64 * full, full):
        n_stock = available // full
        n_orig = (available - reserve) // full  # what vLLM sizes from the reported bytes
        budget = ArenaBudget(tuple(pages), draft, n_orig, unit, draft_bytes=988 << 20)
        n_max = num_max_blocks(budget, n_orig + reserve // full)
        assert n_orig + reserve // full == n_stock
        assert budget.baseline_bytes(n_max) <= n_stock * full
        assert budget.expanded_bytes(n_max) <= budget.stock_bytes(n_stock)


def test_block_outermost_and_foreign_layouts_are_refused() -> None:
    buf = torch.zeros(NUM_BLOCKS * 3 * PAGE_BYTES, dtype=torch.int8)
    interleaved = buf.view(NUM_BLOCKS, 3, PAGE_BYTES).unbind(1)  # BLHNC: layers inside blocks
    with pytest.raises(ValueError, match="pages not to overlap"):
        plan_kv_arena(_runner(list(interleaved)))
    big = torch.zeros(4 * NUM_BLOCKS * PAGE_BYTES, dtype=torch.int8)
    # a dimension outside the blocks whose stride is less than the whole block array
    heads_between = [
        torch.as_strided(big, (NUM_BLOCKS, 2, PAGE_BYTES), (PAGE_BYTES, 3 * PAGE_BYTES, 1), i)
        for i in range(3)
    ]
    with pytest.raises(ValueError, match="one dense page per layer"):
        plan_kv_arena(_runner(heads_between))
    apart = [torch.zeros(NUM_BLOCKS, PAGE_BYTES, dtype=torch.int8) for _ in NAMES]
    with pytest.raises(ValueError, match="one KV buffer"):
        plan_kv_arena(_runner(apart))
    wrong = _block_major()
    runner = _runner(wrong)
    runner.kv_cache_config.num_blocks = NUM_BLOCKS + 1
    with pytest.raises(ValueError, match="no dimension of 7 blocks"):
        plan_kv_arena(runner)
