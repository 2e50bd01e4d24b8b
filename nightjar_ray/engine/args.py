"""Engine arguments that turn a vLLM engine into a Nightjar engine.

>>> from nightjar_ray.engine import NightjarConfig, nightjar_engine_args
>>> kwargs = nightjar_engine_args(
...     NightjarConfig(policy="nightjar"),
...     model="/models/target",
...     speculative_config={
...         "method": "draft_model", "model": "/models/draft", "num_speculative_tokens": 4
...     },
... )
>>> # vllm.LLM(**kwargs) or AsyncEngineArgs(**kwargs)

The config is validated here, in the caller's process, before any vLLM
process starts: a bad field raises ``ValueError`` naming it.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from nightjar_ray.engine.config import (
    ADDITIONAL_CONFIG_KEY,
    DEFAULT_NUM_SPECULATIVE_TOKENS,
    MAX_NUM_SPECULATIVE_TOKENS,
    NightjarConfig,
)
from nightjar_ray.memory.elastic_mode import elastic_memory_blocker, resolve_elastic_mode

logger = logging.getLogger(__name__)

SCHEDULER_CLS = "nightjar_ray.engine.scheduler.NightjarScheduler"
WORKER_CLS = "nightjar_ray.engine.worker.NightjarWorker"
"""Resolved in each worker process to the CPU or GPU worker (``worker.py``)."""
SUPPORTED_METHODS = ("draft_model", "ngram")
START_HOOK_KEY = "nightjar_start_hook"
"""``additional_config`` key naming a ``"module:function"`` the scheduler calls once with
its ``NightjarConfig`` and ``StepDriver`` (how Ray Serve attaches its link; not a user
setting)."""


def nightjar_engine_args(
    config: NightjarConfig | dict[str, Any],
    start_hook: str | None = None,
    *,
    device_type: str | None = None,
    **engine_kwargs: Any,
) -> dict[str, Any]:
    """``engine_kwargs`` plus what Nightjar needs (scheduler, worker, config), for an
    engine started in this process (``vllm.LLM``, ``AsyncLLM``).

    ``start_hook``: a ``"module:function"`` the scheduler calls at start with its config
    and step driver (``START_HOOK_KEY``; Ray Serve's builder passes its link).

    ``device_type``: the engine's ``torch.device`` type, for which
    ``elastic_memory.enabled`` resolves (:func:`resolve_elastic_memory`); None: this
    process's vLLM platform's (:func:`engine_device_type`).

    ``speculative_config["num_speculative_tokens"]`` is the largest gamma: it sizes
    vLLM's buffers and the policy picks 0..num_speculative_tokens per step. Unset, it is
    the deprecated ``config.gamma_max`` or 4 (:func:`with_num_speculative_tokens`).
    """
    kwargs = unresolved_engine_args(config, start_hook, **engine_kwargs)
    return resolve_engine_args(kwargs, device_type)


def unresolved_engine_args(
    config: NightjarConfig | dict[str, Any],
    start_hook: str | None = None,
    **engine_kwargs: Any,
) -> dict[str, Any]:
    """:func:`nightjar_engine_args` with ``elastic_memory.enabled`` as given ("auto"
    stays): for a caller away from the engine's node (Ray Serve's config parser, on the
    head node); the process that starts the engine applies :func:`resolve_engine_args`."""
    cfg = config if isinstance(config, NightjarConfig) else _validate(config)
    spec = dict(engine_kwargs.pop("speculative_config", None) or {})
    method = spec.get("method")
    if method not in SUPPORTED_METHODS:
        raise ValueError(
            f"speculative_config.method must be one of {SUPPORTED_METHODS}, got {method!r}"
        )
    cfg = with_num_speculative_tokens(cfg, spec.get("num_speculative_tokens"))
    spec["num_speculative_tokens"] = cfg.num_speculative_tokens
    for key in ("scheduler_cls", "worker_cls"):
        if key in engine_kwargs:
            raise ValueError(f"{key} is set by nightjar_engine_args; do not pass it")
    additional = dict(engine_kwargs.pop("additional_config", None) or {})
    for reserved in (ADDITIONAL_CONFIG_KEY, START_HOOK_KEY):
        if reserved in additional:
            raise ValueError(f"additional_config.{reserved} is reserved")
    additional.update(cfg.to_additional_config())
    if start_hook is not None:
        additional[START_HOOK_KEY] = start_hook
    return {
        **engine_kwargs,
        "speculative_config": spec,
        "scheduler_cls": SCHEDULER_CLS,
        "worker_cls": WORKER_CLS,
        "additional_config": additional,
    }


def resolve_engine_args(
    engine_kwargs: dict[str, Any],
    device_type: str | None = None,
    log: logging.Logger | None = None,
) -> dict[str, Any]:
    """``engine_kwargs`` (from :func:`unresolved_engine_args`) with the Nightjar block's
    ``elastic_memory.enabled`` resolved for ``device_type`` (None: this process's vLLM
    platform's), which every engine process then reads; ``log``: where the line of
    :func:`resolve_elastic_memory` goes (default: this module's logger)."""
    additional = dict(engine_kwargs["additional_config"])
    config = NightjarConfig.from_additional_config(additional)
    method = (engine_kwargs.get("speculative_config") or {}).get("method")
    device = engine_device_type() if device_type is None else device_type
    runtime = _arena_runtime_blocker(device) if device_type is None else None
    resolved = resolve_elastic_memory(config, device, method, log, runtime)
    additional.update(resolved.to_additional_config())
    return {**engine_kwargs, "additional_config": additional}


def resolve_elastic_memory(
    config: NightjarConfig,
    device_type: str,
    speculative_method: str | None,
    log: logging.Logger | None = None,
    runtime_blocker: str | None = None,
) -> NightjarConfig:
    """``config`` with ``elastic_memory.enabled`` a bool for an engine on ``device_type``
    (a ``torch.device`` type) whose speculative method is ``speculative_method``: "auto"
    turns on where :func:`~nightjar_ray.memory.elastic_mode.elastic_memory_blocker` and
    the testing chaos cycles let it, else off with one INFO line on ``log`` (default: this
    module's logger) saying why; ``True`` where it cannot run is a ``ValueError`` naming
    ``elastic_memory.enabled``. ``runtime_blocker``: why this process cannot build the
    device's arena (``arena.arena_runtime_blocker``), if it cannot."""
    mode = config.elastic_memory.enabled
    testing = config.testing
    chaos = [n for n in ("chaos_cycle_steps", "chaos_offload_steps") if getattr(testing, n)]
    blocker = elastic_memory_blocker(
        device_type,
        draft_model=speculative_method == "draft_model",
        catch_up=config.draft_sync_mode == "catch-up",
    )
    blocker = blocker or runtime_blocker
    if blocker is None and chaos:
        blocker = f"testing.{chaos[0]} drives the same memory"
    enabled = resolve_elastic_mode(mode, blocker)
    if mode == "auto" and not enabled:
        (log or logger).info("nightjar: elastic_memory.enabled 'auto' resolves off: %s", blocker)
    elastic = config.elastic_memory.model_copy(update={"enabled": enabled})
    return config.model_copy(update={"elastic_memory": elastic})


def _arena_runtime_blocker(device_type: str) -> str | None:
    from nightjar_ray.memory.arena import arena_runtime_blocker  # torch: the engine's process

    return arena_runtime_blocker(device_type)


V2_MODEL_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
"""vLLM 0.32 runs a draft model on CUDA with its V2 model runner unless this is "0";
Nightjar's draft hook patches the V1 runner (``worker.NightjarGPUWorker``)."""


def with_v1_model_runner(env_vars: dict[str, str]) -> dict[str, str]:
    """``env_vars`` (an engine process's environment, or a Serve replica's
    ``runtime_env.env_vars``) with vLLM's V1 model runner chosen where nothing chose one;
    ``ValueError`` naming the variable where it asks for the V2 runner."""
    value = env_vars.get(V2_MODEL_RUNNER_ENV)
    if value is not None and value.strip().lower() not in ("0", "false"):
        raise ValueError(
            f"{V2_MODEL_RUNNER_ENV}={value!r}: nightjar drives vLLM's V1 model runner; "
            "set it to 0 or leave it out"
        )
    return {**env_vars, V2_MODEL_RUNNER_ENV: "0"}


def engine_device_type() -> str:
    """The ``torch.device`` type of an engine started in this process: vLLM's current
    platform's, which vLLM's own ``DeviceConfig`` takes (``EngineArgs.create_engine_config``)."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type)


def with_num_speculative_tokens(
    config: NightjarConfig,
    num_speculative_tokens: Any,
    *,
    nightjar_field: str = "nightjar",
    spec_field: str = "speculative_config",
) -> NightjarConfig:
    """``config`` for an engine whose ``speculative_config.num_speculative_tokens`` is
    ``num_speculative_tokens`` (None: not set there). The result drops the deprecated
    ``gamma_max`` and holds the resolved largest gamma in ``policy_params``.

    Set there: it is the largest gamma; a ``gamma_max`` or ``policy_params.gamma_max``
    that differs is an error. Not set: the deprecated ``gamma_max``, else
    :data:`DEFAULT_NUM_SPECULATIVE_TOKENS`. A ``gamma_max`` warns
    (``DeprecationWarning`` and a log line). ``ValueError`` messages name the fields
    as ``<nightjar_field>.gamma_max`` and ``<spec_field>.num_speculative_tokens``.
    """
    spec_name = f"{spec_field}.num_speculative_tokens"
    alias_name = f"{nightjar_field}.gamma_max"
    given = _check_num_speculative_tokens(num_speculative_tokens, spec_name)
    if config.gamma_max is not None:
        _warn_deprecated_gamma_max(alias_name, spec_name)
        if given is not None and given != config.gamma_max:
            raise ValueError(
                f"{alias_name}={config.gamma_max} and {spec_name}={given} disagree: "
                f"{alias_name} is a deprecated alias of {spec_name}; remove it"
            )
    num = given if given is not None else config.gamma_max or DEFAULT_NUM_SPECULATIVE_TOKENS
    params = dict(config.policy_params)
    if params.setdefault("gamma_max", num) != num:
        raise ValueError(
            f"{nightjar_field}.policy_params.gamma_max={params['gamma_max']} differs from "
            f"{spec_name}={num}; leave it out (it is filled in from {spec_name})"
        )
    raw = config.model_dump(exclude={"gamma_max"})
    return NightjarConfig.model_validate({**raw, "policy_params": params})


def _validate(raw: dict[str, Any]) -> NightjarConfig:
    from pydantic import ValidationError

    try:
        return NightjarConfig.model_validate(raw)
    except ValidationError as e:
        fields = ", ".join(".".join(str(p) for p in err["loc"]) or "<root>" for err in e.errors())
        raise ValueError(f"invalid NightjarConfig (fields: {fields}): {e}") from e


def _check_num_speculative_tokens(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer, got {value!r}")
    if not 1 <= value <= MAX_NUM_SPECULATIVE_TOKENS:
        raise ValueError(f"{field} must be in 1..{MAX_NUM_SPECULATIVE_TOKENS}, got {value}")
    return value


def _warn_deprecated_gamma_max(alias_name: str, spec_name: str) -> None:
    message = f"{alias_name} is deprecated: set {spec_name} (vLLM's name for the largest gamma)"
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    logger.warning("nightjar: %s", message)
