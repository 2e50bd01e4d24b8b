"""Which commit units a KV arena's blocks occupy (pure Python; shared by every arena).

An arena commits and releases memory in whole units of its device (the OS page on CPU,
the CUDA allocation granularity ``G``). Each layer's slots start at a multiple of the
unit and its slot range is padded to the next one, so a unit never holds two layers'
pages::

    layer l  [ offset (unit multiple) | slot 0 | slot 1 | ... | slot S-1 | pad ]
    unit     [   u   ][   u   ][   u   ] ...                        (index = byte // u)

Blocks ``[start, end)`` of a layer *touch* the units from the one holding their first
byte to the one holding their last; they *cover* only the units wholly inside them. A
range reaching the last slot also covers the layer's padding (no other layer uses it).
"""

from __future__ import annotations

from collections.abc import Sequence


def round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def round_down(value: int, step: int) -> int:
    return value // step * step


def layer_offsets(
    page_bytes: Sequence[int], num_slot_blocks: int, align_bytes: int
) -> tuple[tuple[int, ...], int]:
    """Byte offset of each layer's first slot (layers back to back, each starting at a
    multiple of ``align_bytes``) and the reservation's bytes (a multiple of it)."""
    if num_slot_blocks < 1 or not page_bytes or min(page_bytes) <= 0:
        raise ValueError("an arena needs >= 1 layer page of > 0 bytes and >= 1 block")
    if align_bytes < 1:
        raise ValueError(f"align_bytes must be >= 1, got {align_bytes}")
    offsets, offset = [], 0
    for page in page_bytes:
        offsets.append(offset)
        offset += round_up(page * num_slot_blocks, align_bytes)
    return tuple(offsets), offset


def unit_span(
    offset_bytes: int,
    page_bytes: int,
    num_slot_blocks: int,
    blocks: tuple[int, int],
    unit_bytes: int,
    whole: bool,
) -> range:
    """Indices of the units blocks ``[start, end)`` of one layer touch (``whole``: only
    those they cover), for a layer at ``offset_bytes`` (a multiple of ``unit_bytes``)
    with ``num_slot_blocks`` slots of ``page_bytes``."""
    if offset_bytes % unit_bytes:
        raise ValueError(f"layer offset {offset_bytes} is not a multiple of {unit_bytes}")
    start, end = blocks
    lo, hi = offset_bytes + start * page_bytes, offset_bytes + end * page_bytes
    if hi <= lo:
        return range(0)
    if end == num_slot_blocks:
        hi = round_up(hi, unit_bytes)  # the layer's padding
    if whole:
        return range(round_up(lo, unit_bytes) // unit_bytes, hi // unit_bytes)
    return range(lo // unit_bytes, round_up(hi, unit_bytes) // unit_bytes)
