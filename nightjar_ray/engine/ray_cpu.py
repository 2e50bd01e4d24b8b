"""vLLM's CPU platform with a Ray resource key: TP ranks as Ray actors on CPU nodes.

vLLM 0.32's CPU platform leaves ``ray_device_key`` empty, so its Ray executor refuses
to start on CPU. :class:`~nightjar_ray.engine.ray_cpu_platform.RayCpuPlatform` is vLLM's
``CpuPlatform`` with one difference: each rank asks Ray for one unit of the custom
resource :data:`RAY_CPU_RESOURCE`, which the CPU nodes that host ranks advertise
(``ray start --resources='{"nightjar_cpu": 2}'``) and the replica's placement-group
bundles request (one bundle per rank).

Activation:

- the platform is registered through vLLM's out-of-tree platform entry point
  (``vllm.platform_plugins``) and active only where :data:`RAY_CPU_PLATFORM_ENV` is
  ``1``; everywhere else vLLM picks its own platform as before;
- each Ray worker process of the replica runs ``setup_rank_process`` (Ray's
  ``worker_process_setup_hook``), which lets a rank report its node without device
  ids (vLLM reads a rank's device ids from Ray's accelerator ids, which Ray keeps only
  for accelerators it knows: ``ray_executor_v2.py`` ``get_node_and_physical_gpu_ids``).
"""

from __future__ import annotations

import os
from typing import Any

RAY_CPU_PLATFORM_ENV = "NIGHTJAR_RAY_CPU_PLATFORM"
RAY_CPU_RESOURCE = "nightjar_cpu"
"""The Ray resource one CPU tensor-parallel rank takes (one unit per rank)."""
SETUP_HOOK = "nightjar_ray.engine.ray_cpu_platform.setup_rank_process"
"""Ray ``worker_process_setup_hook`` of a replica whose ranks run on the CPU platform."""


def ray_cpu_platform_plugin() -> str | None:
    """vLLM platform plugin: the platform's qualified name when asked for, else None."""
    if not ray_cpu_platform_requested(os.environ):
        return None
    return "nightjar_ray.engine.ray_cpu_platform.RayCpuPlatform"


def ray_cpu_platform_requested(environ: dict[str, str] | os._Environ[str]) -> bool:
    return environ.get(RAY_CPU_PLATFORM_ENV, "") == "1"


def ray_cpu_runtime_env(runtime_env: dict[str, Any]) -> dict[str, Any]:
    """``runtime_env`` plus what a replica with CPU ranks on Ray's executor needs."""
    env_vars = {**runtime_env.get("env_vars", {}), RAY_CPU_PLATFORM_ENV: "1"}
    return {**runtime_env, "env_vars": env_vars, "worker_process_setup_hook": SETUP_HOOK}
