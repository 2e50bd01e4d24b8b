"""vLLM adapter: the only package that imports ``vllm``.

Public API (importing it does not import vLLM)::

    from nightjar_ray.engine import NightjarConfig, nightjar_engine_args
    llm = vllm.LLM(**nightjar_engine_args(NightjarConfig(policy="nightjar"),
                                           model=..., speculative_config={...}))

Modules: ``config`` (NightjarConfig, the user boundary), ``args`` (engine kwargs),
``scheduler`` (per-step gamma through the step driver, ``nightjar_ray.driver``), ``lag``
(draft lag bookkeeping), ``draft_sync`` and ``worker`` (true gamma=0 and draft KV
catch-up), ``messages`` (the typed scheduler/worker messages), ``block_pool`` (vLLM's
BlockPool as elastic memory's ``ResizableBlockPool``), ``worker_memory``, ``block_remap``,
``kv_rebind``, ``draft_offload``, ``draft_prepack`` (the worker side of elastic memory),
``onednn_cache`` (a bound on oneDNN's cache in CPU workers), ``testing_config`` (the
test-only ``testing`` block), ``offline`` (offline engines for tests and benchmarks),
``cudagraphs`` and ``cudagraph_runner`` (which CUDA graph each gamma runs; FULL graphs per
gamma), ``switch_cost_profiler`` (C_switch on a real engine), ``selfcheck*`` (the checks
``nightjar-ray selfcheck`` runs).
"""

from nightjar_ray.engine.args import nightjar_engine_args
from nightjar_ray.engine.config import NightjarConfig

__all__ = ["NightjarConfig", "nightjar_engine_args"]
