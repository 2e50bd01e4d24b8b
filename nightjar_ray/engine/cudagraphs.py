"""CUDA graphs and a per-step gamma: what vLLM's V1 dispatcher runs at each gamma.

A step that verifies ``gamma`` drafts per request sends a target batch whose query
length is ``1 + gamma`` for every decoding request. vLLM 0.32's V1 dispatcher keys its
FULL uniform-decode graphs on one query length, ``1 + num_speculative_tokens``
(``vllm/v1/cudagraph_dispatcher.py``), so a step at gamma < K is not "uniform decode"
and replays PIECEWISE graphs (docs/cuda-graphs.md).

- :func:`cudagraph_modes_per_gamma` asks vLLM's own ``CudagraphDispatcher`` (or
  :class:`PerGammaCudagraphDispatcher`) what it decides for a uniform decode batch at
  each gamma: the selfcheck's "graph mode per gamma" line.
- :class:`PerGammaCudagraphDispatcher` also registers FULL keys for every query length
  ``1..K+1``: each with the capture sizes stock vLLM would use for a fixed gamma of
  that length. The V1 model runner that captures and dispatches them is
  ``engine/cudagraph_runner.py`` (opt-in: ``NightjarConfig.cuda_graphs``).
- :func:`cuda_host_config` rebuilds, on any host, the graph settings vLLM gives a
  config on a CUDA host (vLLM's CPU platform turns graphs off), so all of this is
  tested on CPU.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vllm.config import CUDAGraphMode, VllmConfig
from vllm.config.compilation import CompilationMode
from vllm.forward_context import BatchDescriptor
from vllm.v1.attention.backend import AttentionCGSupport
from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

ATTENTION_SUPPORT_NAMES = tuple(s.name for s in AttentionCGSupport)
"""vLLM's levels of attention-backend graph support, weakest last (``AttentionCGSupport``)."""


@dataclass(frozen=True)
class GraphDecision:
    """What the target forward of a step verifying ``gamma`` drafts per request runs.

    ``runtime_mode``: ``"FULL"``, ``"PIECEWISE"`` or ``"NONE"`` (eager).
    ``num_tokens_padded``/``num_reqs_padded``: the graph's batch descriptor (the batch is
    padded to it; ``num_reqs_padded`` is None for PIECEWISE graphs, which take any).
    """

    gamma: int
    query_len: int
    num_reqs: int
    runtime_mode: str
    num_tokens_padded: int
    num_reqs_padded: int | None
    uniform: bool


def cuda_host_config(
    vllm_config: VllmConfig,
    cudagraph_mode: CUDAGraphMode = CUDAGraphMode.FULL_AND_PIECEWISE,
) -> VllmConfig:
    """A copy of ``vllm_config`` with the graph settings a CUDA host gives it.

    vLLM's CPU platform turns graphs off while it builds a config; this re-runs vLLM's
    own steps for a CUDA host (``set_splitting_ops_for_v1`` and ``_set_cudagraph_sizes``)
    with ``cudagraph_mode`` (vLLM's default: FULL_AND_PIECEWISE) on a copy of the
    compilation config. ``enforce_eager`` still means no graphs. The input is not touched.
    """
    config = copy.copy(vllm_config)
    compilation = copy.deepcopy(vllm_config.compilation_config)
    compilation.mode = CompilationMode.VLLM_COMPILE
    compilation.cudagraph_mode = cudagraph_mode
    compilation.splitting_ops = None
    compilation.cudagraph_capture_sizes = None
    compilation.max_cudagraph_capture_size = None
    config.compilation_config = compilation
    compilation.set_splitting_ops_for_v1(all2all_backend=config.parallel_config.all2all_backend)
    model = config.model_config
    if model is not None and model.enforce_eager:
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
        compilation.max_cudagraph_capture_size = 0
        return config
    config._set_cudagraph_sizes()
    compilation.post_init_cudagraph_sizes()
    return config


def resolve_graph_mode(vllm_config: VllmConfig, attention_support: str) -> CUDAGraphMode:
    """The mode vLLM's V1 runner settles on (``resolve_cudagraph_mode_and_sizes``, as in
    ``GPUModelRunner._check_and_update_cudagraph_mode``) for attention backends of
    ``attention_support`` (a name of :data:`ATTENTION_SUPPORT_NAMES`). Mutates
    ``vllm_config.compilation_config`` as vLLM does (capture sizes rounded to K+1)."""
    if attention_support not in ATTENTION_SUPPORT_NAMES:
        raise ValueError(
            f"attention_support must be one of {ATTENTION_SUPPORT_NAMES}, got {attention_support!r}"
        )
    return vllm_config.compilation_config.resolve_cudagraph_mode_and_sizes(
        AttentionCGSupport[attention_support],
        f"an attention backend with {attention_support} graph support",
        1 + vllm_config.num_speculative_tokens,
        use_v2_model_runner=False,
    )


class PerGammaCudagraphDispatcher(CudagraphDispatcher):  # type: ignore[misc]
    """vLLM's dispatcher plus FULL uniform-decode keys for every query length 1..K+1.

    Query length K+1 keeps vLLM's keys and padding unchanged. For each shorter query
    length ``q`` it registers the sizes vLLM's own ``adjust_cudagraph_sizes_for_spec_decode``
    makes of the configured capture sizes for a fixed ``q`` (multiples of ``q``, at most
    ``q * max_num_seqs`` and the resolved largest size). A batch is dispatched at ``q``
    inside :meth:`decoding_at`; outside it, behaviour is vLLM's.
    """

    def __init__(self, vllm_config: VllmConfig) -> None:
        super().__init__(vllm_config)
        self.uniform_decode_query_len: int = 1 + vllm_config.num_speculative_tokens
        sizes = vllm_config.compilation_config.cudagraph_capture_sizes
        self.configured_capture_sizes: tuple[int, ...] = tuple(sorted(set(sizes or ())))
        """The capture sizes before vLLM rounds them to multiples of K+1 (it does in
        ``resolve_cudagraph_mode_and_sizes``, after the runner builds this)."""
        self.decode_query_lens = tuple(range(1, self.uniform_decode_query_len + 1))
        self.sizes_by_query_len: dict[int, tuple[int, ...]] = {}
        self._stock_query_len = self.uniform_decode_query_len

    def initialize_cudagraph_keys(
        self, cudagraph_mode: CUDAGraphMode, uniform_decode_query_len: int = 1
    ) -> None:
        super().initialize_cudagraph_keys(cudagraph_mode, uniform_decode_query_len)
        self.sizes_by_query_len = {}
        if not (
            cudagraph_mode.decode_mode() == CUDAGraphMode.FULL and cudagraph_mode.separate_routine()
        ):
            return
        lora_cases = self._get_lora_cases()
        for q in self.decode_query_lens:
            sizes = self.decode_sizes(q)
            self.sizes_by_query_len[q] = sizes
            if q == self._stock_query_len:
                continue
            for num_tokens in sizes:
                for num_active_loras in lora_cases:
                    self.add_cudagraph_key(
                        CUDAGraphMode.FULL,
                        BatchDescriptor(
                            num_tokens=num_tokens,
                            num_reqs=num_tokens // q,
                            uniform=True,
                            has_lora=num_active_loras > 0,
                            num_active_loras=num_active_loras,
                        ),
                    )

    def decode_sizes(self, query_len: int) -> tuple[int, ...]:
        """Token counts of the FULL uniform-decode graphs at ``query_len``."""
        compilation = self.compilation_config
        max_size = compilation.max_cudagraph_capture_size or 0
        max_num_seqs = self.vllm_config.scheduler_config.max_num_seqs
        if query_len == self._stock_query_len:
            sizes: Iterable[int] = compilation.cudagraph_capture_sizes or ()
        else:
            rounding = copy.copy(compilation)
            rounding.cudagraph_capture_sizes = list(self.configured_capture_sizes)
            rounding.max_cudagraph_capture_size = max_size
            rounding.adjust_cudagraph_sizes_for_spec_decode(query_len)
            sizes = rounding.cudagraph_capture_sizes or ()
        upper = min(max_size, query_len * max_num_seqs)
        return tuple(sorted({s for s in sizes if query_len <= s <= upper and s % query_len == 0}))

    @contextmanager
    def decoding_at(self, query_len: int) -> Iterator[None]:
        """Dispatch uniform decode batches at ``query_len`` tokens per request."""
        saved = self.uniform_decode_query_len
        self.uniform_decode_query_len = query_len
        try:
            yield
        finally:
            self.uniform_decode_query_len = saved

    def _create_padded_batch_descriptor(
        self,
        num_tokens: int,
        uniform_decode: bool,
        has_lora: bool,
        num_active_loras: int = 0,
    ) -> BatchDescriptor:
        q = self.uniform_decode_query_len
        per_gamma = (
            uniform_decode
            and q != self._stock_query_len
            and self.cudagraph_mode.has_mode(CUDAGraphMode.FULL)
        )
        sizes = self.sizes_by_query_len.get(q, ())
        i = bisect.bisect_left(sizes, num_tokens)
        if not per_gamma or i == len(sizes):
            with self.decoding_at(self._stock_query_len):
                return super()._create_padded_batch_descriptor(
                    num_tokens, uniform_decode and not per_gamma, has_lora, num_active_loras
                )
        return BatchDescriptor(
            num_tokens=sizes[i],
            num_reqs=sizes[i] // q,
            uniform=True,
            has_lora=has_lora,
            num_active_loras=num_active_loras,
        )


def build_dispatcher(
    vllm_config: VllmConfig,
    *,
    per_gamma: bool = False,
    attention_support: str = "UNIFORM_BATCH",
) -> CudagraphDispatcher:
    """vLLM's dispatcher (or the per-gamma one) as the V1 runner builds and initializes
    it, on a copy of ``vllm_config``'s compilation config."""
    config = copy.copy(vllm_config)
    config.compilation_config = copy.deepcopy(vllm_config.compilation_config)
    cls = PerGammaCudagraphDispatcher if per_gamma else CudagraphDispatcher
    dispatcher = cls(config)
    mode = resolve_graph_mode(config, attention_support)
    dispatcher.initialize_cudagraph_keys(mode, 1 + config.num_speculative_tokens)
    return dispatcher


def dispatch_uniform_decode(
    dispatcher: CudagraphDispatcher, gamma: int, num_reqs: int
) -> GraphDecision:
    """What ``dispatcher`` runs for ``num_reqs`` requests each verifying ``gamma`` drafts,
    with the V1 runner's own uniform-decode test (``GPUModelRunner._is_uniform_decode``)."""
    q = 1 + gamma
    num_tokens = q * num_reqs
    stock_q = 1 + dispatcher.vllm_config.num_speculative_tokens
    per_gamma = isinstance(dispatcher, PerGammaCudagraphDispatcher)
    uniform = GPUModelRunner._is_uniform_decode(
        max_num_scheduled_tokens=q,
        uniform_decode_query_len=q if per_gamma else stock_q,
        num_tokens=num_tokens,
        num_reqs=num_reqs,
    )
    if isinstance(dispatcher, PerGammaCudagraphDispatcher) and uniform:
        with dispatcher.decoding_at(q):
            mode, desc = dispatcher.dispatch(num_tokens, uniform_decode=True)
    else:
        mode, desc = dispatcher.dispatch(num_tokens, uniform_decode=uniform)
    return GraphDecision(
        gamma=gamma,
        query_len=q,
        num_reqs=num_reqs,
        runtime_mode=mode.name,
        num_tokens_padded=desc.num_tokens,
        num_reqs_padded=desc.num_reqs,
        uniform=desc.uniform,
    )


def cudagraph_modes_per_gamma(
    vllm_config: Any,
    gammas: Iterable[int],
    *,
    num_reqs: int = 1,
    per_gamma: bool = False,
    attention_support: str = "UNIFORM_BATCH",
) -> dict[int, GraphDecision]:
    """gamma -> the graph vLLM's V1 dispatcher runs for a decode step of ``num_reqs``
    requests each verifying ``gamma`` drafts (query length ``1 + gamma``).

    ``per_gamma``: with :class:`PerGammaCudagraphDispatcher` (``cuda_graphs:
    per-gamma``) instead of vLLM's. ``attention_support``: the graph support of the
    attention backend the GPU picks (``AttentionCGSupport`` name; FlashAttention 2 and
    FlashInfer's TRT-LLM decode are ``UNIFORM_BATCH``, FlashAttention 3 ``ALWAYS``).
    ``vllm_config`` as a CUDA host builds it (on other hosts: :func:`cuda_host_config`).
    ``ValueError`` names a gamma outside ``0..num_speculative_tokens``.
    """
    if num_reqs < 1:
        raise ValueError(f"num_reqs must be >= 1, got {num_reqs}")
    k = vllm_config.num_speculative_tokens
    decisions: dict[int, GraphDecision] = {}
    dispatcher = build_dispatcher(
        vllm_config, per_gamma=per_gamma, attention_support=attention_support
    )
    for gamma in gammas:
        if not 0 <= gamma <= k:
            raise ValueError(f"gamma must be in 0..num_speculative_tokens={k}, got {gamma}")
        decisions[gamma] = dispatch_uniform_decode(dispatcher, gamma, num_reqs)
    return decisions


def full_decode_descs_by_query_len(
    dispatcher: CudagraphDispatcher,
) -> dict[int, list[BatchDescriptor]]:
    """The FULL uniform-decode graphs ``dispatcher`` has keys for (and the V1 runner
    captures), by query length (``num_tokens // num_reqs``), largest first."""
    out: dict[int, list[BatchDescriptor]] = {}
    for mode, descs in dispatcher.get_capture_descs():
        if mode != CUDAGraphMode.FULL:
            continue
        for desc in descs:
            if desc.uniform and desc.num_reqs:
                out.setdefault(desc.num_tokens // desc.num_reqs, []).append(desc)
    return out
