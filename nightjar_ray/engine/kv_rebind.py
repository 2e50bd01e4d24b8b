"""Move a worker's KV cache into a :class:`~nightjar_ray.memory.arena.KVArena`.

vLLM allocates the KV cache as one committed buffer. After warm-up (no request holds a
block yet) the worker re-creates every layer's view over an arena of the device
(``build_kv_arena``) with the same page sizes, binds the new views to the attention
layers and the runner; the old buffer is dropped and blocks ``[0, N_orig)`` of every
arena layer are committed (``worker_memory``). From then on the arena commits and releases
pages as the block pool grows and shrinks. The arena's addresses never change, so CUDA
graphs captured over its views stay valid: on GPU the rebind runs before the capture.

A layer's view has one block dimension (``num_blocks`` long). Each block's bytes over the
dimensions physically inside it form one dense page; dimensions physically outside it
(K/V in a ``(2, num_blocks, ...)`` view, heads in a head-outer layout) split the view
into several page arrays, each one arena layer::

    [num_blocks, H, N, C]   (any stride order with blocks outermost)  -> 1 arena layer
    [2, num_blocks, ...]    (K/V outermost)                            -> 2 arena layers

The new view keeps every stride inside a page; the strides outside step between the
arena layers (``torch.as_strided``).

NOTE: layouts whose blocks interleave layers (block-outermost, vLLM's ``BL*``) cannot give
one layer's pages back and are refused; all views must share one buffer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from nightjar_ray.memory.arena import KVArena, build_kv_arena
from nightjar_ray.memory.arena_budget import ArenaBudget, max_rounding_bytes, reserve_bytes

DRAFT_LAYER_PREFIX = "draft_model."
"""vLLM registers the draft model's attention layers under this prefix."""


@dataclass(frozen=True)
class ViewPages:
    """How one KV view splits into arena layers."""

    block_dim: int
    outer_dims: tuple[int, ...]
    """Dimensions physically outside the block dimension, outermost first."""
    num_layers: int
    """Arena layers: the product of the outer dimensions' sizes."""
    page_bytes: int


@dataclass(frozen=True)
class KVArenaPlan:
    """A runner's KV views in buffer order and the arena layers they become."""

    num_blocks: int
    order: tuple[int, ...]
    """Indices into ``model_runner.kv_caches``, by storage offset."""
    views: tuple[ViewPages, ...]
    """Per entry of ``order``."""
    first_layers: tuple[int, ...]
    """Per entry of ``order``: its first arena layer."""
    page_bytes: tuple[int, ...]
    """Per arena layer."""
    draft_layers: tuple[int, ...]
    """Arena layers of the draft model's views."""

    @property
    def target_layers(self) -> tuple[int, ...]:
        draft = set(self.draft_layers)
        return tuple(p for p in range(len(self.page_bytes)) if p not in draft)


def view_pages(kv: torch.Tensor, num_blocks: int) -> ViewPages:
    """Split ``kv`` into page arrays (module docstring); ``ValueError`` when a block's
    bytes are not one dense page or blocks interleave with another dimension.

    NOTE: the block dimension is the first of length ``num_blocks``."""
    if num_blocks not in kv.shape:
        raise ValueError(f"KV view {tuple(kv.shape)} has no dimension of {num_blocks} blocks")
    block_dim = list(kv.shape).index(num_blocks)
    block_stride = kv.stride(block_dim)
    others = [d for d in range(kv.dim()) if d != block_dim and kv.shape[d] > 1]
    outer = sorted((d for d in others if kv.stride(d) > block_stride), key=kv.stride)[::-1]
    inner = [d for d in others if d not in outer]
    extent = 1 + sum((kv.shape[d] - 1) * kv.stride(d) for d in inner)
    dense = extent <= block_stride and all(kv.stride(d) >= num_blocks * block_stride for d in outer)
    if not dense:
        raise ValueError(
            f"elastic memory needs each KV block to be one dense page per layer "
            f"(view {tuple(kv.shape)} strides {kv.stride()}): use a layer-outermost "
            "KV cache layout (VLLM_KV_CACHE_LAYOUT=LBNHC or LBHNC)"
        )
    num_layers = math.prod(kv.shape[d] for d in outer)
    return ViewPages(block_dim, tuple(outer), num_layers, block_stride * kv.element_size())


def kv_num_blocks(model_runner: Any) -> int:
    """N_orig: vLLM's block count (the KV cache config's, else the first view's dim 0)."""
    config = getattr(model_runner, "kv_cache_config", None)
    if config is not None:
        return int(config.num_blocks)
    return int(model_runner.kv_caches[0].shape[0])


def plan_kv_arena(model_runner: Any) -> KVArenaPlan:
    """The arena layers of the runner's KV views (``ValueError`` for layouts it cannot
    hold: views over several buffers, overlapping views, blocks not dense pages)."""
    kv_caches: list[torch.Tensor] = list(model_runner.kv_caches)
    if not kv_caches:
        raise ValueError("no KV cache tensors")
    storage = kv_caches[0].untyped_storage().data_ptr()
    if any(kv.untyped_storage().data_ptr() != storage for kv in kv_caches):
        raise ValueError("elastic memory needs one KV buffer")
    num_blocks = kv_num_blocks(model_runner)
    order = sorted(range(len(kv_caches)), key=lambda i: kv_caches[i].storage_offset())
    views = tuple(view_pages(kv_caches[i], num_blocks) for i in order)
    _check_disjoint([kv_caches[i] for i in order], views, num_blocks)
    firsts: list[int] = []
    pages: list[int] = []
    for view in views:
        firsts.append(len(pages))
        pages += [view.page_bytes] * view.num_layers
    draft_views = _draft_views(model_runner, kv_caches)
    draft_layers = tuple(
        firsts[p] + k
        for p, i in enumerate(order)
        if id(kv_caches[i]) in draft_views
        for k in range(views[p].num_layers)
    )
    return KVArenaPlan(num_blocks, tuple(order), views, tuple(firsts), tuple(pages), draft_layers)


def _check_disjoint(kvs: list[torch.Tensor], views: tuple[ViewPages, ...], n: int) -> None:
    spans = []
    for kv, view in zip(kvs, views, strict=True):
        start = kv.storage_offset() * kv.element_size()
        steps = [kv.stride(d) * kv.element_size() for d in view.outer_dims]
        sizes = [kv.shape[d] for d in view.outer_dims]
        for index in range(view.num_layers):
            offset = start
            for step, size in zip(steps[::-1], sizes[::-1], strict=True):
                offset, index = offset + (index % size) * step, index // size
            spans.append((offset, offset + n * view.page_bytes))
    spans.sort()
    if any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
        raise ValueError(
            "elastic memory needs the KV views' pages not to overlap (a layout whose blocks "
            "interleave layers, or layers sharing a KV cache)"
        )


def _draft_views(model_runner: Any, kv_caches: list[torch.Tensor]) -> set[int]:
    context = model_runner.compilation_config.static_forward_context
    return {
        id(layer.kv_cache)
        for name, layer in context.items()
        if name.startswith(DRAFT_LAYER_PREFIX) and getattr(layer, "kv_cache", None) is not None
    }


def arena_budget(plan: KVArenaPlan, draft_bytes: int, unit_bytes: int) -> ArenaBudget:
    """The plan's arena as the accounting counts it (``memory/arena_budget.py``)."""
    if not plan.draft_layers or len(plan.draft_layers) == len(plan.page_bytes):
        raise ValueError("elastic memory needs KV layers of both the target and the draft")
    return ArenaBudget(plan.page_bytes, plan.draft_layers, plan.num_blocks, unit_bytes, draft_bytes)


def num_max_blocks(budget: ArenaBudget, num_stock_blocks: int) -> int:
    """N_max: the most blocks the target's layers can hold, the draft away, while the
    arena's committed pages (rounded to its units as it commits them) stay within what
    stock vLLM holds with ``num_stock_blocks`` blocks and the draft's weights::

        expanded_bytes(N_max) <= num_stock_blocks * B_full + S_draft

    about ``floor((N_stock * B_full + S_draft) / B_target)`` less the rounding.
    ``num_stock_blocks``: stock vLLM's block count for this configuration (``N_orig``
    plus the blocks reserved for the rounding, ``kv_reserve_bytes``)."""
    return budget.largest_num_max_blocks(budget.stock_bytes(num_stock_blocks))


def spec_arena_pages(specs: Iterable[Any], layer_view_order: Sequence[int]) -> list[int]:
    """Per arena layer, the page bytes the rebind will make of vLLM's per-layer KV specs
    (``page_size_bytes``, ``num_heads``, ``num_states``) under a layout whose per-layer
    view ``[B, H, N, C]`` lies in ``layer_view_order`` (vLLM's ``KVCacheLayout``):
    dimensions physically before B split a layer into that many arena layers."""
    outer = tuple(layer_view_order)[: tuple(layer_view_order).index(0)]
    pages: list[int] = []
    for spec in specs:
        sizes = {1: spec.num_heads, 2: spec.num_states, 3: spec.state_content_size_bytes}
        splits = math.prod(sizes[d] for d in outer)
        pages += [spec.page_size_bytes // splits] * splits
    return pages


def kv_reserve_bytes(specs: Sequence[Any], layer_view_order: Sequence[int], unit: int) -> int:
    """KV memory to take from what vLLM sizes its blocks with, so that the arena's
    rounding to ``unit`` bytes fits in it: the largest rounding of the arena layers
    (``max_rounding_bytes``) in whole blocks (B_full: every layer's page)."""
    pages = spec_arena_pages(specs, layer_view_order)
    return reserve_bytes(max_rounding_bytes(pages, unit), sum(pages))


def rebind_kv_to_arena(
    model_runner: Any, plan: KVArenaPlan, num_slot_blocks: int | None = None
) -> KVArena:
    """Re-create the runner's KV views over a new arena on their device
    (``num_slot_blocks`` per layer, default: the current pool) and bind them; returns the
    arena, nothing committed yet (the caller commits once the old buffer is gone).

    NOTE: every layer gets ``num_slot_blocks`` slots of address space; the draft's
    layers never use slots past the stock block pool (the draft is away while the block
    pool is larger), so those slots are never committed."""
    kv_caches: list[torch.Tensor] = list(model_runner.kv_caches)
    slots = plan.num_blocks if num_slot_blocks is None else num_slot_blocks
    if slots < plan.num_blocks:
        raise ValueError(f"num_slot_blocks={slots} < the block pool's {plan.num_blocks} blocks")
    arena = build_kv_arena(kv_caches[0].device, plan.page_bytes, slots)
    context = model_runner.compilation_config.static_forward_context
    for index, view, first in zip(plan.order, plan.views, plan.first_layers, strict=True):
        old = kv_caches[index]
        new = _arena_view(arena, old, view, first, slots)
        for layer in context.values():
            if getattr(layer, "kv_cache", None) is old:
                layer.bind_kv_cache(new)
        model_runner.kv_caches[index] = new
    return arena


def _arena_view(
    arena: KVArena, old: torch.Tensor, view: ViewPages, first: int, slots: int
) -> torch.Tensor:
    """``old``'s shape (``slots`` blocks) and page strides over arena layers ``first..``."""
    size = list(old.shape)
    size[view.block_dim] = slots
    stride = list(old.stride())
    step = arena.layout.page_bytes[first] * slots
    if view.num_layers > 1:
        layer_offsets = arena.layout.layer_offsets_bytes
        step = layer_offsets[first + 1] - layer_offsets[first]
    element = old.element_size()
    for d in reversed(view.outer_dims):
        stride[d] = step // element
        step *= old.shape[d]
    typed = arena.buffer.view(old.dtype)
    offset = arena.layout.layer_offsets_bytes[first] // element
    return torch.as_strided(typed, size, stride, offset)
