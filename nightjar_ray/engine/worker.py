"""vLLM worker classes that install :class:`DraftSync` on their model runner.

``nightjar_engine_args`` names :data:`NightjarWorker`, which resolves to
``NightjarCPUWorker`` or ``NightjarGPUWorker`` in the worker's own process
(vLLM's ``worker_cls`` takes a qualified name). The hook goes in after
vLLM's warm-up, so warm-up dummy runs are not counted as draft forwards.
Statistics are read with ``llm.collective_rpc("nightjar_draft_stats")``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_worker import Worker

from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.cpu_kernels import register_cpu_kernel_fixes
from nightjar_ray.engine.draft_prepack import PrepackCapture
from nightjar_ray.engine.draft_sync import DraftSync
from nightjar_ray.engine.kv_rebind import kv_reserve_bytes
from nightjar_ray.engine.messages import WorkerReport, attach_worker_report, read_step_message
from nightjar_ray.engine.onednn_cache import bound_onednn_cache
from nightjar_ray.engine.worker_memory import WorkerMemory
from nightjar_ray.memory.arena import arena_unit_bytes

logger = logging.getLogger(__name__)


class _NightjarWorkerMixin:
    """Shared by the CPU and GPU workers (see module docstring)."""

    vllm_config: Any
    model_runner: Any
    _nightjar_sync: DraftSync | None = None
    _memory: WorkerMemory | None = None
    _scheduler_stats: dict[str, Any] | None = None
    _prepack: PrepackCapture | None = None
    _kv_reserve_bytes: int = 0
    """KV memory held back from vLLM for the arena's rounding (``determine_available_memory``)."""

    def determine_available_memory(self) -> int:
        """vLLM's KV memory less, with an arena to come, the blocks its rounding to the
        device's commit unit may take (``kv_rebind.kv_reserve_bytes``): vLLM then sizes
        fewer blocks, and the arena's commit stays within stock vLLM's KV buffer."""
        available = int(super().determine_available_memory())  # type: ignore[misc]
        self._kv_reserve_bytes = self._arena_reserve_bytes()
        return available - self._kv_reserve_bytes

    def _arena_reserve_bytes(self) -> int:
        config = NightjarConfig.from_additional_config(self.vllm_config.additional_config)
        cache = self.vllm_config.cache_config
        if self.vllm_config.speculative_config is None or not config.moves_memory:
            return 0
        if cache.num_gpu_blocks_override is not None:
            return 0  # the block count is fixed; WorkerMemory checks the arena still fits
        specs = list(self.model_runner.get_kv_cache_spec().values())
        order = cache.get_resolved_kv_cache_layout().layer_view_order
        unit = arena_unit_bytes(self.model_runner.device)
        reserve = kv_reserve_bytes(specs, order, unit)
        logger.info(
            "nightjar memory: %d bytes of KV memory held back for the arena's rounding "
            "to %d-byte units",
            reserve,
            unit,
        )
        return reserve

    def _capture_prepacked_draft(self) -> None:
        """Before loading: if the draft may be offloaded, keep the weights vLLM's CPU
        backend prepacks and drops while the drafter loads (``draft_prepack.py``)."""
        config = NightjarConfig.from_additional_config(self.vllm_config.additional_config)
        drafter = getattr(self.model_runner, "drafter", None)
        if config.offloads_draft and hasattr(drafter, "load_model"):
            self._prepack = PrepackCapture()
            self._prepack.wrap_drafter(drafter)

    def _install_nightjar(self) -> None:
        if self.vllm_config.speculative_config is None:
            return
        config = NightjarConfig.from_additional_config(self.vllm_config.additional_config)
        self._nightjar_sync = DraftSync(
            self.model_runner,
            config.draft_sync_mode,
            count_slots=config.testing.count_draft_slots,
        )
        if self._memory is not None:
            self._memory.sync = self._nightjar_sync
        elif config.moves_memory:
            self._memory = WorkerMemory(
                self.model_runner,
                config.elastic_memory,
                self._nightjar_sync,
                self._prepack,
                config.testing,
                self._kv_reserve_bytes,
                fixed_pool=self.vllm_config.cache_config.num_gpu_blocks_override is not None,
            )

    def _install_memory_before_graphs(self) -> None:
        """GPU: move the KV cache into the arena before CUDA graphs are captured over it
        (the draft sync joins after the warm-up, ``_install_nightjar``)."""
        if self.vllm_config.speculative_config is None:
            return
        config = NightjarConfig.from_additional_config(self.vllm_config.additional_config)
        if config.moves_memory:
            self._memory = WorkerMemory(
                self.model_runner,
                config.elastic_memory,
                None,
                self._prepack,
                config.testing,
                self._kv_reserve_bytes,
                fixed_pool=self.vllm_config.cache_config.num_gpu_blocks_override is not None,
            )

    def _apply_memory_events(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The scheduler's memory event for this step, before vLLM updates its states."""
        scheduler_output = args[0] if args else kwargs.get("scheduler_output")
        message = read_step_message(scheduler_output)
        if message is None:
            return
        self._scheduler_stats = message.scheduler_counts
        if self._memory is not None:
            self._memory.apply(message.memory_event)

    def nightjar_memory_stats(self) -> dict[str, Any]:
        """This rank's elastic-memory counts (``WorkerMemory.stats``) and, under
        ``"scheduler"``, the scheduler's counts as last sent with a step (preemptions,
        controller and chaos-cycle counts)."""
        stats = self._memory.stats() if self._memory is not None else {}
        return {**stats, "scheduler": self._scheduler_stats or {}}

    def _stamp(self, output: Any) -> Any:
        """Attach this worker's :class:`WorkerReport` to a step output for the scheduler;
        rank 0's output is the one the scheduler sees."""
        if self._nightjar_sync is not None and isinstance(output, ModelRunnerOutput):
            stats = self._nightjar_sync.stats
            report = WorkerReport(stats.catch_up_s, stats.num_catch_up_tokens)
            if self._memory is not None:
                report = self._memory.report(report)
            attach_worker_report(output, report)
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # NOTE: before anything builds a oneDNN primitive: oneDNN reads the capacity once.
        bound_onednn_cache(os.environ)
        super().__init__(*args, **kwargs)

    def load_model(self, *args: Any, **kwargs: Any) -> Any:
        self._capture_prepacked_draft()
        # NOTE: after vLLM's CPU platform registered its kernel overrides.
        register_cpu_kernel_fixes()
        return super().load_model(*args, **kwargs)

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

    def _make_model_runner(self) -> Any:
        """vLLM's V1 runner (the draft hook needs it), or :class:`PerGammaGraphsRunner`
        with ``cuda_graphs: per-gamma``."""
        spec = self.vllm_config.speculative_config
        if spec is not None and self.vllm_config.use_v2_model_runner:
            raise ValueError(
                "nightjar needs vLLM's V1 GPU model runner (its draft hook patches "
                "propose_draft_token_ids): set VLLM_USE_V2_MODEL_RUNNER=0 in the engine's "
                "environment (the deploy files' runtime_env does)"
            )
        config = NightjarConfig.from_additional_config(self.vllm_config.additional_config)
        if config.cuda_graphs == "per-gamma":
            from nightjar_ray.engine.cudagraph_runner import PerGammaGraphsRunner

            return PerGammaGraphsRunner(self.vllm_config, self.device)
        return super()._make_model_runner()

    def load_model(self, *args: Any, **kwargs: Any) -> Any:
        self._capture_prepacked_draft()
        return super().load_model(*args, **kwargs)

    def initialize_from_config(self, *args: Any, **kwargs: Any) -> Any:
        out = super().initialize_from_config(*args, **kwargs)
        self._install_memory_before_graphs()
        return out

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
