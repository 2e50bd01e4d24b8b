"""vLLM worker classes that install :class:`DraftSync` on their model runner.

``nightjar_engine_args`` picks ``NightjarCPUWorker`` or ``NightjarGPUWorker``
(vLLM's ``worker_cls`` takes a qualified name). The hook goes in after
vLLM's warm-up, so warm-up dummy runs are not counted as draft forwards.
Statistics are read with ``llm.collective_rpc("nightjar_draft_stats")``.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_worker import Worker

from nightjar_ray.engine.config import NightjarConfig
from nightjar_ray.engine.draft_sync import DraftSync


class _NightjarWorkerMixin:
    """Shared by the CPU and GPU workers (see module docstring)."""

    vllm_config: Any
    model_runner: Any
    _nightjar_sync: DraftSync | None = None

    def _install_nightjar(self) -> None:
        if self.vllm_config.speculative_config is None:
            return
        config = NightjarConfig.from_additional_config(self.vllm_config.additional_config)
        self._nightjar_sync = DraftSync(self.model_runner, config.draft_sync)

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


class NightjarGPUWorker(_NightjarWorkerMixin, Worker):
    """vLLM's GPU worker with the Nightjar draft hook."""

    def compile_or_warm_up_model(self) -> Any:
        out = super().compile_or_warm_up_model()
        self._install_nightjar()
        return out
