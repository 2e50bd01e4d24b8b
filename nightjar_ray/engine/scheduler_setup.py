"""What the Nightjar scheduler builds itself from: the engine's config turned into its
managers' settings (the memory controller's, the draft gate's price of a draft token), the
decision log and the start hook (``engine/args.py``, ``START_HOOK_KEY``).

No vLLM import: the vLLM objects it reads (``vllm_config``, ``hf_config``) are passed in.
"""

from __future__ import annotations

import importlib
from typing import IO, Any

from nightjar_ray.driver.draft_gate import DEFAULT_DRAFT_COST_RATIO, approx_num_params
from nightjar_ray.driver.step_driver import StepDriver
from nightjar_ray.engine.args import START_HOOK_KEY
from nightjar_ray.engine.config import ElasticMemoryConfig, NightjarConfig
from nightjar_ray.memory.controller import ControllerParams


def open_decision_log(path: str | None) -> IO[str] | None:
    """The decision log file, appended to line by line (``None``: no log)."""
    return None if path is None else open(path, "a", buffering=1)


def _num_params(hf_config: Any) -> int | None:
    try:
        return approx_num_params(
            hf_config.num_hidden_layers,
            hf_config.hidden_size,
            hf_config.intermediate_size,
            hf_config.vocab_size,
        )
    except (AttributeError, TypeError):
        return None


def controller_params(config: ElasticMemoryConfig) -> ControllerParams:
    """The memory controller's settings from the user's ``elastic_memory`` block."""
    return ControllerParams(
        tau_low_fraction=config.tau_low_fraction,
        expand_persist_steps=config.expand_persist_steps,
        contract_persist_steps=config.contract_persist_steps,
        offload_outvalued=config.offload_outvalued,
    )


def run_start_hook(additional_config: Any, config: NightjarConfig, driver: StepDriver) -> Any:
    """Call the hook ``"module:function"`` named under ``START_HOOK_KEY`` (if any) with
    the engine's config and step driver; returns what it returns (kept alive)."""
    path = (additional_config or {}).get(START_HOOK_KEY)
    if not path:
        return None
    module, _, name = str(path).partition(":")
    return getattr(importlib.import_module(module), name)(config, driver)


def draft_cost_ratio(vllm_config: Any) -> float:
    """The draft gate's price of a draft token in target tokens: the models' size ratio
    (``DEFAULT_DRAFT_COST_RATIO`` when a config lacks the sizes)."""
    spec = vllm_config.speculative_config
    draft_model = getattr(spec, "draft_model_config", None)
    if draft_model is None:
        return DEFAULT_DRAFT_COST_RATIO
    target = _num_params(vllm_config.model_config.hf_config)
    draft = _num_params(draft_model.hf_config)
    if not target or not draft:
        return DEFAULT_DRAFT_COST_RATIO
    return min(1.0, draft / target)
