"""§6.3 Step 4: move KV blocks inside one flat KV buffer.

A buffer holds every layer's pages, layers outermost (the arena's and vLLM's CPU
layout)::

    byte offset of (layer l, block b) = layer_offsets[l] + b * page_bytes[l]

A move ``src -> dst`` copies that page for every listed layer. Sources and destinations
are disjoint (a contraction moves ids >= K_boundary to free ids below it), so no copy
reads what another writes.

Two implementations, chosen by name from :data:`BLOCK_MOVERS`:
- ``torch``: one ``copy_`` per page (64-bit words when aligned); the CPU path.
- ``triton``: one program per (move, layer) copying the page in vectorized tiles of
  64-bit words; the GPU path, tested on CPU under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

BlockMover = Callable[["PageLayout", torch.Tensor, Mapping[int, int]], None]


@dataclass(frozen=True)
class PageLayout:
    """Where each layer's pages start in the buffer and how long they are (bytes)."""

    layer_offsets_bytes: tuple[int, ...]
    page_bytes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.layer_offsets_bytes) != len(self.page_bytes):
            raise ValueError("one offset per layer page size")
        if any(p <= 0 for p in self.page_bytes) or any(o < 0 for o in self.layer_offsets_bytes):
            raise ValueError("page sizes must be > 0 and offsets >= 0")

    @property
    def word_bytes(self) -> int:
        """8 when every offset and page is 8-byte aligned (64-bit copies), else 1."""
        values = (*self.layer_offsets_bytes, *self.page_bytes)
        return 8 if all(v % 8 == 0 for v in values) else 1


def _check(buffer: torch.Tensor) -> None:
    if buffer.dtype != torch.int8 or buffer.dim() != 1 or not buffer.is_contiguous():
        raise ValueError("the KV buffer must be a contiguous 1-D int8 tensor")


def move_blocks_torch(layout: PageLayout, buffer: torch.Tensor, moves: Mapping[int, int]) -> None:
    """Copy every layer's page of each ``src`` block to ``dst``: one ``copy_`` per page,
    in 64-bit words when aligned (a gather into a temporary would move every byte twice;
    per-page copies run at memory-copy speed for KV-sized pages)."""
    _check(buffer)
    if not moves:
        return
    top = max(*moves, *moves.values()) + 1
    word = layout.word_bytes
    words = buffer.view(torch.int64) if word == 8 else buffer
    sources, targets = [], []
    for offset, page in zip(layout.layer_offsets_bytes, layout.page_bytes, strict=True):
        assert offset + top * page <= buffer.numel(), "move outside the buffer"
        start = offset // word
        pages = words[start : start + top * (page // word)].view(top, page // word)
        sources += [pages[src] for src in moves]
        targets += [pages[dst] for dst in moves.values()]
    torch._foreach_copy_(targets, sources)


def _triton_kernel() -> Any:
    """Build the Triton kernel on first use (importing triton is not free)."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def move_pages(buf, src_ids, dst_ids, layer_offsets, page_words, TILE: tl.constexpr):  # type: ignore[no-untyped-def]
        move = tl.program_id(0)
        layer = tl.program_id(1)
        src = tl.load(src_ids + move)
        dst = tl.load(dst_ids + move)
        base = tl.load(layer_offsets + layer)
        page = tl.load(page_words + layer)
        src_start = base + src * page
        dst_start = base + dst * page
        for start in range(0, page, TILE):
            idx = start + tl.arange(0, TILE)
            mask = idx < page
            words = tl.load(buf + src_start + idx, mask=mask)
            tl.store(buf + dst_start + idx, words, mask=mask)

    return move_pages


class TritonBlockMover:
    """The Triton path (one program per move and layer); compiled once per instance."""

    def __init__(self, tile_words: int = 1024, num_warps: int = 4) -> None:
        if tile_words <= 0 or tile_words & (tile_words - 1):
            raise ValueError("tile_words must be a power of two")
        if num_warps <= 0 or num_warps & (num_warps - 1):
            raise ValueError("num_warps must be a power of two")
        self.tile_words = tile_words
        self.num_warps = num_warps
        self._kernel: Any = None

    def __call__(self, layout: PageLayout, buffer: torch.Tensor, moves: Mapping[int, int]) -> None:
        _check(buffer)
        if not moves:
            return
        if self._kernel is None:
            self._kernel = _triton_kernel()
        word = layout.word_bytes
        words = buffer.view(torch.int64) if word == 8 else buffer

        def ids(values: Sequence[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64, device=buffer.device)

        grid = (len(moves), len(layout.page_bytes))
        self._kernel[grid](
            words,
            ids(list(moves)),
            ids(list(moves.values())),
            ids([o // word for o in layout.layer_offsets_bytes]),
            ids([p // word for p in layout.page_bytes]),
            TILE=self.tile_words,
            num_warps=self.num_warps,
        )


BLOCK_MOVERS: dict[str, Callable[[], BlockMover]] = {
    "torch": lambda: move_blocks_torch,
    "triton": TritonBlockMover,
}
"""Block movers by name; ``build_block_mover`` picks one."""


def build_block_mover(name: str) -> BlockMover:
    """The mover registered as ``name`` (``ValueError`` names the choices)."""
    try:
        return BLOCK_MOVERS[name]()
    except KeyError:
        raise ValueError(
            f"unknown block mover {name!r}; choose from {sorted(BLOCK_MOVERS)}"
        ) from None
