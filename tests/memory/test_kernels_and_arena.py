"""Block movers (PyTorch, and Triton under TRITON_INTERPRET) and the reserved KV arena."""

import os
import subprocess
import sys

import pytest
import torch

from nightjar_ray.memory.arena import CPUKVArena, KVArena
from nightjar_ray.memory.kernels import (
    PageLayout,
    TritonBlockMover,
    build_block_mover,
    move_blocks_torch,
)

PAGES = (4096, 4096, 2048)  # two target layers, one smaller draft layer
MOVES = {40: 3, 41: 7, 63: 0}


def _filled_arena() -> KVArena:
    arena = CPUKVArena(PAGES, 64)
    gen = torch.Generator().manual_seed(0)
    arena.buffer.copy_(torch.randint(-128, 127, (arena.num_bytes,), generator=gen).to(torch.int8))
    return arena


def _expected(arena: KVArena) -> torch.Tensor:
    want = arena.buffer.clone()
    for layer in range(len(PAGES)):
        pages = arena.layer_pages(layer)
        offset, page = arena.layout.layer_offsets_bytes[layer], PAGES[layer]
        for src, dst in MOVES.items():
            want[offset + dst * page : offset + (dst + 1) * page] = pages[src]
    return want


def test_torch_mover_copies_every_layer_page_and_nothing_else() -> None:
    arena = _filled_arena()
    want = _expected(arena)
    move_blocks_torch(arena.layout, arena.buffer, MOVES)
    assert torch.equal(arena.buffer, want)


TRITON_SCRIPT = """
import torch
from nightjar_ray.memory.kernels import PageLayout, build_block_mover, move_blocks_torch
layout = PageLayout((0, 8192, 16384), (128, 128, 64))
gen = torch.Generator().manual_seed(1)
buf = torch.randint(-128, 127, (16384 + 64 * 64,), generator=gen).to(torch.int8)
ref = buf.clone()
move_blocks_torch(layout, ref, {40: 3, 41: 7, 63: 0})
build_block_mover("triton")(layout, buf, {40: 3, 41: 7, 63: 0})
assert torch.equal(buf, ref)
odd = PageLayout((0, 300), (5, 3))  # not 8-byte aligned: byte copies
buf2 = torch.randint(-128, 127, (600,), generator=gen).to(torch.int8)
ref2 = buf2.clone()
move_blocks_torch(odd, ref2, {50: 1})
build_block_mover("triton")(odd, buf2, {50: 1})
assert torch.equal(buf2, ref2)
print("ok")
"""


def test_triton_kernel_matches_the_torch_mover_under_the_interpreter() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", TRITON_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_unknown_mover_and_bad_layouts_are_errors() -> None:
    with pytest.raises(ValueError, match="torch"):
        build_block_mover("cuda-magic")
    with pytest.raises(ValueError, match="page sizes must be > 0"):
        PageLayout((0,), (0,))
    with pytest.raises(ValueError, match="contiguous 1-D int8"):
        move_blocks_torch(PageLayout((0,), (8,)), torch.zeros(8, dtype=torch.float32), {1: 0})
    with pytest.raises(ValueError, match="tile_words must be a power of two"):
        TritonBlockMover(tile_words=3)
    with pytest.raises(ValueError, match="num_warps must be a power of two"):
        TritonBlockMover(num_warps=6)


def test_arena_reservation_costs_nothing_until_pages_are_written() -> None:
    arena = CPUKVArena((1 << 18,) * 4, 256)  # 256 MiB reserved
    assert arena.num_bytes == 256 << 20
    assert arena.resident_bytes() == 0
    arena.layer_pages(1)[:10] = 1
    assert arena.resident_bytes() == 10 << 18
    assert arena.release_blocks([1], 5, 10) == 5 << 18
    assert arena.resident_bytes() == 5 << 18
    # NOTE: reading a never-written page maps the kernel's zero page, which mincore counts
    # as resident; the engine never reads blocks it did not write, so reads come last here.
    assert torch.count_nonzero(arena.layer_pages(1)[5:10]) == 0  # released pages read zero
    assert torch.all(arena.layer_pages(1)[:5] == 1)
    assert torch.count_nonzero(arena.layer_pages(0)) == 0  # layers do not overlap
    with pytest.raises(ValueError, match=r"block range \[10, 300\) outside"):
        arena.release_blocks([0], 10, 300)


def test_the_cuda_arena_commits_maximal_runs_of_consecutive_chunks() -> None:
    """The CUDA arena grants access and zeroes once per run (pure Python, runs anywhere)."""
    from nightjar_ray.memory.cuda_arena import _runs

    assert _runs([1, 2, 3, 7, 8, 10]) == [range(1, 4), range(7, 9), range(10, 11)]
    assert _runs([0]) == [range(0, 1)]
    assert _runs([]) == []
