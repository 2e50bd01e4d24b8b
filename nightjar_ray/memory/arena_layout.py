"""Where a KV arena's layers lie and which block ranges it accepts (shared by the arenas)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from nightjar_ray.memory.arena_units import layer_offsets, unit_span
from nightjar_ray.memory.kernels import PageLayout


class ArenaShape(Protocol):
    """The part of a ``KVArena`` the checks read."""

    layout: PageLayout
    num_slot_blocks: int


def arena_layout(
    page_bytes: Sequence[int], num_slot_blocks: int, unit_bytes: int
) -> tuple[PageLayout, int]:
    """Layers back to back, each starting at a multiple of the arena's commit unit
    (``arena_units``); the layout and the reservation's bytes."""
    offsets, num_bytes = layer_offsets(page_bytes, num_slot_blocks, unit_bytes)
    return PageLayout(offsets, tuple(page_bytes)), num_bytes


def block_units(
    arena: ArenaShape, layer: int, blocks: tuple[int, int], unit_bytes: int, whole: bool
) -> range:
    """The units blocks ``[start, end)`` of ``layer`` touch (``whole``: cover), by the
    rounding every arena and the accounting share (``arena_units.unit_span``)."""
    offset, page = arena.layout.layer_offsets_bytes[layer], arena.layout.page_bytes[layer]
    return unit_span(offset, page, arena.num_slot_blocks, blocks, unit_bytes, whole)


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
