"""vLLM's V1 GPU model runner with FULL uniform-decode graphs at every gamma.

Opt-in (``NightjarConfig.cuda_graphs = "per-gamma"``); the GPU worker builds
:class:`PerGammaGraphsRunner` instead of vLLM's runner (``engine/worker.py``). Three
overrides, each around vLLM's own code:

- ``__init__``: the runner's dispatcher is :class:`PerGammaCudagraphDispatcher` (FULL
  keys for every query length 1..K+1; ``engine/cudagraphs.py``).
- ``_determine_batch_execution_and_padding``: a batch whose requests all have the same
  query length ``q`` in 1..K+1 is uniform decode, dispatched at ``q``.
- ``_warmup_and_capture`` (capture and vLLM's graph-memory profiling both call it): a
  FULL uniform descriptor is captured with the runner's decode query length set to the
  descriptor's ``num_tokens // num_reqs``, so vLLM's dummy run builds that batch.

Not used with data parallelism or dual-batch overlap (ranks or micro-batches would
have to agree on ``q``): :func:`per_gamma_supported` says why.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from vllm.config import CUDAGraphMode, VllmConfig
from vllm.forward_context import BatchDescriptor
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from nightjar_ray.engine.cudagraphs import PerGammaCudagraphDispatcher


def per_gamma_supported(vllm_config: VllmConfig) -> str | None:
    """None when per-gamma graphs can run with ``vllm_config``; else why not."""
    parallel = vllm_config.parallel_config
    if vllm_config.num_speculative_tokens < 1:
        return "no speculative decoding (one query length already)"
    if parallel.data_parallel_size > 1:
        return "data parallelism (ranks pad to one shared batch descriptor)"
    if parallel.use_ubatching:
        return "dual-batch overlap (micro-batches share one descriptor)"
    if vllm_config.use_v2_model_runner:
        return "vLLM's model runner V2 (set VLLM_USE_V2_MODEL_RUNNER=0)"
    return None


def uniform_query_len(
    max_num_scheduled_tokens: int,
    num_tokens: int,
    num_reqs: int,
    force_uniform_decode: bool | None,
    query_lens: Collection[int],
) -> int | None:
    """The query length every request of the batch has, when it is one of
    ``query_lens`` and the batch may be dispatched as uniform decode; else None.
    ``force_uniform_decode``: vLLM's capture-time override (False: never uniform)."""
    if force_uniform_decode is False or max_num_scheduled_tokens not in query_lens:
        return None
    if force_uniform_decode or num_tokens == max_num_scheduled_tokens * num_reqs:
        return max_num_scheduled_tokens
    return None


def capture_query_len(desc: BatchDescriptor, default: int) -> int:
    """The query length a capture descriptor was keyed on: ``num_tokens // num_reqs``
    for a uniform one, else ``default`` (vLLM's K+1)."""
    if desc.uniform and desc.num_reqs:
        return int(desc.num_tokens // desc.num_reqs)
    return default


class PerGammaGraphsRunner(GPUModelRunner):  # type: ignore[misc]
    """vLLM's V1 GPU model runner; see module docstring."""

    def __init__(self, vllm_config: VllmConfig, device: Any) -> None:
        super().__init__(vllm_config, device)
        self.uniform_decode_query_len: int = 1 + vllm_config.num_speculative_tokens
        reason = per_gamma_supported(vllm_config)
        if reason is not None:
            raise ValueError(f"cuda_graphs='per-gamma' is not supported with {reason}")
        self.cudagraph_dispatcher = PerGammaCudagraphDispatcher(self.vllm_config)

    def _determine_batch_execution_and_padding(
        self,
        num_tokens: int,
        num_reqs: int,
        num_scheduled_tokens_np: Any,
        max_num_scheduled_tokens: int,
        **kwargs: Any,
    ) -> Any:
        dispatcher = self.cudagraph_dispatcher
        assert isinstance(dispatcher, PerGammaCudagraphDispatcher)
        q = uniform_query_len(
            max_num_scheduled_tokens,
            num_tokens,
            num_reqs,
            kwargs.get("force_uniform_decode"),
            dispatcher.decode_query_lens,
        )
        args = (num_tokens, num_reqs, num_scheduled_tokens_np, max_num_scheduled_tokens)
        if q is None:
            return super()._determine_batch_execution_and_padding(*args, **kwargs)
        kwargs["force_uniform_decode"] = True
        with dispatcher.decoding_at(q):
            return super()._determine_batch_execution_and_padding(*args, **kwargs)

    def _warmup_and_capture(
        self, desc: BatchDescriptor, cudagraph_runtime_mode: CUDAGraphMode, **kwargs: Any
    ) -> Any:
        saved = self.uniform_decode_query_len
        if cudagraph_runtime_mode == CUDAGraphMode.FULL:
            self.uniform_decode_query_len = capture_query_len(desc, saved)
        try:
            return super()._warmup_and_capture(
                desc, cudagraph_runtime_mode=cudagraph_runtime_mode, **kwargs
            )
        finally:
            self.uniform_decode_query_len = saved
