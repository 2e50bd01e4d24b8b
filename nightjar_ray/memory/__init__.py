"""Elastic draft memory (paper §6) without vLLM: when to move memory, and how.

::

    triggers    §6.1 expand / contract decisions with hysteresis (engine and simulator)
    migration   §6.3 Step 2: the one-to-one move plan below K_boundary (engine and simulator)
    controller  the engine's scheduler-side controller: triggers -> one event per step
    events      MemoryEvent: what the scheduler tells every worker at a step boundary
    cycles      forced compaction and draft offload/reload cycles (tests, chaos runs)
    block_pool  ResizableBlockPool: the Protocol the controller and the cycles drive
    kernels     §6.3 Step 4: moving KV blocks (PyTorch, and a Triton kernel for GPUs)
    arena       the KVArena protocol and the CPU arena: one reserved range per device,
                [target KV | region R] per layer; build_kv_arena picks it per device
    cuda_arena  the CUDA arena on the driver's virtual memory calls (cuda-bindings)
    arena_layout, arena_units  layer offsets and the blocks -> commit units rounding both use
    arena_budget  committed bytes at baseline and expanded; the largest N_max within stock
    elastic_mode  the default mode and the rule "auto" resolves by (engine and simulator)

``triggers``, ``migration``, ``controller``, ``events``, ``cycles``, ``elastic_mode``,
``arena_units``, ``arena_budget`` and ``block_pool`` are pure Python (no torch).

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
