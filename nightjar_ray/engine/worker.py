"""vLLM worker classes that install :class:`DraftSync` on their model runner.

``nightjar_engine_args`` names :data:`NightjarWorker`, which resolves to
``NightjarCPUWorker`` or ``NightjarGPUWorker`` in the worker's own process
(vLLM's ``worker_cls`` takes a qualified name). The hook goes in after
vLLM's warm-up, so warm-up dummy runs are not counted as draft forwards.
Statistics are read with ``llm.collective_rpc("nightjar_draft_stats")``.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_worker import Worker

from nightjar_ray.engine.block_remap import (
    DRAFT_ATTR,
    MOVES_ATTR,
    RELEASE_ATTR,
    STATS_ATTR,
    apply_block_moves,
)
from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.draft_offload import DraftOffloader
from nightjar_ray.engine.draft_sync import DraftSync
from nightjar_ray.engine.kv_rebind import rebind_kv_to_arena, release_region
from nightjar_ray.memory.arena import KVArena
from nightjar_ray.memory.kernels import BlockMover, build_block_mover


class _NightjarWorkerMixin:
    """Shared by the CPU and GPU workers (see module docstring)."""

    vllm_config: Any
    model_runner: Any
    _nightjar_sync: DraftSync | None = None
    _block_mover: BlockMover | None = None
    _num_moved_blocks: int = 0
    _num_remapped_entries: int = 0
    _scheduler_memory_stats: dict[str, Any] | None = None
    _arena: KVArena | None = None
    _draft_positions: tuple[int, ...] = ()
    _offloader: DraftOffloader | None = None
    _stock_kv_bytes: int = 0
    _num_released_bytes: int = 0

    def _install_nightjar(self) -> None:
        if self.vllm_config.speculative_config is None:
            return
        config = NightjarConfig.from_additional_config(self.vllm_config.additional_config)
        self._nightjar_sync = DraftSync(self.model_runner, config.draft_sync)
        elastic = config.elastic_memory
        self._block_mover = build_block_mover(elastic.block_mover)
        if elastic.chaos_cycle_steps is not None or elastic.chaos_offload_steps is not None:
            self._stock_kv_bytes = sum(kv.nbytes for kv in self.model_runner.kv_caches)
            self._arena, self._draft_positions = rebind_kv_to_arena(self.model_runner)
        drafter: Any = getattr(self.model_runner, "drafter", None)
        if elastic.chaos_offload_steps is not None and hasattr(drafter, "model"):
            self._offloader = DraftOffloader(drafter.model, self.model_runner.model)

    def _apply_memory_events(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Block moves of a contraction, before this step's states are updated."""
        scheduler_output = args[0] if args else kwargs.get("scheduler_output")
        moves = getattr(scheduler_output, MOVES_ATTR, None)
        self._scheduler_memory_stats = getattr(
            scheduler_output, STATS_ATTR, self._scheduler_memory_stats
        )
        if moves and self._block_mover is not None:
            changed = apply_block_moves(self.model_runner, self._block_mover, moves)
            self._num_moved_blocks += len(moves)
            self._num_remapped_entries += changed
        released = getattr(scheduler_output, RELEASE_ATTR, None)
        if released is not None and self._arena is not None:
            self._num_released_bytes += release_region(self._arena, *released)
        self._apply_draft_command(getattr(scheduler_output, DRAFT_ATTR, None))

    def _apply_draft_command(self, command: str | None) -> None:
        """Offload: weights to the host store, the draft's KV pages to the OS.
        Reload: weights back; every request's draft KV is rebuilt by the catch-up."""
        if command is None or self._offloader is None:
            return
        if command == "offload":
            self._offloader.offload()
            if self._arena is not None:
                slots = self._arena.num_slot_blocks
                self._num_released_bytes += self._arena.release_blocks(
                    self._draft_positions, 0, slots
                )
        else:
            self._offloader.reload()
            assert self._nightjar_sync is not None
            self._nightjar_sync.invalidate_draft_kv()

    def nightjar_memory_stats(self) -> dict[str, Any]:
        """Blocks this rank moved, block-table entries it rewrote, and the scheduler's
        compaction counts as last sent with a step (JSON-able)."""
        return {
            "num_moved_blocks": self._num_moved_blocks,
            "num_remapped_entries": self._num_remapped_entries,
            "scheduler": self._scheduler_memory_stats or {},
            "stock_kv_bytes": self._stock_kv_bytes,
            "arena_resident_bytes": self._arena.resident_bytes() if self._arena else 0,
            "num_released_bytes": self._num_released_bytes,
            "draft": self._offloader.stats.to_json() if self._offloader else {},
        }

    def _stamp(self, output: Any) -> Any:
        """Put this worker's cumulative catch-up work on a step output for the scheduler
        (its metrics); rank 0's output is the one the scheduler sees."""
        if self._nightjar_sync is not None and isinstance(output, ModelRunnerOutput):
            stats = self._nightjar_sync.stats
            output.nightjar_catch_up_s = stats.catch_up_s
            output.nightjar_catch_up_tokens = stats.num_catch_up_tokens
        return output

    def nightjar_draft_stats(self) -> dict[str, Any]:
        """Draft forwards, skipped steps and catch-ups of this worker (JSON-able)."""
        if self._nightjar_sync is None:
            return {}
        return self._nightjar_sync.stats.to_json()

    def nightjar_reset_draft_stats(self) -> None:
        if self._nightjar_sync is not None:
            self._nightjar_sync.reset_stats()


class NightjarCPUWorker(_NightjarWorkerMixin, CPUWorker):
    """vLLM's CPU worker with the Nightjar draft hook."""

    def compile_or_warm_up_model(self) -> Any:
        out = super().compile_or_warm_up_model()
        self._install_nightjar()
        return out

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        self._apply_memory_events(args, kwargs)
        return self._stamp(super().execute_model(*args, **kwargs))

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        return self._stamp(super().sample_tokens(*args, **kwargs))


class NightjarGPUWorker(_NightjarWorkerMixin, Worker):
    """vLLM's GPU worker with the Nightjar draft hook."""

    def compile_or_warm_up_model(self) -> Any:
        out = super().compile_or_warm_up_model()
        self._install_nightjar()
        return out

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        self._apply_memory_events(args, kwargs)
        return self._stamp(super().execute_model(*args, **kwargs))

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        return self._stamp(super().sample_tokens(*args, **kwargs))


def _platform_worker() -> type:
    from vllm.platforms import current_platform

    return NightjarCPUWorker if current_platform.is_cpu() else NightjarGPUWorker


NightjarWorker = _platform_worker()
"""The worker for the platform this process runs on: ``worker_cls`` names this alias,
so engine arguments built on a CPU-only head node still run GPU workers on GPU nodes."""
