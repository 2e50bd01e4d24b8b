"""The KVArena contract, run against every arena this machine has.

CPU always; CUDA when PyTorch sees a GPU and ``cuda.bindings`` imports (skipped, with
the reason, otherwise). Page sizes are chosen so that blocks span several of the
device's commit units (OS pages, CUDA allocation granularity) and so that some units
hold the end of one block and the start of the next.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest
import torch

from nightjar_ray.memory.arena import (
    KV_ARENA_DEVICE_TYPES,
    KVArena,
    arena_runtime_blocker,
    arena_unit_bytes,
    build_kv_arena,
)
from nightjar_ray.memory.arena_budget import ArenaBudget

NUM_SLOT_BLOCKS = 16


def _cuda_missing() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch"
    if (
        importlib.util.find_spec("cuda") is None
        or importlib.util.find_spec("cuda.bindings") is None
    ):
        return "cuda-bindings is not installed"
    return None


def _unit_bytes(device: torch.device) -> int:
    """The device's commit unit: the OS page, or the CUDA allocation granularity."""
    if device.type == "cpu":
        import mmap

        return mmap.PAGESIZE
    probe = build_kv_arena(device, [1], 1)
    try:
        return int(probe.granularity_bytes)  # type: ignore[attr-defined]
    finally:
        probe.close()


@pytest.fixture(params=KV_ARENA_DEVICE_TYPES)
def device(request: pytest.FixtureRequest) -> torch.device:
    if request.param == "cuda" and (reason := _cuda_missing()) is not None:
        pytest.skip(reason)
    return torch.device(request.param)


@pytest.fixture
def arena(device: torch.device) -> Iterator[KVArena]:
    unit = _unit_bytes(device)
    # layer 0: 2 units per block; layer 1: 1.5 units (edge units shared by two blocks)
    made = build_kv_arena(device, [2 * unit, 3 * unit // 2], NUM_SLOT_BLOCKS)
    yield made
    made.close()


def _pattern(arena: KVArena, layer: int, block: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + layer * 100 + block)
    page = arena.layout.page_bytes[layer]
    return torch.randint(-128, 128, (page,), generator=gen, dtype=torch.int8).to(arena.device)


def _write(arena: KVArena, layer: int, blocks: range, seed: int = 0) -> None:
    for block in blocks:
        arena.layer_pages(layer)[block] = _pattern(arena, layer, block, seed)


def _holds(arena: KVArena, layer: int, blocks: range, seed: int = 0) -> bool:
    return all(
        torch.equal(arena.layer_pages(layer)[b], _pattern(arena, layer, b, seed)) for b in blocks
    )


def test_layout_views_and_device(arena: KVArena, device: torch.device) -> None:
    layout = arena.layout
    assert arena.device.type == device.type
    assert arena.buffer.device.type == device.type and arena.buffer.dtype == torch.int8
    assert arena.num_slot_blocks == NUM_SLOT_BLOCKS
    for layer, (offset, page) in enumerate(
        zip(layout.layer_offsets_bytes, layout.page_bytes, strict=True)
    ):
        pages = arena.layer_pages(layer)
        assert pages.shape == (NUM_SLOT_BLOCKS, page)
        assert pages.data_ptr() == arena.buffer.data_ptr() + offset
    end_of_layer_0 = layout.layer_offsets_bytes[0] + NUM_SLOT_BLOCKS * layout.page_bytes[0]
    assert layout.layer_offsets_bytes[1] >= end_of_layer_0  # layers do not overlap
    assert (
        arena.buffer.numel()
        >= layout.layer_offsets_bytes[1] + NUM_SLOT_BLOCKS * (layout.page_bytes[1])
    )
    assert arena.resident_bytes() == 0


def test_commit_then_write_and_read_back(arena: KVArena) -> None:
    committed = arena.commit_blocks([0, 1], 0, 4)
    assert committed == 4 * sum(arena.layout.page_bytes)  # blocks end on unit bounds
    assert arena.resident_bytes() == committed
    assert torch.count_nonzero(arena.layer_pages(0)[:4]) == 0  # new memory reads zero
    _write(arena, 0, range(4))
    _write(arena, 1, range(4))
    assert _holds(arena, 0, range(4)) and _holds(arena, 1, range(4))


def test_commit_is_idempotent_and_keeps_contents(arena: KVArena) -> None:
    arena.commit_blocks([0, 1], 0, 6)
    _write(arena, 0, range(6))
    _write(arena, 1, range(6))
    resident = arena.resident_bytes()
    assert arena.commit_blocks([0, 1], 0, 6) == 0
    assert arena.commit_blocks([1], 2, 5) == 0
    assert arena.resident_bytes() == resident
    assert _holds(arena, 0, range(6)) and _holds(arena, 1, range(6))


def test_release_reduces_resident_bytes_and_reads_zero_after_recommit(arena: KVArena) -> None:
    arena.commit_blocks([0, 1], 0, 8)
    _write(arena, 0, range(8))
    _write(arena, 1, range(8))
    before = arena.resident_bytes()
    released = arena.release_blocks([0], 4, 8)
    assert released == 4 * arena.layout.page_bytes[0]  # layer 0's blocks are whole units
    assert arena.resident_bytes() == before - released
    assert arena.commit_blocks([0], 4, 8) == released
    assert torch.count_nonzero(arena.layer_pages(0)[4:8]) == 0
    assert _holds(arena, 0, range(4)) and _holds(arena, 1, range(8))


def test_release_keeps_units_shared_with_blocks_outside(arena: KVArena) -> None:
    """Layer 1's blocks are 1.5 units: releasing block 1 alone frees no whole unit that
    block 0 or 2 also uses, and blocks 0 and 2 keep their contents."""
    arena.commit_blocks([1], 0, 4)
    _write(arena, 1, range(4))
    released = arena.release_blocks([1], 1, 2)
    assert released == arena.layout.page_bytes[1] * 2 // 3  # the one unit only it uses
    assert _holds(arena, 1, range(0, 1)) and _holds(arena, 1, range(2, 4))


def test_tensors_written_before_a_remap_read_back_bit_identical(arena: KVArena) -> None:
    """Releasing and committing other blocks (an expansion/contraction cycle) leaves the
    contents of the blocks in use, and of typed views over them, unchanged."""
    arena.commit_blocks([0, 1], 0, 6)
    _write(arena, 0, range(6), seed=3)
    _write(arena, 1, range(6), seed=3)
    typed = arena.layer_pages(0)[:6].view(torch.bfloat16)
    snapshot = typed.clone()
    for _ in range(2):
        arena.commit_blocks([0, 1], 6, NUM_SLOT_BLOCKS)
        _write(arena, 0, range(6, NUM_SLOT_BLOCKS), seed=4)
        arena.release_blocks([0, 1], 6, NUM_SLOT_BLOCKS)
    assert torch.equal(typed.view(torch.int8), snapshot.view(torch.int8))
    assert _holds(arena, 0, range(6), seed=3) and _holds(arena, 1, range(6), seed=3)


def test_out_of_range_blocks_and_layers_are_errors(arena: KVArena) -> None:
    with pytest.raises(ValueError, match=r"block range \[2, 17\) outside the arena's 16 blocks"):
        arena.commit_blocks([0], 2, NUM_SLOT_BLOCKS + 1)
    with pytest.raises(ValueError, match=r"block range \[-1, 2\) outside"):
        arena.release_blocks([0], -1, 2)
    with pytest.raises(ValueError, match=r"block range \[5, 4\) outside"):
        arena.commit_blocks([0], 5, 4)
    with pytest.raises(ValueError, match="layer 2 outside the arena's 2 layers"):
        arena.commit_blocks([0, 2], 0, 1)
    assert arena.resident_bytes() == 0  # a refused call commits nothing


def test_build_kv_arena_refuses_devices_without_an_arena() -> None:
    with pytest.raises(ValueError, match="no KV arena for device type 'meta'"):
        build_kv_arena(torch.device("meta"), [4096], 4)
    with pytest.raises(ValueError, match=">= 1 layer page of > 0 bytes"):
        build_kv_arena(torch.device("cpu"), [0], 4)


def test_resident_bytes_are_what_the_budget_predicts(device: torch.device) -> None:
    """The arena's own count after the start's commit of ``[0, N_orig)`` of every layer
    and after an expansion (the draft layer released, the target's region committed) is
    what ``arena_budget`` predicts, and the expansion stays within stock (N_orig blocks
    of every layer plus the draft's weights)."""
    unit = arena_unit_bytes(device)
    assert unit == _unit_bytes(device)
    pages, n_orig = (2 * unit, 3 * unit // 2, unit // 4 + 64), 5  # the last: the draft's
    budget = ArenaBudget(pages, (2,), n_orig, unit, draft_bytes=3 * unit)
    n_max = budget.largest_num_max_blocks(budget.stock_bytes(n_orig))
    arena = build_kv_arena(device, pages, n_max)
    try:
        arena.commit_blocks(range(3), 0, n_orig)
        assert arena.resident_bytes() == budget.baseline_bytes(n_max)
        arena.release_blocks([2], 0, n_max)
        arena.commit_blocks([0, 1], n_orig, n_max)
        assert arena.resident_bytes() == budget.expanded_bytes(n_max)
        assert budget.expanded_bytes(n_max) <= budget.stock_bytes(n_orig)
        assert n_max > n_orig
    finally:
        arena.close()


def test_the_runtime_blocker_names_what_stops_a_cuda_arena_in_this_process() -> None:
    assert arena_runtime_blocker("cpu") is None
    reason = arena_runtime_blocker("cuda")
    try:
        import cuda.bindings  # noqa: F401

        has_bindings = True
    except ImportError:
        has_bindings = False
    if torch.version.hip is not None:
        assert reason is not None and "ROCm" in reason
    elif has_bindings:
        assert reason is None
    else:
        assert reason is not None and "nightjar-ray[gpu]" in reason
