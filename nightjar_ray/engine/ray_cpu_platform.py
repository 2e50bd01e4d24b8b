"""The platform class behind :func:`nightjar_ray.engine.ray_cpu.ray_cpu_platform_plugin`."""

from __future__ import annotations

import os
from typing import Any

from vllm.platforms.cpu import CpuPlatform

from nightjar_ray.engine.ray_cpu import RAY_CPU_RESOURCE, ray_cpu_platform_requested


class RayCpuPlatform(CpuPlatform):  # type: ignore[misc]
    """vLLM's CPU platform whose ranks Ray places by :data:`RAY_CPU_RESOURCE`."""

    ray_device_key: str = RAY_CPU_RESOURCE


def rank_node_and_device_ids(self: Any) -> tuple[str, list[int]]:
    """A CPU rank's (Ray node id, device ids): it owns no device ids."""
    import ray

    del self
    return ray.get_runtime_context().get_node_id(), []


def install_rank_node_ids() -> None:
    """Make vLLM's Ray rank actors (both executors) report :func:`rank_node_and_device_ids`.

    vLLM 0.32 reads ``get_accelerator_ids()[ray_device_key]``, which holds only the
    accelerators Ray knows (GPU, TPU, ...), so a custom resource raised ``KeyError``
    (``v1/executor/ray_executor_v2.py`` L144-156, ``v1/executor/ray_utils.py`` L95-105).
    """
    from vllm.v1.executor.ray_executor_v2 import RayWorkerProc
    from vllm.v1.executor.ray_utils import RayWorkerWrapper

    RayWorkerProc.get_node_and_physical_gpu_ids = rank_node_and_device_ids
    RayWorkerWrapper.get_node_and_physical_gpu_ids = rank_node_and_device_ids


def setup_rank_process() -> None:
    """Ray worker-process setup hook (``ray_cpu.SETUP_HOOK``) of a replica with CPU ranks."""
    if ray_cpu_platform_requested(os.environ):
        install_rank_node_ids()
