"""Worker side of elastic memory: apply the scheduler's :class:`MemoryEvent` on this rank.

Installed when any elastic-memory option is on, once no request holds a block: after
vLLM's warm-up on CPU, before it on GPU (CUDA graphs are captured over the arena's views;
the draft sync is attached after the warm-up). Per step, before the forward pass,
:meth:`WorkerMemory.apply` runs the event's parts in order (``memory/events.py``): block
moves, page release, draft commands. Every rank runs the same event at the same step,
so TP ranks agree on residency and block count by construction; :meth:`stats` lets
tests check that they do.

The worker also states three facts in its :class:`WorkerReport` on each step's output
(rank 0's is the one the scheduler reads): N_max (computed from this rank's KV pages and
draft weights, ``kv_rebind.num_max_blocks``), whether a background reload has finished
loading, and the cumulative offloads and reloads with the step loop's time in them, which
the scheduler counts into the telemetry the metrics export. It also times its own share of
each expansion, contraction and reload (:class:`WorkerEventTimes`), which the scheduler's
event times do not include.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from nightjar_ray.engine.block_remap import apply_block_moves
from nightjar_ray.engine.config import ElasticMemoryConfig
from nightjar_ray.engine.draft_offload import DraftOffloader
from nightjar_ray.engine.draft_prepack import PrepackCapture
from nightjar_ray.engine.draft_sync import DraftSync
from nightjar_ray.engine.kv_rebind import (
    KVArenaPlan,
    arena_budget,
    plan_kv_arena,
    rebind_kv_to_arena,
)
from nightjar_ray.engine.messages import DraftEventCounts, WorkerEventTimes, WorkerReport
from nightjar_ray.engine.testing_config import TestingConfig
from nightjar_ray.memory.arena import arena_unit_bytes
from nightjar_ray.memory.arena_budget import ArenaBudget
from nightjar_ray.memory.events import MemoryEvent
from nightjar_ray.memory.kernels import build_block_mover

logger = logging.getLogger(__name__)


class WorkerMemory:
    """One rank's arena, block mover and draft offloader (see module docstring)."""

    def __init__(
        self,
        model_runner: Any,
        config: ElasticMemoryConfig,
        sync: DraftSync | None,
        prepack: PrepackCapture | None = None,
        testing: TestingConfig | None = None,
        reserve_bytes: int = 0,
        clock: Callable[[], float] = time.perf_counter,
        fixed_pool: bool = False,
    ) -> None:
        """``reserve_bytes``: KV memory the worker held back from vLLM for the arena's
        rounding (``kv_rebind.kv_reserve_bytes``; 0 when none was); ``fixed_pool``: the
        block count is fixed (``num_gpu_blocks_override``), so nothing could be."""
        testing = testing or TestingConfig()
        self.runner = model_runner
        self.clock = clock
        self.event_times = WorkerEventTimes()
        """This rank's share of each event kind so far (seconds of ``clock``)."""
        self.sync = sync
        self.mover = build_block_mover(config.block_mover)
        self.num_moved_blocks = 0
        self.num_remapped_entries = 0
        self.num_released_bytes = 0
        self.pool_kv_bytes = sum(kv.nbytes for kv in model_runner.kv_caches)
        """The KV buffer vLLM allocated: N_orig blocks (the reserve taken out)."""
        plan = plan_kv_arena(model_runner)
        self.num_stock_blocks = plan.num_blocks
        self.num_blocks = self.num_stock_blocks
        """The block pool's size as of the last event this rank applied."""
        self.history: list[list[Any]] = []
        """(pool blocks, draft resident, draft commands) after every event applied."""
        drafter: Any = getattr(model_runner, "drafter", None)
        self.offloader: DraftOffloader | None = None
        if (config.on or testing.chaos_offload_steps) and hasattr(drafter, "model"):
            self.offloader = DraftOffloader(
                drafter.model,
                model_runner.model,
                verify=testing.self_check,
                reload_delay_s=testing.chaos_reload_delay_s,
                prepack=prepack,
            )
        self.self_check = testing.self_check
        self.fault_wrong_block_remap = testing.fault_wrong_block_remap
        self.peak_committed_bytes = 0
        """With ``self_check``: the most KV arena + draft weight bytes committed after a step."""
        draft_bytes = self.offloader.stats.draft_bytes if self.offloader else 0
        unit = arena_unit_bytes(model_runner.kv_caches[0].device)
        self.stock_kv_bytes, self.num_max_blocks = _size_arena(
            plan, config.on, draft_bytes, unit, reserve_bytes, fixed_pool
        )
        """Stock vLLM's KV buffer for this configuration (the pool plus the reserve) and
        N_max (the stock pool without elastic memory)."""
        self.arena = rebind_kv_to_arena(model_runner, plan, self.num_max_blocks)
        if self.arena.device.type == "cuda":
            torch.cuda.empty_cache()  # the stock KV buffer back to the driver first
        self.arena.commit_blocks(range(len(plan.page_bytes)), 0, plan.num_blocks)
        self.draft_positions = plan.draft_layers
        """Arena layers of the draft's KV."""
        self.target_positions = plan.target_layers
        pages = self.arena.layout.page_bytes
        self.block_bytes = sum(pages)
        self.target_block_bytes = self.block_bytes - sum(pages[p] for p in self.draft_positions)

    def apply(self, event: MemoryEvent | None) -> None:
        """This step's event, before the forward pass (and before vLLM's state update);
        times this rank's share of each event kind in it (``event_times``)."""
        if event is None:
            return
        spent: dict[str, float] = {}
        if event.moves or event.release is not None:
            spent["contract"] = self._timed(self._move_and_release, event)
        for command in event.draft_commands:
            seconds = self._timed(self._draft_command, command)
            kind = {"offload": "expand", "reload": "reload"}.get(command)
            if kind is not None:
                spent[kind] = spent.get(kind, 0.0) + seconds
        if event.num_blocks is not None:
            if event.num_blocks > self.arena.num_slot_blocks:
                raise RuntimeError(
                    f"the block pool grew to {event.num_blocks} blocks; this rank's arena holds "
                    f"{self.arena.num_slot_blocks} (ranks disagree on N_max)"
                )
            grows = event.num_blocks > self.num_blocks
            seconds = self._timed(self._grow, event.num_blocks)
            if grows:
                spent["expand"] = spent.get("expand", 0.0) + seconds
        for kind, seconds in spent.items():
            self.event_times = self.event_times.with_event(kind, seconds)
        resident = self.offloader is None or self.offloader.stats.resident
        self.history.append([self.num_blocks, resident, list(event.draft_commands)])

    def _timed(self, work: Callable[[Any], None], arg: Any) -> float:
        """Seconds of ``work(arg)`` on this rank's clock."""
        start = self.clock()
        work(arg)
        return self.clock() - start

    def _move_and_release(self, event: MemoryEvent) -> None:
        """A contraction's block moves and page release.

        NOTE: while the draft is away its KV is garbage (rebuilt by the catch-up after
        the reload), so block moves and releases leave the draft's layers alone; reading
        or writing them would commit pages the offload gave back."""
        if event.moves:
            layers = self.target_positions if self._draft_away else None
            self.num_remapped_entries += apply_block_moves(
                self.runner,
                self.mover,
                self.arena,
                event.moves,
                layers,
                remap=not self.fault_wrong_block_remap,
            )
            self.num_moved_blocks += len(event.moves)
        if event.release is not None:
            self._release(*event.release)

    @property
    def _draft_away(self) -> bool:
        return self.offloader is not None and not self.offloader.stats.resident

    def _release(self, start_block: int, end_block: int) -> None:
        """The draft's layers never used the region while it was away: release (and
        count) only the target's pages then; every layer's under the chaos cycle."""
        all_layers = range(len(self.arena.layout.page_bytes))
        layers = self.target_positions if self._draft_away else all_layers
        self.num_released_bytes += self.arena.release_blocks(layers, start_block, end_block)

    def _grow(self, num_blocks: int) -> None:
        """Commit the pages of the blocks the pool gains before the step that may write
        them: the target's, and the resident draft's up to the stock pool (past it the
        draft's layers hold no blocks)."""
        if num_blocks > self.num_blocks:
            self.arena.commit_blocks(self.target_positions, self.num_blocks, num_blocks)
            draft_end = min(num_blocks, self.num_stock_blocks)
            if not self._draft_away and draft_end > self.num_blocks:
                self.arena.commit_blocks(self.draft_positions, self.num_blocks, draft_end)
        self.num_blocks = num_blocks

    def _draft_command(self, command: str) -> None:
        offloader = self.offloader
        assert offloader is not None, f"draft command {command!r} without an offloader"
        if command == "offload":
            offloader.offload()
            if self.arena.device.type == "cuda":
                torch.cuda.empty_cache()  # the draft's weights back to the driver
            slots = self.arena.num_slot_blocks
            self.num_released_bytes += self.arena.release_blocks(self.draft_positions, 0, slots)
        elif command == "reload":
            # the catch-up after "resume" writes the draft's KV of the stock pool
            self.arena.commit_blocks(self.draft_positions, 0, self.num_stock_blocks)
            offloader.start_reload()
        else:
            assert command == "resume", command
            offloader.finish_reload()
            assert self.sync is not None, "resume before the draft sync was installed"
            self.sync.invalidate_draft_kv()

    def committed_bytes(self) -> int:
        """KV arena bytes backed by memory plus the draft weight bytes on the device."""
        draft = self.offloader.stats if self.offloader is not None else None
        loading = self.offloader is not None and self.offloader.reloading
        on_device = draft is not None and (draft.resident or loading)
        return self.arena.resident_bytes() + (draft.draft_bytes if draft and on_device else 0)

    def report(self, report: WorkerReport) -> WorkerReport:
        """``report`` with the facts the scheduler reads from rank 0's step output."""
        if self.self_check:
            self.peak_committed_bytes = max(self.peak_committed_bytes, self.committed_bytes())
        ready = self.offloader is not None and self.offloader.reload_ready()
        events = None
        if self.offloader is not None:
            d = self.offloader.stats
            events = DraftEventCounts(d.num_offloads, d.offload_s, d.num_reloads, d.reload_s)
        return replace(
            report,
            num_max_blocks=self.num_max_blocks,
            draft_ready=ready,
            draft_events=events,
            event_times=self.event_times,
        )

    def stats(self) -> dict[str, Any]:
        """Blocks this rank moved, table entries it rewrote, bytes it released, its
        arena's resident bytes, its share of the events' time (``worker_events``:
        ``{kind: [count, seconds]}``) and its draft's residency (JSON-able)."""
        return {
            "num_moved_blocks": self.num_moved_blocks,
            "num_remapped_entries": self.num_remapped_entries,
            "stock_kv_bytes": self.stock_kv_bytes,
            "pool_kv_bytes": self.pool_kv_bytes,
            "num_stock_blocks": self.num_stock_blocks,
            "num_max_blocks": self.num_max_blocks,
            "num_blocks": self.num_blocks,
            "history": self.history,
            "block_bytes": self.block_bytes,
            "target_block_bytes": self.target_block_bytes,
            "peak_committed_bytes": self.peak_committed_bytes,
            "arena_resident_bytes": self.arena.resident_bytes(),
            "num_released_bytes": self.num_released_bytes,
            "worker_events": self.event_times.to_json(),
            "draft": self.offloader.stats.to_json() if self.offloader else {},
        }


def _size_arena(
    plan: KVArenaPlan,
    enabled: bool,
    draft_bytes: int,
    unit_bytes: int,
    reserve_bytes: int,
    fixed_pool: bool = False,
) -> tuple[int, int]:
    """Stock vLLM's KV bytes (N_orig plus the reserved blocks) and N_max (``N_orig``
    unless ``enabled``); ``ValueError`` when the arena's baseline would exceed stock.
    ``fixed_pool`` (``num_gpu_blocks_override``): nothing could be held back, so the
    pool's own rounded commit counts as stock (a warning says by how much it exceeds)."""
    budget = ArenaBudget(plan.page_bytes, plan.draft_layers, plan.num_blocks, unit_bytes, 0)
    if enabled:
        budget = arena_budget(plan, draft_bytes, unit_bytes)
    stock_kv_bytes = (plan.num_blocks + reserve_bytes // budget.block_bytes) * budget.block_bytes
    baseline = budget.baseline_bytes(plan.num_blocks)
    if fixed_pool and baseline > stock_kv_bytes:
        logger.warning(
            "nightjar memory: num_gpu_blocks_override fixes the pool, so the arena's "
            "rounding to %d-byte units (%d bytes) comes on top of stock vLLM's KV buffer",
            budget.unit_bytes,
            baseline - stock_kv_bytes,
        )
        stock_kv_bytes = baseline
    stock_bytes = stock_kv_bytes + budget.draft_bytes
    num_max = budget.largest_num_max_blocks(stock_bytes) if enabled else plan.num_blocks
    _check_baseline(budget, num_max, stock_kv_bytes)
    return stock_kv_bytes, num_max


def _check_baseline(budget: ArenaBudget, num_slot_blocks: int, stock_kv_bytes: int) -> None:
    """``ValueError`` unless the arena's commit of the stock pool fits in stock vLLM's
    KV buffer."""
    baseline = budget.baseline_bytes(num_slot_blocks)
    if baseline > stock_kv_bytes:
        raise ValueError(
            f"elastic memory: the KV arena would commit {baseline} bytes for "
            f"{budget.num_blocks} blocks (rounded to {budget.unit_bytes}-byte units), more "
            f"than stock vLLM's {stock_kv_bytes} (the KV memory held back for the rounding "
            "does not cover it; with num_gpu_blocks_override none can be held back: size "
            "the KV cache with kv_cache_memory_bytes or gpu_memory_utilization instead)"
        )
