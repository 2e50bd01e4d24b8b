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

from typing import Any

from nightjar_ray.engine.config import ADDITIONAL_CONFIG_KEY, NightjarConfig

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
    **engine_kwargs: Any,
) -> dict[str, Any]:
    """``engine_kwargs`` plus what Nightjar needs (scheduler, worker, config).

    ``start_hook``: a ``"module:function"`` the scheduler calls at start with its config
    and step driver (``START_HOOK_KEY``; Ray Serve's builder passes its link).

    ``speculative_config["num_speculative_tokens"]`` is the largest gamma: it sizes
    vLLM's buffers and the policy picks 0..num_speculative_tokens per step. Unset, it is
    the deprecated ``config.gamma_max`` or 4 (:meth:`NightjarConfig.with_num_speculative_tokens`).
    """
    cfg = config if isinstance(config, NightjarConfig) else _validate(config)
    spec = dict(engine_kwargs.pop("speculative_config", None) or {})
    method = spec.get("method")
    if method not in SUPPORTED_METHODS:
        raise ValueError(
            f"speculative_config.method must be one of {SUPPORTED_METHODS}, got {method!r}"
        )
    cfg = cfg.with_num_speculative_tokens(spec.get("num_speculative_tokens"))
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


def _validate(raw: dict[str, Any]) -> NightjarConfig:
    from pydantic import ValidationError

    try:
        return NightjarConfig.model_validate(raw)
    except ValidationError as e:
        fields = ", ".join(".".join(str(p) for p in err["loc"]) or "<root>" for err in e.errors())
        raise ValueError(f"invalid NightjarConfig (fields: {fields}): {e}") from e
