"""The CUDA :class:`~nightjar_ray.memory.arena.KVArena`: CUDA virtual memory management.

One virtual address range is reserved for every layer's ``num_slot_blocks`` pages
(``cuMemAddressReserve``); each layer's slot range starts at a multiple of the device's
allocation granularity ``G`` (``cuMemGetAllocationGranularity``, 2 MiB on current GPUs),
so a chunk of ``G`` bytes never holds two layers' pages::

    reservation  [ layer 0 slots ...pad | layer 1 slots ...pad | ... ]   (G-aligned)
    chunk        [ G ][ G ][ G ] ...    mapped = committed, unmapped = no memory

``commit_blocks`` creates a physical chunk (``cuMemCreate``) for every unmapped chunk a
block touches and maps it (``cuMemMap``), then grants this device read/write access
(``cuMemSetAccess``) and zeroes each run of consecutive new chunks at once;
``release_blocks`` unmaps and releases (``cuMemUnmap``, ``cuMemRelease``) the mapped
chunks wholly inside the range, after waiting for the device to finish the work queued
on it. ``buffer`` is a PyTorch tensor over the whole reservation
(``__cuda_array_interface__``, no copy).

NOTE: the driver calls need the device's primary context, which PyTorch creates;
``cuda.bindings`` (package ``cuda-bindings``) is imported when an arena is built.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from nightjar_ray.memory.arena_layout import arena_layout, block_units, check_blocks


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise RuntimeError(
            "the CUDA KV arena needs the 'cuda-bindings' package (the 'gpu' extra)"
        ) from error
    return driver


def _check(driver: Any, result: Any, call: str) -> Any:
    """The values a driver call returned after its CUresult; ``RuntimeError`` naming
    the call and the driver's error otherwise."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(status)
        _, text = driver.cuGetErrorString(status)
        raise RuntimeError(f"{call} failed: {_text(name)} ({_text(text)})")
    return values[0] if len(values) == 1 else tuple(values)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _DeviceRange:
    """``__cuda_array_interface__`` of the reservation, for ``torch.as_tensor``."""

    def __init__(self, address: int, num_bytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (num_bytes,),
            "typestr": "|i1",
            "data": (address, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


def _allocation_prop(driver: Any, index: int) -> Any:
    prop = driver.CUmemAllocationProp()
    prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = index
    return prop


def cuda_granularity_bytes(device: torch.device) -> int:
    """G: the allocation granularity of ``device`` (the CUDA arena's commit unit)."""
    driver = _driver()
    index = torch.cuda.current_device() if device.index is None else device.index
    torch.zeros(1, device=torch.device("cuda", index))  # the primary context exists
    minimum = driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
    with torch.cuda.device(index):
        result = driver.cuMemGetAllocationGranularity(_allocation_prop(driver, index), minimum)
    return int(_check(driver, result, "cuMemGetAllocationGranularity"))


def _runs(chunks: Sequence[int]) -> list[range]:
    """Sorted chunk indices as maximal runs of consecutive ones."""
    runs: list[range] = []
    for chunk in chunks:
        if runs and runs[-1].stop == chunk:
            runs[-1] = range(runs[-1].start, chunk + 1)
        else:
            runs.append(range(chunk, chunk + 1))
    return runs


class CUDAKVArena:
    """The CUDA :class:`~nightjar_ray.memory.arena.KVArena` (module docstring)."""

    def __init__(self, device: torch.device, page_bytes: Sequence[int], num_slot_blocks: int):
        if device.type != "cuda":
            raise ValueError(f"CUDAKVArena needs a cuda device, not {device}")
        self._driver = driver = _driver()
        index = torch.cuda.current_device() if device.index is None else device.index
        self.device = torch.device("cuda", index)
        torch.cuda.init()
        torch.zeros(1, device=self.device)  # the primary context exists from here on
        self._prop = _allocation_prop(driver, index)
        self._access = driver.CUmemAccessDesc()
        self._access.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        self._access.location.id = index
        self._access.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self.granularity_bytes = cuda_granularity_bytes(self.device)
        """G: bytes of one physical chunk; each layer's slots start at a multiple of it."""
        self.layout, self.num_bytes = arena_layout(
            page_bytes, num_slot_blocks, self.granularity_bytes
        )
        self.num_slot_blocks = num_slot_blocks
        self._handles: dict[int, Any] = {}
        """Mapped chunks: chunk index (byte offset // G) -> its physical allocation."""
        with torch.cuda.device(self.device):
            reserved = self._call(
                "cuMemAddressReserve", self.num_bytes, self.granularity_bytes, 0, 0
            )
        self.address = int(reserved)
        # The indexed device: with a bare "cuda" PyTorch asks the driver which device
        # the pointer lives on, and an unmapped reservation belongs to none.
        self.buffer = torch.as_tensor(
            _DeviceRange(self.address, self.num_bytes), device=self.device
        )
        """The whole reservation as one int8 tensor; only committed chunks may be touched."""

    def _call(self, name: str, *args: Any) -> Any:
        return _check(self._driver, getattr(self._driver, name)(*args), name)

    def _ptr(self, offset: int) -> Any:
        return self._driver.CUdeviceptr(self.address + offset)

    def layer_pages(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s pages as ``[num_slot_blocks, page_bytes]`` int8 (a view)."""
        offset, page = self.layout.layer_offsets_bytes[layer], self.layout.page_bytes[layer]
        return self.buffer[offset : offset + page * self.num_slot_blocks].view(-1, page)

    def _chunks(self, layer: int, start_block: int, end_block: int, whole: bool) -> range:
        """Chunks the blocks touch (``whole``: only those wholly inside them)."""
        return block_units(self, layer, (start_block, end_block), self.granularity_bytes, whole)

    def commit_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Map a zeroed chunk under every unmapped chunk the blocks touch; returns the
        bytes newly mapped. Mapped chunks are left as they are."""
        chosen = check_blocks(self, layers, start_block, end_block)
        missing = sorted(
            {
                chunk
                for layer in chosen
                for chunk in self._chunks(layer, start_block, end_block, whole=False)
                if chunk not in self._handles
            }
        )
        with torch.cuda.device(self.device):
            for run in _runs(missing):
                self._map_run(run)
        return len(missing) * self.granularity_bytes

    def _map_run(self, run: range) -> None:
        """Map a physical chunk under each of the consecutive chunks ``run``, then grant
        access and zero the whole run at once (one driver call and one fill, not one per
        chunk); on a failure the run's chunks mapped so far are given back."""
        g = self.granularity_bytes
        mapped: list[int] = []
        try:
            for chunk in run:
                handle = self._call("cuMemCreate", g, self._prop, 0)
                try:
                    self._call("cuMemMap", self._ptr(chunk * g), g, 0, handle, 0)
                except RuntimeError:
                    self._call("cuMemRelease", handle)
                    raise
                self._handles[chunk] = handle
                mapped.append(chunk)
            span = len(run) * g
            self._call("cuMemSetAccess", self._ptr(run.start * g), span, [self._access], 1)
        except RuntimeError:
            self._unmap(mapped)
            raise
        self.buffer[run.start * g : run.stop * g].zero_()

    def release_blocks(self, layers: Iterable[int], start_block: int, end_block: int) -> int:
        """Unmap and release the mapped chunks wholly inside the blocks (after the device
        finished its queued work); returns the bytes released. Chunks shared with blocks
        outside the range stay mapped."""
        chosen = check_blocks(self, layers, start_block, end_block)
        doomed = sorted(
            {
                chunk
                for layer in chosen
                for chunk in self._chunks(layer, start_block, end_block, whole=True)
                if chunk in self._handles
            }
        )
        if doomed:
            torch.cuda.synchronize(self.device)
        self._unmap(doomed)
        return len(doomed) * self.granularity_bytes

    def _unmap(self, chunks: Iterable[int]) -> None:
        g = self.granularity_bytes
        with torch.cuda.device(self.device):
            for chunk in chunks:
                self._call("cuMemUnmap", self._ptr(chunk * g), g)
                self._call("cuMemRelease", self._handles.pop(chunk))

    def resident_bytes(self) -> int:
        """Bytes of the reservation mapped to physical memory now."""
        return len(self._handles) * self.granularity_bytes

    def close(self) -> None:
        """Unmap and release every chunk and free the reservation (idempotent); tensors
        over ``buffer`` must not be used afterwards."""
        if self.address == 0:
            return
        torch.cuda.synchronize(self.device)
        self._unmap(sorted(self._handles))
        with torch.cuda.device(self.device):
            self._call("cuMemAddressFree", self._ptr(0), self.num_bytes)
        self.address = 0
