"""Elastic draft memory (paper §6): triggers, migration planning and kernels, the arena.

Pure pieces shared by the engine adapter and the simulator::

    triggers    §6.1 expand / contract decisions with hysteresis (no torch)
    migration   §6.3 Step 2: the one-to-one move plan below K_boundary (no torch)
    kernels     §6.3 Step 4: moving KV blocks (PyTorch, and a Triton kernel for GPUs)
    arena       one reserved address range per device: [target KV | region R]

vLLM-facing code (growing vLLM's block pool, rebinding a worker's KV cache) lives in
``nightjar_ray.engine``, which keeps every ``vllm`` import.
"""

from nightjar_ray.memory.migration import plan_migration
from nightjar_ray.memory.triggers import (
    DraftResidency,
    ElasticTriggers,
    MemoryAction,
    MemoryView,
    TriggerConfig,
    draft_outvalued,
)

__all__ = [
    "DraftResidency",
    "ElasticTriggers",
    "MemoryAction",
    "MemoryView",
    "TriggerConfig",
    "draft_outvalued",
    "plan_migration",
]
