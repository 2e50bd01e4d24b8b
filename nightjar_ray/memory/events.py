"""What the scheduler tells every worker about memory at one step boundary.

The scheduler decides elastic-memory events once (``memory/controller.py``, or the forced
cycles in ``memory/cycles.py``) and sends them with that step (``engine/messages.py``);
every rank applies them before the step's forward pass (``engine/worker_memory.py``),
through the executor's normal step RPC, so the mp executor on
CPU and the Ray executor on GPU run the same code at the same step::

    MemoryEvent(moves={src: dst}, release=(start, end), draft_commands=("offload",))
      1. moves           copy KV pages src -> dst, rewrite block tables (a contraction)
      2. release         give the pages of blocks [start, end) back (a contraction)
      3. draft_commands  "offload": draft weights to the host store, draft KV pages back
                         "reload":  start bringing the weights back (does not block)
                         "resume":  wait for the reload, rebuild the draft KV by catch-up
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

DraftCommand = Literal["offload", "reload", "resume"]


@dataclass(frozen=True)
class MemoryEvent:
    """One step's memory work for the workers (see module docstring)."""

    moves: Mapping[int, int] = field(default_factory=dict)
    release: tuple[int, int] | None = None
    draft_commands: tuple[DraftCommand, ...] = ()
    num_blocks: int | None = None
    """The scheduler's block pool size after this event, when the block pool changed (every rank
    checks it fits its arena and records it, so ranks can be compared event by event)."""

    def __bool__(self) -> bool:
        changes = self.release is not None or self.num_blocks is not None
        return changes or bool(self.moves) or bool(self.draft_commands)

    def merge(self, other: MemoryEvent | None) -> MemoryEvent:
        """Both events' work (at most one of them may move or release blocks)."""
        if other is None or not other:
            return self
        if not self:
            return other
        assert not (self.moves and other.moves), "two block moves in one step"
        assert self.release is None or other.release is None, "two releases in one step"
        assert self.num_blocks is None or other.num_blocks is None, "two pool changes"
        return MemoryEvent(
            moves=self.moves or other.moves,
            release=self.release if self.release is not None else other.release,
            draft_commands=self.draft_commands + other.draft_commands,
            num_blocks=self.num_blocks if self.num_blocks is not None else other.num_blocks,
        )
