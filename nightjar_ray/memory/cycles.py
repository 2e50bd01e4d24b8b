"""Forced memory cycles for tests and chaos runs (scheduler side, no vLLM).

Two drivers that exercise elastic memory's paths on a fixed schedule instead of the
§6.1 triggers, enabled only by the testing switches of the engine config:

* :class:`CompactionCycle`: KV compaction, forced contract/expand cycles under load;
* :class:`DraftCycle`: forced draft offload/reload cycles.

:class:`CompactionCycle` drives a ``ResizableBlockPool`` at step boundaries: every
``cycle_steps`` steps it gives the top ``region_blocks`` ids back (moving live blocks
below the boundary; refused and retried next step when they do not fit) and
``cycle_steps`` steps later hands them out again. It is the contraction path of elastic
memory exercised on purpose (``TestingConfig.chaos_cycle_steps``): tests check that
greedy outputs do not change and that no block is lost, and chaos runs do the same under
real traffic.

Every event is logged with its duration and counted (:class:`CompactionStats`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from nightjar_ray.memory.block_pool import ResizableBlockPool, finish_pool_event
from nightjar_ray.memory.events import MemoryEvent
from nightjar_ray.metrics.telemetry import EngineTelemetry


@dataclass
class CompactionStats:
    """Cumulative counts of one engine's compaction events (JSON-able)."""

    num_contractions: int = 0
    num_expansions: int = 0
    num_refused: int = 0
    """Contractions refused because the region's live blocks did not fit below it."""
    num_moved_blocks: int = 0
    contract_s: float = 0.0
    expand_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class CompactionCycle:
    """Contract and re-expand the top ``region_blocks`` ids every ``cycle_steps`` steps."""

    def __init__(
        self,
        pool: ResizableBlockPool,
        region_blocks: int,
        cycle_steps: int,
        clock: Callable[[], float] = time.perf_counter,
        telemetry: EngineTelemetry | None = None,
    ) -> None:
        if not 1 <= region_blocks < pool.num_blocks - 1:
            raise ValueError(
                f"chaos_region_blocks={region_blocks} must leave at least one usable block "
                f"of the block pool's {pool.num_blocks - 1}"
            )
        self.pool = pool
        self.region_blocks = region_blocks
        self.cycle_steps = cycle_steps
        self.clock = clock
        self.telemetry = telemetry
        self.stats = CompactionStats()
        self.contracted = False
        self._steps_since_event = 0

    def before_schedule(self) -> MemoryEvent | None:
        """Run at the start of ``schedule()``; a contraction's work for the workers
        (block moves and the ids given back), or ``None``."""
        self._steps_since_event += 1
        if self._steps_since_event < self.cycle_steps:
            return None
        if self.contracted:
            return self._expand()
        return self._contract()

    def _expand(self) -> MemoryEvent:
        start = self.clock()
        assert self.pool.can_expand(self.region_blocks)
        self.pool.expand(self.region_blocks)
        self.stats.expand_s += self._done("expand", start)
        self.stats.num_expansions += 1
        self.contracted = False
        return MemoryEvent(num_blocks=self.pool.num_blocks)

    def _contract(self) -> MemoryEvent | None:
        start = self.clock()
        moves = self.pool.plan_contract(self.region_blocks)
        if moves is None:
            self.stats.num_refused += 1
            return None
        self.pool.contract(self.region_blocks, moves)
        self.stats.contract_s += self._done("contract", start, len(moves))
        self.stats.num_contractions += 1
        self.stats.num_moved_blocks += len(moves)
        self.contracted = True
        boundary = self.pool.num_blocks
        release = (boundary, boundary + self.region_blocks)
        return MemoryEvent(moves=moves, release=release, num_blocks=boundary)

    def _done(self, kind: str, start_s: float, num_moved: int = 0) -> float:
        """Check, count and log the event; returns its duration (seconds, check excluded)."""
        self._steps_since_event = 0
        return finish_pool_event(
            self.pool, kind, self.clock() - start_s, self.region_blocks, num_moved, self.telemetry
        )


@dataclass
class DraftCycleStats:
    num_offload_commands: int = 0
    num_reload_commands: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class DraftCycle:
    """Offload the draft every ``cycle_steps`` steps and reload it as many steps later."""

    def __init__(self, cycle_steps: int) -> None:
        if cycle_steps < 1:
            raise ValueError("cycle_steps must be >= 1")
        self.cycle_steps = cycle_steps
        self.resident = True
        self.stats = DraftCycleStats()
        self._steps = 0

    def before_schedule(self) -> MemoryEvent | None:
        """Run at the start of ``schedule()``; this step's draft commands, if any."""
        self._steps += 1
        if self._steps < self.cycle_steps:
            return None
        self._steps = 0
        self.resident = not self.resident
        if self.resident:
            self.stats.num_reload_commands += 1
            return MemoryEvent(draft_commands=("reload", "resume"))
        self.stats.num_offload_commands += 1
        return MemoryEvent(draft_commands=("offload",))
