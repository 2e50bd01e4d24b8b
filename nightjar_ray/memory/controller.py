"""The engine's §6.1 memory controller: when to offload the draft and grow the KV cache,
when to compact it and bring the draft back (scheduler side, one per engine).

It reads, after every ``schedule()``, the same :class:`LoadSnapshot` the metrics export
and whether speculation is off, runs :class:`ElasticTriggers` (the simulator runs the
same object), and performs the decided action at the start of the next ``schedule()``,
before vLLM schedules that step::

    RESIDENT  --EXPAND-->    pool += N_region blocks          workers: "offload"
    OFFLOADED --CONTRACT-->  live region blocks move down,    workers: moves, release,
                             pool -= N_region (refused and    "reload" (background)
                             retried when they do not fit)
    RELOADING --rank 0 reports the weights loaded-->          workers: "resume" (wait,
                                                              rebuild draft KV by catch-up)
    -> RESIDENT: the policy is asked again from this step

While the draft is not RESIDENT the scheduler plays gamma = 0 without asking or teaching
the policy. N_region = N_max - N_orig comes from the workers (``kv_rebind.num_max_blocks``)
with the first step output; the controller acts only once it is known.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from nightjar_ray.memory.block_pool import ResizableBlockPool, finish_pool_event
from nightjar_ray.memory.events import MemoryEvent
from nightjar_ray.memory.triggers import (
    DraftResidency,
    DraftValue,
    ElasticTriggers,
    MemoryAction,
    MemoryView,
    TriggerConfig,
    draft_outvalued,
)
from nightjar_ray.metrics.telemetry import EngineTelemetry, LoadSnapshot

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerParams:
    """The controller's settings (the engine builds them from ``ElasticMemoryConfig``)."""

    tau_low_fraction: float
    """tau_low as a fraction of the stock block pool's usable blocks."""
    expand_persist_steps: int
    """T_persist: steps speculation must be off with N_free < tau_low."""
    contract_persist_steps: int
    """Steps the queue must stay empty with N_free > N_region + tau_low."""
    offload_outvalued: bool
    """Also offload when the draft's memory, as KV cache, is worth more than speculation."""


@dataclass
class ControllerStats:
    """Cumulative counts of one engine's controller (JSON-able)."""

    residency: str = DraftResidency.RESIDENT.value
    num_blocks: int = 0
    """Pool ids now, the null block included (vLLM's ``num_gpu_blocks``)."""
    num_stock_blocks: int = 0
    num_max_blocks: int = 0
    peak_num_blocks: int = 0
    num_expansions: int = 0
    num_contractions: int = 0
    num_refused: int = 0
    num_moved_blocks: int = 0
    num_reload_wait_steps: int = 0
    """Steps between a reload's dispatch and its resume (the draft loading meanwhile)."""
    expand_s: float = 0.0
    contract_s: float = 0.0
    reload_wall_s: float = 0.0
    """Wall time from each reload's dispatch to its resume (steps ran meanwhile)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ElasticController:
    """See module docstring. ``bind_pool(N_max)`` returns the engine's block pool as a
    :class:`ResizableBlockPool` that may grow to ``N_max`` ids; ``num_stock_blocks`` is
    its size at start (the null block included)."""

    def __init__(
        self,
        bind_pool: Callable[[int], ResizableBlockPool],
        num_stock_blocks: int,
        config: ControllerParams,
        telemetry: EngineTelemetry,
        clock: Callable[[], float] = time.perf_counter,
        max_num_reqs: int = 1,
    ) -> None:
        self.config = config
        self.max_num_reqs = max_num_reqs
        """vLLM's ``max_num_seqs``: how far a grown pool can grow the batch."""
        self.telemetry = telemetry
        self.clock = clock
        self._bind_pool = bind_pool
        self.pool: ResizableBlockPool | None = None
        self.triggers: ElasticTriggers | None = None
        self.residency = DraftResidency.RESIDENT
        self.stats = ControllerStats(
            num_blocks=num_stock_blocks,
            num_stock_blocks=num_stock_blocks,
            peak_num_blocks=num_stock_blocks,
        )
        self._pending: MemoryAction | None = None
        self._draft_ready = False
        self._reload_start_s = 0.0

    @property
    def draft_away(self) -> bool:
        """Speculation must not run this step (the draft is offloaded or reloading)."""
        return self.residency is not DraftResidency.RESIDENT

    @property
    def num_region_blocks(self) -> int:
        return self.stats.num_max_blocks - self.stats.num_stock_blocks

    def on_worker_output(self, num_max_blocks: int | None, draft_ready: bool) -> None:
        """Facts rank 0 stamped on a step output (``engine/worker_memory.py``): N_max and
        whether a started reload finished loading."""
        self._draft_ready = draft_ready
        if self.triggers is not None or num_max_blocks is None:
            return
        self.stats.num_max_blocks = num_max_blocks
        self.pool = self._bind_pool(num_max_blocks)
        if self.num_region_blocks <= 0:
            logger.warning("nightjar memory: the draft frees no whole block; controller off")
            return
        tau_low = math.ceil(self.config.tau_low_fraction * (self.stats.num_stock_blocks - 1))
        self.triggers = ElasticTriggers(
            TriggerConfig(
                tau_low_blocks=tau_low,
                num_region_blocks=self.num_region_blocks,
                expand_persist_steps=self.config.expand_persist_steps,
                contract_persist_steps=self.config.contract_persist_steps,
            )
        )

    def before_schedule(self) -> MemoryEvent | None:
        """Run at the start of ``schedule()``: the decided action, or the resume."""
        if self.residency is DraftResidency.RELOADING:
            if self._draft_ready:
                return self._resume()
            self.stats.num_reload_wait_steps += 1
        action, self._pending = self._pending, None
        if action is MemoryAction.EXPAND:
            return self._expand()
        if action is MemoryAction.CONTRACT:
            return self._contract()
        return None

    def after_schedule(
        self,
        load: LoadSnapshot,
        sd_disabled: bool,
        draft_value: DraftValue | None = None,
    ) -> None:
        """Run the triggers on this step's snapshot; the action waits for the next step.
        ``draft_value`` prices the draft against its memory (``draft_outvalued``, which
        calls it only where it can decide)."""
        if self.triggers is None:
            return
        outvalued = (
            self.config.offload_outvalued
            and draft_value is not None
            and draft_outvalued(
                draft_value,
                load.num_waiting_reqs,
                load.num_total_blocks - load.num_free_blocks,
                self.num_region_blocks,
                self.max_num_reqs,
            )
        )
        view = MemoryView(
            residency=self.residency,
            sd_disabled=sd_disabled,
            draft_outvalued=outvalued,
            num_free_blocks=load.num_free_blocks,
            num_waiting_reqs=load.num_waiting_reqs,
            can_contract=self._can_contract(load),
        )
        self._pending = self.triggers.step(view)

    def _can_contract(self, load: LoadSnapshot) -> bool:
        """Plan only when the cheap conditions hold (planning walks the free queue)."""
        assert self.triggers is not None and self.pool is not None
        cfg = self.triggers.config
        if self.residency is not DraftResidency.OFFLOADED or load.num_waiting_reqs > 0:
            return False
        if load.num_free_blocks <= cfg.num_region_blocks + cfg.tau_low_blocks:
            return False
        return self.pool.plan_contract(self.num_region_blocks) is not None

    def _expand(self) -> MemoryEvent:
        assert self.pool is not None and self.pool.can_expand(self.num_region_blocks)
        start = self.clock()
        self.pool.expand(self.num_region_blocks)
        duration_s = self._done("expand", start)
        self.stats.num_expansions += 1
        self.stats.expand_s += duration_s
        self._set_residency(DraftResidency.OFFLOADED)
        return MemoryEvent(draft_commands=("offload",), num_blocks=self.pool.num_blocks)

    def _contract(self) -> MemoryEvent | None:
        assert self.pool is not None
        start = self.clock()
        moves = self.pool.plan_contract(self.num_region_blocks)
        if moves is None:  # the queue refilled since the trigger: retry later
            self.stats.num_refused += 1
            return None
        self.pool.contract(self.num_region_blocks, moves)
        duration_s = self._done("contract", start, len(moves))
        self.stats.num_contractions += 1
        self.stats.num_moved_blocks += len(moves)
        self.stats.contract_s += duration_s
        self._set_residency(DraftResidency.RELOADING)
        self._draft_ready = False
        self._reload_start_s = self.clock()
        boundary = self.pool.num_blocks
        release = (boundary, boundary + self.num_region_blocks)
        return MemoryEvent(
            moves=moves, release=release, draft_commands=("reload",), num_blocks=boundary
        )

    def _resume(self) -> MemoryEvent:
        self._set_residency(DraftResidency.RESIDENT)
        self.stats.reload_wall_s += self.clock() - self._reload_start_s
        return MemoryEvent(draft_commands=("resume",))

    def _set_residency(self, residency: DraftResidency) -> None:
        """One place for the state, its stats entry and the exported gauge."""
        self.residency = residency
        self.stats.residency = residency.value
        self.telemetry.draft_resident = residency is DraftResidency.RESIDENT

    def _done(self, kind: str, start_s: float, num_moved: int = 0) -> float:
        """Check, count and log the event (``block_pool.finish_pool_event``); returns its
        duration (check excluded)."""
        assert self.pool is not None
        duration_s = finish_pool_event(
            self.pool,
            kind,
            self.clock() - start_s,
            self.num_region_blocks,
            num_moved,
            self.telemetry,
        )
        self.stats.num_blocks = self.pool.num_blocks
        self.stats.peak_num_blocks = max(self.stats.peak_num_blocks, self.pool.num_blocks)
        return duration_s
