"""Grow and shrink vLLM's scheduler-side ``BlockPool`` in place (paper §6.2-6.3).

vLLM builds its block pool once, with ids ``0 .. num_gpu_blocks-1`` (id 0 is the null
block). :class:`ElasticBlockPool` adds ids at the top and takes them back::

    ids:  0 (null) ........................ K_boundary ............ K_total
          [ original pool                  ][ region: exists while expanded ]

- ``expand(n)``: new ``KVCacheBlock`` objects with ids ``K_total ..`` join the *tail* of
  the free queue (handed out last, so live blocks stay low and a later contraction moves
  little). No existing block changes.
- ``plan_contract(n)`` then ``contract(plan)``: every live block at or above the new
  boundary trades ids with a free block below it, so every reference the scheduler holds
  (request block lists, pending copies) stays valid and only ids change; then the free
  blocks of the region leave the free queue and the block pool is trimmed. The returned moves
  ``{src: dst}`` are what the workers must copy and remap before the next forward pass.

NOTE: prefix-cache entries of moved blocks are dropped (a lost hit, never a wrong one).
NOTE: the caller performs both operations between steps (in ``schedule``), before
vLLM's own scheduling of that step.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.kv_cache_utils import KVCacheBlock

from nightjar_ray.memory.migration import plan_migration


class ElasticBlockPool:
    """In-place capacity changes of one vLLM ``BlockPool`` (see module docstring)."""

    def __init__(self, pool: Any, max_num_blocks: int) -> None:
        if max_num_blocks < pool.num_gpu_blocks:
            raise ValueError(
                f"max_num_blocks={max_num_blocks} < the block pool's {pool.num_gpu_blocks} blocks"
            )
        self.pool = pool
        self.max_num_blocks = max_num_blocks

    @property
    def num_blocks(self) -> int:
        """Ids in use now, the null block included (vLLM's ``num_gpu_blocks``)."""
        return int(self.pool.num_gpu_blocks)

    def can_expand(self, num_blocks: int) -> bool:
        return num_blocks > 0 and self.num_blocks + num_blocks <= self.max_num_blocks

    def expand(self, num_blocks: int) -> range:
        """Append ``num_blocks`` free blocks; returns their ids. Call ``can_expand`` first."""
        assert self.can_expand(num_blocks), "expand() without can_expand()"
        pool = self.pool
        ids = range(self.num_blocks, self.num_blocks + num_blocks)
        new = [KVCacheBlock(i, pool=pool) for i in ids]
        pool.blocks.extend(new)
        pool.free_block_queue.append_n(new)
        pool.num_gpu_blocks += num_blocks
        return ids

    def plan_contract(self, num_blocks: int) -> dict[int, int] | None:
        """The moves that give the top ``num_blocks`` ids back, or ``None`` when the live
        blocks there do not fit in free blocks below (do not contract; retry later)."""
        boundary = self.num_blocks - num_blocks
        if num_blocks <= 0 or boundary < 1:
            return None
        live = (b.block_id for b in self.pool.blocks[boundary:] if b.ref_cnt > 0)
        free = [b.block_id for b in self._free_blocks() if b.block_id < boundary]
        return plan_migration(live, free, boundary)

    def contract(self, num_blocks: int, moves: dict[int, int]) -> None:
        """Apply a plan from ``plan_contract(num_blocks)`` made at this step boundary."""
        pool = self.pool
        boundary = self.num_blocks - num_blocks
        for src, dst in moves.items():
            live, free = pool.blocks[src], pool.blocks[dst]
            assert live.ref_cnt > 0 and free.ref_cnt == 0 and dst < boundary <= src
            pool._maybe_evict_cached_block(live)
            pool._maybe_evict_cached_block(free)
            pool.free_block_queue.remove(free)
            live.block_id, free.block_id = dst, src
            pool.blocks[dst], pool.blocks[src] = live, free
        for block in pool.blocks[boundary:]:
            assert block.ref_cnt == 0, "a live block stayed in the region"
            pool._maybe_evict_cached_block(block)
            if block.prev_free_block is not None:
                pool.free_block_queue.remove(block)
        del pool.blocks[boundary:]
        pool.num_gpu_blocks = boundary

    def _free_blocks(self) -> list[Any]:
        return list(self.pool.free_block_queue.get_all_free_blocks())

    def check(self) -> None:
        """Assert the accounting invariant: ids are positions, every block is either free
        (in the queue, ref_cnt 0) or live (ref_cnt > 0) or the null block, never both."""
        pool = self.pool
        assert len(pool.blocks) == pool.num_gpu_blocks
        assert all(b.block_id == i for i, b in enumerate(pool.blocks)), "id != position"
        free_ids = [b.block_id for b in self._free_blocks()]
        assert len(free_ids) == len(set(free_ids)) == pool.get_num_free_blocks()
        assert all(pool.blocks[i].ref_cnt == 0 for i in free_ids)
        live = [b for b in pool.blocks if b.ref_cnt > 0 and not b.is_null]
        assert len(live) + len(free_ids) + 1 == pool.num_gpu_blocks, "block lost"
