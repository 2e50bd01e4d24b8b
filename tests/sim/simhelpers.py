"""Shared helpers for simulator tests."""

from __future__ import annotations

import random
from dataclasses import replace

from nightjar_ray.policy import build_policy
from nightjar_ray.sim.presets import Setting, get_dataset, get_setting
from nightjar_ray.sim.server import ServerOptions, SimServer
from nightjar_ray.sim.workload import synthetic_workload
from nightjar_ray.workload import RequestSpec
from nightjar_ray.workload.arrivals import poisson_gaps


def poisson_workload(
    setting: Setting, qps: float, n: int, seed: int = 0
) -> tuple[RequestSpec, ...]:
    rng = random.Random(seed)
    gaps = poisson_gaps(qps, n, rng)
    return synthetic_workload(gaps, get_dataset("sharegpt"), setting.target.max_model_len, rng)


def small_memory_setting(utilization: float = 0.77) -> Setting:
    """The 4090/7B preset with little KV space (a few hundred blocks): forces preemption."""
    return replace(get_setting("rtx4090-7b"), gpu_memory_utilization=utilization)


def server(
    setting: Setting, policy: str, params: dict[str, object], **options: object
) -> SimServer:
    return SimServer(
        setting,
        build_policy(policy, params, rng=random.Random(1)),
        ServerOptions(**options),  # type: ignore[arg-type]
    )
