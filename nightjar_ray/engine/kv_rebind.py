"""Move a worker's KV cache into a :class:`~nightjar_ray.memory.arena.KVArena`.

vLLM allocates the KV cache as one committed buffer. After warm-up (no request holds a
block yet) the worker re-creates every layer's view over an arena with the same page
sizes, in the same layer order, and binds the new views to the attention layers and the
runner; the old buffer is dropped. From then on, pages of blocks the pool gives back can
be released to the OS (``KVArena.release_blocks``) and come back, zeroed, when written.

NOTE: only the layout vLLM's CPU backend uses is accepted: per layer a contiguous
``[num_blocks, ...]`` view, blocks outermost, all views over one buffer.
"""

from __future__ import annotations

from typing import Any

import torch

from nightjar_ray.memory.arena import KVArena


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


def rebind_kv_to_arena(
    model_runner: Any, num_slot_blocks: int | None = None
) -> tuple[KVArena, tuple[int, ...]]:
    """Re-create the runner's KV views over a new arena (``num_slot_blocks`` per layer,
    default: the current pool) and bind them; returns the arena and the arena positions
    of the draft's layers."""
    kv_caches: list[torch.Tensor] = list(model_runner.kv_caches)
    num_blocks = _check_layout(kv_caches)
    slots = num_blocks if num_slot_blocks is None else num_slot_blocks
    if slots < num_blocks:
        raise ValueError(f"num_slot_blocks={slots} < the pool's {num_blocks} blocks")
    order = sorted(range(len(kv_caches)), key=lambda i: kv_caches[i].storage_offset())
    arena = KVArena([kv_caches[i][0].nbytes for i in order], slots)
    context = model_runner.compilation_config.static_forward_context
    draft_positions = []
    for position, index in enumerate(order):
        old = kv_caches[index]
        view = arena.layer_pages(position).view(old.dtype).view(slots, *old.shape[1:])
        for name, layer in context.items():
            if getattr(layer, "kv_cache", None) is old:
                layer.bind_kv_cache(view)
                if name.startswith(DRAFT_LAYER_PREFIX):
                    draft_positions.append(position)
        model_runner.kv_caches[index] = view
    return arena, tuple(sorted(set(draft_positions)))


def release_region(arena: KVArena, start_block: int, end_block: int) -> int:
    """Give the pages of blocks ``[start_block, end_block)`` of every layer back."""
    return arena.release_blocks(range(len(arena.layout.page_bytes)), start_block, end_block)
