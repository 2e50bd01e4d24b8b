"""Where a KV arena's layers lie and which block ranges it accepts (shared by the arenas)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from nightjar_ray.memory.kernels import PageLayout


class ArenaShape(Protocol):
    """The part of a ``KVArena`` the checks read."""

    layout: PageLayout
    num_slot_blocks: int


def arena_layout(
    page_bytes: Sequence[int], num_slot_blocks: int, align_bytes: int = 1
) -> tuple[PageLayout, int]:
    """Layers back to back, each starting at a multiple of ``align_bytes``; the layout
    and the reservation's bytes."""
    if num_slot_blocks < 1 or not page_bytes or min(page_bytes) <= 0:
        raise ValueError("an arena needs >= 1 layer page of > 0 bytes and >= 1 block")
    offsets, offset = [], 0
    for page in page_bytes:
        offsets.append(offset)
        offset += round_up(page * num_slot_blocks, align_bytes)
    return PageLayout(tuple(offsets), tuple(page_bytes)), offset


def check_blocks(
    arena: ArenaShape, layers: Iterable[int], start_block: int, end_block: int
) -> list[int]:
    """``layers`` as a list; ``ValueError`` unless every layer and the block range
    ``[start_block, end_block)`` lie inside the arena."""
    if not 0 <= start_block <= end_block <= arena.num_slot_blocks:
        raise ValueError(
            f"block range [{start_block}, {end_block}) outside the arena's "
            f"{arena.num_slot_blocks} blocks"
        )
    chosen, num_layers = list(layers), len(arena.layout.page_bytes)
    for layer in chosen:
        if not 0 <= layer < num_layers:
            raise ValueError(f"layer {layer} outside the arena's {num_layers} layers")
    return chosen


def round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def round_down(value: int, step: int) -> int:
    return value // step * step
