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

Expansion releases the draft's weights and KV pages (``release_blocks``), commits the
region (``commit_blocks``) and only then hands ids ``N_orig .. N_max-1`` to the
scheduler; nothing is copied. Contraction moves live blocks below ``N_orig``
(``kernels``), releases the region's pages and commits the draft's pages again before
the draft returns. On CPU the reservation is an anonymous ``mmap`` with
``MAP_NORESERVE``; on GPU the same layout maps onto CUDA virtual memory
(``cuda_arena.CUDAKVArena``). ``build_kv_arena`` picks the arena for a device.

NOTE: Linux only (``mmap`` flags, ``madvise``, ``mincore``).
"""

from __future__ import annotations

import ctypes
import errno
import importlib.util
import mmap
from collections.abc import Iterable, Sequence
from typing import Protocol

import torch

from nightjar_ray.memory.arena_layout import arena_layout, block_units, check_blocks
from nightjar_ray.memory.arena_units import round_up
from nightjar_ray.memory.elastic_mode import KV_ARENA_DEVICE_TYPES as KV_ARENA_DEVICE_TYPES
from nightjar_ray.memory.kernels import PageLayout

# KV_ARENA_DEVICE_TYPES is re-exported: defined where torch-free code reads it.

MAP_NORESERVE = 0x4000
"""Linux's flag (Python's ``mmap`` module does not export it before 3.13)."""

MADV_POPULATE_WRITE = 23
"""Linux >= 5.14: back a range with writable pages without changing their contents."""


class KVArena(Protocol):
    """One device's KV pages for every layer, reserved for ``num_slot_blocks`` blocks and
    backed by memory only where committed (module docstring).

    Block ``b`` of layer ``l`` is ``layer_pages(l)[b]``, at byte offset
    ``layout.layer_offsets_bytes[l] + b * layout.page_bytes[l]`` of ``buffer``. Layers
    never overlap. Only committed blocks may be read or written on a GPU (elsewhere the
    address range is unmapped). Committing never changes a committed block's contents;
    memory newly committed reads as zeros. Memory is committed and released in units of
    the device's page (OS page, CUDA allocation granularity): ``commit_blocks`` backs every
    unit a block touches, ``release_blocks`` gives back only units wholly inside the range.
    """

    layout: PageLayout
    """Per layer: byte offset of its first page in ``buffer`` and bytes per page."""
    num_slot_blocks: int
    """N_max: blocks reserved per layer (the largest block pool the arena can back)."""
    device: torch.device
    """Where the memory is."""
    buffer: torch.Tensor
    """The whole reservation as one 1-D int8 tensor on ``device`` (a view, no copy)."""

    def layer_pages(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s pages as ``[num_slot_blocks, page_bytes]`` int8 (a view)."""

    def commit_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Back blocks ``[start_block, end_block)`` of ``layers`` with memory; returns the
        bytes newly committed (0 when all were committed already: idempotent)."""

    def release_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Give the memory behind blocks ``[start_block, end_block)`` of ``layers`` back
        (their contents are lost); returns the bytes released."""

    def resident_bytes(self) -> int:
        """Bytes of the reservation backed by memory now."""

    def close(self) -> None:
        """Free the reservation (idempotent); tensors over ``buffer`` are invalid after."""


class CPUKVArena:
    """The CPU :class:`KVArena`: an anonymous ``MAP_NORESERVE`` mapping, committed with
    ``madvise(MADV_POPULATE_WRITE)`` (a no-op before Linux 5.14: pages commit on first
    write) and released with ``madvise(MADV_DONTNEED)``, in OS pages; each layer's
    slots start on an OS page (``memory/arena_units.py``)."""

    def __init__(self, page_bytes: Sequence[int], num_slot_blocks: int) -> None:
        self.layout, self.num_bytes = arena_layout(page_bytes, num_slot_blocks, mmap.PAGESIZE)
        self.num_slot_blocks = num_slot_blocks
        self.device = torch.device("cpu")
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE
        self._map = mmap.mmap(-1, self.num_bytes, flags=flags)
        self._can_populate = True
        self.buffer = torch.frombuffer(self._map, dtype=torch.int8)
        """The whole reservation as one int8 tensor (no page is touched by creating it)."""

    @property
    def address(self) -> int:
        return int(self.buffer.data_ptr())

    def layer_pages(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s pages as ``[num_slot_blocks, page_bytes]`` int8 (a view)."""
        offset, page = self.layout.layer_offsets_bytes[layer], self.layout.page_bytes[layer]
        return self.buffer[offset : offset + page * self.num_slot_blocks].view(-1, page)

    def commit_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Populate every OS page the blocks touch (contents unchanged); returns the bytes
        newly resident (``mincore``, so a page only read before counts as resident)."""
        committed = 0
        for layer in check_blocks(self, layers, start_block, end_block):
            units = block_units(self, layer, (start_block, end_block), mmap.PAGESIZE, False)
            if not units:
                continue
            lo, length = units.start * mmap.PAGESIZE, len(units) * mmap.PAGESIZE
            before = resident_bytes(self.address + lo, length)
            self._populate(lo, length)
            committed += resident_bytes(self.address + lo, length) - before
        return committed

    def _populate(self, start: int, length: int) -> None:
        if not self._can_populate:
            return
        try:
            self._map.madvise(MADV_POPULATE_WRITE, start, length)
        except OSError as error:
            if error.errno != errno.EINVAL:  # EINVAL: a kernel older than 5.14
                raise
            self._can_populate = False

    def release_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Give the memory of blocks ``[start_block, end_block)`` of ``layers`` back to the
        OS (their contents read as zeros afterwards); returns the bytes of whole OS pages
        released. Partial OS pages at the edges stay committed."""
        released = 0
        for layer in check_blocks(self, layers, start_block, end_block):
            units = block_units(self, layer, (start_block, end_block), mmap.PAGESIZE, True)
            if units:
                length = len(units) * mmap.PAGESIZE
                self._map.madvise(mmap.MADV_DONTNEED, units.start * mmap.PAGESIZE, length)
                released += length
        return released

    def resident_bytes(self) -> int:
        """Bytes of the reservation backed by memory now (``mincore``)."""
        return resident_bytes(self.address, self.num_bytes)

    def close(self) -> None:
        """Give every page back; the address range itself goes with the last tensor
        over ``buffer`` (a mapping with exported views cannot be unmapped)."""
        self._map.madvise(mmap.MADV_DONTNEED, 0, self.num_bytes)


def build_kv_arena(
    device: torch.device, page_bytes: Sequence[int], num_slot_blocks: int
) -> KVArena:
    """The arena for ``device`` (one of :data:`KV_ARENA_DEVICE_TYPES`), nothing committed."""
    if device.type == "cpu":
        return CPUKVArena(page_bytes, num_slot_blocks)
    if device.type == "cuda":
        from nightjar_ray.memory.cuda_arena import CUDAKVArena

        return CUDAKVArena(device, page_bytes, num_slot_blocks)
    raise ValueError(
        f"no KV arena for device type {device.type!r}; arenas exist for {KV_ARENA_DEVICE_TYPES}"
    )


def arena_unit_bytes(device: torch.device) -> int:
    """The commit unit of ``device``'s arena: the OS page on CPU, the allocation
    granularity ``G`` on CUDA (needs ``cuda-bindings``)."""
    if device.type == "cpu":
        return mmap.PAGESIZE
    if device.type == "cuda":
        from nightjar_ray.memory.cuda_arena import cuda_granularity_bytes

        return cuda_granularity_bytes(device)
    raise ValueError(
        f"no KV arena for device type {device.type!r}; arenas exist for {KV_ARENA_DEVICE_TYPES}"
    )


def resident_bytes(address: int, num_bytes: int) -> int:
    """Resident bytes of the page-aligned range ``[address, address + num_bytes)``."""
    if address % mmap.PAGESIZE:
        raise ValueError("address must be page-aligned")
    num_pages = round_up(num_bytes, mmap.PAGESIZE) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * num_pages)()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(num_bytes), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(v & 1 for v in bytes(vec)) * mmap.PAGESIZE


def arena_runtime_blocker(device_type: str) -> str | None:
    """Why no arena can be built in this process for ``device_type`` although the type has
    one (``KV_ARENA_DEVICE_TYPES``): a missing binding or a platform the arena does not
    drive; None when it can."""
    if device_type != "cuda":
        return None
    if torch.version.hip is not None:
        return "the CUDA arena drives CUDA's virtual memory API, not ROCm's"
    try:
        found = importlib.util.find_spec("cuda.bindings") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        return "cuda-bindings is not installed (pip install 'nightjar-ray[gpu]')"
    return None
