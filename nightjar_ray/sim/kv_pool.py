"""Paged KV-cache blocks with elastic capacity (paper §6.2-6.3).

Physical block ids ``0 .. num_blocks-1``; the free set hands out the lowest id first (a
heap), so live blocks gather at low ids and a contraction has little to migrate::

    ids:   0 ..................... K_boundary ............ K_total
           [ original pool N_orig ][ draft's bytes N_draft ]
                                     ^ exists only while the draft is offloaded

``expand(n)`` appends ``n`` free blocks at the top. ``contract(n)`` migrates every live
block with id >= K_boundary to a free id below it (the Step-2 mapping) and trims the top.

NOTE (invariant, checked by ``check``): every id < num_blocks is either free or owned by
exactly one request; owned + free == num_blocks.
"""

from __future__ import annotations

import heapq

from nightjar_ray.memory.migration import plan_migration


class BlockPool:
    """Block allocator; requests own lists of block ids (their block tables)."""

    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        if num_blocks < 1 or block_size_tokens < 1:
            raise ValueError("a block pool needs >= 1 block of >= 1 token")
        self.block_size_tokens = block_size_tokens
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks))
        self.tables: dict[int, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def blocks_needed(self, req_id: int, num_tokens: int) -> int:
        """Extra blocks ``req_id`` needs to hold ``num_tokens`` tokens."""
        have = len(self.tables.get(req_id, ()))
        need = -(-num_tokens // self.block_size_tokens)
        return max(0, need - have)

    def can_allocate(self, req_id: int, num_tokens: int) -> bool:
        return self.blocks_needed(req_id, num_tokens) <= len(self._free)

    def allocate(self, req_id: int, num_tokens: int) -> None:
        """Grow ``req_id``'s table to hold ``num_tokens``; call ``can_allocate`` first."""
        n = self.blocks_needed(req_id, num_tokens)
        assert n <= len(self._free), "allocate() without can_allocate()"
        table = self.tables.setdefault(req_id, [])
        for _ in range(n):
            table.append(heapq.heappop(self._free))

    def free(self, req_id: int) -> int:
        """Release all of ``req_id``'s blocks; returns how many."""
        table = self.tables.pop(req_id, [])
        for block in table:
            heapq.heappush(self._free, block)
        return len(table)

    def expand(self, num_blocks: int) -> None:
        """Append ``num_blocks`` new free blocks at the top (in-place expansion)."""
        if num_blocks < 0:
            raise ValueError("expand needs num_blocks >= 0")
        for block in range(self.num_blocks, self.num_blocks + num_blocks):
            heapq.heappush(self._free, block)
        self.num_blocks += num_blocks

    def can_contract(self, num_blocks: int) -> bool:
        """Enough free blocks to give ``num_blocks`` back and keep every live block."""
        return 0 <= num_blocks < self.num_blocks and len(self._free) >= num_blocks

    def contract(self, num_blocks: int) -> int:
        """Remove the top ``num_blocks`` ids, migrating live ones down; returns #migrated."""
        assert self.can_contract(num_blocks), "contract() without can_contract()"
        boundary = self.num_blocks - num_blocks
        low_free = sorted(b for b in self._free if b < boundary)
        live = (b for table in self.tables.values() for b in table)
        plan = plan_migration(live, low_free, boundary)
        assert plan is not None, "can_contract() admitted an unplannable contraction"
        for table in self.tables.values():
            table[:] = [plan.get(b, b) for b in table]
        self._free = low_free[len(plan) :]
        heapq.heapify(self._free)
        self.num_blocks = boundary
        return len(plan)

    def check(self) -> None:
        """Assert the accounting invariant (tests and debug runs)."""
        owned = [b for table in self.tables.values() for b in table]
        every = owned + self._free
        assert len(every) == self.num_blocks, (len(every), self.num_blocks)
        assert sorted(every) == list(range(self.num_blocks)), "block owned twice or lost"
