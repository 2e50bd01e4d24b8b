"""What a KV arena commits, counted as the arenas count it, against stock vLLM (pure Python).

Stock vLLM holds ``N_stock`` blocks of ``B_full`` bytes (every layer, the draft's
included) plus ``S_draft`` bytes of draft-only weights. The arena holds the same blocks
but commits whole units (OS page, CUDA granularity ``G``) per arena layer
(``arena_units``), so each layer may commit up to ``unit - gcd(page, unit)`` bytes more
than its pages. Two consequences, both settled here:

- baseline: the worker reports ``reserve_bytes`` (whole blocks covering the largest
  rounding, :func:`max_rounding_bytes`) less KV memory to vLLM, so vLLM allocates
  ``N_orig = N_stock - reserve_blocks`` blocks and the arena's commit of ``[0, N_orig)``
  stays within ``N_stock * B_full``;
- expansion: :meth:`ArenaBudget.largest_num_max_blocks` is the largest ``N_max`` whose
  committed target pages (draft released) stay within ``N_stock * B_full + S_draft``.

:class:`CommitReplay` replays the worker's commit and release calls with the arenas'
own rounding (``arena_units.unit_span``), so what it predicts is what ``resident_bytes``
of a fresh arena reads after the same calls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nightjar_ray.memory.arena_units import layer_offsets, round_up, unit_span


def max_rounding_bytes(page_bytes: Sequence[int], unit_bytes: int) -> int:
    """The most bytes an arena with these layer pages commits beyond ``N * sum(pages)``
    for blocks ``[0, N)`` of every layer, over every ``N``: per layer ``unit - gcd(page,
    unit)`` (0 when the page is a multiple of the unit)."""
    return sum(unit_bytes - math.gcd(page, unit_bytes) for page in page_bytes)


def reserve_bytes(rounding_bytes: int, block_bytes: int) -> int:
    """``rounding_bytes`` rounded up to whole blocks of ``block_bytes`` (B_full): what the
    worker takes from vLLM's KV memory so the block count drops by whole blocks."""
    if block_bytes <= 0:
        raise ValueError(f"block_bytes must be > 0, got {block_bytes}")
    return round_up(rounding_bytes, block_bytes)


class _Intervals:
    """Disjoint half-open integer intervals (committed unit indices of an arena)."""

    def __init__(self) -> None:
        self._spans: list[tuple[int, int]] = []

    @property
    def size(self) -> int:
        return sum(hi - lo for lo, hi in self._spans)

    def add(self, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        kept = []
        for a, b in self._spans:
            if b < lo or a > hi:
                kept.append((a, b))
            else:
                lo, hi = min(a, lo), max(b, hi)
        self._spans = sorted([*kept, (lo, hi)])

    def remove(self, lo: int, hi: int) -> None:
        kept = [(a, min(b, lo)) for a, b in self._spans] + [(max(a, hi), b) for a, b in self._spans]
        self._spans = sorted((a, b) for a, b in kept if a < b)


class CommitReplay:
    """The units a fresh arena with ``page_bytes`` x ``num_slot_blocks`` holds after the
    same ``commit``/``release`` calls (no memory is touched)."""

    def __init__(self, page_bytes: Sequence[int], num_slot_blocks: int, unit_bytes: int):
        self.page_bytes = tuple(page_bytes)
        self.num_slot_blocks = num_slot_blocks
        self.unit_bytes = unit_bytes
        self.offsets, self.num_bytes = layer_offsets(page_bytes, num_slot_blocks, unit_bytes)
        self._units = _Intervals()

    def _span(self, layer: int, blocks: tuple[int, int], whole: bool) -> range:
        offset, page = self.offsets[layer], self.page_bytes[layer]
        return unit_span(offset, page, self.num_slot_blocks, blocks, self.unit_bytes, whole)

    def commit(self, layers: Iterable[int], start_block: int, end_block: int) -> None:
        for layer in layers:
            span = self._span(layer, (start_block, end_block), whole=False)
            self._units.add(span.start, span.stop)

    def release(self, layers: Iterable[int], start_block: int, end_block: int) -> None:
        for layer in layers:
            span = self._span(layer, (start_block, end_block), whole=True)
            self._units.remove(span.start, span.stop)

    @property
    def resident_bytes(self) -> int:
        return self._units.size * self.unit_bytes


@dataclass(frozen=True)
class ArenaBudget:
    """One rank's arena: per arena layer page bytes, which layers are the draft's,
    vLLM's block count ``N_orig``, the device's commit unit and the draft-only weight
    bytes an offload frees (``S_draft``)."""

    page_bytes: tuple[int, ...]
    draft_layers: tuple[int, ...]
    num_blocks: int
    unit_bytes: int
    draft_bytes: int

    def __post_init__(self) -> None:
        if self.num_blocks < 1 or self.unit_bytes < 1 or self.draft_bytes < 0:
            raise ValueError(
                "num_blocks and unit_bytes must be >= 1 and draft_bytes >= 0, got "
                f"{self.num_blocks}, {self.unit_bytes}, {self.draft_bytes}"
            )
        if not set(self.draft_layers) <= set(range(len(self.page_bytes))):
            raise ValueError(f"draft layers {self.draft_layers} outside the arena's layers")

    @property
    def target_layers(self) -> tuple[int, ...]:
        draft = set(self.draft_layers)
        return tuple(p for p in range(len(self.page_bytes)) if p not in draft)

    @property
    def block_bytes(self) -> int:
        """B_full: one block over every layer."""
        return sum(self.page_bytes)

    @property
    def target_block_bytes(self) -> int:
        """B_target: one block over the target's layers."""
        return sum(self.page_bytes[p] for p in self.target_layers)

    def baseline_bytes(self, num_slot_blocks: int) -> int:
        """KV bytes committed at start: blocks ``[0, N_orig)`` of every layer."""
        replay = CommitReplay(self.page_bytes, num_slot_blocks, self.unit_bytes)
        replay.commit(range(len(self.page_bytes)), 0, self.num_blocks)
        return replay.resident_bytes

    def expanded_bytes(self, num_max_blocks: int) -> int:
        """KV bytes committed with the pool at ``num_max_blocks`` (the arena's slots) and
        the draft away: the worker's calls from the start (baseline, the offload's
        release of every draft slot, the growth's commit of the target's new blocks)."""
        replay = CommitReplay(self.page_bytes, num_max_blocks, self.unit_bytes)
        replay.commit(range(len(self.page_bytes)), 0, self.num_blocks)
        replay.release(self.draft_layers, 0, num_max_blocks)
        replay.commit(self.target_layers, self.num_blocks, num_max_blocks)
        return replay.resident_bytes

    def stock_bytes(self, num_stock_blocks: int) -> int:
        """What stock vLLM commits with ``num_stock_blocks``: KV buffer + draft weights."""
        return num_stock_blocks * self.block_bytes + self.draft_bytes

    def largest_num_max_blocks(self, stock_bytes: int) -> int:
        """The largest ``N_max >= N_orig`` whose expanded commit stays within
        ``stock_bytes`` (``N_orig`` when even one more block would exceed it)."""
        target = self.target_block_bytes
        if target <= 0:
            raise ValueError("elastic memory needs KV layers of the target")
        lo, hi = self.num_blocks, max(self.num_blocks, stock_bytes // target)
        while lo < hi:  # expanded_bytes grows with N_max; >= N_max * B_target
            mid = (lo + hi + 1) // 2
            if self.expanded_bytes(mid) <= stock_bytes:
                lo = mid
            else:
                hi = mid - 1
        return lo
