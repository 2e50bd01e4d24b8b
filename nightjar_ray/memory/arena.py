r"""The KV arena: one reserved address range per device, [target KV | region R] per layer.

vLLM lays its KV cache out layers outermost in one buffer, so a layer's pages cannot
grow without moving every later layer. The arena reserves each layer's pages for the
largest pool up front (``num_slot_blocks``) and commits memory only where blocks are
used; reserving costs address space, not memory::

    layer 0 (target) [ 0 | 1 | ... | N_orig-1 | N_orig ... N_max-1 ]   <- region R
    layer 1 (target) [ 0 | 1 | ... | N_orig-1 | N_orig ... N_max-1 ]
      ...
    layer L (draft)  [ 0 | 1 | ... | N_orig-1 | (never used)        ]
                       \__ committed while used __/ \__ committed only while the
                                                      draft is away (expanded) __/

Expansion hands ids ``N_orig .. N_max-1`` to the scheduler after the draft's weights and
its KV pages were released (``release_blocks``); nothing is copied. Contraction moves live
blocks below ``N_orig`` (``kernels``) and releases the region's pages before the draft
returns. On CPU the reservation is an anonymous ``mmap`` with ``MAP_NORESERVE`` and the
release is ``madvise(MADV_DONTNEED)``; on GPU the same layout maps onto CUDA virtual
memory (``cuMemAddressReserve`` / ``cuMemMap``, as kvcached does).

NOTE: Linux only (``mmap`` flags, ``madvise``, ``mincore``).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Iterable, Sequence
from typing import Protocol

import torch

from nightjar_ray.memory.elastic_mode import KV_ARENA_DEVICE_TYPES as KV_ARENA_DEVICE_TYPES

# (re-exported: device types with a KVArena, defined where torch-free code reads them)
from nightjar_ray.memory.kernels import PageLayout

MAP_NORESERVE = 0x4000
"""Linux's flag (Python's ``mmap`` module does not export it before 3.13)."""


class KVArena(Protocol):
    """One device's KV pages for every layer, reserved for ``num_slot_blocks`` blocks and
    backed by memory only where used (module docstring). Block ``b`` of layer ``l`` is
    ``layer_pages(l)[b]``; a released block reads as zeros once written again."""

    layout: PageLayout
    """Per layer: byte offset of its first page and bytes per page."""
    num_slot_blocks: int
    """N_max: blocks reserved per layer (the largest block pool the arena can back)."""

    def layer_pages(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s pages as ``[num_slot_blocks, page_bytes]`` int8 (a view)."""

    def release_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Give the memory behind blocks ``[start_block, end_block)`` of ``layers`` back;
        returns the bytes released."""

    def resident_bytes(self) -> int:
        """Bytes of the reservation backed by memory now."""


class CPUKVArena:
    """The CPU :class:`KVArena`: an anonymous ``MAP_NORESERVE`` mapping, released with
    ``madvise(MADV_DONTNEED)``."""

    def __init__(self, page_bytes: Sequence[int], num_slot_blocks: int) -> None:
        if num_slot_blocks < 1 or not page_bytes or min(page_bytes) <= 0:
            raise ValueError("an arena needs >= 1 layer page of > 0 bytes and >= 1 block")
        offsets, offset = [], 0
        for page in page_bytes:
            offsets.append(offset)
            offset += page * num_slot_blocks
        self.layout = PageLayout(tuple(offsets), tuple(page_bytes))
        self.num_slot_blocks = num_slot_blocks
        self.num_bytes = offset
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE
        self._map = mmap.mmap(-1, self.num_bytes, flags=flags)
        self.buffer = torch.frombuffer(self._map, dtype=torch.int8)
        """The whole reservation as one int8 tensor (no page is touched by creating it)."""

    @property
    def address(self) -> int:
        return int(self.buffer.data_ptr())

    def layer_pages(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s pages as ``[num_slot_blocks, page_bytes]`` int8 (a view)."""
        offset, page = self.layout.layer_offsets_bytes[layer], self.layout.page_bytes[layer]
        return self.buffer[offset : offset + page * self.num_slot_blocks].view(-1, page)

    def release_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Give the memory of blocks ``[start_block, end_block)`` of ``layers`` back to the
        OS (their contents read as zeros afterwards); returns the bytes of whole OS pages
        released. Partial OS pages at the edges stay committed."""
        if not 0 <= start_block <= end_block <= self.num_slot_blocks:
            raise ValueError(f"block range [{start_block}, {end_block}) outside the arena")
        released = 0
        for layer in layers:
            offset, page = self.layout.layer_offsets_bytes[layer], self.layout.page_bytes[layer]
            lo = _round_up(offset + start_block * page, mmap.PAGESIZE)
            hi = _round_down(offset + end_block * page, mmap.PAGESIZE)
            if hi > lo:
                self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                released += hi - lo
        return released

    def resident_bytes(self) -> int:
        """Bytes of the reservation backed by memory now (``mincore``)."""
        return resident_bytes(self.address, self.num_bytes)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _round_down(value: int, step: int) -> int:
    return value // step * step


def resident_bytes(address: int, num_bytes: int) -> int:
    """Resident bytes of the page-aligned range ``[address, address + num_bytes)``."""
    if address % mmap.PAGESIZE:
        raise ValueError("address must be page-aligned")
    num_pages = _round_up(num_bytes, mmap.PAGESIZE) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * num_pages)()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(num_bytes), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(v & 1 for v in bytes(vec)) * mmap.PAGESIZE
