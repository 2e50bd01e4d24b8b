"""The CPU platform for vLLM's Ray executor (``engine/ray_cpu.py``): registered through
vLLM's own platform-plugin entry point, chosen by vLLM's resolver only on request, and
vLLM's CPU platform in everything but its Ray resource key. The ranks running on it
under Serve: ``tests/serve/test_serve_tp_ray.py``."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pytest

from nightjar_ray.engine.ray_cpu import (
    RAY_CPU_PLATFORM_ENV,
    RAY_CPU_RESOURCE,
    SETUP_HOOK,
    ray_cpu_platform_plugin,
    ray_cpu_runtime_env,
)


def test_the_plugin_is_registered_with_vllms_platform_entry_point() -> None:
    (plugin,) = [p for p in entry_points(group="vllm.platform_plugins") if "nightjar" in p.name]
    assert plugin.load() is ray_cpu_platform_plugin


@pytest.mark.parametrize(("value", "active"), [(None, False), ("0", False), ("1", True)])
def test_vllm_resolves_the_ray_cpu_platform_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, value: str | None, active: bool
) -> None:
    from vllm.platforms import resolve_current_platform_cls_qualname

    if value is None:
        monkeypatch.delenv(RAY_CPU_PLATFORM_ENV, raising=False)
    else:
        monkeypatch.setenv(RAY_CPU_PLATFORM_ENV, value)
    qualname = resolve_current_platform_cls_qualname()
    ours = "nightjar_ray.engine.ray_cpu_platform.RayCpuPlatform"
    assert (qualname == ours) is active
    if not active:
        assert qualname == "vllm.platforms.cpu.CpuPlatform"


def test_the_platform_differs_from_vllms_cpu_platform_only_in_its_ray_key() -> None:
    from vllm.platforms.cpu import CpuPlatform

    from nightjar_ray.engine.ray_cpu_platform import RayCpuPlatform

    assert issubclass(RayCpuPlatform, CpuPlatform)
    assert CpuPlatform.ray_device_key == "" and RayCpuPlatform.ray_device_key == RAY_CPU_RESOURCE
    overridden = {k for k in vars(RayCpuPlatform) if not k.startswith("__")}
    assert overridden == {"ray_device_key"}


def test_rank_actors_report_their_node_without_device_ids() -> None:
    """vLLM's rank actors index Ray's accelerator ids by the platform key (KeyError for a
    custom resource); installed, both executors' actors report (node, [])."""
    from vllm.v1.executor.ray_executor_v2 import RayWorkerProc
    from vllm.v1.executor.ray_utils import RayWorkerWrapper

    from nightjar_ray.engine.ray_cpu_platform import (
        install_rank_node_ids,
        rank_node_and_device_ids,
    )

    saved: dict[type[Any], Any] = {
        cls: vars(cls)["get_node_and_physical_gpu_ids"] for cls in (RayWorkerProc, RayWorkerWrapper)
    }
    try:
        install_rank_node_ids()
        for cls in saved:
            assert cls.get_node_and_physical_gpu_ids is rank_node_and_device_ids
    finally:
        for cls, method in saved.items():
            cls.get_node_and_physical_gpu_ids = method


def test_the_runtime_env_adds_the_platform_switch_and_the_setup_hook() -> None:
    env = ray_cpu_runtime_env({"env_vars": {"A": "1"}, "pip": ["x"]})
    assert env == {
        "env_vars": {"A": "1", RAY_CPU_PLATFORM_ENV: "1"},
        "pip": ["x"],
        "worker_process_setup_hook": SETUP_HOOK,
    }
