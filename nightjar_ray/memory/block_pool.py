"""The scheduler-side KV block pool as elastic memory sees it (no vLLM).

A :class:`ResizableBlockPool` hands out block ids ``0 .. num_blocks - 1`` (id 0 is the
null block, never handed out) and changes that range only between steps, check first,
then commit::

    can_expand(n) -> expand(n)                 ids num_blocks .. num_blocks+n-1 join, free
    plan_contract(n) -> contract(n, moves)     live ids >= num_blocks-n trade places with
                                               free ids below; the top n ids leave

The engine's implementation wraps vLLM's ``BlockPool`` (``engine/block_pool.py``); the
memory controller and the forced cycles (``memory/controller.py``, ``memory/cycles.py``)
drive it only through this Protocol.
"""

from __future__ import annotations

import logging
from typing import Protocol

from nightjar_ray.metrics.telemetry import EngineTelemetry

logger = logging.getLogger(__name__)


class ResizableBlockPool(Protocol):
    """A block pool whose id range grows at the top and shrinks from the top."""

    @property
    def num_blocks(self) -> int:
        """Ids in use now, the null block included."""

    def can_expand(self, num_blocks: int) -> bool:
        """Whether ``num_blocks`` more ids fit under the block pool's maximum."""

    def expand(self, num_blocks: int) -> range:
        """Append ``num_blocks`` free ids; returns them. Only after ``can_expand``."""

    def plan_contract(self, num_blocks: int) -> dict[int, int] | None:
        """Moves ``{src: dst}`` that free the top ``num_blocks`` ids, or ``None`` when the
        live blocks there do not fit below (do not contract now)."""

    def contract(self, num_blocks: int, moves: dict[int, int]) -> None:
        """Apply a plan from ``plan_contract(num_blocks)`` made at this step boundary."""

    def check(self) -> None:
        """Raise ``AssertionError`` if the accounting invariant does not hold: every id
        is the null block, free (queued, unreferenced) or live, never two of these."""


def finish_pool_event(
    pool: ResizableBlockPool,
    kind: str,
    duration_s: float,
    num_region_blocks: int,
    num_moved: int,
    telemetry: EngineTelemetry | None,
) -> float:
    """After an expansion or contraction (a forced cycle's or the memory controller's):
    check the block pool's accounting, count the event in the telemetry the metrics
    export, log it; returns ``duration_s`` (taken before the O(N) check)."""
    pool.check()
    if telemetry is not None:
        telemetry.record_memory_event(kind, duration_s)
    logger.info(
        "nightjar memory: %s %d blocks (%d moved) in %.3f ms; block pool now %d blocks",
        kind,
        num_region_blocks,
        num_moved,
        duration_s * 1e3,
        pool.num_blocks,
    )
    return duration_s
