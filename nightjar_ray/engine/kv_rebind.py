"""Move a worker's KV cache into a :class:`~nightjar_ray.memory.arena.KVArena`.

vLLM allocates the KV cache as one committed buffer. After warm-up (no request holds a
block yet) the worker re-creates every layer's view over an arena with the same page
sizes, in the same layer order, and binds the new views to the attention layers and the
runner; the old buffer is dropped. From then on, pages of blocks the block pool gives back can
be released to the OS (``KVArena.release_blocks``) and come back, zeroed, when written.

NOTE: only the layout vLLM's CPU backend uses is accepted: per layer a contiguous
``[num_blocks, ...]`` view, blocks outermost, all views over one buffer.
"""

from __future__ import annotations

from typing import Any

import torch

from nightjar_ray.memory.arena import CPUKVArena, KVArena


def _check_layout(kv_caches: list[torch.Tensor]) -> int:
    num_blocks = int(kv_caches[0].shape[0])
    storage = kv_caches[0].untyped_storage().data_ptr()
    for kv in kv_caches:
        if not kv.is_contiguous() or int(kv.shape[0]) != num_blocks:
            raise ValueError("elastic memory needs contiguous [num_blocks, ...] KV views")
        if kv.untyped_storage().data_ptr() != storage:
            raise ValueError("elastic memory needs one KV buffer")
    return num_blocks


DRAFT_LAYER_PREFIX = "draft_model."
"""vLLM registers the draft model's attention layers under this prefix."""


def kv_layer_order(model_runner: Any) -> tuple[list[int], tuple[int, ...]]:
    """The runner's KV views in buffer order, and the positions of the draft's layers."""
    kv_caches: list[torch.Tensor] = list(model_runner.kv_caches)
    order = sorted(range(len(kv_caches)), key=lambda i: kv_caches[i].storage_offset())
    context = model_runner.compilation_config.static_forward_context
    draft = {
        id(layer.kv_cache)
        for name, layer in context.items()
        if name.startswith(DRAFT_LAYER_PREFIX) and getattr(layer, "kv_cache", None) is not None
    }
    positions = tuple(p for p, i in enumerate(order) if id(kv_caches[i]) in draft)
    return order, positions


def num_max_blocks(model_runner: Any, draft_bytes: int) -> int:
    """N_max: blocks the target's layers can hold in the memory stock vLLM gave this
    rank's KV cache and draft weights together::

        N_max = floor((N_orig * B_full + S_draft) / B_target)

    B_full: bytes of one block over every layer (the draft's included), B_target: over
    the target's layers only, S_draft: the draft-only weight bytes an offload frees,
    N_orig: vLLM's block count (the null block included). With the draft away the block pool
    may hold N_max blocks and the committed bytes stay within stock."""
    kv_caches: list[torch.Tensor] = list(model_runner.kv_caches)
    num_blocks = _check_layout(kv_caches)
    order, draft_positions = kv_layer_order(model_runner)
    pages = [int(kv_caches[i][0].nbytes) for i in order]
    full = sum(pages)
    target = full - sum(pages[p] for p in draft_positions)
    if target <= 0 or target == full:
        raise ValueError("elastic memory needs KV layers of both the target and the draft")
    return (num_blocks * full + draft_bytes) // target


def rebind_kv_to_arena(
    model_runner: Any, num_slot_blocks: int | None = None
) -> tuple[KVArena, tuple[int, ...]]:
    """Re-create the runner's KV views over a new arena (``num_slot_blocks`` per layer,
    default: the current pool) and bind them; returns the arena and the arena positions
    of the draft's layers.

    NOTE: every layer gets ``num_slot_blocks`` slots of address space; the draft's
    layers never use slots past the stock block pool (the draft is away while the block pool is
    larger), so those slots are never committed."""
    kv_caches: list[torch.Tensor] = list(model_runner.kv_caches)
    num_blocks = _check_layout(kv_caches)
    slots = num_blocks if num_slot_blocks is None else num_slot_blocks
    if slots < num_blocks:
        raise ValueError(f"num_slot_blocks={slots} < the block pool's {num_blocks} blocks")
    if kv_caches[0].device.type != "cpu":
        raise ValueError(
            "elastic_memory needs the KV arena, built for the CPU only so far "
            "(GPU: CUDA virtual memory, docs/memory.md)"
        )
    order, draft_positions = kv_layer_order(model_runner)
    arena = CPUKVArena([kv_caches[i][0].nbytes for i in order], slots)
    context = model_runner.compilation_config.static_forward_context
    for position, index in enumerate(order):
        old = kv_caches[index]
        view = arena.layer_pages(position).view(old.dtype).view(slots, *old.shape[1:])
        for layer in context.values():
            if getattr(layer, "kv_cache", None) is old:
                layer.bind_kv_cache(view)
        model_runner.kv_caches[index] = view
    return arena, draft_positions
