"""vLLM adapter: the only package that imports ``vllm``.

Public API (importing it does not import vLLM)::

    from nightjar_ray.engine import NightjarConfig, nightjar_engine_args
    llm = vllm.LLM(**nightjar_engine_args(NightjarConfig(policy="nightjar"),
                                           model=..., speculative_config={...}))

Modules: ``config`` (NightjarConfig), ``args`` (engine kwargs), ``scheduler``
(per-step gamma), ``stepper`` (policy loop and timing, vLLM-free), ``lag``
(draft lag bookkeeping), ``draft_sync`` and ``worker`` (true gamma=0 and
draft KV catch-up), ``profiler`` (C_switch measurement), ``bench`` (offline
runs shared by benchmarks and the profiler).
"""

from nightjar_ray.engine.args import nightjar_engine_args
from nightjar_ray.engine.config import NightjarConfig

__all__ = ["NightjarConfig", "nightjar_engine_args"]
