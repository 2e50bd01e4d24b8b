"""``NightjarLLMServer``: Ray Serve LLM's ``LLMServer`` that hands Nightjar its identity.

Before the parent class starts vLLM, the replica:

0. resolves ``elastic_memory.enabled`` for the device its engine runs on (vLLM's
   platform in this process; the config parser on the head node cannot know it), so
   every engine process reads the resolved value (``engine.args.resolve_engine_args``);
1. ensures its model's policy actor exists (named, detached, restartable;
   on the head node unless ``pooling.actor_node: any``);
2. writes a :class:`ServeContext` (app, deployment, replica ID, model, actor
   name, its cluster's GCS address and its node's IP) into
   ``NIGHTJAR_SERVE_CONTEXT``, which vLLM's engine-core process inherits; the
   scheduler there starts the Serve link (``link.py``);
3. sets ``RAY_ADDRESS`` to its own cluster's GCS address: vLLM's Ray executor joins
   the cluster from the engine-core process, which is not a Ray worker (with no
   address it would start a new local cluster).

Everything else (OpenAI API, streaming, engine metrics) is Ray Serve LLM's own, with one
exception: Ray Serve LLM 2.60 runs every deployment without GPU or TPU bundles on vLLM's
``mp`` executor (``vllm_models.py``, ``get_initialization_kwargs``), so a replica whose
bundles place CPU ranks on Ray (``engine/ray_cpu.py``) starts its engine through
:class:`RayRanksVLLMEngine`, which keeps the ``ray`` executor the config asked for.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray
from ray import serve
from ray.llm._internal.serve.engines.vllm.vllm_engine import VLLMEngine
from ray.serve.llm import LLMServer

from nightjar_ray.engine.args import resolve_engine_args
from nightjar_ray.engine.config import ADDITIONAL_CONFIG_KEY, NightjarConfig
from nightjar_ray.engine.ray_cpu import ray_cpu_platform_requested
from nightjar_ray.policy.pooling import stats_fingerprint
from nightjar_ray.serve.context import (
    NAMESPACE,
    SERVE_CONTEXT_ENV,
    ServeContext,
    policy_actor_name,
)
from nightjar_ray.serve.policy_actor import get_or_create_policy_actor

RAY_ADDRESS_ENV = "RAY_ADDRESS"
logger = logging.getLogger(f"ray.serve.{__name__}")
"""Under Ray Serve's logger, so its INFO lines reach the replica's log."""


def with_resolved_engine_args(llm_config: Any, device_type: str | None = None) -> Any:
    """``llm_config`` whose engine arguments have ``elastic_memory.enabled`` resolved for
    ``device_type`` (None: this process's vLLM platform's, the replica's engine's)."""
    nightjar_config_of(llm_config)  # ValueError when build_app did not build it
    engine_kwargs = resolve_engine_args(dict(llm_config.engine_kwargs), device_type, logger)
    resolved = llm_config.model_copy(update={"engine_kwargs": engine_kwargs})
    # Ray Serve LLM caches the engine config it derived from the old kwargs (built when
    # the deployment's placement was computed); the engine must start from the new ones.
    resolved._engine_config = None
    return resolved


def nightjar_config_of(llm_config: Any) -> NightjarConfig:
    """The ``NightjarConfig`` that ``build_app`` put into the engine arguments."""
    additional = llm_config.engine_kwargs.get("additional_config") or {}
    if ADDITIONAL_CONFIG_KEY not in additional:
        raise ValueError("engine_kwargs.additional_config has no nightjar block; use build_app")
    return NightjarConfig.from_additional_config(additional)


def replica_context(llm_config: Any, config: NightjarConfig) -> ServeContext:
    """This replica's identity, and the policy actor it pools with."""
    import ray

    ctx = serve.get_replica_context()
    fingerprint = stats_fingerprint(config.policy, config.policy_config())
    return ServeContext(
        app=ctx.app_name,
        deployment=ctx.deployment,
        replica=ctx.replica_id.unique_id,
        model=llm_config.model_id,
        actor_name=policy_actor_name(ctx.app_name, llm_config.model_id, fingerprint),
        gcs_address=ray.get_runtime_context().gcs_address,
        node_ip_address=ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
        namespace=NAMESPACE,
    )


class RayRanksVLLMEngine(VLLMEngine):
    """Ray Serve LLM's vLLM engine, its ranks on vLLM's Ray executor on CPU nodes."""

    def _start_async_llm_engine(
        self, engine_args: Any, engine_config: Any, placement_group: Any
    ) -> Any:
        engine_config.parallel_config.distributed_executor_backend = "ray"
        return super()._start_async_llm_engine(engine_args, engine_config, placement_group)


class NightjarLLMServer(LLMServer):
    """``LLMServer`` plus Nightjar's replica set-up (see module docstring)."""

    async def __init__(self, llm_config: Any, **kwargs: Any) -> None:  # type: ignore[misc]
        llm_config = with_resolved_engine_args(llm_config)
        config = nightjar_config_of(llm_config)
        context = replica_context(llm_config, config)
        if config.pooling.enabled:
            fingerprint = stats_fingerprint(config.policy, config.policy_config())
            get_or_create_policy_actor(
                context.actor_name,
                context.namespace,
                fingerprint,
                config.pooling.snapshot_dir,
                on_head=config.pooling.actor_node == "head",
            )
        os.environ[SERVE_CONTEXT_ENV] = context.to_env()
        os.environ[RAY_ADDRESS_ENV] = ray.get_runtime_context().gcs_address
        if ray_cpu_platform_requested(os.environ):
            kwargs.setdefault("engine_cls", RayRanksVLLMEngine)
        await super().__init__(llm_config, **kwargs)
